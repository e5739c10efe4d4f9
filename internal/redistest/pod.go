package redistest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/counting"
)

// Pod is one simulated process: its own rueidis client, counted, and its distsync handle.
type Pod struct {
	Raw    rueidis.Client   // the client itself
	Client *counting.Client // Raw, counting what the pod sends after New (whose INFO is not counted)
	H      *distsync.Handle // the pod's handle, on Client, with the test's key prefix
}

// Pod returns a new pod whose keys start with prefix; it is closed when the test ends.
func (b *Backend) Pod(tb testing.TB, prefix string, opts ...distsync.Option) *Pod {
	tb.Helper()
	return b.podOn(tb, b.Client(tb), prefix, opts)
}

// PodVia is Pod whose connections go through n, for partitions.
func (b *Backend) PodVia(tb testing.TB, prefix string, n *Network, opts ...distsync.Option) *Pod {
	tb.Helper()
	return b.podOn(tb, b.ClientVia(tb, n), prefix, opts)
}

// PodOn is Pod on a client the test made (a Dropper, say).
func (b *Backend) PodOn(tb testing.TB, c rueidis.Client, prefix string, opts ...distsync.Option) *Pod {
	tb.Helper()
	return b.podOn(tb, c, prefix, opts)
}

func (b *Backend) podOn(tb testing.TB, raw rueidis.Client, prefix string, opts []distsync.Option) *Pod {
	c := counting.New(raw)
	h := b.Handle(tb, c, append([]distsync.Option{distsync.WithKeyPrefix(prefix)}, opts...)...)
	c.Reset() // New's version check: the tests count what the primitives send
	return &Pod{Raw: raw, Client: c, H: h}
}

// Faulty is a rueidis.Client that interferes with chosen commands sent with Do, on request:
//
//   - Drop: the command runs in Redis, but its caller gets an error that distsync treats as a
//     dropped connection ("LOADING ..."), so that it retries: a reply lost on the wire;
//     DropAll does the same to a pipeline (DoMulti) that holds a matching command;
//   - Delay: the reply reaches its caller late: Redis or the network stalled;
//   - Expire: the command fails with context.DeadlineExceeded before it is sent, although the
//     caller's context is live, as rueidis fails every command queued on a connection that
//     another command's deadline closed.
type Faulty struct {
	rueidis.Client
	mu      sync.Mutex
	arms    []*arm
	dropped int
}

// arm is one armed fault: the next left commands that match get it.
type arm struct {
	left  int
	match func(cmd []string) bool
	mode  int
	delay time.Duration
}

const (
	drop = iota
	delay
	expire
	dropAll
)

// NewFaulty wraps c.
func NewFaulty(c rueidis.Client) *Faulty { return &Faulty{Client: c} }

// ScriptCall returns a matcher of the commands that run s (EVALSHA or EVAL).
func ScriptCall(s interface{ SHA() string }) func(cmd []string) bool {
	return func(cmd []string) bool {
		return len(cmd) > 1 && (cmd[0] == "EVALSHA" && cmd[1] == s.SHA() || cmd[0] == "EVAL" && sha1hex(cmd[1]) == s.SHA())
	}
}

// Each call arms one more fault; a command gets the first armed fault it matches.

// Drop arms f: the replies of the next n commands that match are lost.
func (f *Faulty) Drop(n int, match func(cmd []string) bool) { f.arm(n, match, drop, 0) }

// DropAll is Drop for pipelines too: the replies of the next n pipelines (DoMulti) or commands
// (Do) that hold a matching command are lost, every reply of the pipeline, after it ran.
func (f *Faulty) DropAll(n int, match func(cmd []string) bool) { f.arm(n, match, dropAll, 0) }

// Delay arms f: the replies of the next n commands that match reach their callers d late.
func (f *Faulty) Delay(n int, d time.Duration, match func(cmd []string) bool) {
	f.arm(n, match, delay, d)
}

// Expire arms f: the next n commands that match fail with context.DeadlineExceeded, unsent.
func (f *Faulty) Expire(n int, match func(cmd []string) bool) { f.arm(n, match, expire, 0) }

func (f *Faulty) arm(n int, match func(cmd []string) bool, mode int, d time.Duration) {
	f.mu.Lock()
	f.arms = append(f.arms, &arm{left: n, match: match, mode: mode, delay: d})
	f.mu.Unlock()
}

// Dropped returns how many commands f has interfered with.
func (f *Faulty) Dropped() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dropped
}

// Do implements rueidis.Client.
func (f *Faulty) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	f.mu.Lock()
	var hit *arm
	for _, a := range f.arms {
		if a.left > 0 && a.match(cmd.Commands()) {
			hit = a
			a.left--
			f.dropped++
			break
		}
	}
	f.mu.Unlock()
	if hit == nil {
		return f.Client.Do(ctx, cmd)
	}
	mode, d := hit.mode, hit.delay
	switch mode {
	case expire:
		ectx, cancel := context.WithDeadline(ctx, time.Now())
		defer cancel()
		return f.Client.Do(ectx, cmd)
	case delay:
		res := f.Client.Do(ctx, cmd)
		time.Sleep(d)
		return res
	}
	res := f.Client.Do(ctx, cmd)
	if res.Error() != nil {
		return res
	}
	return f.Client.Do(ctx, f.Client.B().Eval().Script("return redis.error_reply('LOADING reply dropped by the test')").Numkeys(0).Build())
}

// DoMulti implements rueidis.Client. A pipeline with a command that matches an armed Delay
// or Expire gets it as a whole; Drop applies to Do only, DropAll to both.
func (f *Faulty) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	f.mu.Lock()
	var hit *arm
	for _, a := range f.arms {
		if a.left <= 0 || a.mode == drop {
			continue
		}
		for _, cmd := range multi {
			if a.match(cmd.Commands()) {
				hit = a
				break
			}
		}
		if hit != nil {
			hit.left--
			f.dropped++
			break
		}
	}
	f.mu.Unlock()
	switch {
	case hit == nil:
		return f.Client.DoMulti(ctx, multi...)
	case hit.mode == expire:
		ectx, cancel := context.WithDeadline(ctx, time.Now())
		defer cancel()
		return f.Client.DoMulti(ectx, multi...)
	case hit.mode == dropAll:
		res := f.Client.DoMulti(ctx, multi...)
		for i := range res {
			if res[i].Error() == nil {
				res[i] = f.Client.Do(ctx, f.Client.B().Eval().Script("return redis.error_reply('LOADING reply dropped by the test')").Numkeys(0).Build())
			}
		}
		return res
	}
	res := f.Client.DoMulti(ctx, multi...)
	time.Sleep(hit.delay)
	return res
}

func sha1hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

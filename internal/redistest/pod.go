package redistest

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/counting"
)

// Pod is one simulated process: its own rueidis client, counted, and its distsync handle.
type Pod struct {
	Raw    rueidis.Client   // the client itself
	Client *counting.Client // Raw, counting what the pod sends
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
	return &Pod{Raw: raw, Client: c, H: b.Handle(tb, c, append([]distsync.Option{distsync.WithKeyPrefix(prefix)}, opts...)...)}
}

// Dropper is a rueidis.Client that loses replies on request: a matching command runs in
// Redis, but its caller gets an error that distsync treats as a dropped connection
// ("LOADING ..."), so that it retries. It is the fault of a reply lost on the wire.
type Dropper struct {
	rueidis.Client
	mu      sync.Mutex
	left    int
	match   func(cmd []string) bool
	dropped int
}

// NewDropper wraps c.
func NewDropper(c rueidis.Client) *Dropper { return &Dropper{Client: c} }

// Drop arms d: the replies of the next n commands sent with Do that match are lost.
func (d *Dropper) Drop(n int, match func(cmd []string) bool) {
	d.mu.Lock()
	d.left, d.match = n, match
	d.mu.Unlock()
}

// Dropped returns how many replies d has lost.
func (d *Dropper) Dropped() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropped
}

// Do implements rueidis.Client.
func (d *Dropper) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	d.mu.Lock()
	drop := d.left > 0 && d.match(cmd.Commands())
	if drop {
		d.left--
		d.dropped++
	}
	d.mu.Unlock()
	res := d.Client.Do(ctx, cmd)
	if !drop || res.Error() != nil {
		return res
	}
	return d.Client.Do(ctx, d.Client.B().Eval().Script("return redis.error_reply('LOADING reply dropped by the test')").Numkeys(0).Build())
}

package once

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
)

// FuzzGroupForeign writes a foreign value under one of a once key's Redis keys
// (internal/scripts/once_begin.lua), then runs Group.Do with a short ctx:
//
//	part 0  lead                 the leader's claim
//	part 1  kept                 a kept result
//	part 2  res:                 the result key begin reads while it knows no leader
//	part 3  res:L, lead = L      the result of a leader L that holds the lead
//	part 4  a PUBLISH of value on the key's channel, lead = L, while Do waits
//
// kind (parts 0-3) makes it a string, a hash field, a zset member, a list or a set element;
// flags&1 gives it a TTL; flags&8 runs a Group[string] (String codec) instead of a
// Group[int] (JSON).
//
// What is correct (a result is the status byte 'v', 'e', 'p' or 'g' and a payload):
//   - lead: someone leads; Do waits for them and ends with its ctx (an error matching both
//     ErrNotAcquired and DeadlineExceeded), fn does not run.
//   - kept, res:, res:L: a string there is a result: Do returns without running fn, with
//     exactly what decode makes of it, never another value: the codec's value for 'v' and a
//     payload the codec reads; else an error matching ErrCodec, ErrLeaderFailed, ErrPanicked
//     or ErrGoexit. (” and '!' in a res key are not results: see once_begin.lua.)
//   - a published "<leader>\n<result>" with a result is the same; any other message makes
//     Do look again (and wait on).
//   - A value of another type is an error; nothing panics; fn runs only where nobody leads
//     and no result is there; a Do that waits issues a bounded number of commands.
func FuzzGroupForeign(f *testing.F) {
	r := startFuzzRedis(f)
	for _, s := range []struct {
		part, kind uint8
		value      string
		flags      uint8
	}{
		{0, 0, "L", 1}, {0, 0, "", 1}, {0, 0, "L", 0}, {0, 1, "x", 1}, {0, 3, "x", 1},
		{1, 0, "v42", 1}, {1, 0, "v\"x\"", 1}, {1, 0, "vjunk", 1}, {1, 0, "v", 0}, {1, 0, "", 1}, {1, 0, "eboom", 1},
		{1, 0, "pboom", 1}, {1, 0, "x", 1}, {1, 0, "!", 1}, {1, 0, "vnull", 0}, {1, 0, "v42", 8}, {1, 1, "x", 1},
		{2, 0, "v7", 1}, {2, 0, "", 1}, {2, 0, "!", 1}, {2, 0, "vjunk", 1}, {2, 2, "x", 1},
		{3, 0, "v7", 1}, {3, 0, "!", 1}, {3, 0, "", 1}, {3, 0, "ejunk", 8}, {3, 1, "x", 1},
		{4, 0, "L\nv5", 0}, {4, 0, "L\n", 0}, {4, 0, "L", 0}, {4, 0, "\nvjunk", 0}, {4, 0, "x\n\n", 8}, {4, 0, "L\nzz", 0},
	} {
		f.Add(s.part, s.kind, s.value, s.flags)
	}
	f.Fuzz(func(t *testing.T, part, kind uint8, value string, flags uint8) {
		name := r.next(t)
		if flags&8 != 0 {
			fuzzGroup(t, r, name, part, kind, value, flags, "forty-two")
		} else {
			fuzzGroup(t, r, name, part, kind, value, flags, 42)
		}
	})
}

func fuzzGroup[T comparable](t *testing.T, r *fuzzRedis, name string, part, kind uint8, value string, flags uint8, fnVal T) {
	g, err := NewGroup[T](r.h, name, distsync.WithLeaseTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ks, err := g.keys("k")
	if err != nil {
		t.Fatal(err)
	}
	const leader = "L"
	r.cleanup(t, ks.lead, ks.kept, ks.resPrefix, ks.resPrefix+leader, ks.fence)
	fv := foreign{kind: kind % 5, value: value, member: value, score: 1, ttl: flags&1 != 0}
	part %= 5
	switch part {
	case 0:
		r.write(t, ks.lead, fv)
	case 1:
		r.write(t, ks.kept, fv)
	case 2:
		r.write(t, ks.resPrefix, fv)
	case 3, 4:
		r.do(t, "SET", ks.lead, leader, "PX", "60000")
		if part == 3 {
			r.write(t, ks.resPrefix+leader, fv)
		}
	}

	// What the value means.
	isResult := false // a result is there (or was published)
	stored := ""
	switch {
	case part == 1 && fv.kind == 0:
		isResult, stored = true, value
	case (part == 2 || part == 3) && fv.kind == 0:
		isResult, stored = value != "" && value != "!", value
	case part == 4:
		_, after, ok := strings.Cut(value, "\n")
		isResult, stored = ok && after != "", after
	}
	wrongType := part <= 3 && fv.kind != 0
	// Nobody leads and no result is there only with a res: key that holds no result.
	leads := part == 2 && !wrongType && !isResult

	var ran atomic.Int32
	fn := func(context.Context) (T, error) { ran.Add(1); return fnVal, nil }
	// Only a Do that waits for a leader runs into its ctx: the others get a long one, so that
	// a slow machine does not turn their result into a timeout.
	wait := 5 * time.Second
	if !wrongType && !isResult && !leads {
		wait = doWait
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	n0 := r.cc.Total()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err, _ := g.Do(ctx, "k", fn)
		done <- result{v, err}
	}()
	if part == 4 {
		// Publish once Do listens (on the embedded server; or at once).
		for end := time.Now().Add(time.Second); time.Now().Before(end) && r.subscribers(t, ks.channel) == 0; {
			time.Sleep(100 * time.Microsecond)
		}
		r.do(t, "PUBLISH", ks.channel, value)
	}
	res := <-done
	v, err := res.v, res.err
	sent := r.cc.Total() - n0

	switch {
	case wrongType:
		if err == nil || ran.Load() != 0 {
			t.Fatalf("Do with a %d-kind value in part %d: %v, %v; fn ran %d times", fv.kind, part, v, err, ran.Load())
		}
	case isResult:
		want, werr := g.decode("k", stored)
		if ran.Load() != 0 {
			t.Fatalf("Do ran fn with result %q there", stored)
		}
		switch {
		case werr == nil && (err != nil || v != want):
			t.Fatalf("Do with result %q there: %v, %v; want %v", stored, v, err, want)
		case werr != nil && err == nil:
			t.Fatalf("Do with result %q there: %v, nil; want an error (%v)", stored, v, werr)
		case werr != nil && !errors.Is(err, ErrCodec) && !errors.Is(err, ErrLeaderFailed) && !errors.Is(err, ErrPanicked) &&
			!errors.Is(err, ErrGoexit):
			t.Fatalf("Do with result %q there: %v; want ErrCodec, ErrLeaderFailed, ErrPanicked or ErrGoexit", stored, err)
		}
	case leads:
		if err != nil || v != fnVal || ran.Load() != 1 {
			t.Fatalf("Do with nobody leading (part %d %q): %v, %v; fn ran %d times", part, value, v, err, ran.Load())
		}
	default: // someone leads: Do waits until its ctx ends
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distsync.ErrNotAcquired) || ran.Load() != 0 {
			t.Fatalf("Do with a leader (part %d %q): %v, %v; fn ran %d times", part, value, v, err, ran.Load())
		}
		if sent > maxWaitCommands {
			t.Fatalf("Do sent %d commands in %v waiting for a leader (part %d %q): polling", sent, doWait, part, value)
		}
	}
}

// subscribers returns how many clients listen on channel.
func (r *fuzzRedis) subscribers(t *testing.T, channel string) int64 {
	t.Helper()
	m, _ := r.raw.Do(context.Background(), r.raw.B().PubsubNumsub().Channel(channel).Build()).AsIntMap()
	return m[channel]
}

const (
	// doWait bounds a Do that waits for a foreign leader.
	doWait = 25 * time.Millisecond
	// maxWaitCommands bounds the commands a Do may send while it waits doWait: a begin,
	// another after subscribing, and slack. Polling at a 1 ms backstop sends several times
	// that.
	maxWaitCommands = 6
)

// foreign is a value the library did not write.
type foreign struct {
	kind          uint8 // 0 string, 1 hash field, 2 zset member, 3 list element, 4 set member
	member, value string
	score         float64
	ttl           bool // a TTL of a minute; else none
}

// fuzzRedis is one Redis per fuzz process: an embedded miniredis, or the Redis at
// $DISTSYNC_FUZZ_REDIS (host:port; its keyspace is the test's to change), and one Handle on a
// counted client (keyCounter). Every input gets a name of its own, so that clean-ups a previous
// input left running in the background cannot touch it.
type fuzzRedis struct {
	raw rueidis.Client // the test's own client, for foreign writes and reads
	cc  *keyCounter
	h   *distsync.Handle
	srv *embedded.Server
	pfx string
	seq atomic.Int64
}

func startFuzzRedis(f *testing.F) *fuzzRedis {
	r := &fuzzRedis{}
	var b [4]byte
	_, _ = rand.Read(b[:])
	r.pfx = "fz" + hex.EncodeToString(b[:]) + ":"
	opt := rueidis.ClientOption{InitAddress: []string{os.Getenv("DISTSYNC_FUZZ_REDIS")}, DisableCache: true}
	if opt.InitAddress[0] == "" {
		srv, err := embedded.Start()
		if err != nil {
			f.Fatal(err)
		}
		r.srv, opt = srv, srv.ClientOption()
	}
	var err error
	if r.raw, err = rueidis.NewClient(opt); err != nil {
		f.Fatal(err)
	}
	hc, err := rueidis.NewClient(opt)
	if err != nil {
		f.Fatal(err)
	}
	r.cc = &keyCounter{Client: hc}
	if r.h, err = distsync.New(r.cc, distsync.WithKeyPrefix(r.pfx), distsync.WithLeaseTTL(2*time.Second)); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.h.Close(ctx)
		hc.Close()
		r.raw.Close()
		if r.srv != nil {
			r.srv.Close()
		}
	})
	return r
}

// next returns a new name, with the embedded server emptied.
func (r *fuzzRedis) next(t *testing.T) string {
	if r.srv != nil {
		r.srv.Miniredis().FlushAll()
	}
	name := "i" + strconv.FormatInt(r.seq.Add(1), 10) + "z"
	r.cc.Reset(name)
	return name
}

// cleanup deletes keys when the input is done (they may have no TTL).
func (r *fuzzRedis) cleanup(t *testing.T, keys ...string) {
	t.Cleanup(func() { r.do(t, append([]string{"DEL"}, keys...)...) })
}

func (r *fuzzRedis) do(t *testing.T, cmd ...string) rueidis.RedisResult {
	t.Helper()
	res := r.raw.Do(context.Background(), r.raw.B().Arbitrary(cmd...).Build())
	if err := res.Error(); err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("%q: %v", cmd, err)
	}
	return res
}

// write puts v under key, after what is there.
func (r *fuzzRedis) write(t *testing.T, key string, v foreign) {
	t.Helper()
	switch v.kind {
	case 0:
		r.do(t, "SET", key, v.value)
	case 1:
		r.do(t, "HSET", key, v.member, v.value)
	case 2:
		s := v.score
		if math.IsNaN(s) {
			s = 0 // Redis refuses NaN
		}
		r.do(t, "ZADD", key, strconv.FormatFloat(s, 'g', -1, 64), v.member)
	case 3:
		r.do(t, "RPUSH", key, v.value)
	default:
		r.do(t, "SADD", key, v.value)
	}
	if v.ttl {
		r.do(t, "PEXPIRE", key, "60000")
	}
}

// snapshot describes key's type and contents (not its TTL).
func (r *fuzzRedis) snapshot(t *testing.T, key string) string {
	t.Helper()
	typ, _ := r.do(t, "TYPE", key).ToString()
	var v any
	switch typ {
	case "string":
		v, _ = r.do(t, "GET", key).ToString()
	case "hash":
		v, _ = r.do(t, "HGETALL", key).AsStrMap()
	case "zset":
		v, _ = r.do(t, "ZRANGE", key, "0", "-1", "WITHSCORES").ToAny()
	case "list":
		v, _ = r.do(t, "LRANGE", key, "0", "-1").AsStrSlice()
	case "set":
		v, _ = r.do(t, "SMEMBERS", key).AsStrSlice()
	}
	return fmt.Sprintf("%s %v", typ, v)
}

// keyCounter is the Handle's client: it counts the commands that name the current input's
// keys (the input's name is in every key), so that background work left by earlier inputs is
// not counted against this one. Pub/sub commands are not counted.
type keyCounter struct {
	rueidis.Client
	mu  sync.Mutex
	tag string
	n   int
}

func (c *keyCounter) count(cmd rueidis.Completed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range cmd.Commands() {
		if c.tag != "" && strings.Contains(s, c.tag) {
			c.n++
			return
		}
	}
}

// Reset starts counting the commands that name tag.
func (c *keyCounter) Reset(tag string) {
	c.mu.Lock()
	c.tag, c.n = tag, 0
	c.mu.Unlock()
}

// Total returns the number of commands counted since Reset.
func (c *keyCounter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Do implements rueidis.Client.
func (c *keyCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.count(cmd)
	return c.Client.Do(ctx, cmd)
}

// DoMulti implements rueidis.Client.
func (c *keyCounter) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for _, cmd := range multi {
		c.count(cmd)
	}
	return c.Client.DoMulti(ctx, multi...)
}

package semaphore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// fuzzSize is the size of the fuzzed semaphore.
const fuzzSize = 3

// FuzzSemaphoreForeign writes a foreign value under one of a semaphore's keys (lib/sem.lua:
// h, n, q, qx, qn, size), or a foreign holder (h member + n count: part 6) or a foreign
// waiter (q + qx + qn: part 7) with a fuzzed count; then, with flags&4, runs Acquire(1)
// with a short ctx; then TryAcquire(1) size+1 times; then releases what it got. For parts
// 0-5 kind is that of a string, a hash field, a zset member (score), a list or a set element
// (value, member); flags&1 gives the key a TTL.
//
// What is correct:
//   - The semaphore never hands out more than its size because of a foreign value: if this
//     test got permits, they and the foreign holds in Redis afterwards that are real holds
//     (a live lease in h and a count that is an integer >= 1 in n) are at most the size. A
//     count that is junk (negative, zero, fractional, not a number) is no hold, and must not
//     make room for more permits either.
//   - A junk value may make a call fail with an error; a size other than the caller's is
//     ErrSizeMismatch; nothing panics.
//   - An Acquire that waits issues a bounded number of commands (no polling).
func FuzzSemaphoreForeign(f *testing.F) {
	r := startFuzzRedis(f)
	for _, s := range []struct {
		part, kind    uint8
		member, value string
		score         float64
		flags         uint8
	}{
		{6, 0, "foreign", "1", 0, 4},
		{6, 0, "foreign", "3", 0, 4},
		{6, 0, "foreign", "3", math.Inf(1), 4},
		{6, 0, "foreign", "-5", 0, 0},
		{6, 0, "foreign", "0", 0, 0},
		{6, 0, "foreign", "0.5", 0, 0},
		{6, 0, "foreign", "abc", 0, 0},
		{6, 0, "foreign", "nan", 0, 0},
		{6, 0, "foreign", "-inf", 0, 0},
		{1, 1, "orphan", "-5", 0, 1},
		{1, 1, "orphan", "2", 0, 1},
		{1, 0, "", "x", 0, 1},
		{0, 2, "foreign", "", math.Inf(1), 4},
		{0, 2, "foreign", "", 1e300, 4},
		{7, 0, "foreign/1", "1", 0, 4},
		{7, 0, "foreign/1", "-3", 0, 4},
		{7, 0, "foreign/1", "0", 0, 4},
		{7, 0, "foreign/1", "abc", 0, 4},
		{7, 0, "foreign/1", "2.5", 0, 4},
		{4, 1, "w", "-1", 0, 4},
		{2, 2, "w", "", 1, 4},
		{3, 2, "w", "", math.Inf(1), 4},
		{5, 0, "", "3", 0, 1 | 4},
		{5, 0, "", "2", 0, 1 | 4},
		{5, 0, "", "abc", 0, 1 | 4},
		{5, 0, "", "0x3", 0, 4},
		{5, 0, "", "3.5", 0, 4},
		{5, 1, "f", "v", 0, 4},
	} {
		f.Add(s.part, s.kind, s.member, s.value, s.score, s.flags)
	}
	f.Fuzz(func(t *testing.T, part, kind uint8, member, value string, score float64, flags uint8) {
		name := r.next(t)
		s, err := New(r.h, name, fuzzSize)
		if err != nil {
			t.Fatal(err)
		}
		r.cleanup(t, s.keys...)
		ctx := context.Background()
		var got int64
		defer func() {
			if got > 0 {
				_ = s.Release(ctx, got)
			}
		}()
		fv := foreign{kind: kind % 5, member: member, value: value, score: score, ttl: flags&1 != 0}
		h, n, q, qx, qn, size := s.keys[0], s.keys[1], s.keys[2], s.keys[3], s.keys[4], s.keys[5]
		switch part % 8 {
		case 6: // a holder, with a lease of a minute (or of +inf)
			exp := strconv.FormatInt(r.nowMs(t)+60000, 10)
			if math.IsInf(score, 1) {
				exp = "+inf"
			}
			r.do(t, "ZADD", h, exp, member)
			r.do(t, "HSET", n, member, value)
		case 7: // a waiter
			s := score
			if math.IsNaN(s) {
				s = 0
			}
			exp := strconv.FormatInt(r.nowMs(t)+60000, 10)
			r.do(t, "ZADD", q, strconv.FormatFloat(s, 'g', -1, 64), member)
			r.do(t, "ZADD", qx, exp, member)
			r.do(t, "HSET", qn, member, value)
		default:
			r.write(t, []string{h, n, q, qx, qn, size}[part%8], fv)
		}

		if flags&4 != 0 {
			n0 := r.cc.Total()
			actx, cancel := context.WithTimeout(ctx, acquireWait)
			err := s.Acquire(actx, 1)
			cancel()
			sent := r.cc.Total() - n0
			switch {
			case err == nil:
				got++
			case sent > maxWaitCommands:
				t.Fatalf("Acquire sent %d commands in %v: polling (%s)", sent, acquireWait, r.state(t, s))
			}
		}
		for range fuzzSize + 1 {
			if ok, _ := s.TryAcquire(ctx, 1); ok {
				got++
			}
		}
		if others := r.foreignHolds(t, s); got > 0 && got+others > fuzzSize {
			t.Fatalf("%d permits handed out to the test and %d held by others, of %d: %s", got, others, fuzzSize, r.state(t, s))
		}
	})
}

// foreignHolds returns the permits that holders other than s's hold in Redis: live leases
// with a count that is an integer >= 1.
func (r *fuzzRedis) foreignHolds(t *testing.T, s *Semaphore) int64 {
	t.Helper()
	now := r.nowMs(t)
	counts, err := r.raw.Do(context.Background(), r.raw.B().Hgetall().Key(s.keys[1]).Build()).AsStrMap()
	if err != nil {
		return 0 // not a hash: no holds
	}
	var sum int64
	for o, v := range counts {
		if strings.HasPrefix(o, s.proc+"/") || strings.HasPrefix(o, "~"+s.proc+"/") {
			continue
		}
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil || c < 1 || strconv.FormatInt(c, 10) != v {
			continue
		}
		at, err := r.raw.Do(context.Background(), r.raw.B().Zscore().Key(s.keys[0]).Member(o).Build()).AsFloat64()
		if err == nil && at > float64(now) {
			sum += c
		}
	}
	return sum
}

func (r *fuzzRedis) state(t *testing.T, s *Semaphore) string {
	t.Helper()
	var b strings.Builder
	for i, part := range []string{"h", "n", "q", "qx", "qn", "size"} {
		fmt.Fprintf(&b, "%s: %s; ", part, r.snapshot(t, s.keys[i]))
	}
	return b.String()
}

// nowMs is the server's clock in ms.
func (r *fuzzRedis) nowMs(t *testing.T) int64 {
	t.Helper()
	tm, _ := r.do(t, "TIME").AsStrSlice()
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	return sec*1000 + us/1000
}

const (
	// acquireWait bounds an Acquire that waits behind a foreign value.
	acquireWait = 25 * time.Millisecond
	// maxWaitCommands bounds the commands an Acquire may send while it waits acquireWait: an
	// attempt, another after subscribing, the clean-up, and slack. Polling at a 1 ms backstop
	// sends several times that.
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

package mutex

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

// FuzzMutexForeign writes a foreign value under one of a mutex's keys, then runs the mutex against
// it: TryLock, Unlock, TryLock again; Lock with a short ctx (flags&4); or, with flags&2, the
// value replaces a part while the mutex is held, and Unlock runs. The value is a string, a
// hash field, a zset member with its score, or a list or set element (kind), with or without
// a TTL (flags&1); "$W" in it stands for the Mutex's waiter id, so that the fuzzer can write
// grants to this Mutex ('~$W:<token>').
//
// What is correct, per key:
//   - lock: any value there is someone else's hold, except a grant to this Mutex's waiter
//     ('~<waiter>:...'), which only Lock may adopt. So TryLock never returns true; Lock
//     returns true only for such a grant; a call that does not acquire leaves the value as it
//     was. Replaced while held: Unlock returns an error (ErrNotHeld for a string: the hold was
//     lost) and leaves the foreign value alone.
//   - fence: whatever it holds, an acquisition either fails with an error or gets a token
//     above 0, above the value if it is an integer Lua counts exactly (< 2^53), and above the
//     previous acquisition's token.
//   - q, qx: junk there may make a call fail (an error), never acquire a held lock.
//   - every key: no panic; a TryLock or Lock that returns an error or false leaves no claim
//     behind (the lock key holds no value the caller did not write); a Lock that waits issues
//     a bounded number of commands (no polling: DESIGN.md, "The waiting protocol").
func FuzzMutexForeign(f *testing.F) {
	r := startFuzzRedis(f)
	for _, s := range []struct {
		part, kind    uint8
		member, value string
		score         float64
		flags         uint8
	}{
		{0, 0, "", "someone", 0, 1 | 4},
		{0, 0, "", "someone", 0, 4},
		{0, 0, "", "~other:17", 0, 1 | 4},
		{0, 0, "", "~$W:17", 0, 1 | 4},
		{0, 0, "", "~$W:abc", 0, 1 | 4},
		{0, 0, "", "~$W:", 0, 1 | 4},
		{0, 0, "", "", 0, 1},
		{0, 1, "f", "v", 0, 1 | 4},
		{0, 2, "m", "", 1, 4},
		{0, 3, "", "x", 0, 1},
		{0, 0, "", "someone", 0, 2},
		{0, 1, "f", "v", 0, 2},
		{1, 0, "", "5", 0, 0},
		{1, 0, "", "9007199254740990", 0, 0},
		{1, 0, "", "9007199254740993", 0, 0},
		{1, 0, "", "99999999999999999999", 0, 0},
		{1, 0, "", "-5", 0, 1},
		{1, 0, "", "abc", 0, 1},
		{1, 0, "", "1e3", 0, 0},
		{1, 0, "", "inf", 0, 0},
		{1, 1, "f", "v", 0, 0},
		{2, 2, "$W", "", 1, 4},
		{2, 0, "", "junk", 0, 4},
		{2, 0, "", "junk", 0, 2},
		{3, 2, "$W", "", math.Inf(1), 4},
		{3, 2, "!x", "", 1e18, 0},
		{3, 1, "f", "v", 0, 4},
	} {
		f.Add(s.part, s.kind, s.member, s.value, s.score, s.flags)
	}
	f.Fuzz(func(t *testing.T, part, kind uint8, member, value string, score float64, flags uint8) {
		name := r.next(t)
		m, err := New(r.h, name)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if m.Lease() != nil {
				_ = m.Unlock(context.Background())
			}
		}()
		r.cleanup(t, m.lock, m.fence, m.q, m.qx)
		member = strings.ReplaceAll(member, "$W", m.waiter)
		value = strings.ReplaceAll(value, "$W", m.waiter)
		key := []string{m.lock, m.fence, m.q, m.qx}[part%4]
		fv := foreign{kind: kind % 5, member: member, value: value, score: score, ttl: flags&1 != 0}
		ctx := context.Background()

		if flags&2 != 0 {
			// Written while held.
			if ok, err := m.TryLock(ctx); !ok || err != nil {
				t.Fatalf("TryLock of a free mutex: %v, %v", ok, err)
			}
			r.do(t, "DEL", key) // the foreign value replaces what is there
			r.write(t, key, fv)
			before := r.snapshot(t, key)
			err := m.Unlock(ctx)
			if key == m.lock {
				if err == nil {
					t.Fatalf("Unlock succeeded with %s in the lock key", before)
				}
				if fv.kind == 0 && !errors.Is(err, distsync.ErrNotHeld) {
					t.Fatalf("Unlock with %s in the lock key: %v, want ErrNotHeld", before, err)
				}
				if after := r.snapshot(t, key); after != before {
					t.Fatalf("Unlock changed the foreign lock value %s to %s", before, after)
				}
			}
			return
		}

		r.write(t, key, fv)
		before := r.snapshot(t, m.lock)
		own := key == m.lock && fv.kind == 0 && strings.HasPrefix(value, "~"+m.waiter+":")

		ok, err := m.TryLock(ctx)
		var tok int64
		switch {
		case ok && key == m.lock:
			t.Fatalf("TryLock took the mutex with %s in the lock key", before)
		case ok:
			tok = m.Lease().Token()
			checkToken(t, fv, key == m.fence, tok, 0)
			if err := m.Unlock(ctx); err == nil {
				// The lock is free: a second TryLock takes it, with a larger token.
				ok2, err := m.TryLock(ctx)
				if !ok2 && err == nil {
					t.Fatalf("TryLock after an Unlock: not acquired (lock key %s)", r.snapshot(t, m.lock))
				}
				if ok2 {
					checkToken(t, fv, key == m.fence, m.Lease().Token(), tok)
					_ = m.Unlock(ctx)
				}
			}
		default:
			// Not acquired: the lock key is as the test left it.
			if after := r.snapshot(t, m.lock); after != before {
				t.Fatalf("TryLock returned %v, %v and left the lock key %s (was %s)", ok, err, after, before)
			}
		}

		if flags&4 != 0 {
			r.do(t, "DEL", m.lock)
			if key == m.lock {
				r.write(t, key, fv)
			}
			before := r.snapshot(t, m.lock)
			n0 := r.cc.Total()
			lctx, cancel := context.WithTimeout(ctx, lockWait)
			err := m.Lock(lctx)
			cancel()
			sent := r.cc.Total() - n0
			switch {
			case err == nil && key == m.lock && !own:
				t.Fatalf("Lock took the mutex with %s in the lock key", before)
			case err == nil:
				checkToken(t, fv, key == m.fence, m.Lease().Token(), 0)
				_ = m.Unlock(ctx)
			case sent > maxWaitCommands:
				t.Fatalf("Lock sent %d commands in %v with %s in %s: polling", sent, lockWait, r.snapshot(t, key), key)
			case key == m.lock && !own:
				// (With the lock free, a Lock that timed out may leave its attempt's clean-up
				// to the background; with a foreign value there, no attempt takes anything.)
				if after := r.snapshot(t, m.lock); after != before {
					t.Fatalf("Lock returned %v and left the lock key %s (was %s)", err, after, before)
				}
			}
		}
	})
}

// checkToken checks the fencing token of an acquisition: above 0, above the previous one
// (prev), and above the fence's value if the test wrote an integer Lua counts exactly.
func checkToken(t *testing.T, fv foreign, fence bool, tok, prev int64) {
	t.Helper()
	if tok <= 0 || tok <= prev {
		t.Fatalf("fencing token %d after %d (fence written: %v, %+v)", tok, prev, fence, fv)
	}
	if n, err := strconv.ParseInt(fv.value, 10, 64); fence && fv.kind == 0 && err == nil && n < 1<<53 && tok <= n {
		t.Fatalf("fencing token %d, not above the fence %d", tok, n)
	}
}

const (
	// lockWait bounds a Lock that waits behind a foreign value.
	lockWait = 25 * time.Millisecond
	// maxWaitCommands bounds the commands a Lock may send while it waits lockWait: an
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

package reentrant

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

// FuzzReentrantForeign writes a foreign value under a reentrant mutex's lock key (the hash
// 'o:<owner>' -> count, 't' -> token), then runs TryLock (and Unlock if it took it) and, with
// flags&4, Lock with a short ctx; or, with flags&2, the value replaces the hash while the
// mutex is held, and Unlock runs. kind 0 writes the hash field member = value, and 't' = tval
// if tval is not empty; kinds 1-4 write a string, a zset member (score), a list or a set
// element. flags&1 gives the key a TTL. "$O" in the member or value stands for the owner the
// calls run for, so that the fuzzer can write that owner's own hold ('o:$O').
//
// What is correct:
//   - A key that holds anything without the field 'o:<owner>' is someone else's hold: TryLock
//     and Lock never return true, and a call that does not take it leaves the key as it was.
//     Replaced while held, Unlock returns an error (ErrNotHeld for a hash: the hold was lost)
//     and leaves the foreign value alone.
//   - A hash with 'o:<owner>' is the owner's own hold (an owner may be shared across
//     processes): taking it again is re-entry, and anything but a panic is allowed.
//   - No panic, and a Lock that waits issues a bounded number of commands whatever the key
//     holds, with or without a TTL (no polling: DESIGN.md, "The waiting protocol").
func FuzzReentrantForeign(f *testing.F) {
	r := startFuzzRedis(f)
	for _, s := range []struct {
		kind               uint8
		member, value, tok string
		score              float64
		flags              uint8
	}{
		{0, "o:someone", "1", "1712345678901234", 0, 1 | 4},
		{0, "o:someone", "1", "1712345678901234", 0, 4},
		{0, "o:$O", "1", "1712345678901234", 0, 1 | 4},
		{0, "o:$O", "abc", "1712345678901234", 0, 1},
		{0, "o:$O", "1", "junk", 0, 1},
		{0, "o:$O", "-5", "", 0, 1},
		{0, "t", "1", "", 0, 1 | 4},
		{0, "o:", "1", "", 0, 1},
		{1, "", "someone", "", 0, 1 | 4},
		{1, "", "o:$O", "", 0, 1 | 4},
		{2, "o:$O", "", "", 1, 1 | 4},
		{3, "", "x", "", 0, 4},
		{4, "", "x", "", 0, 1},
		{0, "o:someone", "1", "", 0, 2},
		{0, "o:$O", "1", "", 0, 2},
		{1, "", "x", "", 0, 2},
	} {
		f.Add(s.kind, s.member, s.value, s.tok, s.score, s.flags)
	}
	f.Fuzz(func(t *testing.T, kind uint8, member, value, tval string, score float64, flags uint8) {
		name := r.next(t)
		m, err := New(r.h, name)
		if err != nil {
			t.Fatal(err)
		}
		o := NewOwner()
		ctx := WithOwner(context.Background(), o)
		defer func() {
			for m.HoldCount(ctx) > 0 {
				_ = m.Unlock(ctx)
			}
		}()
		r.cleanup(t, m.keys...)
		member = strings.ReplaceAll(member, "$O", string(o))
		value = strings.ReplaceAll(value, "$O", string(o))
		k := kind % 5
		if k <= 1 {
			k = 1 - k // this target's kind 0 is the hash, 1 the string
		}
		fv := foreign{kind: k, member: member, value: value, score: score, ttl: flags&1 != 0}
		write := func() {
			r.write(t, m.lock, fv)
			if fv.kind == 1 && tval != "" {
				r.do(t, "HSET", m.lock, "t", tval)
			}
		}
		own := fv.kind == 1 && member == "o:"+string(o)

		if flags&2 != 0 {
			if ok, err := m.TryLock(ctx); !ok || err != nil {
				t.Fatalf("TryLock of a free mutex: %v, %v", ok, err)
			}
			r.do(t, "DEL", m.lock)
			write()
			before := r.snapshot(t, m.lock)
			err := m.Unlock(ctx)
			if !own {
				if err == nil {
					t.Fatalf("Unlock succeeded with %s in the lock key", before)
				}
				if fv.kind == 1 && !errors.Is(err, distsync.ErrNotHeld) {
					t.Fatalf("Unlock with %s in the lock key: %v, want ErrNotHeld", before, err)
				}
				if after := r.snapshot(t, m.lock); after != before {
					t.Fatalf("Unlock changed the foreign lock value %s to %s", before, after)
				}
			}
			return
		}

		write()
		before := r.snapshot(t, m.lock)
		ok, err := m.TryLock(ctx)
		switch {
		case ok && !own:
			t.Fatalf("TryLock took the mutex with %s in the lock key", before)
		case ok:
			if tok := m.Lease(ctx).Token(); tok <= 0 {
				t.Logf("re-entered %s with token %d", before, tok)
			}
			_ = m.Unlock(ctx)
		case !own:
			if after := r.snapshot(t, m.lock); after != before {
				t.Fatalf("TryLock returned %v, %v and left the lock key %s (was %s)", ok, err, after, before)
			}
		}

		if flags&4 != 0 {
			r.do(t, "DEL", m.lock)
			write()
			before := r.snapshot(t, m.lock)
			n0 := r.cc.Total()
			lctx, cancel := context.WithTimeout(ctx, lockWait)
			err := m.Lock(lctx)
			cancel()
			sent := r.cc.Total() - n0
			switch {
			case err == nil && !own:
				t.Fatalf("Lock took the mutex with %s in the lock key", before)
			case err == nil:
				_ = m.Unlock(ctx)
			case sent > maxWaitCommands:
				t.Fatalf("Lock sent %d commands in %v with %s in the lock key (TTL: %v): polling", sent, lockWait, before, fv.ttl)
			case !own:
				if after := r.snapshot(t, m.lock); after != before {
					t.Fatalf("Lock returned %v and left the lock key %s (was %s)", err, after, before)
				}
			}
		}
	})
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

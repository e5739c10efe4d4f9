package mutex

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
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
//     was, but for a '+' after a value shaped as a holder's ('<handle id>:<sequence>', not a
//     grant): a Lock that queues behind a hold marks it as waited for (lib/queue.lua). Replaced while held: Unlock returns an error (ErrNotHeld for a string: the hold was
//     lost) and leaves the foreign value alone.
//   - fence: whatever it holds, an acquisition either fails with an error or gets a token
//     above 0, above the value if it is an integer Lua counts exactly (< 2^53), and above the
//     previous acquisition's token.
//   - q, qx: junk there may make a call fail (an error), never acquire a held lock.
//   - every key: no panic; a TryLock or Lock that returns an error or false leaves no claim
//     behind (the lock key holds no value the caller did not write); a Lock that waits issues
//     a bounded number of commands (no polling: docs/design.md, "The waiting protocol").
func FuzzMutexForeign(f *testing.F) {
	r := redistest.StartFuzz(f)
	for _, s := range []struct {
		part, kind    uint8
		member, value string
		score         float64
		flags         uint8
	}{
		{0, 0, "", "someone", 0, 1 | 4},
		{0, 0, "", "someone", 0, 4},
		{0, 0, "", "~other:17", 0, 1 | 4},
		{0, 0, "", "pod%3A7.AAECAwQFBgcICQoL:1", 0, 1 | 4},     // another Handle's hold, with an identity
		{0, 0, "", "~pod%3A7.AAECAwQFBgcICQoL:1:17", 0, 1 | 4}, // a grant to it
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
		name := r.Next()
		m, err := New(r.H, name)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if m.Lease() != nil {
				_ = m.Unlock(context.Background())
			}
		}()
		s := m.impl.(*single)
		r.Cleanup(t, s.lockKey, s.fence, s.q, s.qx)
		member = strings.ReplaceAll(member, "$W", s.waiter)
		value = strings.ReplaceAll(value, "$W", s.waiter)
		key := []string{s.lockKey, s.fence, s.q, s.qx}[part%4]
		fv := redistest.Foreign{Kind: kind % 5, Member: member, Value: value, Score: score, TTL: flags&1 != 0}
		ctx := context.Background()

		if flags&2 != 0 {
			// Written while held.
			if ok, err := m.TryLock(ctx); !ok || err != nil {
				t.Fatalf("TryLock of a free mutex: %v, %v", ok, err)
			}
			r.Do(t, "DEL", key) // the foreign value replaces what is there
			r.Write(t, key, fv)
			before := r.Snapshot(t, key)
			err := m.Unlock(ctx)
			if key == s.lockKey {
				if err == nil {
					t.Fatalf("Unlock succeeded with %s in the lock key", before)
				}
				if fv.Kind == 0 && !errors.Is(err, distsync.ErrNotHeld) {
					t.Fatalf("Unlock with %s in the lock key: %v, want ErrNotHeld", before, err)
				}
				if after := r.Snapshot(t, key); after != before {
					t.Fatalf("Unlock changed the foreign lock value %s to %s", before, after)
				}
			}
			return
		}

		r.Write(t, key, fv)
		before := r.Snapshot(t, s.lockKey)
		own := key == s.lockKey && fv.Kind == 0 && strings.HasPrefix(value, "~"+s.waiter+":")

		ok, err := m.TryLock(ctx)
		var tok int64
		switch {
		case ok && key == s.lockKey:
			t.Fatalf("TryLock took the mutex with %s in the lock key", before)
		case ok:
			tok = m.Lease().Token()
			checkToken(t, fv, key == s.fence, tok, 0)
			if err := m.Unlock(ctx); err == nil {
				// The lock is free: a second TryLock takes it, with a larger token.
				ok2, err := m.TryLock(ctx)
				if !ok2 && err == nil {
					t.Fatalf("TryLock after an Unlock: not acquired (lock key %s)", r.Snapshot(t, s.lockKey))
				}
				if ok2 {
					checkToken(t, fv, key == s.fence, m.Lease().Token(), tok)
					_ = m.Unlock(ctx)
				}
			}
		default:
			// Not acquired: the lock key is as the test left it.
			if after := r.Snapshot(t, s.lockKey); after != before {
				t.Fatalf("TryLock returned %v, %v and left the lock key %s (was %s)", ok, err, after, before)
			}
		}

		if flags&4 != 0 {
			r.Do(t, "DEL", s.lockKey)
			if key == s.lockKey {
				r.Write(t, key, fv)
			}
			before := r.Snapshot(t, s.lockKey)
			n0 := r.Counter.Total()
			lctx, cancel := context.WithTimeout(ctx, lockWait)
			err := m.Lock(lctx)
			cancel()
			sent := r.Counter.Total() - n0
			switch {
			case err == nil && key == s.lockKey && !own:
				t.Fatalf("Lock took the mutex with %s in the lock key", before)
			case err == nil:
				checkToken(t, fv, key == s.fence, m.Lease().Token(), 0)
				_ = m.Unlock(ctx)
			case sent > maxWaitCommands:
				t.Fatalf("Lock sent %d commands in %v with %s in %s: polling", sent, lockWait, r.Snapshot(t, key), key)
			case key == s.lockKey && !own:
				// (With the lock free, a Lock that timed out may leave its attempt's clean-up
				// to the background; with a foreign value there, no attempt takes anything.)
				if after := r.Snapshot(t, s.lockKey); after != before && !markedWaitedFor(before, after) {
					t.Fatalf("Lock returned %v and left the lock key %s (was %s)", err, after, before)
				}
			}
		}
	})
}

// markedWaitedFor reports whether snapshot after is snapshot before, a string shaped as a
// holder's owner value, with the mark of a waiter queued behind it: a '+' after it.
func markedWaitedFor(before, after string) bool {
	v, ok := strings.CutPrefix(before, "string ")
	if !ok || after != before+"+" || v == "" || strings.HasPrefix(v, "~") || !strings.ContainsAny(v, ":/") {
		return false
	}
	c := v[len(v)-1]
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// checkToken checks the fencing token of an acquisition: above 0, above the previous one
// (prev), and above the fence's value if the test wrote an integer Lua counts exactly.
func checkToken(t *testing.T, fv redistest.Foreign, fence bool, tok, prev int64) {
	t.Helper()
	if tok <= 0 || tok <= prev {
		t.Fatalf("fencing token %d after %d (fence written: %v, %+v)", tok, prev, fence, fv)
	}
	if n, err := strconv.ParseInt(fv.Value, 10, 64); fence && fv.Kind == 0 && err == nil && n < 1<<53 && tok <= n {
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

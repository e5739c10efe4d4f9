package reentrant

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
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
//     holds, with or without a TTL (no polling: docs/design.md, "The waiting protocol").
func FuzzReentrantForeign(f *testing.F) {
	r := redistest.StartFuzz(f)
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
		name := r.Next()
		m, err := New(r.H, name)
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
		r.Cleanup(t, m.keys...)
		member = strings.ReplaceAll(member, "$O", string(o))
		value = strings.ReplaceAll(value, "$O", string(o))
		k := kind % 5
		if k <= 1 {
			k = 1 - k // this target's kind 0 is the hash, 1 the string
		}
		fv := redistest.Foreign{Kind: k, Member: member, Value: value, Score: score, TTL: flags&1 != 0}
		write := func() {
			r.Write(t, m.lock, fv)
			if fv.Kind == 1 && tval != "" {
				r.Do(t, "HSET", m.lock, "t", tval)
			}
		}
		own := fv.Kind == 1 && member == "o:"+string(o)

		if flags&2 != 0 {
			if ok, err := m.TryLock(ctx); !ok || err != nil {
				t.Fatalf("TryLock of a free mutex: %v, %v", ok, err)
			}
			r.Do(t, "DEL", m.lock)
			write()
			before := r.Snapshot(t, m.lock)
			err := m.Unlock(ctx)
			if !own {
				if err == nil {
					t.Fatalf("Unlock succeeded with %s in the lock key", before)
				}
				if fv.Kind == 1 && !errors.Is(err, distsync.ErrNotHeld) {
					t.Fatalf("Unlock with %s in the lock key: %v, want ErrNotHeld", before, err)
				}
				if after := r.Snapshot(t, m.lock); after != before {
					t.Fatalf("Unlock changed the foreign lock value %s to %s", before, after)
				}
			}
			return
		}

		write()
		before := r.Snapshot(t, m.lock)
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
			if after := r.Snapshot(t, m.lock); after != before {
				t.Fatalf("TryLock returned %v, %v and left the lock key %s (was %s)", ok, err, after, before)
			}
		}

		if flags&4 != 0 {
			r.Do(t, "DEL", m.lock)
			write()
			before := r.Snapshot(t, m.lock)
			n0 := r.Counter.Total()
			lctx, cancel := context.WithTimeout(ctx, lockWait)
			err := m.Lock(lctx)
			cancel()
			sent := r.Counter.Total() - n0
			switch {
			case err == nil && !own:
				t.Fatalf("Lock took the mutex with %s in the lock key", before)
			case err == nil:
				_ = m.Unlock(ctx)
			case sent > maxWaitCommands:
				t.Fatalf("Lock sent %d commands in %v with %s in the lock key (TTL: %v): polling", sent, lockWait, before, fv.TTL)
			case !own:
				if after := r.Snapshot(t, m.lock); after != before {
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

package distsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
)

// oddIdentity holds every byte that ids and messages give a meaning to, and then some.
const oddIdentity = "pod:7 50%~{x}\tcaf\u00e9/\u65e5\u672c,a.b@c+d=e"

// Every lock and the semaphore say who holds a name: the Handle it was taken through and its
// identity, the hold's token as its holder has it, the lease Redis keeps, and the count;
// nothing once it is given back. A Holders call from another process sees the same.
func TestHoldersSayWhoHoldsAName(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 20 * time.Second
		prefix := b.Prefix(t)
		h := b.Pod(t, prefix, distsync.WithLeaseTTL(ttl), distsync.WithIdentity(oddIdentity)).H
		other := b.Pod(t, prefix).H // an observer in another process, of the default identity
		ctx := context.Background()
		if h.ID() == "" || h.ID() == other.ID() {
			t.Fatalf("Handle IDs %q and %q: want distinct and non-empty", h.ID(), other.ID())
		}
		if h.Identity() != oddIdentity || other.Identity() == oddIdentity {
			t.Fatalf("Handle identities %q and %q, want %q and the default", h.Identity(), other.Identity(), oddIdentity)
		}

		// check compares what a Holders call (from h's process and from the other's) returns
		// with want, Remaining aside, which must lie in (0, ttl].
		check := func(t *testing.T, what string, holders func(*distsync.Handle) ([]distsync.Holder, error), want []distsync.Holder) {
			t.Helper()
			for _, via := range []*distsync.Handle{h, other} {
				got, err := holders(via)
				if err != nil {
					t.Fatalf("%s: Holders: %v", what, err)
				}
				if len(got) != len(want) {
					t.Fatalf("%s: Holders = %+v, want %d holders", what, got, len(want))
				}
				for i := range got {
					if got[i].Remaining <= 0 || got[i].Remaining > ttl {
						t.Errorf("%s: holder %d has %v left, want within the %v lease", what, i, got[i].Remaining, ttl)
					}
					g := got[i]
					g.Remaining, g.Owner = 0, ""
					if g != want[i] {
						t.Errorf("%s: holder %d = %+v, want %+v", what, i, g, want[i])
					}
				}
			}
		}

		t.Run("mutex", func(t *testing.T) {
			m, _ := mutex.New(h, "who")
			view := func(via *distsync.Handle) ([]distsync.Holder, error) {
				v, _ := mutex.New(via, "who")
				return v.Holders(ctx)
			}
			check(t, "free", view, nil)
			l, err := m.LockLease(ctx)
			if err != nil {
				t.Fatal(err)
			}
			check(t, "held", view, []distsync.Holder{{Handle: h.ID(), Identity: oddIdentity, Token: l.Token(), Count: 1}})
			if err := m.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			check(t, "unlocked", view, nil)
		})

		t.Run("fair", func(t *testing.T) {
			m, _ := fair.New(h, "who")
			view := func(via *distsync.Handle) ([]distsync.Holder, error) {
				v, _ := fair.New(via, "who")
				return v.Holders(ctx)
			}
			l, err := m.LockLease(ctx)
			if err != nil {
				t.Fatal(err)
			}
			check(t, "held", view, []distsync.Holder{{Handle: h.ID(), Identity: oddIdentity, Token: l.Token(), Count: 1}})
			if err := m.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			check(t, "unlocked", view, nil)
		})

		t.Run("reentrant", func(t *testing.T) {
			m, _ := reentrant.New(h, "who")
			o := reentrant.NewOwner()
			octx := reentrant.WithOwner(ctx, o)
			view := func(via *distsync.Handle) ([]distsync.Holder, error) {
				v, _ := reentrant.New(via, "who")
				return v.Holders(ctx)
			}
			l, err := m.LockLease(octx)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Lock(octx); err != nil {
				t.Fatal(err)
			}
			check(t, "held twice", view, []distsync.Holder{{Token: l.Token(), Count: 2}})
			if got, _ := m.Holders(ctx); len(got) == 1 && got[0].Owner != string(o) {
				t.Errorf("Owner = %q, want the reentrant owner %q", got[0].Owner, o)
			}
			for range 2 {
				if err := m.Unlock(octx); err != nil {
					t.Fatal(err)
				}
			}
			check(t, "unlocked", view, nil)
		})

		t.Run("rwmutex", func(t *testing.T) {
			m, _ := rwmutex.New(h, "who")
			view := func(via *distsync.Handle) ([]distsync.Holder, error) {
				v, _ := rwmutex.New(via, "who")
				return v.Holders(ctx)
			}
			l, err := m.LockLease(ctx)
			if err != nil {
				t.Fatal(err)
			}
			check(t, "write held", view, []distsync.Holder{{Handle: h.ID(), Identity: oddIdentity, Token: l.Token(), Count: 1}})
			if err := m.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			r := []*rwmutex.RWMutex{m}
			ro, _ := rwmutex.New(other, "who")
			r = append(r, ro)
			for _, x := range r {
				if err := x.RLock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			got, err := m.Holders(ctx)
			if err != nil || len(got) != 2 {
				t.Fatalf("Holders with two readers: %+v, %v", got, err)
			}
			handles, identities := map[string]bool{}, map[string]bool{}
			for _, g := range got {
				identities[g.Identity] = true
				if !g.Shared || g.Token != l.Token() || g.Count != 1 || g.Remaining <= 0 || g.Remaining > ttl {
					t.Errorf("read hold %+v: want Shared, the last writer's token %d, count 1, within the lease", g, l.Token())
				}
				handles[g.Handle] = true
			}
			if !handles[h.ID()] || !handles[other.ID()] {
				t.Errorf("readers' Handles %v, want %q and %q", handles, h.ID(), other.ID())
			}
			if !identities[h.Identity()] || !identities[other.Identity()] {
				t.Errorf("readers' identities %v, want %q and %q", identities, h.Identity(), other.Identity())
			}
			for _, x := range r {
				if err := x.RUnlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			check(t, "unlocked", view, nil)
		})

		t.Run("semaphore", func(t *testing.T) {
			s, _ := semaphore.New(h, "who", 5)
			view := func(via *distsync.Handle) ([]distsync.Holder, error) {
				v, _ := semaphore.New(via, "who", 5)
				return v.Holders(ctx)
			}
			if err := s.Acquire(ctx, 2); err != nil {
				t.Fatal(err)
			}
			check(t, "two permits held", view, []distsync.Holder{{Handle: h.ID(), Identity: oddIdentity, Count: 2}})
			if err := s.Release(ctx, 2); err != nil {
				t.Fatal(err)
			}
			check(t, "released", view, nil)
		})
	})
}

package distsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/inspect"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
)

// The identity rides in every owner value and waiter id, which the scripts split, publish to
// and hand claims to: an identity holding every byte they give a meaning to (':' '/' ','
// '~' '%', braces, spaces) must leave waiting as it was. Each primitive's waiter, whose
// Handle has such an identity, takes the claim from a holder with another one well within a
// lease, so by the release's message (or hand-off), not by its backstop re-check; Holders and
// inspect then name it.
func TestOddIdentitiesWaitAndHandOff(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 20 * time.Second // a waiter's backstop re-check: far past the limit below
		prefix := b.Prefix(t)
		// The waiter lease, and the hand-off window, are what a claim handed to the waiter
		// lasts until its confirm reaches Redis: long, for a loaded machine.
		opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(ttl), distsync.WithHandoffWindow(ttl)}
		ha := b.Pod(t, prefix, append(opts, distsync.WithIdentity(oddIdentity))...).H
		hb := b.Pod(t, prefix, append(opts, distsync.WithIdentity("b:{2} ~%/, \u00e9"))...).H
		ctx := context.Background()
		owner := func() context.Context { return reentrant.WithOwner(ctx, reentrant.NewOwner()) }
		ownerA, ownerB := owner(), owner()

		// Each primitive: a holds, then b waits; release ends a's hold, and b's call returns.
		type prim struct {
			kind    string
			hold    func(h *distsync.Handle) (release func() error)
			wait    func(h *distsync.Handle) func(ctx context.Context) error
			holders bool // the waiter's hold shows in Holders (not an election's)
		}
		prims := []prim{
			{inspect.Mutex, func(h *distsync.Handle) func() error {
				m, _ := mutex.New(h, "odd")
				must(t, m.Lock(ctx))
				return func() error { return m.Unlock(ctx) }
			}, func(h *distsync.Handle) func(ctx context.Context) error {
				m, _ := mutex.New(h, "odd")
				return m.Lock
			}, true},
			{inspect.Fair, func(h *distsync.Handle) func() error {
				m, _ := fair.New(h, "odd")
				must(t, m.Lock(ctx))
				return func() error { return m.Unlock(ctx) }
			}, func(h *distsync.Handle) func(ctx context.Context) error {
				m, _ := fair.New(h, "odd")
				return m.Lock
			}, true},
			{inspect.Semaphore, func(h *distsync.Handle) func() error {
				s, _ := semaphore.New(h, "odd", 2)
				must(t, s.Acquire(ctx, 2))
				return func() error { return s.Release(ctx, 2) }
			}, func(h *distsync.Handle) func(ctx context.Context) error {
				s, _ := semaphore.New(h, "odd", 2)
				return func(ctx context.Context) error { return s.Acquire(ctx, 1) }
			}, true},
			{inspect.Reentrant, func(h *distsync.Handle) func() error {
				m, _ := reentrant.New(h, "odd")
				must(t, m.Lock(ownerA))
				return func() error { return m.Unlock(ownerA) }
			}, func(h *distsync.Handle) func(ctx context.Context) error {
				m, _ := reentrant.New(h, "odd")
				return func(context.Context) error { return m.Lock(ownerB) }
			}, false}, // a reentrant hold is its owner's: no Handle, no identity
			{inspect.RWMutex, func(h *distsync.Handle) func() error {
				m, _ := rwmutex.New(h, "odd")
				must(t, m.Lock(ctx))
				return func() error { return m.Unlock(ctx) }
			}, func(h *distsync.Handle) func(ctx context.Context) error {
				m, _ := rwmutex.New(h, "odd")
				return m.RLock
			}, true},
			{inspect.Election, func(h *distsync.Handle) func() error {
				e, _ := election.New(h, "odd")
				tm, err := e.Campaign(ctx, "a")
				must(t, err)
				return func() error { return tm.Resign(ctx) }
			}, func(h *distsync.Handle) func(ctx context.Context) error {
				e, _ := election.New(h, "odd")
				return func(ctx context.Context) error { _, err := e.Campaign(ctx, "b"); return err }
			}, true},
		}
		for _, p := range prims {
			t.Run(p.kind, func(t *testing.T) {
				release := p.hold(ha)
				waiting := redistest.Async(ctx, p.wait(hb))
				if !redistest.Eventually(5*time.Second, func() bool {
					r, err := inspect.Inspect(ctx, hb, p.kind, "odd")
					return err == nil && len(r.Queue) == 1
				}) {
					t.Fatal("the waiter was not queued within 5s")
				}
				r, err := inspect.Inspect(ctx, ha, p.kind, "odd")
				if err != nil || len(r.Queue) != 1 || len(r.Holders) != 1 {
					t.Fatalf("Inspect: %+v, %v; want one holder and one waiter", r, err)
				}
				if w := r.Queue[0]; w.Identity != hb.Identity() || w.Handle != hb.ID() {
					t.Errorf("waiter %+v: want identity %q, Handle %s", w, hb.Identity(), hb.ID())
				}
				if h := r.Holders[0]; p.holders && (h.Identity != ha.Identity() || h.Handle != ha.ID()) {
					t.Errorf("holder %+v: want identity %q, Handle %s", h, ha.Identity(), ha.ID())
				}
				start := time.Now()
				must(t, release())
				if ret := redistest.Await(t, waiting, 10*time.Second); ret.Err != nil {
					t.Fatalf("the waiter's call: %v", ret.Err)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("the waiter took the claim %v after the release: not by the release's message", d)
				}
				r, err = inspect.Inspect(ctx, ha, p.kind, "odd")
				if err != nil || len(r.Holders) != 1 {
					t.Fatalf("Inspect after the hand-off: %+v, %v; want one holder", r, err)
				}
				if h := r.Holders[0]; p.holders && (h.Identity != hb.Identity() || h.Handle != hb.ID()) {
					t.Errorf("holder after the hand-off %+v: want identity %q, Handle %s", h, hb.Identity(), hb.ID())
				}
				if p.kind == inspect.Election {
					e, _ := election.New(ha, "odd")
					info, err := e.Leader(ctx)
					if err != nil || info.Identity != hb.Identity() {
						t.Errorf("Leader = %+v, %v; want identity %q", info, err, hb.Identity())
					}
				}
			})
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

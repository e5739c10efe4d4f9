package inspect_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/inspect"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/reentrant"
)

// nested is a process (a Handle) that holds one name and waits for the next, as a goroutine
// with nested Locks taken in its own order does.
type nested struct {
	h     *distsync.Handle
	holds string
	waits string
}

// deadlock makes the processes of ps, each holding its name, then waiting for the next one's:
// with mutexes, or reentrant mutexes (each process an owner of its own). It returns once every
// process waits.
func deadlock(e *env, kind string, names ...string) []nested {
	ctx := context.Background()
	ps := make([]nested, len(names))
	for i, n := range names {
		ps[i] = nested{h: e.pod(), holds: n, waits: names[(i+1)%len(names)]}
	}
	owners := make([]reentrant.Owner, len(ps))
	for i, p := range ps { // every hold first: a wait would take a name not yet held
		var err error
		switch kind {
		case inspect.Mutex:
			m, _ := mutex.New(p.h, p.holds)
			err = m.Lock(ctx)
		case inspect.Reentrant:
			owners[i] = reentrant.NewOwner()
			m, _ := reentrant.New(p.h, p.holds)
			err = m.Lock(reentrant.WithOwner(ctx, owners[i]))
		}
		if err != nil {
			e.t.Fatal(err)
		}
	}
	for i, p := range ps {
		switch kind {
		case inspect.Mutex:
			w, _ := mutex.New(p.h, p.waits)
			e.wait(w.Lock)
		case inspect.Reentrant:
			w, _ := reentrant.New(p.h, p.waits)
			e.wait(func(ctx context.Context) error { return w.Lock(reentrant.WithOwner(ctx, owners[i])) })
		}
	}
	for _, p := range ps {
		e.until(p.waits+" waited for", kind, p.waits, queued(1))
	}
	return ps
}

// checkCycle checks that d is the cycle of ps: each process waits for the name the next holds,
// each Wait names its process, its identity, the name and the hold it waits behind.
func checkCycle(t *testing.T, kind string, d inspect.Deadlock, ps []nested) {
	t.Helper()
	if len(d) != len(ps) {
		t.Fatalf("deadlock %+v: want a cycle of %d processes", d, len(ps))
	}
	for i, w := range d {
		at := slices.IndexFunc(ps, func(p nested) bool { return p.h.ID() == w.Handle })
		if at < 0 {
			t.Fatalf("wait %d: Handle %q is none of the processes", i, w.Handle)
		}
		p, next := ps[at], d[(i+1)%len(d)]
		if w.Identity != identityOf(w.Handle) || w.Kind != kind || w.Name != p.waits || w.Waiter == "" {
			t.Errorf("wait %d = %+v: want %s's wait for %s %q", i, w, w.Handle, kind, p.waits)
		}
		holder := ps[(at+1)%len(ps)]
		if next.Handle != holder.h.ID() || w.Holder.Token == 0 {
			t.Errorf("wait %d = %+v, behind %+v: want the hold of the next wait's process %s", i, w, w.Holder, holder.h.ID())
		}
	}
}

// Two processes that each hold what the other waits for, and three in a ring, over mutexes and
// over reentrant mutexes, are reported, each once; a plain queue, and a process waiting for a
// name it holds itself (in another goroutine), are not.
func TestDeadlocks(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, kind := range []string{inspect.Mutex, inspect.Reentrant} {
			t.Run(kind, func(t *testing.T) {
				e := newEnv(t, b)
				ctx := context.Background()
				two := deadlock(e, kind, "a", "b")
				ring := deadlock(e, kind, "x", "y", "z")
				// A plain queue: one holds, one waits.
				free, _ := mutex.New(e.pod(), "queue")
				if err := free.Lock(ctx); err != nil {
					t.Fatal(err)
				}
				queuer, _ := mutex.New(e.pod(), "queue")
				e.wait(queuer.Lock)
				// One process whose goroutines hold and wait for one name.
				self := e.pod()
				m1, _ := mutex.New(self, "self")
				if err := m1.Lock(ctx); err != nil {
					t.Fatal(err)
				}
				m2, _ := mutex.New(self, "self")
				e.wait(m2.Lock)
				e.until("the queues", inspect.Mutex, "queue", queued(1))
				e.until("the queues", inspect.Mutex, "self", queued(1))

				ds, err := inspect.Deadlocks(ctx, e.obs, "")
				if err != nil {
					t.Fatal(err)
				}
				if len(ds) != 2 {
					t.Fatalf("Deadlocks = %s: want the two cycles", show(ds))
				}
				// Sorted by their first Handle: find each by its size.
				slices.SortFunc(ds, func(a, b inspect.Deadlock) int { return len(a) - len(b) })
				checkCycle(t, kind, ds[0], two)
				checkCycle(t, kind, ds[1], ring)
				// A pattern that leaves out a name of the cycle leaves out the cycle.
				if ds, err := inspect.Deadlocks(ctx, e.obs, "[abxy]"); err != nil || len(ds) != 1 || len(ds[0]) != 2 {
					t.Errorf("Deadlocks [abxy] = %s, %v: want the cycle of a and b only", show(ds), err)
				}
			})
		}
	})
}

// show prints deadlocks for a test's message.
func show(ds []inspect.Deadlock) string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString("[")
		for _, w := range d {
			fmt.Fprintf(&b, " %s waits for %s %q (held by %s)", w.Handle, w.Kind, w.Name, w.Holder.Owner)
		}
		b.WriteString(" ]")
	}
	return b.String()
}

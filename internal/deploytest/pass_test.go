package deploytest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/fenced"
	"github.com/distsync/distsync/inspect"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/once"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
	"github.com/distsync/distsync/waitgroup"
)

// passTTL is the lease of every hold of the pass unless it says otherwise: short, so that
// each hold is renewed (at a third of it) during its scenario, after the disruption if there
// is one.
const passTTL = 2 * time.Second

// passLimit bounds every call of the pass that waits: far above what any takes when it works
// (milliseconds), so that a busy machine does not fail it, and far below a hang.
const passLimit = 30 * time.Second

// pass is one representative pass of every primitive on one deployment: each scenario holds,
// makes others wait (across processes: a Handle and client each), lets renewals run, then
// lets go, and checks that the waiters are served in turn.
type pass struct {
	prefix string
	// client returns a new client of the deployment, closed when t ends.
	client func(t *testing.T) rueidis.Client
	// disrupt, if set, is called once in each scenario while its holders hold and its waiters
	// wait: what must change nothing a user sees. Each scenario then lets a renewal run.
	disrupt func(t *testing.T)
	// serial runs the scenarios one at a time (a disruption that restarts the server);
	// otherwise they run in parallel.
	serial bool
	// acks is the number of replicas WithReplicaAck waits for in the replica ack's scenario;
	// 0 leaves it out (no replica).
	acks int
	// ackAll makes every Handle of the pass wait for acks replicas, not only the replica
	// ack's scenario.
	ackAll bool
	// only, if set, names the scenarios to run.
	only []string
	// ttl is the lease of every hold; passTTL if 0.
	ttl time.Duration
	// log, if set, receives every Handle's log, Debug included.
	log *redistest.Buffer
}

// leaseTTL returns the lease of the pass's holds.
func (p pass) leaseTTL() time.Duration {
	if p.ttl > 0 {
		return p.ttl
	}
	return passTTL
}

type scenario struct {
	name string
	f    func(t *testing.T)
}

// scenarios returns the scenarios of the pass, one a primitive (and the replica ack's if
// p.acks > 0).
func (p pass) scenarios() []scenario {
	s := []scenario{
		{"mutex", p.mutex}, {"rwmutex", p.rwmutex}, {"fair", p.fair}, {"semaphore", p.semaphore},
		{"reentrant", p.reentrant}, {"once", p.once}, {"election", p.election},
		{"waitgroup", p.waitgroup}, {"fenced", p.fenced}, {"inspect", p.inspect},
	}
	if p.acks > 0 {
		s = append(s, scenario{"replicaack", p.replicaAck})
	}
	return s
}

// run runs every scenario (or p.only) as a subtest.
func (p pass) run(t *testing.T) {
	t.Run("pass", func(t *testing.T) {
		for _, s := range p.scenarios() {
			if p.only != nil && !slices.Contains(p.only, s.name) {
				continue
			}
			t.Run(s.name, func(t *testing.T) {
				if !p.serial {
					t.Parallel()
				}
				s.f(t)
			})
		}
	})
}

// handle returns a Handle of a client of its own (one simulated process).
func (p pass) handle(t *testing.T, opts ...distsync.Option) *distsync.Handle {
	t.Helper()
	opts = append([]distsync.Option{distsync.WithKeyPrefix(p.prefix), distsync.WithLeaseTTL(p.leaseTTL())}, opts...)
	if p.ackAll {
		opts = append(opts, distsync.WithReplicaAck(p.acks, 5*time.Second))
	}
	if p.log != nil {
		opts = append(opts, distsync.WithLogger(slog.New(slog.NewTextHandler(p.log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	h, err := distsync.New(p.client(t), opts...)
	if err != nil {
		t.Fatalf("distsync.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Close(ctx)
	})
	return h
}

// made returns n of what mk makes, each from a Handle of its own (a process each).
func made[T any](t *testing.T, p pass, n int, mk func(h *distsync.Handle) (T, error)) []T {
	t.Helper()
	out := make([]T, n)
	for i := range out {
		v, err := mk(p.handle(t))
		must(t, "New", err)
		out[i] = v
	}
	return out
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), passLimit)
	t.Cleanup(cancel)
	return ctx
}

// must fails t with what did if err is not nil (a NOSCRIPT, an ACL refusal).
func must(t *testing.T, did string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", did, err)
	}
}

// async runs f in the background; wait returns its error, failing t if f takes more than
// passLimit, and waiting reports whether f still runs.
type async struct {
	done chan struct{}
	err  error
}

func start(f func() error) *async {
	a := &async{done: make(chan struct{})}
	go func() { defer close(a.done); a.err = f() }()
	return a
}

func (a *async) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-a.done:
		must(t, what, a.err)
	case <-time.After(passLimit):
		t.Fatalf("%s: still waiting after %v", what, passLimit)
	}
}

// waiting fails t if a returned already: it was to wait.
func (a *async) waiting(t *testing.T, what string) {
	t.Helper()
	select {
	case <-a.done:
		t.Fatalf("%s returned (%v) while it should wait", what, a.err)
	default:
	}
}

// queued waits until Redis has n waiters of the primitive in its queue, read by inspect.
func queued(t *testing.T, h *distsync.Handle, kind, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(passLimit)
	for {
		r, err := inspect.Inspect(ctxFor(t), h, kind, name)
		must(t, "inspect.Inspect", err)
		if len(r.Queue) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %q: %d waiters queued after %v, want %d", kind, name, len(r.Queue), passLimit, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// middle is the middle of a scenario, its holders holding and its waiters waiting: it
// disrupts, if the pass does, lets the leases be renewed (more than a renewal period), and
// checks that every lease is still held.
func (p pass) middle(t *testing.T, leases ...*distsync.Lease) {
	t.Helper()
	if p.disrupt != nil {
		p.disrupt(t)
	}
	time.Sleep(p.leaseTTL()/2 + p.leaseTTL()/4)
	for i, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lease %d of the scenario lost while held: %v", i, err)
		}
	}
}

func (p pass) mutex(t *testing.T) {
	ctx := ctxFor(t)
	ms := made(t, p, 3, func(h *distsync.Handle) (*mutex.Mutex, error) { return mutex.New(h, "m") })
	a, b, c := ms[0], ms[1], ms[2]
	l, err := a.LockLease(ctx)
	must(t, "Lock", err)
	if ok, err := c.TryLock(ctx); ok || err != nil {
		t.Fatalf("TryLock of a held mutex = %v, %v", ok, err)
	}
	wb := start(func() error { return b.Lock(ctx) })
	wc := start(func() error { return c.Lock(ctx) })
	queued(t, p.handle(t), "mutex", "m", 2)
	if hs, err := a.Holders(ctx); err != nil || len(hs) != 1 {
		t.Fatalf("Holders = %v, %v", hs, err)
	}
	p.middle(t, l)
	wb.waiting(t, "Lock")
	must(t, "Unlock", a.Unlock(ctx))
	// The first waiter served unlocks for the second.
	select {
	case <-wb.done:
		wb.wait(t, "second Lock")
		must(t, "Unlock", b.Unlock(ctx))
		wc.wait(t, "third Lock")
		must(t, "Unlock", c.Unlock(ctx))
	case <-wc.done:
		wc.wait(t, "third Lock")
		must(t, "Unlock", c.Unlock(ctx))
		wb.wait(t, "second Lock")
		must(t, "Unlock", b.Unlock(ctx))
	case <-time.After(passLimit):
		t.Fatal("no waiter took the mutex after Unlock")
	}
}

func (p pass) rwmutex(t *testing.T) {
	ctx := ctxFor(t)
	ms := made(t, p, 3, func(h *distsync.Handle) (*rwmutex.RWMutex, error) { return rwmutex.New(h, "rw") })
	r1, r2, w := ms[0], ms[1], ms[2]
	l1, err := r1.RLockLease(ctx)
	must(t, "RLock", err)
	l2, err := r2.RLockLease(ctx)
	must(t, "second RLock", err)
	ww := start(func() error { return w.Lock(ctx) })
	queued(t, p.handle(t), "rwmutex", "rw", 1)
	p.middle(t, l1, l2)
	must(t, "RUnlock", r1.RUnlock(ctx))
	ww.waiting(t, "Lock behind a reader")
	must(t, "RUnlock", r2.RUnlock(ctx))
	ww.wait(t, "Lock")
	// A waiting reader is let in by the writer's Unlock.
	wr := start(func() error { return r1.RLock(ctx) })
	queued(t, p.handle(t), "rwmutex", "rw", 1)
	must(t, "Unlock", w.Unlock(ctx))
	wr.wait(t, "RLock")
	must(t, "RUnlock", r1.RUnlock(ctx))
}

func (p pass) fair(t *testing.T) {
	ctx := ctxFor(t)
	ms := made(t, p, 3, func(h *distsync.Handle) (*fair.Mutex, error) { return fair.New(h, "f") })
	a, b, c := ms[0], ms[1], ms[2]
	l, err := a.LockLease(ctx)
	must(t, "Lock", err)
	wb := start(func() error { return b.Lock(ctx) })
	queued(t, p.handle(t), "fair", "f", 1)
	wc := start(func() error { return c.Lock(ctx) })
	queued(t, p.handle(t), "fair", "f", 2)
	p.middle(t, l)
	must(t, "Unlock", a.Unlock(ctx))
	wb.wait(t, "first waiter's Lock") // FIFO: the first to queue is served first
	wc.waiting(t, "second waiter's Lock")
	must(t, "Unlock", b.Unlock(ctx))
	wc.wait(t, "second waiter's Lock")
	must(t, "Unlock", c.Unlock(ctx))
}

func (p pass) semaphore(t *testing.T) {
	ctx := ctxFor(t)
	ss := made(t, p, 3, func(h *distsync.Handle) (*semaphore.Semaphore, error) { return semaphore.New(h, "s", 3) })
	a, b, c := ss[0], ss[1], ss[2]
	l, err := a.AcquireLease(ctx, 2)
	must(t, "Acquire(2)", err)
	wb := start(func() error { return b.Acquire(ctx, 2) })
	queued(t, p.handle(t), "semaphore", "s", 1)
	wc := start(func() error { return c.Acquire(ctx, 1) }) // fits, but FIFO: behind b
	queued(t, p.handle(t), "semaphore", "s", 2)
	if st, err := a.Status(ctx); err != nil || st.InUse != 2 || st.Waiters != 2 {
		t.Fatalf("Status = %+v, %v; want 2 in use, 2 waiters", st, err)
	}
	p.middle(t, l)
	must(t, "Release(2)", a.Release(ctx, 2))
	wb.wait(t, "Acquire(2)")
	wc.wait(t, "Acquire(1)")
	must(t, "Release(2)", b.Release(ctx, 2))
	must(t, "Release(1)", c.Release(ctx, 1))
}

func (p pass) reentrant(t *testing.T) {
	ms := made(t, p, 2, func(h *distsync.Handle) (*reentrant.Mutex, error) { return reentrant.New(h, "r") })
	a, b := ms[0], ms[1]
	ctxA := reentrant.WithOwner(ctxFor(t), reentrant.NewOwner())
	ctxB := reentrant.WithOwner(ctxFor(t), reentrant.NewOwner())
	l, err := a.LockLease(ctxA)
	must(t, "Lock", err)
	must(t, "Lock again", a.Lock(ctxA))
	if n := a.HoldCount(ctxA); n != 2 {
		t.Fatalf("HoldCount = %d, want 2", n)
	}
	wb := start(func() error { return b.Lock(ctxB) })
	queued(t, p.handle(t), "reentrant", "r", 1)
	p.middle(t, l)
	must(t, "Unlock", a.Unlock(ctxA))
	wb.waiting(t, "another owner's Lock")
	must(t, "last Unlock", a.Unlock(ctxA))
	wb.wait(t, "another owner's Lock")
	must(t, "Unlock", b.Unlock(ctxB))
}

func (p pass) once(t *testing.T) {
	ctx := ctxFor(t)
	gs := made(t, p, 2, func(h *distsync.Handle) (*once.Group[string], error) {
		return once.NewGroup[string](h, "o", once.WithKeep(time.Minute))
	})
	a, b := gs[0], gs[1]
	var runs atomic.Int32
	release := make(chan struct{})
	var lease *distsync.Lease
	leading := make(chan struct{})
	fn := func(ctx context.Context) (string, error) {
		runs.Add(1)
		lease, _ = distsync.LeaseFromContext(ctx)
		close(leading)
		<-release
		return "computed", nil
	}
	var va, vb string
	wa := start(func() (err error) { va, err, _ = a.Do(ctx, "k", fn); return err })
	<-leading
	wb := start(func() (err error) {
		vb, err, _ = b.Do(ctx, "k", func(context.Context) (string, error) { runs.Add(1); return "again", nil })
		return err
	})
	time.Sleep(100 * time.Millisecond) // b subscribes and waits for a's result
	p.middle(t, lease)
	wb.waiting(t, "the second Do")
	close(release)
	wa.wait(t, "leader's Do")
	wb.wait(t, "follower's Do")
	if va != "computed" || vb != "computed" || runs.Load() != 1 {
		t.Fatalf("Do = %q and %q with %d runs, want the one result twice", va, vb, runs.Load())
	}
	must(t, "Forget", b.Forget(ctx, "k"))

	o, err := once.NewOnce(p.handle(t), "o1")
	must(t, "once.NewOnce", err)
	must(t, "Once.Do", o.Do(ctx, func(context.Context) error { return nil }))
	if done, err := o.Done(ctx); !done || err != nil {
		t.Fatalf("Once.Done = %v, %v", done, err)
	}
	must(t, "Once.Reset", o.Reset(ctx))
}

func (p pass) election(t *testing.T) {
	ctx := ctxFor(t)
	es := made(t, p, 3, func(h *distsync.Handle) (*election.Election, error) { return election.New(h, "e") })
	a, b, obs := es[0], es[1], es[2]
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := obs.Observe(octx)
	term, err := a.Campaign(ctx, "a")
	must(t, "Campaign", err)
	var tb *election.Term
	wb := start(func() (err error) { tb, err = b.Campaign(ctx, "b"); return err })
	queued(t, p.handle(t), "election", "e", 1)
	p.middle(t, term.Lease())
	must(t, "Proclaim", term.Proclaim(ctx, "a2"))
	if info, err := b.Leader(ctx); err != nil || info.Value != "a2" {
		t.Fatalf("Leader = %+v, %v; want a2", info, err)
	}
	wb.waiting(t, "second Campaign")
	must(t, "Resign", term.Resign(ctx))
	wb.wait(t, "second Campaign")
	// The observer saw a's values, then b.
	for want := "b"; ; {
		select {
		case info, ok := <-seen:
			if !ok {
				t.Fatal("Observe's channel closed")
			}
			if info.Value == want {
				must(t, "Resign", tb.Resign(ctx))
				return
			}
		case <-time.After(passLimit):
			t.Fatalf("the observer did not see %q lead", want)
		}
	}
}

func (p pass) waitgroup(t *testing.T) {
	ctx := ctxFor(t)
	gs := made(t, p, 3, func(h *distsync.Handle) (*waitgroup.WaitGroup, error) { return waitgroup.New(h, "wg") })
	a, b, c := gs[0], gs[1], gs[2]
	must(t, "Add(1)", a.Add(ctx, 1))
	member, err := b.Join(ctx)
	must(t, "Join", err)
	w := start(func() error { return c.Wait(ctx) })
	time.Sleep(100 * time.Millisecond) // c subscribes and waits
	p.middle(t, member.Lease())
	must(t, "Done", a.Done(ctx))
	w.waiting(t, "Wait with a member left")
	must(t, "member's Done", member.Done(ctx))
	w.wait(t, "Wait")
}

func (p pass) fenced(t *testing.T) {
	ctx := ctxFor(t)
	h1, h2 := p.handle(t), p.handle(t)
	m1, err := mutex.New(h1, "fv")
	must(t, "mutex.New", err)
	m2, err := mutex.New(h2, "fv")
	must(t, "mutex.New", err)
	v1, err := fenced.New(h1, "fv")
	must(t, "fenced.New", err)
	v2, err := fenced.New(h2, "fv")
	must(t, "fenced.New", err)
	l1, err := m1.LockLease(ctx)
	must(t, "Lock", err)
	stale := l1.Token()
	var l2 *distsync.Lease
	w := start(func() (err error) { l2, err = m2.LockLease(ctx); return err })
	queued(t, h2, "mutex", "fv", 1)
	p.middle(t, l1)
	if ok, err := v1.Set(ctx, stale, "one"); !ok || err != nil {
		t.Fatalf("Set with the holder's token = %v, %v", ok, err)
	}
	must(t, "Unlock", m1.Unlock(ctx))
	w.wait(t, "Lock")
	if ok, err := v2.Set(ctx, l2.Token(), "two"); !ok || err != nil {
		t.Fatalf("Set with the new holder's token = %v, %v", ok, err)
	}
	if ok, err := v1.Set(ctx, stale, "stale"); ok || err != nil {
		t.Fatalf("Set with a stale token = %v, %v; want refused", ok, err)
	}
	if got, _, ok, err := v1.Get(ctx); got != "two" || !ok || err != nil {
		t.Fatalf("Get = %q, %v, %v", got, ok, err)
	}
	if ok, err := v2.Delete(ctx, l2.Token()); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	must(t, "Unlock", m2.Unlock(ctx))
}

func (p pass) inspect(t *testing.T) {
	ctx := ctxFor(t)
	h := p.handle(t)
	m, err := mutex.New(h, "i")
	must(t, "mutex.New", err)
	l, err := m.LockLease(ctx)
	must(t, "Lock", err)
	g, err := once.NewGroup[string](h, "io", once.WithKeep(time.Minute))
	must(t, "once.NewGroup", err)
	if _, err, _ := g.Do(ctx, "k", func(context.Context) (string, error) { return "v", nil }); err != nil {
		t.Fatalf("Do: %v", err)
	}
	p.middle(t, l)
	list, err := inspect.List(ctx, h, "i*")
	must(t, "inspect.List", err)
	if fmt.Sprint(list) != "[{mutex i} {once io}]" {
		t.Errorf("List = %v, want the mutex and the once group", list)
	}
	reports, err := inspect.Name(ctx, h, "io")
	must(t, "inspect.Name", err)
	if len(reports) != 1 || len(reports[0].Keys) != 1 {
		t.Errorf("Name(io) = %+v, want the once group's one key", reports)
	}
	must(t, "Unlock", m.Unlock(ctx))
}

// replicaAck runs the mutex's scenario with every grant acknowledged by p.acks replicas.
func (p pass) replicaAck(t *testing.T) {
	ctx := ctxFor(t)
	var opts []distsync.Option
	if !p.ackAll {
		opts = append(opts, distsync.WithReplicaAck(p.acks, 5*time.Second))
	}
	a, err := mutex.New(p.handle(t, opts...), "ack")
	must(t, "mutex.New", err)
	b, err := mutex.New(p.handle(t, opts...), "ack")
	must(t, "mutex.New", err)
	l, err := a.LockLease(ctx)
	must(t, "Lock", err)
	w := start(func() error { return b.Lock(ctx) })
	queued(t, p.handle(t), "mutex", "ack", 1)
	p.middle(t, l)
	must(t, "Unlock", a.Unlock(ctx))
	w.wait(t, "Lock")
	must(t, "Unlock", b.Unlock(ctx))
}

package distsync_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/inspect"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/once"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
)

// replicated starts a primary and one replica, and returns them once the replica's link is up.
func replicated(t *testing.T) (primary, replica *redistest.Proc) {
	t.Helper()
	primary = redistest.StartRedis(t)
	host, port, _ := strings.Cut(primary.Addr(), ":")
	replica = redistest.StartRedis(t, "replicaof "+host+" "+port)
	linked(t, replica)
	return primary, replica
}

// linked waits until replica's link to its primary is up.
func linked(t *testing.T, replica *redistest.Proc) {
	t.Helper()
	if !redistest.Eventually(20*time.Second, func() bool {
		info, err := redistest.Command(replica.Addr(), time.Second, "INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	}) {
		t.Fatal("the replica's link to the primary did not come up")
	}
}

// cutReplica freezes the replica and drops its link, so that the primary's writes reach no
// replica (a frozen replica alone would still get them from its socket buffer when resumed).
// It returns a func that resumes the replica and waits for its link.
func cutReplica(t *testing.T, primary, replica *redistest.Proc) (resume func()) {
	t.Helper()
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := primary.ClientKill("replica"); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := replica.Resume(); err != nil {
			t.Fatal(err)
		}
		linked(t, replica)
	}
}

func handleOn(t *testing.T, c rueidis.Client, opts ...distsync.Option) *distsync.Handle {
	t.Helper()
	return redistest.Handle(t, c, append([]distsync.Option{distsync.WithKeyPrefix("ack:")}, opts...)...)
}

// acquirer is one primitive's acquire and release, and who holds it.
type acquirer struct {
	name    string
	acquire func(ctx context.Context) error
	release func(ctx context.Context) error
	holders func(ctx context.Context) (int, error) // -1: the primitive has no Holders
}

func acquirers(t *testing.T, h *distsync.Handle, name string) []acquirer {
	t.Helper()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	count := func(f func(context.Context) ([]distsync.Holder, error)) func(context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			hs, err := f(ctx)
			return len(hs), err
		}
	}
	m, err := mutex.New(h, name+":mutex")
	must(err)
	f, err := fair.New(h, name+":fair")
	must(err)
	rw, err := rwmutex.New(h, name+":rw")
	must(err)
	re, err := reentrant.New(h, name+":re")
	must(err)
	owner := reentrant.NewOwner()
	s, err := semaphore.New(h, name+":sem", 3)
	must(err)
	g, err := once.NewGroup[string](h, name+":once")
	must(err)
	var ran int
	return []acquirer{
		{"mutex", m.Lock, m.Unlock, count(m.Holders)},
		{"fair", f.Lock, f.Unlock, count(f.Holders)},
		{"rwmutex write", rw.Lock, rw.Unlock, count(rw.Holders)},
		{"rwmutex read", rw.RLock, rw.RUnlock, count(rw.Holders)},
		{"reentrant", func(ctx context.Context) error { return re.Lock(reentrant.WithOwner(ctx, owner)) },
			func(ctx context.Context) error { return re.Unlock(reentrant.WithOwner(ctx, owner)) }, count(re.Holders)},
		{"semaphore", func(ctx context.Context) error { return s.Acquire(ctx, 2) },
			func(ctx context.Context) error { return s.Release(ctx, 2) }, count(s.Holders)},
		{"once lead", func(ctx context.Context) error {
			before := ran
			_, err, _ := g.Do(ctx, "k"+time.Now().String(), func(context.Context) (string, error) { ran++; return "v", nil })
			if err == nil && ran != before+1 {
				return errors.New("fn did not run")
			}
			if err != nil && ran != before {
				return errors.New("fn ran although the lead was not acknowledged")
			}
			return err
		}, func(context.Context) error { return nil }, nil},
	}
}

// TestReplicaAck: with WithReplicaAck, an acquire the replica acknowledged holds; one no
// replica could acknowledge fails with ErrNotReplicated and leaves nothing held, where a Handle
// without the option takes the claim; a holder whose renewals no replica acknowledges loses
// its lease at its deadline.
func TestReplicaAck(t *testing.T) {
	t.Parallel()
	redistest.RequireRedis(t)
	primary, replica := replicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// With the replica up, a generous timeout: a loaded machine must not fail what should work.
	// With it cut off, a short one: the refusal comes at the timeout.
	acked := handleOn(t, primary.Client(t), distsync.WithReplicaAck(1, 5*time.Second))
	short := handleOn(t, primary.Client(t), distsync.WithReplicaAck(1, 100*time.Millisecond))
	plain := handleOn(t, primary.Client(t))
	onReplica := replica.Client(t)

	t.Run("acknowledged", func(t *testing.T) {
		for _, a := range acquirers(t, acked, "up") {
			if err := a.acquire(ctx); err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			if err := a.release(ctx); err != nil {
				t.Fatalf("%s: release: %v", a.name, err)
			}
		}
		// What Lock returned for is on the replica already: no wait for replication.
		m, _ := mutex.New(acked, "up:probe")
		for range 20 {
			if err := m.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			n, err := onReplica.Do(ctx, onReplica.B().Keys().Pattern("ack:{up:probe}*").Build()).AsStrSlice()
			if err != nil || len(n) == 0 {
				t.Fatalf("the lock was not on the replica when Lock returned: %v %v", n, err)
			}
			if err := m.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})

	// Hand-offs under the option: a claim granted inside Redis is adopted through the acquire
	// script, which waits for the replica, and every contender gets its turns.
	t.Run("hand-offs acknowledged", func(t *testing.T) {
		other := handleOn(t, primary.Client(t), distsync.WithReplicaAck(1, 5*time.Second))
		for _, kind := range []string{"mutex", "fair", "semaphore"} {
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for _, h := range []*distsync.Handle{acked, other} {
				var lock, unlock func(context.Context) error
				switch kind {
				case "mutex":
					m, _ := mutex.New(h, "handoff:mutex")
					lock, unlock = m.Lock, m.Unlock
				case "fair":
					m, _ := fair.New(h, "handoff:fair")
					lock, unlock = m.Lock, m.Unlock
				case "semaphore":
					s, _ := semaphore.New(h, "handoff:sem", 1)
					lock = func(ctx context.Context) error { return s.Acquire(ctx, 1) }
					unlock = func(ctx context.Context) error { return s.Release(ctx, 1) }
				}
				for range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 5 {
							if err := lock(ctx); err != nil {
								errs <- err
								return
							}
							time.Sleep(time.Millisecond)
							if err := unlock(ctx); err != nil {
								errs <- err
								return
							}
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("%s: %v", kind, err)
			}
		}
	})

	t.Run("not acknowledged", func(t *testing.T) {
		resume := cutReplica(t, primary, replica)
		defer resume()
		for _, a := range acquirers(t, short, "down") {
			start := time.Now()
			err := a.acquire(ctx)
			if !errors.Is(err, distsync.ErrNotReplicated) {
				t.Fatalf("%s: got %v, want ErrNotReplicated", a.name, err)
			}
			if errors.Is(err, distsync.ErrNotAcquired) {
				t.Errorf("%s: %v also matches ErrNotAcquired, which says ctx ended", a.name, err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("%s: took %v to report it", a.name, d)
			}
			if a.holders != nil {
				n, err := a.holders(ctx)
				if err != nil || n != 0 {
					t.Errorf("%s: %d holders after ErrNotReplicated (%v), want none", a.name, n, err)
				}
			}
		}
		// The same acquires without the option take the claims: the primary is up.
		for _, a := range acquirers(t, plain, "down") {
			if err := a.acquire(ctx); err != nil {
				t.Fatalf("%s without the option: %v", a.name, err)
			}
			if err := a.release(ctx); err != nil {
				t.Fatalf("%s without the option: release: %v", a.name, err)
			}
		}
	})

	// A hand-off made while no replica can acknowledge: the waiter it is granted to must not
	// hold it on the strength of the grant's message.
	t.Run("hand-off not acknowledged", func(t *testing.T) {
		other := handleOn(t, primary.Client(t), distsync.WithReplicaAck(1, 100*time.Millisecond))
		type lk interface {
			Lock(context.Context) error
			Unlock(context.Context) error
		}
		for _, kind := range []string{inspect.Mutex, inspect.Fair} {
			var a, b lk
			if kind == inspect.Mutex {
				a, _ = mutex.New(acked, "cut:mutex")
				b, _ = mutex.New(other, "cut:mutex")
			} else {
				a, _ = fair.New(acked, "cut:fair")
				b, _ = fair.New(other, "cut:fair")
			}
			if err := a.Lock(ctx); err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			got := make(chan error, 1)
			go func() { got <- b.Lock(ctx) }()
			if !redistest.Eventually(10*time.Second, func() bool {
				r, err := inspect.Inspect(ctx, acked, kind, "cut:"+kind)
				return err == nil && len(r.Queue) == 1
			}) {
				t.Fatalf("%s: the waiter was not queued within 10s", kind)
			}
			resume := cutReplica(t, primary, replica)
			if err := a.Unlock(ctx); err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			select {
			case err := <-got:
				if !errors.Is(err, distsync.ErrNotReplicated) {
					t.Errorf("%s: the waiter's Lock after a hand-off no replica acknowledged: %v, want ErrNotReplicated", kind, err)
					if err == nil {
						_ = b.Unlock(ctx)
					}
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: the waiter's Lock did not return", kind)
			}
			resume()
		}
	})

	// Every hold's renewal (each primitive renews with a script of its own) is acknowledged
	// or does not count: the lease ends at the deadline of the last acknowledged renewal. Each
	// primitive on a Handle of its own, whose renewals are not batched with another's, and
	// with a WAIT timeout short against the lease: an unacknowledged renewal answers in time,
	// and must not count.
	t.Run("renewal not acknowledged", func(t *testing.T) {
		ttl := distsync.WithLeaseTTL(1500 * time.Millisecond)
		own := func() *distsync.Handle {
			return handleOn(t, primary.Client(t), distsync.WithReplicaAck(1, 200*time.Millisecond))
		}
		type held struct {
			name    string
			l       *distsync.Lease
			release func() error
		}
		var holds []held
		take := func(name string, l *distsync.Lease, err error, release func() error) {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			holds = append(holds, held{name, l, release})
		}
		m, _ := mutex.New(own(), "renew:mutex", ttl)
		l, err := m.LockLease(ctx)
		take("mutex", l, err, func() error { return m.Unlock(ctx) })
		rm, _ := reentrant.New(own(), "renew:reentrant", ttl)
		octx := reentrant.WithOwner(ctx, reentrant.NewOwner())
		l, err = rm.LockLease(octx)
		take("reentrant", l, err, func() error { return rm.Unlock(octx) })
		fm, _ := fair.New(own(), "renew:fair", ttl)
		l, err = fm.LockLease(ctx)
		take("fair", l, err, func() error { return fm.Unlock(ctx) })
		el, _ := election.New(own(), "renew:election", ttl)
		term, err := el.Campaign(ctx, "v")
		if err != nil {
			t.Fatalf("election: %v", err)
		}
		take("election", term.Lease(), nil, func() error { return term.Resign(ctx) })
		sm, _ := semaphore.New(own(), "renew:semaphore", 2, ttl)
		l, err = sm.AcquireLease(ctx, 1)
		take("semaphore", l, err, func() error { return sm.Release(ctx, 1) })
		wm, _ := rwmutex.New(own(), "renew:rwmutex:w", ttl)
		l, err = wm.LockLease(ctx)
		take("rwmutex writer", l, err, func() error { return wm.Unlock(ctx) })
		rw, _ := rwmutex.New(own(), "renew:rwmutex:r", ttl)
		l, err = rw.RLockLease(ctx)
		take("rwmutex reader", l, err, func() error { return rw.RUnlock(ctx) })

		resume := cutReplica(t, primary, replica)
		defer resume()
		// Each lease's deadline once no renewal can be acknowledged: that of the last renewal
		// acknowledged before the cut (one acknowledged as the cut came may move it later),
		// and when the lease ended, as it ended.
		deadlines := make([]time.Time, len(holds))
		ended := make([]chan time.Time, len(holds))
		for i, h := range holds {
			deadlines[i] = h.l.Deadline()
			ended[i] = make(chan time.Time, 1)
			go func() {
				<-h.l.Done()
				ended[i] <- time.Now()
			}()
		}
		for i, h := range holds {
			select {
			case at := <-ended[i]:
				if at.Before(deadlines[i]) {
					t.Errorf("%s: the lease ended %v before its deadline", h.name, deadlines[i].Sub(at))
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("%s: the lease did not end although no renewal was acknowledged", h.name)
			}
			if !errors.Is(h.l.Err(), distsync.ErrLost) {
				t.Errorf("%s: lease error %v, want ErrLost", h.name, h.l.Err())
			}
			if err := h.release(); !errors.Is(err, distsync.ErrLost) {
				t.Errorf("%s: release after the loss: %v, want ErrLost", h.name, err)
			}
		}
	})
}

func TestReplicaAckOption(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Mini)
	c := b.Client(t)
	for _, o := range []distsync.Option{distsync.WithReplicaAck(0, time.Second), distsync.WithReplicaAck(1, 0)} {
		if _, err := distsync.New(c, o); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New with a bad replica ack: %v, want ErrInvalid", err)
		}
	}
	if _, err := mutex.New(b.Handle(t, c), "x", distsync.WithReplicaAck(1, time.Second)); !errors.Is(err, distsync.ErrInvalid) {
		t.Errorf("mutex.New with WithReplicaAck: %v, want ErrInvalid (a Handle option)", err)
	}
}

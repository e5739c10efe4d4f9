// Package failovertest checks the primitives across failovers of replicated topologies that
// the test harness starts: Sentinel (a primary, a replica, three Sentinels) and a Cluster with a
// replica per primary.
package failovertest

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
)

func TestMain(m *testing.M) { redistest.MainLong(m, "failover under Sentinel and Cluster") }

// topology is what a failover test needs of a replicated topology.
type topology struct {
	client   func(tb testing.TB) rueidis.Client
	failover func(tb testing.TB) // graceful; returns once settled
}

func sentinel(t *testing.T) topology {
	s := redistest.StartSentinel(t, 1)
	return topology{client: s.Client, failover: s.Failover}
}

// The names the tests lock, and a key in their slot (keys are <prefix>{<name>}:<part>).
const name, slotKey = "orders", "{orders}"

func handle(t *testing.T, c rueidis.Client, opts ...distsync.Option) *distsync.Handle {
	t.Helper()
	return redistest.Handle(t, c, append([]distsync.Option{distsync.WithKeyPrefix("failover:")}, opts...)...)
}

// locker is a mutex or a fair lock.
type locker interface {
	LockLease(ctx context.Context) (*distsync.Lease, error)
	Unlock(ctx context.Context) error
}

// heldAcrossFailover: a holder in one process and a waiter in another, on a lock of kind
// made by mk; a graceful failover; then the holder still holds its lock (its renewals reach the
// new primary, and no one else got it) or knows it lost it, never both holders silent; once the
// holder unlocks, the waiter, subscribed on the old primary, gets the lock from the new one;
// and every token after the failover is larger than every token before it.
func heldAcrossFailover(t *testing.T, top topology, mk func(h *distsync.Handle) (locker, error), opts ...distsync.Option) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ttl := 3 * time.Second
	opts = append([]distsync.Option{distsync.WithLeaseTTL(ttl)}, opts...)
	ha := handle(t, top.client(t), opts...)
	hb := handle(t, top.client(t), opts...)
	a, err := mk(ha)
	if err != nil {
		t.Fatal(err)
	}
	b, err := mk(hb)
	if err != nil {
		t.Fatal(err)
	}
	// Tokens before the failover.
	var before int64
	for range 3 {
		l, err := a.LockLease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before = max(before, l.Token())
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	la, err := a.LockLease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before = max(before, la.Token())
	type result struct {
		l   *distsync.Lease
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := b.LockLease(ctx)
		got <- result{l, err, time.Now()}
	}()
	// The waiter is queued (and subscribed) before the failover.
	time.Sleep(300 * time.Millisecond)

	top.failover(t)

	// Two lease periods on the new primary: the holder's renewals go there.
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("the waiter's Lock failed across the failover: %v", r.err)
		}
		select {
		case <-la.Done():
			t.Logf("the holder lost its lock across the failover and was told (%v); the waiter got it after", la.Err())
		default:
			t.Fatalf("the waiter got the lock (token %d) while the holder's lease (token %d) had not ended: two holders, one silent", r.l.Token(), la.Token())
		}
		if r.l.Token() <= before {
			t.Errorf("token after the failover %d, not above %d before it", r.l.Token(), before)
		}
		return
	case <-time.After(2 * ttl):
	}
	select {
	case <-la.Done():
		t.Fatalf("the holder's lease ended (%v) but the waiter did not get the lock within %v", la.Err(), 2*ttl)
	default:
	}
	// The holder still holds: it unlocks, and the waiter gets the lock through the new primary.
	unlocked := time.Now()
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the failover: %v", err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("the waiter's Lock: %v", r.err)
		}
		t.Logf("the holder kept its lock across the failover; the waiter got it %v after Unlock", r.at.Sub(unlocked).Round(time.Millisecond))
		if r.l.Token() <= before {
			t.Errorf("token after the failover %d, not above %d before it", r.l.Token(), before)
		}
		if err := b.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * ttl):
		t.Fatalf("the waiter was stranded: no lock %v after the holder's Unlock", 2*ttl)
	}
	// And a new holder after it gets a larger token still.
	l, err := a.LockLease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= before {
		t.Errorf("token %d after the failover, not above %d before it", l.Token(), before)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// candidate is an election seen as a locker: Campaign takes the lock, Resign gives it back.
type candidate struct {
	e    *election.Election
	term *election.Term
}

func (c *candidate) LockLease(ctx context.Context) (*distsync.Lease, error) {
	t, err := c.e.Campaign(ctx, "v")
	if err != nil {
		return nil, err
	}
	c.term = t
	return t.Lease(), nil
}

func (c *candidate) Unlock(ctx context.Context) error { return c.term.Resign(ctx) }

// kinds returns the locks the failover tests run. The quorum mutex takes its lock on the
// topology's primary and on two independent redis-servers of the test: the failover moves one
// of its three primaries.
func kinds(t *testing.T) map[string]func(h *distsync.Handle) (locker, error) {
	var others [2]*redistest.Proc
	return map[string]func(h *distsync.Handle) (locker, error){
		"mutex": func(h *distsync.Handle) (locker, error) { return mutex.New(h, name) },
		"fair":  func(h *distsync.Handle) (locker, error) { return fair.New(h, name) },
		"election": func(h *distsync.Handle) (locker, error) {
			e, err := election.New(h, name)
			return &candidate{e: e}, err
		},
		"quorum mutex": func(h *distsync.Handle) (locker, error) {
			var hs []*distsync.Handle
			for i := range others {
				if others[i] == nil {
					others[i] = redistest.StartRedis(t)
				}
				hs = append(hs, handle(t, others[i].Client(t), distsync.WithLeaseTTL(3*time.Second)))
			}
			return mutex.New(h, name, mutex.WithQuorum(hs...))
		},
	}
}

func TestSentinelFailover(t *testing.T) {
	top := sentinel(t)
	for kind, mk := range kinds(t) {
		t.Run(kind, func(t *testing.T) { heldAcrossFailover(t, top, mk) })
	}
	t.Run("mutex with replica ack", func(t *testing.T) {
		heldAcrossFailover(t, top, func(h *distsync.Handle) (locker, error) { return mutex.New(h, name) },
			distsync.WithReplicaAck(1, 5*time.Second))
	})
}

func TestClusterFailover(t *testing.T) {
	c := redistest.StartClusterReplicas(t)
	top := topology{client: c.Client, failover: func(tb testing.TB) { c.Failover(tb, slotKey) }}
	for kind, mk := range kinds(t) {
		t.Run(kind, func(t *testing.T) { heldAcrossFailover(t, top, mk) })
	}
	// WithReplicaAck on a Cluster: WAIT goes to the node of the lock's slot, on the
	// connection of the script.
	t.Run("mutex with replica ack", func(t *testing.T) {
		heldAcrossFailover(t, top, func(h *distsync.Handle) (locker, error) { return mutex.New(h, name) },
			distsync.WithReplicaAck(1, 5*time.Second))
	})
	t.Run("replica ack refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// A generous timeout while the replica is up (load must not fail it), a short one once
		// it is cut off (the refusal comes at the timeout).
		up, err := mutex.New(handle(t, c.Client(t), distsync.WithReplicaAck(1, 5*time.Second)), name)
		if err != nil {
			t.Fatal(err)
		}
		if err := up.Lock(ctx); err != nil {
			t.Fatalf("Lock with the replica up: %v", err)
		}
		if err := up.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		m, err := mutex.New(handle(t, c.Client(t), distsync.WithReplicaAck(1, 200*time.Millisecond)), name)
		if err != nil {
			t.Fatal(err)
		}
		p := c.PrimaryOf(slotKey)
		r := c.ReplicaOf(p)
		if err := r.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := r.Signal(syscall.SIGCONT); err != nil {
				t.Error(err)
			}
			c.WaitSettled(t, 20*time.Second)
		}()
		if _, err := redistest.Command(p.Addr(), 2*time.Second, "CLIENT", "KILL", "TYPE", "replica"); err != nil {
			t.Fatal(err)
		}
		err = m.Lock(ctx)
		if !errors.Is(err, distsync.ErrNotReplicated) {
			t.Fatalf("Lock with the replica cut off: %v, want ErrNotReplicated", err)
		}
		hs, err := m.Holders(ctx)
		if err != nil || len(hs) != 0 {
			t.Fatalf("holders after ErrNotReplicated: %v %v, want none", hs, err)
		}
	})
}

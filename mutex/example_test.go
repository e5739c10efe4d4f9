package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/mutex"
)

// pods starts an embedded Redis and n handles on it, each with its own rueidis client, as n
// processes would have. A real program builds one client and one Handle per process.
func pods(n int) (hs []*distsync.Handle, stop func()) {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	var closers []func()
	for range n {
		client, err := srv.NewClient()
		if err != nil {
			panic(err)
		}
		// A hand-off stays its grantee's until it confirms it, as long as this (by default half
		// a second): these examples must print the same on a test machine so busy that a
		// grantee confirms late, and would otherwise lose the hold.
		h, err := distsync.New(client, distsync.WithHandoffWindow(time.Minute))
		if err != nil {
			panic(err)
		}
		hs = append(hs, h)
		closers = append(closers, func() { _ = h.Close(context.Background()); client.Close() })
	}
	return hs, func() {
		for _, c := range closers {
			c()
		}
		srv.Close()
	}
}

func Example() {
	hs, stop := pods(1)
	defer stop()
	ctx := context.Background()

	m, err := mutex.New(hs[0], "orders:42")
	if err != nil {
		panic(err)
	}
	lease, err := m.LockLease(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("locked; fencing token issued:", lease.Token() > 0)
	if err := m.Unlock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("unlocked")
	// Output:
	// locked; fencing token issued: true
	// unlocked
}

// Three pods increment a counter that lives outside any one of them; the mutex keeps the
// read-modify-write cycles from interleaving.
func Example_acrossProcesses() {
	hs, stop := pods(3)
	defer stop()
	ctx := context.Background()

	shared := 0 // stands for a record in a database all pods write
	var wg sync.WaitGroup
	for _, h := range hs {
		m, err := mutex.New(h, "counter")
		if err != nil {
			panic(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if err := m.Lock(ctx); err != nil {
					panic(err)
				}
				v := shared
				time.Sleep(time.Millisecond)
				shared = v + 1
				if err := m.Unlock(ctx); err != nil {
					panic(err)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Println(shared)
	// Output: 30
}

func ExampleMutex_TryLock() {
	hs, stop := pods(2)
	defer stop()
	ctx := context.Background()
	a, _ := mutex.New(hs[0], "report")
	b, _ := mutex.New(hs[1], "report")

	ok, err := a.TryLock(ctx)
	fmt.Println("pod A:", ok, err)
	ok, err = b.TryLock(ctx)
	fmt.Println("pod B:", ok, err)
	_ = a.Unlock(ctx)
	// Output:
	// pod A: true <nil>
	// pod B: false <nil>
}

// Run the protected work under the lease's context, so that it stops if the lock is lost, and
// hand the fencing token to the storage it writes.
func ExampleMutex_LockLease() {
	hs, stop := pods(1)
	defer stop()
	ctx := context.Background()
	m, _ := mutex.New(hs[0], "migration")
	lease, err := m.LockLease(ctx)
	if err != nil {
		panic(err)
	}
	work, cancel := lease.Context(ctx)
	defer cancel()

	write := func(ctx context.Context, token int64) error {
		// A real store would refuse token if it has seen a larger one.
		return ctx.Err()
	}
	if err := write(work, lease.Token()); err != nil {
		fmt.Println("stopped:", context.Cause(work))
	}
	err = m.Unlock(ctx)
	fmt.Println("unlock:", err)
	fmt.Println("lease ended because:", lease.Err())
	// Output:
	// unlock: <nil>
	// lease ended because: released
}

// Lock waits no longer than its context allows, and says why it gave up.
func ExampleMutex_Lock_timeout() {
	hs, stop := pods(2)
	defer stop()
	ctx := context.Background()
	a, _ := mutex.New(hs[0], "busy")
	b, _ := mutex.New(hs[1], "busy")
	_ = a.Lock(ctx)

	wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := b.Lock(wait)
	fmt.Println(errors.Is(err, distsync.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))
	fmt.Println(err)
	_ = a.Unlock(ctx)
	// Output:
	// true true
	// mutex "busy": not acquired: context deadline exceeded
}

// Where an API wants a sync.Locker. Its methods panic on Redis errors.
func ExampleMutex_Locker() {
	hs, stop := pods(1)
	defer stop()
	m, _ := mutex.New(hs[0], "legacy")
	var l sync.Locker = m.Locker()
	l.Lock()
	ok, _ := m.TryLock(context.Background())
	fmt.Println("free:", ok)
	l.Unlock()
	ok, _ = m.TryLock(context.Background())
	fmt.Println("free:", ok)
	_ = m.Unlock(context.Background())
	// Output:
	// free: false
	// free: true
}

// Holders tells an operator, or a dashboard, which process holds a name: compare the
// holder's Handle with each process's Handle.ID.
func ExampleMutex_Holders() {
	hs, stop := pods(2)
	defer stop()
	ctx := context.Background()

	m, _ := mutex.New(hs[0], "orders:42")
	lease, err := m.LockLease(ctx)
	if err != nil {
		panic(err)
	}
	observer, _ := mutex.New(hs[1], "orders:42") // another process
	held, err := observer.Holders(ctx)
	if err != nil {
		panic(err)
	}
	for _, hd := range held {
		fmt.Println("held by the first process:", hd.Handle == hs[0].ID())
		fmt.Println("with its token:", hd.Token == lease.Token())
		fmt.Println("lease left in Redis:", hd.Remaining > 0 && hd.Remaining <= distsync.DefaultLeaseTTL)
	}
	_ = m.Unlock(ctx)
	held, _ = observer.Holders(ctx)
	fmt.Println("holders after Unlock:", len(held))
	// Output:
	// held by the first process: true
	// with its token: true
	// lease left in Redis: true
	// holders after Unlock: 0
}

// A mutex on a quorum of three independent Redis primaries (Redlock): it is held once a
// majority holds it, so it keeps working, and keeps excluding, with one primary lost. Here the
// three primaries are embedded servers; in production, three Redis servers that are not
// replicas of one another.
func ExampleWithQuorum() {
	var hs []*distsync.Handle
	for range 3 {
		srv, err := embedded.Start()
		if err != nil {
			panic(err)
		}
		defer srv.Close()
		h, err := srv.NewHandle()
		if err != nil {
			panic(err)
		}
		defer h.Close(context.Background())
		hs = append(hs, h)
	}
	m, err := mutex.New(hs[0], "orders:42", mutex.WithQuorum(hs[1], hs[2]))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lease, err := m.LockLease(ctx)
	if err != nil {
		panic(err)
	}
	holders, _ := m.Holders(ctx)
	fmt.Println("held:", lease.Err() == nil, "holders:", len(holders))
	if err := m.Unlock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("released:", errors.Is(lease.Err(), distsync.ErrReleased))
	// Output:
	// held: true holders: 1
	// released: true
}

// A transfer between two accounts locks both, all or nothing. Another transfer that names
// them in the opposite order cannot deadlock with it: every All takes its mutexes in one
// order, whatever the order they were given in.
func ExampleAll() {
	hs, stop := pods(2)
	defer stop()
	ctx := context.Background()

	transfer := func(h *distsync.Handle, from, to string) {
		a, err := mutex.New(h, "account:"+from)
		if err != nil {
			panic(err)
		}
		b, err := mutex.New(h, "account:"+to)
		if err != nil {
			panic(err)
		}
		both, err := mutex.NewAll(a, b)
		if err != nil {
			panic(err)
		}
		if err := both.Lock(ctx); err != nil {
			panic(err)
		}
		defer func() {
			if err := both.Unlock(ctx); err != nil {
				panic(err)
			}
		}()
		// Move the money here, fencing each account's write with its own token:
		// both.Tokens()[0] for from, both.Tokens()[1] for to.
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(2)
		go func() { defer wg.Done(); transfer(hs[0], "alice", "bob") }()
		go func() { defer wg.Done(); transfer(hs[1], "bob", "alice") }()
	}
	wg.Wait()
	fmt.Println("20 transfers, no deadlock")
	// Output:
	// 20 transfers, no deadlock
}

// TryLock takes every mutex of the set or none: with one of them held elsewhere, it returns
// false and holds nothing.
func ExampleAll_TryLock() {
	hs, stop := pods(2)
	defer stop()
	ctx := context.Background()

	x, _ := mutex.New(hs[0], "x")
	y, _ := mutex.New(hs[0], "y")
	both, err := mutex.NewAll(x, y)
	if err != nil {
		panic(err)
	}
	other, _ := mutex.New(hs[1], "y")
	if err := other.Lock(ctx); err != nil {
		panic(err)
	}
	ok, err := both.TryLock(ctx)
	fmt.Println("with y held elsewhere:", ok, err)
	free, _ := mutex.New(hs[1], "x")
	ok, _ = free.TryLock(ctx)
	fmt.Println("x left free:", ok)
	_ = free.Unlock(ctx)
	_ = other.Unlock(ctx)
	ok, err = both.TryLock(ctx)
	fmt.Println("with both free:", ok, err, len(both.Tokens()), "tokens")
	_ = both.Unlock(ctx)
	// Output:
	// with y held elsewhere: false <nil>
	// x left free: true
	// with both free: true <nil> 2 tokens
}

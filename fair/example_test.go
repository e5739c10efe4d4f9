package fair_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/fair"
)

// Callers get the lock in the order they asked for it, across processes.
func Example() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ctx := context.Background()
	h0, _ := srv.NewHandle()
	first, _ := fair.New(h0, "printer")
	if err := first.Lock(ctx); err != nil {
		panic(err)
	}

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i, who := range []string{"ann", "bob", "cat"} {
		h, _ := srv.NewHandle() // each in its own process
		m, _ := fair.New(h, "printer")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Lock(ctx); err != nil {
				panic(err)
			}
			mu.Lock()
			order = append(order, who)
			mu.Unlock()
			_ = m.Unlock(ctx)
		}()
		exampleQueued(srv, "printer", i+1) // ann asks first, then bob, then cat
	}
	_ = first.Unlock(ctx)
	wg.Wait()
	fmt.Println(order)
	// Output: [ann bob cat]
}

// TryLock does not jump the queue: it takes the lock only if nobody holds or waits for it.
func ExampleMutex_TryLock() {
	srv, _ := embedded.Start()
	defer srv.Close()
	h, _ := srv.NewHandle()
	m, _ := fair.New(h, "printer")
	ctx := context.Background()
	ok, _ := m.TryLock(ctx)
	fmt.Println("free:", ok)
	ok, _ = m.TryLock(ctx)
	fmt.Println("held:", ok)
	_ = m.Unlock(ctx)
	// Output:
	// free: true
	// held: false
}

// exampleQueued waits until n calls wait in the queue of the fair lock name (default key prefix)
// on srv, for at most five seconds: the example's callers ask in a known order.
func exampleQueued(srv *embedded.Server, name string, n int) {
	for range 500 {
		if q, _ := srv.Miniredis().ZMembers("distsync:{" + name + "}:fair:q"); len(q) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

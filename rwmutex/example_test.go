package rwmutex_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/rwmutex"
)

// Readers in two processes share the lock; a writer waits for both, then holds it alone.
func Example() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	h1, _ := srv.NewHandle() // process 1
	h2, _ := srv.NewHandle() // process 2
	cfg1, _ := rwmutex.New(h1, "config")
	cfg2, _ := rwmutex.New(h2, "config")
	ctx := context.Background()

	_ = cfg1.RLock(ctx)
	_ = cfg2.RLock(ctx)
	fmt.Println("two readers inside")

	ok, _ := cfg2.TryLock(ctx)
	fmt.Println("a writer gets in while they read:", ok)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		lease, _ := cfg2.LockLease(ctx) // waits for both readers; new readers now wait behind it
		fmt.Println("writer inside, token issued:", lease.Token() > 0)
		_ = cfg2.Unlock(ctx)
	}()
	_ = cfg1.RUnlock(ctx)
	_ = cfg2.RUnlock(ctx)
	wg.Wait()
	// Output:
	// two readers inside
	// a writer gets in while they read: false
	// writer inside, token issued: true
}

// RUnlock without a read hold is an error, not a silent success.
func ExampleRWMutex_RUnlock() {
	srv, _ := embedded.Start()
	defer srv.Close()
	h, _ := srv.NewHandle()
	m, _ := rwmutex.New(h, "config")
	err := m.RUnlock(context.Background())
	fmt.Println(errors.Is(err, distsync.ErrNotHeld))
	// Output: true
}

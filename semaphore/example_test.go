package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/semaphore"
)

// Cap the concurrent calls to a slow partner API at 3, across every pod: here 4 pods with 5
// workers each.
func Example_rateLimit() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	var inFlight, peak atomic.Int64
	callPartner := func() {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(20 * time.Millisecond) // the slow dependency
		inFlight.Add(-1)
	}

	var wg sync.WaitGroup
	var calls atomic.Int64
	for range 4 { // pods
		h, err := srv.NewHandle()
		if err != nil {
			panic(err)
		}
		limit, err := semaphore.New(h, "partner-api", 3)
		if err != nil {
			panic(err)
		}
		for range 5 { // workers
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				for range 2 {
					if err := limit.Acquire(ctx, 1); err != nil {
						panic(err)
					}
					callPartner()
					calls.Add(1)
					_ = limit.Release(ctx, 1)
				}
			}()
		}
	}
	wg.Wait()
	// How many ran at once at the most depends on the scheduling (a loaded machine may never
	// have three in flight); that it never exceeds the size does not.
	fmt.Println("calls:", calls.Load(), "at most 3 at once:", peak.Load() <= 3)
	// Output: calls: 40 at most 3 at once: true
}

// Permits are weighted; asking for more than the size is a mistake reported at once.
func ExampleSemaphore_Acquire() {
	srv, _ := embedded.Start()
	defer srv.Close()
	h, _ := srv.NewHandle()
	sem, _ := semaphore.New(h, "exports", 4)
	ctx := context.Background()

	_ = sem.Acquire(ctx, 3) // a big export
	ok, _ := sem.TryAcquire(ctx, 2)
	fmt.Println("2 more while 3 of 4 are held:", ok)
	err := sem.Acquire(ctx, 5)
	fmt.Println("5 of 4:", errors.Is(err, distsync.ErrInvalid))
	_ = sem.Release(ctx, 3)
	// Output:
	// 2 more while 3 of 4 are held: false
	// 5 of 4: true
}

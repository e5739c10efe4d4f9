package inspect_test

import (
	"context"
	"fmt"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/inspect"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/rate"
	"github.com/distsync/distsync/semaphore"
)

// Who holds a FIFO lock and who waits for it, seen from a third process that takes no part.
func Example() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ctx := context.Background()
	holder, _ := srv.NewHandle()
	waiter, _ := srv.NewHandle()
	operator, _ := srv.NewHandle()

	m, _ := fair.New(holder, "printer")
	lease, err := m.LockLease(ctx)
	if err != nil {
		panic(err)
	}
	w, _ := fair.New(waiter, "printer")
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Lock(wctx) }()

	var r inspect.Report
	for range 1000 { // until the waiter is queued, 10 s at most
		if r, err = inspect.Inspect(ctx, operator, inspect.Fair, "printer"); err != nil {
			panic(err)
		}
		if len(r.Queue) == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	h := r.Holders[0]
	fmt.Println("holders:", len(r.Holders))
	fmt.Println("held by the holder's Handle:", h.Handle == holder.ID(), "with its token:", h.Token == lease.Token())
	fmt.Println("lease left:", h.Remaining > 0 && h.Remaining <= 10*time.Second)
	fmt.Println("waiting:", len(r.Queue), "first in line is the waiter's:", r.Queue[0].Handle == waiter.ID())

	cancel()
	<-done
	// Output:
	// holders: 1
	// held by the holder's Handle: true with its token: true
	// lease left: true
	// waiting: 1 first in line is the waiter's: true
}

// List finds the primitives under the Handle's prefix; a pattern picks names.
func ExampleList() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ctx := context.Background()
	h, _ := srv.NewHandle()

	for _, name := range []string{"orders:1", "orders:2", "invoices:1"} {
		m, _ := mutex.New(h, name)
		if err := m.Lock(ctx); err != nil {
			panic(err)
		}
	}
	s, _ := semaphore.New(h, "orders:api", 4)
	if err := s.Acquire(ctx, 3); err != nil {
		panic(err)
	}

	entries, err := inspect.List(ctx, h, "orders:*")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		fmt.Println(e.Kind, e.Name)
	}
	r, _ := inspect.Inspect(ctx, h, inspect.Semaphore, "orders:api")
	fmt.Printf("orders:api: %d of %d permits in use\n", r.InUse, r.Size)
	// Output:
	// mutex orders:1
	// mutex orders:2
	// semaphore orders:api
	// orders:api: 3 of 4 permits in use
}

// The keys in which Redis keeps a mutex: a watcher reads them with client tracking (or
// subscribes to their keyspace notifications) to read the mutex again at every change, as
// "distsync inspect --watch" does.
func ExampleKeys() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	h, _ := srv.NewHandle()
	keys, err := inspect.Keys(h, inspect.Mutex, "orders")
	if err != nil {
		panic(err)
	}
	for _, k := range keys {
		fmt.Println(k)
	}
	// Output:
	// distsync:{orders}:mutex
	// distsync:{orders}:mutex:fence
	// distsync:{orders}:mutex:q
	// distsync:{orders}:mutex:qx
	// distsync:{orders}:mutex:rel
	// distsync:{orders}:mutex:with
}

// A rate limiter's bucket, seen by an operator: the tokens left, and the settings stored.
func ExampleBucket() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ctx := context.Background()
	app, _ := srv.NewHandle()
	operator, _ := srv.NewHandle()

	l, _ := rate.NewLimiter(app, "partner-api", rate.Every(time.Minute), 10)
	_ = l.SetLimit(ctx, rate.Every(time.Minute)) // stored: every process now uses them,
	_ = l.SetBurst(ctx, 5)                       // and Redis can tell the tokens now
	if ok, err := l.AllowN(ctx, 3); !ok || err != nil {
		panic(err)
	}

	r, err := inspect.Inspect(ctx, operator, inspect.Rate, "partner-api")
	if err != nil {
		panic(err)
	}
	b := r.Bucket
	fmt.Printf("tokens now: %.0f (exact: %v)\n", b.Tokens, b.Exact)
	fmt.Printf("limit: one per %.0f s, burst %d\n", 1/b.Limit, b.Burst)
	fmt.Println("a reservation ahead:", b.Next > 0)
	// Output:
	// tokens now: 2 (exact: true)
	// limit: one per 60 s, burst 5
	// a reservation ahead: false
}

// Two processes lock two mutexes in opposite orders, each holding one and waiting for the
// other's: Deadlocks names both, what each waits for and who holds it.
func ExampleDeadlocks() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	orders, _ := srv.NewHandle(distsync.WithIdentity("orders-pod"))
	billing, _ := srv.NewHandle(distsync.WithIdentity("billing-pod"))
	operator, _ := srv.NewHandle()

	stock, _ := mutex.New(orders, "stock")
	invoice, _ := mutex.New(billing, "invoice")
	if err := stock.Lock(ctx); err != nil {
		panic(err)
	}
	if err := invoice.Lock(ctx); err != nil {
		panic(err)
	}
	done := make(chan error, 2)
	for _, then := range []*mutex.Mutex{must(mutex.New(orders, "invoice")), must(mutex.New(billing, "stock"))} {
		go func() { done <- then.Lock(ctx) }() // blocks: the other process holds it
	}

	var ds []inspect.Deadlock
	for range 1000 { // until both wait, 10 s at most
		if ds, err = inspect.Deadlocks(ctx, operator, ""); err != nil {
			panic(err)
		}
		if len(ds) == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, d := range ds {
		fmt.Println("deadlock of", len(d), "processes:")
		for i, w := range d {
			fmt.Printf("  %s waits for %s %q, held by %s\n", w.Identity, w.Kind, w.Name, d[(i+1)%len(d)].Identity)
		}
	}

	cancel()
	<-done
	<-done
	// Output:
	// deadlock of 2 processes:
	//   billing-pod waits for mutex "stock", held by orders-pod
	//   orders-pod waits for mutex "invoice", held by billing-pod
}

// must returns v, or panics with err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

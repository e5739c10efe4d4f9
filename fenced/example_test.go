package fenced_test

import (
	"context"
	"fmt"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/fenced"
	"github.com/distsync/distsync/mutex"
)

// pods starts an embedded Redis and n handles on it, each with its own rueidis client, as n
// processes would have. A real program builds one client and one Handle per process.
func pods(n int) (hs []*distsync.Handle, stop func()) {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	for range n {
		h, err := srv.NewHandle()
		if err != nil {
			panic(err)
		}
		hs = append(hs, h)
	}
	return hs, srv.Close
}

// Write under a lock with the hold's fencing token.
func Example() {
	hs, stop := pods(1)
	defer stop()
	ctx := context.Background()

	m, _ := mutex.New(hs[0], "config")
	v, _ := fenced.New(hs[0], "config")
	lease, err := m.LockLease(ctx)
	if err != nil {
		panic(err)
	}
	ok, err := v.Set(ctx, lease.Token(), "replicas=3")
	fmt.Println("written:", ok, err)
	_ = m.Unlock(ctx)

	value, _, found, _ := v.Get(ctx)
	fmt.Println(value, found)
	// Output:
	// written: true <nil>
	// replicas=3 true
}

// A holder paused past its lease resumes and writes with its old token, after another process
// took the lock and wrote: the late write is refused.
func Example_pausedHolder() {
	hs, stop := pods(2)
	defer stop()
	ctx := context.Background()

	a, _ := mutex.New(hs[0], "balance:7", distsync.WithFixedLease(50*time.Millisecond))
	b, _ := mutex.New(hs[1], "balance:7")
	va, _ := fenced.New(hs[0], "balance:7")
	vb, _ := fenced.New(hs[1], "balance:7")

	la, err := a.LockLease(ctx)
	if err != nil {
		panic(err)
	}
	tokenA := la.Token()
	<-la.Done() // A pauses; its lease runs out

	lb, err := b.LockLease(ctx)
	if err != nil {
		panic(err)
	}
	ok, _ := vb.Set(ctx, lb.Token(), "100")
	fmt.Println("B writes:", ok)
	_ = b.Unlock(ctx)

	ok, _ = va.Set(ctx, tokenA, "90") // A resumes, unaware
	fmt.Println("A writes late:", ok)
	value, _, _, _ := va.Get(ctx)
	fmt.Println("balance:", value)
	// Output:
	// B writes: true
	// A writes late: false
	// balance: 100
}

// A Delete keeps the token, so a stale holder cannot bring the value back.
func ExampleValue_Delete() {
	hs, stop := pods(1)
	defer stop()
	ctx := context.Background()
	v, _ := fenced.New(hs[0], "session:9")

	_, _ = v.Set(ctx, 41, "alive")
	ok, _ := v.Delete(ctx, 42)
	fmt.Println("deleted:", ok)
	ok, _ = v.Set(ctx, 41, "alive again")
	fmt.Println("stale write:", ok)
	_, token, found, _ := v.Get(ctx)
	fmt.Println(found, token)
	// Output:
	// deleted: true
	// stale write: false
	// false 42
}

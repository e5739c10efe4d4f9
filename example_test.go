package distsync_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/mutex"
)

func ExampleNew() {
	srv, _ := embedded.Start() // stands for your Redis
	defer srv.Close()
	client, err := srv.NewClient() // build your rueidis client as usual
	if err != nil {
		panic(err)
	}
	defer client.Close()

	h, err := distsync.New(client, distsync.WithKeyPrefix("myapp:"), distsync.WithLeaseTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	defer h.Close(context.Background())

	m, _ := mutex.New(h, "nightly-report")
	fmt.Println(m.Name())
	// Output: nightly-report
}

// A lease ends with the reason it ended; here the lock's key is deleted behind the holder's
// back, and the renewal that finds it gone ends the lease.
func ExampleLease_Err() {
	srv, _ := embedded.Start()
	defer srv.Close()
	client, _ := srv.NewClient()
	defer client.Close()
	h, _ := distsync.New(client, distsync.WithLeaseTTL(300*time.Millisecond))
	defer h.Close(context.Background())
	ctx := context.Background()

	m, _ := mutex.New(h, "job")
	lease, _ := m.LockLease(ctx)
	srv.Miniredis().Del("distsync:{job}:mutex") // an operator deletes the key

	<-lease.Done()
	fmt.Println(errors.Is(lease.Err(), distsync.ErrLost))
	err := m.Unlock(ctx)
	fmt.Println(errors.Is(err, distsync.ErrNotHeld), errors.Is(err, distsync.ErrLost))
	// Output:
	// true
	// true true
}

// An observer sees what the Handle's primitives do: here, a TryLock that finds the mutex held,
// and a Lock that waits for its release, is handed the lock, and releases it.
func ExampleWithObserver() {
	srv, _ := embedded.Start()
	defer srv.Close()
	ctx := context.Background()

	// The lock handed to the waiter lasts the holder's hand-off window until its confirm
	// reaches Redis: a long one, so that a slow machine does not lose it first.
	holder, _ := srv.NewHandle(distsync.WithHandoffWindow(10 * time.Second))
	defer holder.Close(ctx)
	queued := make(chan struct{})
	watched, _ := srv.NewHandle(distsync.WithObserver(func(e distsync.Event) {
		if e.Kind == distsync.EventQueued {
			defer close(queued)
		}
		switch e.Kind {
		case distsync.EventAcquired:
			fmt.Println(e.Kind, e.Primitive, e.Name, "token > 0:", e.Token > 0)
		case distsync.EventWoken, distsync.EventGranted, distsync.EventRenewed:
			// how the wait ended; renewals come every third of the lease
		default:
			fmt.Println(e.Kind, e.Primitive, e.Name)
		}
	}))
	defer watched.Close(ctx)

	a, _ := mutex.New(holder, "report")
	b, _ := mutex.New(watched, "report")
	_ = a.Lock(ctx)
	_, _ = b.TryLock(ctx) // held: not acquired
	done := make(chan error)
	go func() { done <- b.Lock(ctx) }()
	<-queued // b waits
	_ = a.Unlock(ctx)
	<-done
	_ = b.Unlock(ctx)
	// Output:
	// acquire_started mutex report
	// not_acquired mutex report
	// acquire_started mutex report
	// queued mutex report
	// acquired mutex report token > 0: true
	// released mutex report
}

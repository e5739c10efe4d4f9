package reentrant_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/reentrant"
)

// An owner rides in the context; functions called under it re-enter the lock it holds.
func Example() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	h, err := srv.NewHandle()
	if err != nil {
		panic(err)
	}
	account, err := reentrant.New(h, "account:7")
	if err != nil {
		panic(err)
	}

	var deposit func(ctx context.Context, n int) error
	transfer := func(ctx context.Context) error {
		if err := account.Lock(ctx); err != nil {
			return err
		}
		defer account.Unlock(ctx)
		fmt.Println("transfer holds", account.HoldCount(ctx))
		return deposit(ctx, 10) // takes the same lock again
	}
	deposit = func(ctx context.Context, n int) error {
		if err := account.Lock(ctx); err != nil {
			return err
		}
		defer account.Unlock(ctx)
		fmt.Println("deposit holds", account.HoldCount(ctx))
		return nil
	}

	ctx := reentrant.WithOwner(context.Background(), reentrant.NewOwner())
	if err := transfer(ctx); err != nil {
		panic(err)
	}
	fmt.Println("after transfer:", account.HoldCount(ctx))
	// Output:
	// transfer holds 1
	// deposit holds 2
	// after transfer: 0
}

// Another process resumes a hold when given its owner: it re-enters, and the lock is free once
// both have unlocked.
func ExampleOwner_resume() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	h1, _ := srv.NewHandle() // process 1
	h2, _ := srv.NewHandle() // process 2
	l1, _ := reentrant.New(h1, "job:9")
	l2, _ := reentrant.New(h2, "job:9")

	owner := reentrant.NewOwner()
	ctx1 := reentrant.WithOwner(context.Background(), owner)
	if err := l1.Lock(ctx1); err != nil {
		panic(err)
	}
	// Process 2 gets the owner's string, say in the job's message.
	ctx2 := reentrant.WithOwner(context.Background(), reentrant.Owner(string(owner)))
	ok, err := l2.TryLock(ctx2)
	fmt.Println("process 2 re-entered:", ok, err)
	_ = l1.Unlock(ctx1)

	stranger := reentrant.WithOwner(context.Background(), reentrant.NewOwner())
	ok, _ = l1.TryLock(stranger)
	fmt.Println("a stranger gets it while process 2 holds:", ok)
	_ = l2.Unlock(ctx2)
	ok, _ = l1.TryLock(stranger)
	fmt.Println("a stranger gets it after both unlocked:", ok)
	_ = l1.Unlock(stranger)
	// Output:
	// process 2 re-entered: true <nil>
	// a stranger gets it while process 2 holds: false
	// a stranger gets it after both unlocked: true
}

// Unlock by an owner that holds nothing is an error, and changes nothing.
func ExampleMutex_Unlock() {
	srv, _ := embedded.Start()
	defer srv.Close()
	h, _ := srv.NewHandle()
	l, _ := reentrant.New(h, "report")
	ctx := reentrant.WithOwner(context.Background(), reentrant.NewOwner())
	err := l.Unlock(ctx)
	fmt.Println(errors.Is(err, distsync.ErrNotHeld))
	// Output: true
}

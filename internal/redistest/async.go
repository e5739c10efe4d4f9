package redistest

import (
	"context"
	"testing"
	"time"
)

// Returned is what a call started with Async returned: its error, and when it returned.
type Returned struct {
	Err error
	At  time.Time
}

// Async runs f(ctx) on a goroutine (a Lock, an Acquire) and returns a channel that yields what
// it returned, and when.
func Async(ctx context.Context, f func(context.Context) error) <-chan Returned {
	ch := make(chan Returned, 1)
	go func() {
		err := f(ctx)
		ch <- Returned{err, time.Now()}
	}()
	return ch
}

// Await returns what ch yields, failing t, with the library's goroutines, if nothing comes
// within limit.
func Await(t testing.TB, ch <-chan Returned, limit time.Duration) Returned {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(limit):
		t.Fatalf("the call did not return within %v; goroutines:\n%s", limit, LibraryStacks())
		return Returned{}
	}
}

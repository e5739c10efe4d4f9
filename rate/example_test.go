package rate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/rate"
)

// Drop what goes over a partner API's contract of 5 calls a minute, with bursts of 3,
// across every pod calling it.
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
	lim, err := rate.NewLimiter(h, "partner-api", rate.Every(time.Minute/5), 3)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := range 5 {
		ok, err := lim.Allow(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println("call", i, "allowed:", ok)
	}
	// Output:
	// call 0 allowed: true
	// call 1 allowed: true
	// call 2 allowed: true
	// call 3 allowed: false
	// call 4 allowed: false
}

// Wait slows callers down to the rate instead of dropping them: each reserves its turn in
// Redis and sleeps until it. A Wait whose turn would come after its deadline fails at once.
func ExampleLimiter_Wait() {
	srv, _ := embedded.Start()
	defer srv.Close()
	h, _ := srv.NewHandle()
	lim, _ := rate.NewLimiter(h, "emails", rate.Every(50*time.Millisecond), 1)
	ctx := context.Background()

	start := time.Now()
	for range 4 {
		if err := lim.Wait(ctx); err != nil {
			panic(err)
		}
	}
	fmt.Println("4 sends took at least 150ms:", time.Since(start) >= 150*time.Millisecond)

	digest, _ := rate.NewLimiter(h, "digest", rate.Every(time.Hour), 1)
	_ = digest.Wait(ctx) // the one token there is; the next comes in an hour
	soon, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := digest.Wait(soon)
	fmt.Println("with a minute to spare:", errors.Is(err, rate.ErrWouldExceedDeadline))
	// Output:
	// 4 sends took at least 150ms: true
	// with a minute to spare: true
}

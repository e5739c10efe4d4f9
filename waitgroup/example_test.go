package waitgroup_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/waitgroup"
)

// A batch job: a coordinator adds one unit per job, workers in other processes each claim a
// job and mark it done, and the coordinator waits for all of them.
func Example() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ctx := context.Background()

	h, _ := srv.NewHandle()
	coordinator, _ := waitgroup.New(h, "nightly-report")
	const jobs = 3
	if err := coordinator.Add(ctx, jobs); err != nil {
		panic(err)
	}

	var mu sync.Mutex
	done := 0
	for range jobs {
		h, _ := srv.NewHandle() // each worker in its own process
		worker, _ := waitgroup.New(h, "nightly-report")
		go func() {
			m, err := worker.Claim(ctx) // vouch for one job: if this process dies, it is reported
			if err != nil {
				panic(err)
			}
			mu.Lock()
			done++ // the job's work
			mu.Unlock()
			_ = m.Done(ctx)
		}()
	}

	if err := coordinator.Wait(ctx); err != nil {
		fmt.Println("batch failed:", err)
		return
	}
	mu.Lock()
	fmt.Println("jobs done:", done)
	mu.Unlock()
	// Output: jobs done: 3
}

// Go runs a function as a member of the group; its error reaches Wait in every process.
func ExampleWaitGroup_Go() {
	srv, _ := embedded.Start()
	defer srv.Close()
	ctx := context.Background()

	hw, _ := srv.NewHandle()
	workers, _ := waitgroup.New(hw, "imports")
	started := make(chan struct{}) // no member finishes before all have joined: one round
	for _, file := range []string{"a.csv", "b.csv", "c.csv"} {
		_ = workers.Go(ctx, func(ctx context.Context) error {
			<-started
			if file == "b.csv" {
				return fmt.Errorf("%s: line 12: bad date", file)
			}
			return nil
		})
	}
	close(started)

	hc, _ := srv.NewHandle() // another process
	coordinator, _ := waitgroup.New(hc, "imports")
	err := coordinator.Wait(ctx)
	fmt.Println(errors.Is(err, waitgroup.ErrMemberFailed))
	fmt.Println(err)
	// Output:
	// true
	// waitgroup "imports": member failed: b.csv: line 12: bad date
}

// A worker whose process dies, here cut off from Redis, stops renewing its lease: when it
// lapses, Wait reports the member lost instead of waiting for ever or counting it done.
func Example_lostMember() {
	srv, _ := embedded.Start()
	defer srv.Close()
	ctx := context.Background()

	hc, _ := srv.NewHandle()
	coordinator, _ := waitgroup.New(hc, "upload")

	client, _ := srv.NewClient() // the worker's process, with a short lease
	hw, _ := distsync.New(client, distsync.WithLeaseTTL(300*time.Millisecond),
		distsync.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	worker, _ := waitgroup.New(hw, "upload")
	if _, err := worker.Join(ctx); err != nil {
		panic(err)
	}
	client.Close() // the worker's process dies: nothing renews its lease

	err := coordinator.Wait(ctx)
	var lost *waitgroup.LostError
	if errors.As(err, &lost) {
		fmt.Println(lost.Members, "lost:", err)
	}
	_ = hw.Close(ctx)
	// Output: 1 lost: waitgroup "upload": 1 member lost
}

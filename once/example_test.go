package once_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/once"
)

// Cache-stampede protection: a hot entry expires, and 200 requests on 4 pods ask for it at
// once. The slow loader runs once; every request gets its value; and for a minute after,
// requests get the kept value without loading at all.
func Example_cacheStampede() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	var loads atomic.Int32
	loadProduct := func(ctx context.Context) (string, error) {
		loads.Add(1)
		time.Sleep(100 * time.Millisecond) // the slow database
		return "product 42: a kettle", nil
	}

	var wg sync.WaitGroup
	var served atomic.Int32
	for range 4 { // pods
		h, err := srv.NewHandle()
		if err != nil {
			panic(err)
		}
		products, err := once.NewGroup[string](h, "products", once.WithKeep(time.Minute))
		if err != nil {
			panic(err)
		}
		for range 50 { // concurrent requests on this pod
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err, _ := products.Do(context.Background(), "42", loadProduct)
				if err == nil && v == "product 42: a kettle" {
					served.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	fmt.Println("requests served:", served.Load(), "database loads:", loads.Load())
	// Output: requests served: 200 database loads: 1
}

// Once runs a migration once across every pod of a rollout.
func ExampleOnce() {
	srv, _ := embedded.Start()
	defer srv.Close()
	ctx := context.Background()
	var runs atomic.Int32
	migrate := func(ctx context.Context) error {
		runs.Add(1)
		return nil
	}
	var wg sync.WaitGroup
	for range 3 { // pods starting at the same time
		h, _ := srv.NewHandle()
		o, _ := once.NewOnce(h, "migration:0042")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := o.Do(ctx, migrate); err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println("migrations run:", runs.Load())
	// Output: migrations run: 1
}

// OnceValue computes a value once across processes and keeps it.
func ExampleOnceValue() {
	srv, _ := embedded.Start()
	defer srv.Close()
	ctx := context.Background()
	h1, _ := srv.NewHandle()
	h2, _ := srv.NewHandle()
	pick := func(pod string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return "chosen by " + pod, nil }
	}
	epoch1, _ := once.OnceValue(h1, "epoch", pick("pod 1"))
	epoch2, _ := once.OnceValue(h2, "epoch", pick("pod 2"))
	v1, _ := epoch1(ctx)
	v2, _ := epoch2(ctx)
	fmt.Println(v1, "|", v2)
	// Output: chosen by pod 1 | chosen by pod 1
}

// OnceFunc seeds a shared store once across pods: a failure goes to its caller and the next
// call, from any pod, tries again; after the first success no pod runs it again.
func ExampleOnceFunc() {
	srv, _ := embedded.Start()
	defer srv.Close()
	ctx := context.Background()
	attempts := 0
	seed := func(ctx context.Context) error {
		attempts++
		if attempts == 1 {
			return errors.New("database not ready")
		}
		return nil
	}
	h1, _ := srv.NewHandle()
	h2, _ := srv.NewHandle()
	seed1, _ := once.OnceFunc(h1, "seed-catalog", seed)
	seed2, _ := once.OnceFunc(h2, "seed-catalog", seed)
	fmt.Println("pod 1:", seed1(ctx))
	fmt.Println("pod 2:", seed2(ctx))
	fmt.Println("pod 1:", seed1(ctx))
	fmt.Println("attempts:", attempts)
	// Output:
	// pod 1: database not ready
	// pod 2: <nil>
	// pod 1: <nil>
	// attempts: 2
}

// OnceValues computes two values once across processes and keeps them: here the plan of a
// sharded job, which every pod must agree on.
func ExampleOnceValues() {
	srv, _ := embedded.Start()
	defer srv.Close()
	ctx := context.Background()
	plan := func(pod string) func(context.Context) (string, int, error) {
		return func(context.Context) (string, int, error) { return "planned by " + pod, 16, nil }
	}
	h1, _ := srv.NewHandle()
	h2, _ := srv.NewHandle()
	plan1, _ := once.OnceValues(h1, "job-plan", plan("pod 1"))
	plan2, _ := once.OnceValues(h2, "job-plan", plan("pod 2"))
	by1, shards1, _ := plan1(ctx)
	by2, shards2, _ := plan2(ctx)
	fmt.Println(by1, shards1, "|", by2, shards2)
	// Output: planned by pod 1 16 | planned by pod 1 16
}

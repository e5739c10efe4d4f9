package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/semaphore"
)

// scaleSizes are the numbers of contenders of the scale scenario; pods are min(n, 16).
var scaleSizes = []int{1, 8, 64, 512}

// scaleKinds are the primitives the scale scenario runs: one goroutine's acquire and release.
var scaleKinds = []struct {
	name string
	size int // permits that can be held at once
	open func(p pod, name string) (acq, rel func(context.Context) error, err error)
}{
	{"mutex", 1, func(p pod, name string) (func(context.Context) error, func(context.Context) error, error) {
		m, err := mutex.New(p.h, name)
		if err != nil {
			return nil, nil, err
		}
		return m.Lock, m.Unlock, nil
	}},
	{"fair", 1, func(p pod, name string) (func(context.Context) error, func(context.Context) error, error) {
		m, err := fair.New(p.h, name)
		if err != nil {
			return nil, nil, err
		}
		return m.Lock, m.Unlock, nil
	}},
	{"semaphore (size 8)", 8, func(p pod, name string) (func(context.Context) error, func(context.Context) error, error) {
		s, err := semaphore.New(p.h, name, 8)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) error { return s.Acquire(ctx, 1) },
			func(ctx context.Context) error { return s.Release(ctx, 1) }, nil
	}},
}

// scalePoint is one primitive at one number of contenders.
type scalePoint struct {
	kind                string
	contenders, pods    int
	acquisitions        int
	handoffP50          time.Duration
	handoffP99          time.Duration
	clientCmds          float64
	redisCmds           float64
	redisCPU            time.Duration
	redisMem, clientMem float64 // bytes that the waiting contenders cost, all of them
	err                 error
}

// scale runs every kind at every size: contenders spread over pods in this process (each pod a
// handle on its own client), every contender acquiring and releasing at once for dur. The
// hand-off is the time from a release call to the acquire it lets in returning (for a
// semaphore, releases and acquisitions matched in order). Then, with every permit held, the
// contenders wait, and the Redis and client memory they cost is read.
func scale(ctx context.Context, addr string, dur time.Duration) []scalePoint {
	var out []scalePoint
	for _, k := range scaleKinds {
		for _, n := range scaleSizes {
			if ctx.Err() != nil {
				return out
			}
			fmt.Fprintf(os.Stderr, "scale: %s, %d contenders…\n", k.name, n)
			pt := scalePoint{kind: k.name, contenders: n, pods: min(n, 16)}
			if err := scaleRun(ctx, addr, k.size, k.open, &pt, dur); err != nil {
				pt.err = err
				fmt.Fprintf(os.Stderr, "scale %s %d: %v\n", k.name, n, err)
			}
			out = append(out, pt)
		}
	}
	return out
}

func scaleRun(ctx context.Context, addr string, size int,
	open func(p pod, name string) (acq, rel func(context.Context) error, err error), pt *scalePoint, dur time.Duration) error {
	ps, closeAll, err := openPods(addr, pt.pods)
	if err != nil {
		return err
	}
	defer closeAll()
	name := fmt.Sprintf("scale-%s-%d", strings.Fields(pt.kind)[0], pt.contenders)
	type ops struct{ acq, rel func(context.Context) error }
	per := make([]ops, pt.pods)
	for i, p := range ps {
		if per[i].acq, per[i].rel, err = open(p, name); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, dur+time.Minute)
	defer cancel()

	// The run.
	type ev struct {
		at  int64
		g   int
		acq bool // an acquire returned; else a release was called
	}
	var mu sync.Mutex
	var evs []ev
	var firstErr error
	before, err := commandstats(addr)
	if err != nil {
		return err
	}
	cl0 := clientTotal(ps)
	until := time.Now().Add(dur)
	var wg sync.WaitGroup
	for g := range pt.contenders {
		o := per[g%pt.pods]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []ev
			for time.Now().Before(until) {
				if err := o.acq(ctx); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				mine = append(mine, ev{time.Now().UnixNano(), g, true}, ev{time.Now().UnixNano(), g, false})
				if err := o.rel(ctx); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			evs = append(evs, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	after, err := commandstats(addr)
	if err != nil {
		return err
	}
	slices.SortFunc(evs, func(a, b ev) int { return int(a.at - b.at) })
	// Match the k-th acquisition beyond the first size with the k-th release, in time order:
	// with size 1 that is "the release just before it"; a release followed by an acquisition
	// of the same contender is the releaser taking it back, not a hand-off.
	var releases []ev
	var handoffs []time.Duration
	acquired := 0
	for _, e := range evs {
		if !e.acq {
			releases = append(releases, e)
			continue
		}
		acquired++
		if acquired <= size || len(releases) == 0 {
			continue
		}
		r := releases[0]
		releases = releases[1:]
		if r.g != e.g && e.at >= r.at {
			handoffs = append(handoffs, time.Duration(e.at-r.at))
		}
	}
	pt.acquisitions = acquired
	pt.handoffP50, pt.handoffP99 = pct(handoffs, 50), pct(handoffs, 99)
	pt.clientCmds = float64(clientTotal(ps)-cl0) / float64(max(acquired, 1))
	pt.redisCmds, pt.redisCPU = after.per(before, float64(acquired))

	closeAll()
	return scaleMemory(ctx, addr, name+"-mem", open, size, pt)
}

// scaleMemory measures what waiting contenders cost, on pods of their own (so that what the
// run left in Redis's and the client's buffers does not count): every permit held, the
// contenders start waiting, and Redis's used_memory and the Go heap and stacks, after GC, are
// compared with before they started, once every contender has queued.
func scaleMemory(ctx context.Context, addr, name string,
	open func(p pod, name string) (acq, rel func(context.Context) error, err error), size int, pt *scalePoint) error {
	ps, closeAll, err := openPods(addr, pt.pods)
	if err != nil {
		return err
	}
	defer closeAll()
	type ops struct{ acq, rel func(context.Context) error }
	per := make([]ops, pt.pods)
	for i, p := range ps {
		if per[i].acq, per[i].rel, err = open(p, name); err != nil {
			return err
		}
	}
	holder := per[0]
	for range size {
		if err := holder.acq(ctx); err != nil {
			return err
		}
	}
	time.Sleep(time.Second) // let Redis shrink the buffers of the connections just made
	mem0, err := redisMemory(addr)
	if err != nil {
		return err
	}
	heap0 := goMemory()
	wctx, wcancel := context.WithCancel(ctx)
	var waiting sync.WaitGroup
	for g := range pt.contenders {
		o := per[g%pt.pods]
		waiting.Add(1)
		go func() {
			defer waiting.Done()
			if o.acq(wctx) == nil { // cannot happen while every permit is held
				_ = o.rel(context.Background())
			}
		}()
	}
	time.Sleep(time.Second) // every contender queued, every process subscribed
	mem1, err := redisMemory(addr)
	heap1 := goMemory()
	wcancel()
	waiting.Wait()
	for range size {
		_ = holder.rel(ctx)
	}
	if err != nil {
		return err
	}
	pt.redisMem = float64(mem1 - mem0)
	pt.clientMem = float64(heap1 - heap0)
	return nil
}

// goMemory is the Go heap in use and the goroutine stacks, after a GC.
func goMemory() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc + ms.StackInuse)
}

// redisMemory returns INFO memory's used_memory.
func redisMemory(addr string) (int64, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	info, err := c.Do(context.Background(), c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO memory")
}

// printScale prints the scale table.
func printScale(pts []scalePoint) {
	fmt.Printf("\n### Scale: one name, more and more contenders\n\n")
	fmt.Printf("| primitive | contenders (pods) | acquisitions | hand-off p50 / p99 | client cmds / acq | Redis cmds / acq | Redis CPU / acq | Redis memory, all waiting | client memory, all waiting |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range pts {
		if p.err != nil {
			fmt.Printf("| %s | %d (%d) | error: %v | | | | | | |\n", p.kind, p.contenders, p.pods, p.err)
			continue
		}
		handoff := "—"
		if p.contenders > 1 {
			handoff = fmt.Sprintf("%v / %v", p.handoffP50.Round(time.Microsecond), p.handoffP99.Round(time.Microsecond))
		}
		fmt.Printf("| %s | %d (%d) | %d | %s | %.2f | %.2f | %v | %.1f kB | %.1f kB |\n", p.kind, p.contenders, p.pods,
			p.acquisitions, handoff, p.clientCmds, p.redisCmds, p.redisCPU.Round(100*time.Nanosecond), p.redisMem/1000, p.clientMem/1000)
	}
	fmt.Printf("\nEach contender acquires and releases at once, again and again, for the run; pods are handles with their own rueidis clients in the benchmark's process (min(contenders, 16) of them). A hand-off is the time from a release call to the acquisition it lets in returning, in another contender. Memory: on pods of their own, the contenders wait while the run holds every permit; Redis's used_memory and the Go heap and goroutine stacks, after GC, against before they started: the pods' subscriptions and connections, then what each waiter adds (a few kB of noise either way). A mutex queues one entry per waiting process in Redis, fair and semaphore one per waiting call. With one contender there is no hand-off; for the semaphore, releases and acquisitions are matched in time order, which approximates the hand-off.\n")
}

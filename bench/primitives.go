package main

// The distsync primitives beyond the mutex, measured on the same redis-server as the peers.
// Each scenario adds rows to a second table: what it measured, in absolute time and in Redis
// round trips (a PING measured in the same scenario), and commands per operation.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/once"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
)

// primRow is one row of the primitives table.
type primRow struct {
	scenario   string
	result     string
	rtt        string        // the result in round trips, or ""
	clientCmds float64       // per operation, or -1
	redisCmds  float64       // per operation (INFO commandstats), or -1
	redisCPU   time.Duration // Redis's CPU time per operation (INFO cpu), or -1
}

// pod is one simulated process of a primitives scenario: its own client and handle.
type pod struct {
	c *countingClient
	h *distsync.Handle
}

// openPods opens n handles on the server at addr, each with its own counting client.
func openPods(addr string, n int) ([]pod, func(), error) {
	return openPodsOn(target{addrs: []string{addr}}, n)
}

func clientTotal(ps []pod) int64 {
	var n int64
	for _, p := range ps {
		n += p.c.Total()
	}
	return n
}

// pingP50 measures the median PING round trip over n pings.
func pingP50(addr string, n int) time.Duration {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return 0
	}
	defer c.Close()
	var d []time.Duration
	for range n {
		t0 := time.Now()
		if c.Do(context.Background(), c.B().Ping().Build()).Error() != nil {
			return 0
		}
		d = append(d, time.Since(t0))
	}
	return pct(d, 50)
}

// readMostly runs pods × goroutines on one name for dur: each operation is a read (RLock,
// hold, RUnlock) with probability readShare, else a write (Lock, hold, Unlock). With rw false
// every operation takes the mutex instead, as a program without a read-write lock would.
func readMostly(ctx context.Context, addr string, rw bool, pods, goroutines int, readShare float64, hold, dur time.Duration) (primRow, error) {
	ps, closeAll, err := openPods(addr, pods)
	if err != nil {
		return primRow{}, err
	}
	defer closeAll()
	name := fmt.Sprintf("readmostly:%v:%d", rw, time.Now().UnixNano())
	type ops struct {
		rlock, runlock, lock, unlock func(context.Context) error
	}
	var all []ops
	for _, p := range ps {
		if rw {
			m, err := rwmutex.New(p.h, name)
			if err != nil {
				return primRow{}, err
			}
			all = append(all, ops{m.RLock, m.RUnlock, m.Lock, m.Unlock})
		} else {
			m, err := mutex.New(p.h, name)
			if err != nil {
				return primRow{}, err
			}
			all = append(all, ops{m.Lock, m.Unlock, m.Lock, m.Unlock})
		}
	}
	ctx, cancel := context.WithTimeout(ctx, dur+time.Minute)
	defer cancel()
	before, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	cl0 := clientTotal(ps)
	var done, reads atomic.Int64
	var firstErr atomic.Value
	until := time.Now().Add(dur)
	var wg sync.WaitGroup
	for _, o := range all {
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(until) {
					read := rand.Float64() < readShare
					acquire, release := o.lock, o.unlock
					if read {
						acquire, release = o.rlock, o.runlock
					}
					if err := acquire(ctx); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					time.Sleep(hold)
					if err := release(ctx); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					done.Add(1)
					if read {
						reads.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return primRow{}, err
	}
	after, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	n := float64(done.Load())
	what := "rwmutex"
	if !rw {
		what = "mutex (every operation exclusive)"
	}
	rc, rcpu := after.per(before, n)
	return primRow{
		scenario:   fmt.Sprintf("read-mostly, %s: %d pods × %d goroutines, %.0f%% reads, %v held", what, pods, goroutines, 100*readShare, hold),
		result:     fmt.Sprintf("%.0f ops/s", n/dur.Seconds()),
		clientCmds: float64(clientTotal(ps)-cl0) / n,
		redisCmds:  rc,
		redisCPU:   rcpu,
	}, nil
}

// reentry measures a re-entrant Lock+Unlock pair on a mutex the owner already holds, and the
// first (outermost) Lock+Unlock, with PINGs interleaved as the unit.
func reentry(ctx context.Context, addr string, iters int) ([]primRow, error) {
	ps, closeAll, err := openPods(addr, 1)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	pinger, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	defer pinger.Close()
	m, err := reentrant.New(ps[0].h, "reentry")
	if err != nil {
		return nil, err
	}
	ctx = reentrant.WithOwner(ctx, reentrant.NewOwner())
	var outer, lockOnly, pair, pings []time.Duration
	var cmds int64
	for i := range iters + iters/10 {
		warm := i < iters/10
		t0 := time.Now()
		if err := pinger.Do(ctx, pinger.B().Ping().Build()).Error(); err != nil {
			return nil, err
		}
		p := time.Since(t0)
		t0 = time.Now()
		if err := m.Lock(ctx); err != nil {
			return nil, err
		}
		o := time.Since(t0)
		c0 := ps[0].c.Total()
		t0 = time.Now()
		if err := m.Lock(ctx); err != nil {
			return nil, err
		}
		l := time.Since(t0)
		if err := m.Unlock(ctx); err != nil {
			return nil, err
		}
		pr := time.Since(t0)
		c1 := ps[0].c.Total()
		t0 = time.Now()
		if err := m.Unlock(ctx); err != nil {
			return nil, err
		}
		o += time.Since(t0)
		if !warm {
			pings, outer, lockOnly, pair = append(pings, p), append(outer, o), append(lockOnly, l), append(pair, pr)
			cmds += c1 - c0
		}
	}
	rtt := pct(pings, 50)
	inRTT := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(rtt)) }
	return []primRow{
		{scenario: "reentrant: re-entering Lock (the owner holds it)", result: pct(lockOnly, 50).Round(time.Microsecond).String() + " p50",
			rtt: inRTT(pct(lockOnly, 50)), clientCmds: float64(cmds) / float64(2*len(pair)), redisCmds: -1, redisCPU: -1},
		{scenario: "reentrant: re-entering Lock + its Unlock", result: fmt.Sprintf("%v p50 (%v p99)", pct(pair, 50).Round(time.Microsecond), pct(pair, 99).Round(time.Microsecond)),
			rtt: inRTT(pct(pair, 50)), clientCmds: -1, redisCmds: -1, redisCPU: -1},
		{scenario: "reentrant: outermost Lock + Unlock, uncontended", result: fmt.Sprintf("%v p50 (%v p99)", pct(outer, 50).Round(time.Microsecond), pct(outer, 99).Round(time.Microsecond)),
			rtt: inRTT(pct(outer, 50)), clientCmds: -1, redisCmds: -1, redisCPU: -1},
	}, nil
}

// primitives runs every primitives scenario and prints their table. It returns ctx.Err(),
// printing nothing, if ctx ends first.
func primitives(ctx context.Context, addr string, quick bool) error {
	dur, iters := 4*time.Second, 2000
	if quick {
		dur, iters = time.Second, 300
	}
	var rows []primRow
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		rows = append(rows, primRow{scenario: what, result: "error: " + err.Error(), clientCmds: -1, redisCmds: -1, redisCPU: -1})
	}
	fmt.Fprintf(os.Stderr, "primitives: every primitive, uncontended…\n")
	if rs, err := everyPair(ctx, addr, iters); err != nil {
		fail("every primitive, uncontended", err)
	} else {
		rows = append(rows, rs...)
	}
	distinctDur := 3 * time.Second
	if quick {
		distinctDur = time.Second
	}
	if rs, err := distinctPrims(ctx, addr, distinctDur); err != nil {
		fail("every primitive, distinct keys", err)
	} else {
		rows = append(rows, rs...)
	}
	fmt.Fprintf(os.Stderr, "primitives: observer cost…\n")
	if rs, err := observerCost(ctx, addr, iters); err != nil {
		fail("observer cost", err)
	} else {
		rows = append(rows, rs...)
	}
	fmt.Fprintf(os.Stderr, "primitives: identity cost…\n")
	if rs, err := identityCost(ctx, addr, iters); err != nil {
		fail("identity cost", err)
	} else {
		rows = append(rows, rs...)
	}
	fmt.Fprintf(os.Stderr, "primitives: replica ack…\n")
	if rs, err := replicaAck(ctx, addr, iters); err != nil {
		fail("replica ack", err)
	} else {
		rows = append(rows, rs...)
	}
	fmt.Fprintf(os.Stderr, "primitives: redlock…\n")
	if rs, err := redlock(ctx, addr, iters); err != nil {
		fail("redlock", err)
	} else {
		rows = append(rows, rs...)
	}
	fmt.Fprintf(os.Stderr, "primitives: reentrant re-entry…\n")
	if rs, err := reentry(ctx, addr, iters); err != nil {
		fail("reentrant re-entry", err)
	} else {
		rows = append(rows, rs...)
	}
	for _, rw := range []bool{true, false} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(os.Stderr, "primitives: read-mostly (rwmutex %v)…\n", rw)
		if r, err := readMostly(ctx, addr, rw, 4, 4, 0.9, time.Millisecond, dur); err != nil {
			fail("read-mostly", err)
		} else {
			rows = append(rows, r)
		}
	}
	for _, q := range [][2]int{{2, 2}, {4, 8}} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(os.Stderr, "primitives: fair hand-off %d×%d…\n", q[0], q[1])
		if r, err := fairHandoff(ctx, addr, q[0], q[1], dur); err != nil {
			fail("fair hand-off", err)
		} else {
			rows = append(rows, r)
		}
	}
	fmt.Fprintf(os.Stderr, "primitives: election…\n")
	rounds := 20
	if quick {
		rounds = 5
	}
	if r, err := electionResign(ctx, addr, rounds, 100*time.Millisecond); err != nil {
		fail("election resign", err)
	} else {
		rows = append(rows, r)
	}
	if r, err := electionFailover(ctx, addr, rounds/2, time.Second); err != nil {
		fail("election failover", err)
	} else {
		rows = append(rows, r)
	}
	fmt.Fprintf(os.Stderr, "primitives: waitgroup…\n")
	if r, err := waitgroupWake(ctx, addr, 4, 8, rounds); err != nil {
		fail("waitgroup", err)
	} else {
		rows = append(rows, r)
	}
	for _, size := range []int64{8, 0} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(os.Stderr, "primitives: permits (size %d)…\n", size)
		if r, err := permits(ctx, addr, size, 4, 8, time.Millisecond, dur); err != nil {
			fail("permits", err)
		} else {
			rows = append(rows, r)
		}
	}
	for _, protect := range []bool{true, false} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(os.Stderr, "primitives: stampede (protected %v)…\n", protect)
		if r, err := stampede(ctx, addr, 4, 200, 5, 50*time.Millisecond, protect); err != nil {
			fail("stampede", err)
		} else {
			rows = append(rows, r)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rows = append(rows, wakeFloor(1000, 5))
	printPrimRows(addr, "distsync primitives", rows)
	pts := scale(ctx, addr, dur/2)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	printScale(pts)
	plotScale(pts)
	if err := rateBench(ctx, addr, quick); err != nil {
		return err
	}
	return lockAll(ctx, addr, quick)
}

// printPrimRows prints the table of the primitives' scenarios.
func printPrimRows(addr, title string, rows []primRow) {
	rtt := pingP50(addr, 500)
	fmt.Printf("\n### %s\n\nRound trip (PING p50) after the runs: %v.\n\n", title, rtt.Round(time.Microsecond))
	fmt.Printf("| scenario | result | in RTT | client cmds / op | Redis cmds / op | Redis CPU / op |\n|---|---|---|---|---|---|\n")
	num := func(f float64) string {
		if f < 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f", f)
	}
	for _, r := range rows {
		in := r.rtt
		if in == "" {
			in = "—"
		}
		cpu := "—"
		if r.redisCPU >= 0 {
			cpu = r.redisCPU.Round(100 * time.Nanosecond).String()
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", r.scenario, r.result, in, num(r.clientCmds), num(r.redisCmds), cpu)
	}
}

// identityOnly runs the identity-cost scenario alone and prints its rows
// (-primitives identity).
func identityOnly(ctx context.Context, addr string, quick bool) error {
	iters := 2000
	if quick {
		iters = 300
	}
	rows, err := identityCost(ctx, addr, iters)
	if err != nil {
		return err
	}
	printPrimRows(addr, "distsync primitives", rows)
	return nil
}

// loadedPing pings addr every 5 ms until stop is closed and returns the median: the round
// trip under the same load as the scenario it runs beside.
func loadedPing(addr string, stop <-chan struct{}) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			out <- 0
			return
		}
		defer c.Close()
		var d []time.Duration
		for {
			select {
			case <-stop:
				out <- pct(d, 50)
				return
			case <-time.After(5 * time.Millisecond):
			}
			t0 := time.Now()
			if c.Do(context.Background(), c.B().Ping().Build()).Error() == nil {
				d = append(d, time.Since(t0))
			}
		}
	}()
	return out
}

// fairHandoff runs pods × goroutines on one fair lock for dur, nothing done inside, and
// measures the hand-off: from an Unlock call to the next Lock returning in another goroutine.
func fairHandoff(ctx context.Context, addr string, pods, goroutines int, dur time.Duration) (primRow, error) {
	ps, closeAll, err := openPods(addr, pods)
	if err != nil {
		return primRow{}, err
	}
	defer closeAll()
	name := fmt.Sprintf("fair:%d", time.Now().UnixNano())
	var ms []*fair.Mutex
	for _, p := range ps {
		m, err := fair.New(p.h, name)
		if err != nil {
			return primRow{}, err
		}
		ms = append(ms, m)
	}
	ctx, cancel := context.WithTimeout(ctx, dur+time.Minute)
	defer cancel()
	before, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	cl0 := clientTotal(ps)
	var (
		mu        sync.Mutex
		lastFrom  = -1
		lastAt    time.Time
		handoffs  []time.Duration
		acquired  int
		firstErr  error
		stopPing  = make(chan struct{})
		pinged    = loadedPing(addr, stopPing)
		until     = time.Now().Add(dur)
		wg        sync.WaitGroup
		goroutine int
	)
	for _, m := range ms {
		for range goroutines {
			id := goroutine
			goroutine++
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(until) {
					if err := m.Lock(ctx); err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
					now := time.Now()
					mu.Lock()
					if lastFrom >= 0 && lastFrom != id {
						handoffs = append(handoffs, now.Sub(lastAt))
					}
					acquired++
					lastFrom, lastAt = id, time.Now()
					mu.Unlock()
					if err := m.Unlock(ctx); err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(stopPing)
	rtt := <-pinged
	if firstErr != nil {
		return primRow{}, firstErr
	}
	after, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	p50, p99 := pct(handoffs, 50), pct(handoffs, 99)
	rc, rcpu := after.per(before, float64(acquired))
	return primRow{
		scenario:   fmt.Sprintf("fair: hand-off, %d pods × %d goroutines queued on one lock", pods, goroutines),
		result:     fmt.Sprintf("p50 %v / p99 %v; %.0f acq/s", p50.Round(time.Microsecond), p99.Round(time.Microsecond), float64(acquired)/dur.Seconds()),
		rtt:        fmt.Sprintf("%.1f / %.1f (RTT under load %v)", float64(p50)/float64(rtt), float64(p99)/float64(rtt), rtt.Round(time.Microsecond)),
		clientCmds: float64(clientTotal(ps)-cl0) / float64(acquired),
		redisCmds:  rc,
		redisCPU:   rcpu,
	}, nil
}

// permits runs pods × goroutines acquiring 1 permit of a semaphore of size, holding it for
// hold, and releasing it, for dur; with size 0 it takes the distsync mutex instead.
func permits(ctx context.Context, addr string, size int64, pods, goroutines int, hold, dur time.Duration) (primRow, error) {
	ps, closeAll, err := openPods(addr, pods)
	if err != nil {
		return primRow{}, err
	}
	defer closeAll()
	name := fmt.Sprintf("permits:%d", time.Now().UnixNano())
	type pair struct{ acquire, release func(context.Context) error }
	var all []pair
	for _, p := range ps {
		if size > 0 {
			s, err := semaphore.New(p.h, name, size)
			if err != nil {
				return primRow{}, err
			}
			all = append(all, pair{func(ctx context.Context) error { return s.Acquire(ctx, 1) },
				func(ctx context.Context) error { return s.Release(ctx, 1) }})
		} else {
			m, err := mutex.New(p.h, name)
			if err != nil {
				return primRow{}, err
			}
			all = append(all, pair{m.Lock, m.Unlock})
		}
	}
	ctx, cancel := context.WithTimeout(ctx, dur+time.Minute)
	defer cancel()
	before, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	cl0 := clientTotal(ps)
	var n atomic.Int64
	var firstErr atomic.Value
	until := time.Now().Add(dur)
	var wg sync.WaitGroup
	for _, pr := range all {
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(until) {
					if err := pr.acquire(ctx); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					time.Sleep(hold)
					if err := pr.release(ctx); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					n.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return primRow{}, err
	}
	after, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	what := fmt.Sprintf("semaphore of size %d", size)
	if size == 0 {
		what = "mutex (size 1)"
	}
	total := float64(n.Load())
	rc, rcpu := after.per(before, total)
	return primRow{
		scenario:   fmt.Sprintf("%s: %d contenders (%d pods × %d), acquire 1, hold %v, release", what, pods*goroutines, pods, goroutines, hold),
		result:     fmt.Sprintf("%.0f acquire+release/s", total/dur.Seconds()),
		clientCmds: float64(clientTotal(ps)-cl0) / total,
		redisCmds:  rc,
		redisCPU:   rcpu,
	}, nil
}

// stampede is the cache-stampede scenario: callers across pods ask for one expired key at
// once; fn sleeps fnTime. With protect, they go through a once.Group; without, each calls fn.
// It reports fn's executions per round and, over rounds fresh keys, the time from fn
// returning in the leader to the first follower in another pod returning (the result's
// trip through Redis) and to the last caller returning. Its RTT unit is a PING sent after
// each round by a client idle for fnTime, with Redis idle as long: the state the leader's
// finish script and the followers' subscriptions are in when fn returns (on this VM an idle
// vCPU is slow to wake, so a PING from a busy loop would be the wrong unit).
func stampede(ctx context.Context, addr string, pods, callers, rounds int, fnTime time.Duration, protect bool) (primRow, error) {
	ps, closeAll, err := openPods(addr, pods)
	if err != nil {
		return primRow{}, err
	}
	defer closeAll()
	var gs []*once.Group[string]
	for _, p := range ps {
		g, err := once.NewGroup[string](p.h, "stampede")
		if err != nil {
			return primRow{}, err
		}
		gs = append(gs, g)
	}
	idle, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return primRow{}, err
	}
	defer idle.Close()
	before, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	cl0 := clientTotal(ps)
	var firsts, lasts, rtts []time.Duration
	var execs int64
	for r := range rounds {
		key := fmt.Sprintf("product:%d:%d", time.Now().UnixNano(), r)
		var runs atomic.Int64
		var resultAt atomic.Int64 // unix ns when fn returned (the last time, without protection)
		var leaderPod atomic.Int64
		fnOf := func(pod int) func(context.Context) (string, error) {
			return func(context.Context) (string, error) {
				runs.Add(1)
				leaderPod.Store(int64(pod))
				time.Sleep(fnTime)
				resultAt.Store(time.Now().UnixNano())
				return "value of " + key, nil
			}
		}
		returned := make([]int64, pods*callers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var firstErr atomic.Value
		for i := range pods * callers {
			g, fn := gs[i%pods], fnOf(i%pods)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				var err error
				if protect {
					_, err, _ = g.Do(ctx, key, fn)
				} else {
					_, err = fn(ctx)
				}
				returned[i] = time.Now().UnixNano()
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if err, _ := firstErr.Load().(error); err != nil {
			return primRow{}, err
		}
		execs += runs.Load()
		if protect {
			first, last := int64(0), int64(0)
			for i, at := range returned {
				if int64(i%pods) != leaderPod.Load() && (first == 0 || at < first) {
					first = at
				}
				last = max(last, at)
			}
			firsts = append(firsts, time.Duration(first-resultAt.Load()))
			lasts = append(lasts, time.Duration(last-resultAt.Load()))
			time.Sleep(fnTime)
			t0 := time.Now()
			if err := idle.Do(ctx, idle.B().Ping().Build()).Error(); err != nil {
				return primRow{}, err
			}
			rtts = append(rtts, time.Since(t0))
		}
	}
	after, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	total := float64(pods * callers * rounds)
	rc, rcpu := after.per(before, total)
	row := primRow{
		scenario:   fmt.Sprintf("stampede, %s: %d callers (%d pods × %d) on one expired key, fn 50 ms, %d rounds", map[bool]string{true: "once.Group", false: "no protection"}[protect], pods*callers, pods, callers, rounds),
		result:     fmt.Sprintf("fn ran %.0f times per round", float64(execs)/float64(rounds)),
		clientCmds: float64(clientTotal(ps)-cl0) / total,
		redisCmds:  rc,
		redisCPU:   rcpu,
	}
	if protect {
		rtt := pct(rtts, 50)
		in := func(d time.Duration) float64 { return float64(d) / float64(rtt) }
		f50, fmax, l50, lmax := pct(firsts, 50), pct(firsts, 100), pct(lasts, 50), pct(lasts, 100)
		row.result += fmt.Sprintf("; leader's result to the first follower in another pod returning: p50 %v (max %v); to the last caller: p50 %v (max %v)",
			f50.Round(time.Microsecond), fmax.Round(time.Microsecond), l50.Round(time.Microsecond), lmax.Round(time.Microsecond))
		row.rtt = fmt.Sprintf("first: %.1f (%.1f); last: %.1f (%.1f) (idle RTT %v)", in(f50), in(fmax), in(l50), in(lmax), rtt.Round(time.Microsecond))
	}
	return row, nil
}

// wakeFloor is the least the stampede's callers can cost once a result is in their process:
// n goroutines, spread over the same Go runtime, woken by closing one channel.
func wakeFloor(n, rounds int) primRow {
	var lat []time.Duration
	for range rounds {
		done := make(chan struct{})
		ret := make([]int64, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				select {
				case <-done:
				case <-ctx.Done():
				}
				ret[i] = time.Now().UnixNano()
			}()
		}
		time.Sleep(50 * time.Millisecond)
		t0 := time.Now().UnixNano()
		close(done)
		wg.Wait()
		for _, at := range ret {
			lat = append(lat, time.Duration(at-t0))
		}
	}
	return primRow{
		scenario:   fmt.Sprintf("reference: %d goroutines woken by closing one channel, no Redis", n),
		result:     fmt.Sprintf("p50 %v, p99 %v", pct(lat, 50).Round(time.Microsecond), pct(lat, 99).Round(time.Microsecond)),
		clientCmds: -1, redisCmds: -1, redisCPU: -1,
	}
}

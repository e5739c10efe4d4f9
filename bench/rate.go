package main

// rate.Limiter (a token bucket in one hash, x/time/rate's arithmetic, one script per decision)
// against github.com/go-redis/redis_rate v10 (GCRA: one string key holding the theoretical
// arrival time, one script per decision), on the same redis-server, in one run:
//
//   - Allow, one goroutine, the two libraries interleaved round by round with a PING (the
//     unit): a limit high enough that every call is allowed (the decision path that writes),
//     and one low enough that all but the first call are refused (the path that only reads);
//   - Wait's wake-up accuracy: waiters, each a Handle of its own, queued on one limiter at a
//     limit they exceed; the k-th admission's time to act is the first admission's (read from
//     Redis) plus k/limit, against its actual return. redis_rate has no Wait: its users poll,
//     Allow and then sleep RetryAfter, which is measured the same way, and a plain
//     time.Sleep to the same schedule gives the floor of Go's timers on this machine.
//
// redis_rate's keys are "rate:" + its caller's key, outside the run's prefix: each scenario
// deletes them (its Reset) when it ends; they carry a TTL anyway.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	redisrate "github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/keys"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/rate"
)

// gcraEpoch is redis_rate's epoch: its script keeps times in seconds since 2017-01-01 UTC.
const gcraEpoch = 1483228800

// rateBench runs every rate scenario and prints its table (-primitives rate, and the default
// run).
func rateBench(ctx context.Context, addr string, quick bool) error {
	iters, dur := 2000, 4*time.Second
	if quick {
		iters, dur = 300, time.Second
	}
	var rows []primRow
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		rows = append(rows, primRow{scenario: what, result: "error: " + err.Error(), clientCmds: -1, redisCmds: -1, redisCPU: -1})
	}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	fmt.Fprintf(os.Stderr, "rate: Allow, distsync and redis_rate interleaved…\n")
	if rs, err := rateAllow(ctx, addr, stamp, iters); err != nil {
		fail("rate: Allow", err)
	} else {
		rows = append(rows, rs...)
	}
	fmt.Fprintf(os.Stderr, "rate: Allow paced 10 ms apart…\n")
	if r, err := ratePaced(ctx, addr, "paced-"+stamp, 10*time.Millisecond, iters/4); err != nil {
		fail("rate: Allow paced", err)
	} else {
		rows = append(rows, r)
	}
	const waiters, limit = 8, 100.0
	for _, shape := range []string{"sleep", "distsync", "redis_rate"} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(os.Stderr, "rate: wake-up accuracy, %s…\n", shape)
		var r primRow
		var err error
		switch shape {
		case "sleep":
			r = sleepFloor(limit, dur)
		case "distsync":
			r, err = rateWaitDistsync(ctx, addr, "wait-"+stamp, waiters, limit, dur)
		case "redis_rate":
			r, err = rateWaitPolling(ctx, addr, "poll-"+stamp, waiters, limit, dur)
		}
		if err != nil {
			fail("rate: wake-up accuracy, "+shape, err)
		} else {
			rows = append(rows, r)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	printPrimRows(addr, "Rate limiter: distsync rate.Limiter against go-redis/redis_rate", rows)
	fmt.Printf("\nAllow: one goroutine, the four calls in a new order each round with a PING before each round, %d rounds after %d to warm up; commands, Redis CPU and allocations (the process's) over %d more calls of each alone. Allowed: distsync limit 100000/s burst 1000, redis_rate Limit{Rate: 100000, Period: 1s, Burst: 1000}. Refused: distsync Every(1 min) burst 1, redis_rate PerMinute(1). Wake-up: %d waiters, each its own client (and Handle), on one limiter at %v/s, burst 1, for %v; lateness is an admission's return (local wall clock) against its slot, the first admission's time (Redis's TIME, read from the key) + k/limit: the same clock on this one machine. Gap excess: the time between consecutive admissions less 1/limit. Redis CPU per admission is less Redis's idle CPU over the same time (at 100 decisions/s the idle server's own CPU is most of it otherwise).\n",
		iters, iters/10, iters/2, waiters, limit, dur)
	return nil
}

// rateAllow measures one goroutine's Allow, distsync's and redis_rate's, allowed and refused,
// interleaved.
func rateAllow(ctx context.Context, addr, stamp string, iters int) ([]primRow, error) {
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
	gc, gn := goredisClient(addr)
	defer func() { _ = gc.Close() }()
	rl := redisrate.NewLimiter(gc)
	open, err := rate.NewLimiter(ps[0].h, "allow-open-"+stamp, 100000, 1000)
	if err != nil {
		return nil, err
	}
	shut, err := rate.NewLimiter(ps[0].h, "allow-shut-"+stamp, rate.Every(time.Minute), 1)
	if err != nil {
		return nil, err
	}
	openKey, shutKey := keyPrefix+"allow-open-"+stamp, keyPrefix+"allow-shut-"+stamp
	defer func() {
		_ = rl.Reset(context.Background(), openKey)
		_ = rl.Reset(context.Background(), shutKey)
	}()
	openLim := redisrate.Limit{Rate: 100000, Period: time.Second, Burst: 1000}
	shutLim := redisrate.PerMinute(1)
	allowed := make([]atomic.Int64, 4)
	calls := make([]atomic.Int64, 4)
	ds := func(k int, l *rate.Limiter) func(context.Context) error {
		return func(ctx context.Context) error {
			ok, err := l.Allow(ctx)
			calls[k].Add(1)
			if ok {
				allowed[k].Add(1)
			}
			return err
		}
	}
	gr := func(k int, key string, lim redisrate.Limit) func(context.Context) error {
		return func(ctx context.Context) error {
			res, err := rl.Allow(ctx, key, lim)
			calls[k].Add(1)
			if err == nil && res.Allowed > 0 {
				allowed[k].Add(1)
			}
			return err
		}
	}
	ops := []pairOp{
		{"distsync rate.Limiter.Allow, allowed (limit 100000/s, burst 1000)", ds(0, open)},
		{"redis_rate Limiter.Allow, allowed (100000/s, burst 1000)", gr(1, openKey, openLim)},
		{"distsync rate.Limiter.Allow, refused (Every(1 min), burst 1)", ds(2, shut)},
		{"redis_rate Limiter.Allow, refused (PerMinute(1))", gr(3, shutKey, shutLim)},
	}
	times, pings, err := interleave(ctx, pinger, ops, iters)
	if err != nil {
		return nil, err
	}
	rtt := pct(pings, 50)
	var rows []primRow
	for k, o := range ops {
		n := iters / 2
		before, err := commandstats(addr)
		if err != nil {
			return nil, err
		}
		c0 := ps[0].c.Total() + gn.Load()
		for range n {
			if err := o.run(ctx); err != nil {
				return nil, fmt.Errorf("%s: %w", o.name, err)
			}
		}
		c1 := ps[0].c.Total() + gn.Load()
		after, err := commandstats(addr)
		if err != nil {
			return nil, err
		}
		rc, rcpu := after.per(before, float64(n))
		allocs, bytes, err := allocsPerPair(ctx, o, n)
		if err != nil {
			return nil, err
		}
		p50 := pct(times[k], 50)
		rows = append(rows, primRow{
			scenario: "rate, uncontended, one goroutine: " + o.name,
			result: fmt.Sprintf("%v p50 (%v p99); allowed %d of %d calls; %.1f allocs, %.0f B per call",
				p50.Round(time.Microsecond), pct(times[k], 99).Round(time.Microsecond),
				allowed[k].Load(), calls[k].Load(), allocs, bytes),
			rtt:        fmt.Sprintf("%.1f", float64(p50)/float64(rtt)),
			clientCmds: float64(c1-c0) / float64(n),
			redisCmds:  rc,
			redisCPU:   rcpu,
		})
	}
	rows = append(rows, primRow{scenario: "rate, uncontended: PING p50 between the calls (the RTT unit)", result: rtt.Round(time.Microsecond).String(), clientCmds: -1, redisCmds: -1, redisCPU: -1})
	return rows, nil
}

// ratePaced is a reference for the Wait rows' Redis CPU: one goroutine's distsync Allow (always
// allowed), n calls gap apart, Redis's idle CPU over the same time taken out. An idle server
// woken for each call spends more CPU per call than one kept busy.
func ratePaced(ctx context.Context, addr, name string, gap time.Duration, n int) (primRow, error) {
	ps, closeAll, err := openPods(addr, 1)
	if err != nil {
		return primRow{}, err
	}
	defer closeAll()
	l, err := rate.NewLimiter(ps[0].h, name, 100000, 1000)
	if err != nil {
		return primRow{}, err
	}
	idle, err := target{addrs: []string{addr}}.idleCPU(time.Second)
	if err != nil {
		return primRow{}, err
	}
	before, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	c0 := ps[0].c.Total()
	t0 := time.Now()
	allowed := 0
	for range n {
		ok, err := l.Allow(ctx)
		if err != nil {
			return primRow{}, err
		}
		if ok {
			allowed++
		}
		time.Sleep(gap)
	}
	took := time.Since(t0)
	after, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	after.cpu -= time.Duration(idle * took.Seconds())
	rc, rcpu := after.per(before, float64(n))
	return primRow{
		scenario: fmt.Sprintf("rate, reference: distsync Allow, one goroutine, one call every %v (limit 100000/s)", gap),
		result: fmt.Sprintf("allowed %d of %d calls; Redis's idle CPU (%.2f ms/s, measured before) taken out", allowed, n,
			idle*1e3/float64(time.Second)),
		clientCmds: float64(ps[0].c.Total()-c0) / float64(n),
		redisCmds:  rc,
		redisCPU:   rcpu,
	}, nil
}

// admissions summarises the admission times (µs, wall clock) of a queue at limit per second
// whose slot 0 is at t0 (µs): lateness against slot k = t0 + k/limit for the k-th admission in
// order of return, and the excess of each gap between consecutive admissions over 1/limit.
func admissions(ts []int64, t0 int64, limit float64, took time.Duration) string {
	slices.Sort(ts)
	step := 1e6 / limit
	var late, gaps []time.Duration
	for k, t := range ts {
		slot := float64(t0) + float64(k+1)*step
		late = append(late, time.Duration((float64(t)-slot)*1e3))
		if k > 0 {
			gaps = append(gaps, time.Duration((float64(t-ts[k-1])-step)*1e3))
		}
	}
	us := func(d time.Duration) string { return d.Round(time.Microsecond).String() }
	return fmt.Sprintf("%d admissions, %.1f/s; lateness p50 %s, p99 %s, max %s, min %s; gap excess p50 %s, p99 %s",
		len(ts), float64(len(ts))/took.Seconds(), us(pct(late, 50)), us(pct(late, 99)), us(slices.Max(late)),
		us(slices.Min(late)), us(pct(gaps, 50)), us(pct(gaps, 99)))
}

// sleepFloor is Go's timer on this machine: one goroutine sleeping to the same schedule as the
// waiters' slots (time.Sleep until slot k), its lateness measured the same way.
func sleepFloor(limit float64, dur time.Duration) primRow {
	t0 := time.Now().UnixMicro()
	step := 1e6 / limit
	var ts []int64
	start := time.Now()
	for k := 1; time.Since(start) < dur; k++ {
		slot := time.UnixMicro(t0 + int64(math.Round(float64(k)*step)))
		time.Sleep(time.Until(slot))
		ts = append(ts, time.Now().UnixMicro())
	}
	return primRow{
		scenario:   fmt.Sprintf("rate, wake-up floor: one goroutine, time.Sleep to each slot of %v/s (no Redis)", limit),
		result:     admissions(ts, t0, limit, time.Since(start)),
		clientCmds: -1, redisCmds: -1, redisCPU: -1,
	}
}

// rateWaitDistsync runs waiters pods, each calling Wait in a loop on one limiter at limit per
// second, burst 1, for dur. A reservation made first (the burst's token, at once) gives slot 0:
// the bucket's "last" field, Redis's time of that decision.
func rateWaitDistsync(ctx context.Context, addr, name string, waiters int, limit float64, dur time.Duration) (primRow, error) {
	ps, closeAll, err := openPods(addr, waiters+1)
	if err != nil {
		return primRow{}, err
	}
	defer closeAll()
	var lims []*rate.Limiter
	for _, p := range ps {
		l, err := rate.NewLimiter(p.h, name, rate.Limit(limit), 1)
		if err != nil {
			return primRow{}, err
		}
		lims = append(lims, l)
	}
	ks, err := keys.New(keyPrefix, kind.Rate, name)
	if err != nil {
		return primRow{}, err
	}
	idle, err := target{addrs: []string{addr}}.idleCPU(time.Second)
	if err != nil {
		return primRow{}, err
	}
	if r, err := lims[waiters].Reserve(ctx); err != nil {
		return primRow{}, err
	} else if !r.OK() || r.Delay() > 0 {
		return primRow{}, errors.New("the first reservation was not at once")
	}
	raw := ps[waiters].c
	last, err := raw.Do(ctx, raw.B().Hget().Key(ks.Key()).Field("last").Build()).ToString()
	if err != nil {
		return primRow{}, fmt.Errorf("read slot 0: %w", err)
	}
	t0, err := strconv.ParseInt(last, 10, 64)
	if err != nil {
		return primRow{}, fmt.Errorf("read slot 0: %q: %w", last, err)
	}
	before, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	cl0 := clientTotal(ps[:waiters])
	ts, took, err := runWaiters(waiters, dur, func(w int) error { return lims[w].Wait(ctx) })
	if err != nil {
		return primRow{}, err
	}
	after, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	after.cpu -= time.Duration(idle * took.Seconds())
	n := float64(len(ts))
	rc, rcpu := after.per(before, n)
	return primRow{
		scenario:   fmt.Sprintf("rate, wake-up accuracy: distsync Wait, %d waiters (a Handle each) at %v/s, burst 1, for %v", waiters, limit, dur),
		result:     admissions(ts, t0, limit, took) + fmt.Sprintf("; Redis's idle CPU (%.2f ms/s, measured before with the clients connected) taken out", idle*1e3/float64(time.Second)),
		clientCmds: float64(clientTotal(ps[:waiters])-cl0) / n,
		redisCmds:  rc,
		redisCPU:   rcpu,
	}, nil
}

// rateWaitPolling is the same queue with redis_rate, as its users wait: Allow, and if refused
// sleep RetryAfter and try again. Slot 0 is a first Allow's, read back from the key (its
// theoretical arrival time less one interval).
func rateWaitPolling(ctx context.Context, addr, name string, waiters int, limit float64, dur time.Duration) (primRow, error) {
	type client struct {
		c *goredis.Client
		n *atomic.Int64
		l *redisrate.Limiter
	}
	var cs []client
	defer func() {
		for _, c := range cs {
			_ = c.c.Close()
		}
	}()
	for range waiters + 1 {
		c, n := goredisClient(addr)
		cs = append(cs, client{c, n, redisrate.NewLimiter(c)})
	}
	key := keyPrefix + name
	defer func() { _ = cs[waiters].l.Reset(context.Background(), key) }()
	lim := redisrate.Limit{Rate: int(limit), Period: time.Second, Burst: 1}
	idle, err := target{addrs: []string{addr}}.idleCPU(time.Second)
	if err != nil {
		return primRow{}, err
	}
	if res, err := cs[waiters].l.Allow(ctx, key, lim); err != nil {
		return primRow{}, err
	} else if res.Allowed != 1 {
		return primRow{}, errors.New("the first Allow was refused")
	}
	tat, err := cs[waiters].c.Get(ctx, "rate:"+key).Float64()
	if err != nil {
		return primRow{}, fmt.Errorf("read slot 0: %w", err)
	}
	t0 := int64(math.Round((tat+gcraEpoch)*1e6 - 1e6/limit))
	before, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	total := func() (n int64) {
		for _, c := range cs[:waiters] {
			n += c.n.Load()
		}
		return n
	}
	cl0 := total()
	ts, took, err := runWaiters(waiters, dur, func(w int) error {
		for {
			res, err := cs[w].l.Allow(ctx, key, lim)
			if err != nil {
				return err
			}
			if res.Allowed > 0 {
				return nil
			}
			time.Sleep(res.RetryAfter)
		}
	})
	if err != nil {
		return primRow{}, err
	}
	after, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	after.cpu -= time.Duration(idle * took.Seconds())
	n := float64(len(ts))
	rc, rcpu := after.per(before, n)
	return primRow{
		scenario:   fmt.Sprintf("rate, wake-up accuracy: redis_rate Allow + sleep RetryAfter, %d waiters (a client each) at %v/s, burst 1, for %v", waiters, limit, dur),
		result:     admissions(ts, t0, limit, took) + fmt.Sprintf("; Redis's idle CPU (%.2f ms/s, measured before with the clients connected) taken out", idle*1e3/float64(time.Second)),
		clientCmds: float64(total()-cl0) / n,
		redisCmds:  rc,
		redisCPU:   rcpu,
	}, nil
}

// runWaiters runs waiters goroutines, each calling wait(w) in a loop until dur has passed, and
// returns the wall-clock time (µs) of every return and how long the run took (to the last
// return).
func runWaiters(waiters int, dur time.Duration, wait func(w int) error) ([]int64, time.Duration, error) {
	var (
		mu       sync.Mutex
		ts       []int64
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	until := start.Add(dur)
	for w := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int64
			var err error
			for time.Now().Before(until) {
				if err = wait(w); err != nil {
					break
				}
				mine = append(mine, time.Now().UnixMicro())
			}
			mu.Lock()
			ts = append(ts, mine...)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return ts, time.Since(start), firstErr
}

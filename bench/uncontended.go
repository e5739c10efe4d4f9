package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
)

// pairOp is one primitive's acquire+release, uncontended.
type pairOp struct {
	name string
	run  func(ctx context.Context) error
}

// everyPair measures one goroutine's uncontended acquire+release for every primitive against
// the floor (SET NX PX + EVALSHA compare-and-delete), in one loop that interleaves them pair by
// pair so that all meet the same moments of the machine, with a PING as the unit; then back to
// back (see backToBack), against the floor back to back; then, one primitive at a time, the
// Redis commands and CPU of a pair and the allocations, over at least 1000 pairs.
func everyPair(ctx context.Context, addr string, iters int) ([]primRow, error) {
	// A deadline, as the main table's uncontended pairs have: rueidis sends a command whose
	// context can be cancelled but has no deadline through the connection's writer and reader
	// goroutines, and one with a deadline from the caller's goroutine (see breakdown).
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	ps, closeAll, err := openPods(addr, 1)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	h := ps[0].h
	pinger, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	defer pinger.Close()
	fl, err := openFloor(addr)
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	floorLk := fl.New("every-pair")
	m, _ := mutex.New(h, "pair-mutex")
	f, _ := fair.New(h, "pair-fair")
	r, _ := reentrant.New(h, "pair-reentrant")
	rw, _ := rwmutex.New(h, "pair-rwmutex")
	s, err := semaphore.New(h, "pair-semaphore", 8)
	if err != nil {
		return nil, err
	}
	rctx := reentrant.WithOwner(ctx, reentrant.NewOwner())
	ops := []pairOp{
		{"floor: SET NX PX + EVALSHA compare-and-delete", pairOf(floorLk.Lock, floorLk.Unlock)},
		{"mutex: Lock + Unlock", pairOf(m.Lock, m.Unlock)},
		{"fair: Lock + Unlock", pairOf(f.Lock, f.Unlock)},
		{"reentrant: Lock + Unlock", func(context.Context) error { return pairOf(r.Lock, r.Unlock)(rctx) }},
		{"rwmutex: Lock + Unlock (write)", pairOf(rw.Lock, rw.Unlock)},
		{"rwmutex: RLock + RUnlock (read)", pairOf(rw.RLock, rw.RUnlock)},
		{"semaphore: Acquire(1) + Release(1)", pairOf(
			func(ctx context.Context) error { return s.Acquire(ctx, 1) },
			func(ctx context.Context) error { return s.Release(ctx, 1) })},
	}
	times, pings, err := interleave(ctx, pinger, ops, iters)
	if err != nil {
		return nil, err
	}
	b2b, err := backToBack(ctx, ops, iters)
	if err != nil {
		return nil, err
	}
	rtt := pct(pings, 50)
	floor, floorB2B := pct(times[0], 50), pct(b2b[0], 50)
	var rows []primRow
	for k, o := range ops {
		rc, rcpu, allocs, err := pairLoad(ctx, addr, o, max(iters, 1000))
		if err != nil {
			return nil, err
		}
		p50, b2bP50 := pct(times[k], 50), pct(b2b[k], 50)
		rows = append(rows, primRow{
			scenario: "uncontended, one goroutine: " + o.name,
			result: fmt.Sprintf("%v p50 (%v p99), %.2f× the floor; back-to-back %v p50, %.2f× the floor's; %.1f allocs/pair",
				p50.Round(time.Microsecond), pct(times[k], 99).Round(time.Microsecond), float64(p50)/float64(floor),
				b2bP50.Round(time.Microsecond), float64(b2bP50)/float64(floorB2B), allocs),
			rtt:        fmt.Sprintf("%.1f", float64(p50)/float64(rtt)),
			clientCmds: -1, redisCmds: rc, redisCPU: rcpu,
		})
	}
	return rows, nil
}

// pairLoad runs n pairs of o alone and returns the Redis commands and CPU of a pair (see
// commandstats) and the process's allocations per pair (see allocsPerPair: the client's
// goroutines' included).
func pairLoad(ctx context.Context, addr string, o pairOp, n int) (redisCmds float64, redisCPU time.Duration, allocs float64, err error) {
	before, err := commandstats(addr)
	if err != nil {
		return 0, 0, 0, err
	}
	if allocs, _, err = allocsPerPair(ctx, o, n); err != nil {
		return 0, 0, 0, fmt.Errorf("%s: %w", o.name, err)
	}
	after, err := commandstats(addr)
	if err != nil {
		return 0, 0, 0, err
	}
	redisCmds, redisCPU = after.per(before, float64(n))
	return redisCmds, redisCPU, allocs, nil
}

// pairOf returns one acquire+release: lock, then unlock if lock succeeded.
func pairOf(lock, unlock func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := lock(ctx); err != nil {
			return err
		}
		return unlock(ctx)
	}
}

// pairBlock is how many consecutive pairs one op runs in its turn of backToBack.
const pairBlock = 100

// backToBack times every op's pairs back to back, as a worker loop that locks item after
// item does: each op in turn runs a block of pairBlock consecutive pairs, in a new random order
// each round so that all meet the same moments of a noisy machine, until each has run n pairs
// (rounded up to whole blocks) after one block to warm up. It returns the times of each op.
func backToBack(ctx context.Context, ops []pairOp, n int) ([][]time.Duration, error) {
	times := make([][]time.Duration, len(ops))
	rounds := (n + pairBlock - 1) / pairBlock
	for i := range 1 + rounds {
		warm := i == 0
		for _, k := range rand.Perm(len(ops)) {
			o := ops[k]
			for range pairBlock {
				t0 := time.Now()
				if err := o.run(ctx); err != nil {
					return nil, fmt.Errorf("%s: %w", o.name, err)
				}
				if !warm {
					times[k] = append(times[k], time.Since(t0))
				}
			}
		}
	}
	return times, nil
}

// interleave runs every op once per round, in a new order each round, with a PING before
// each round, for iters rounds after iters/10 to warm up, and returns the times of each op
// and of the PINGs.
func interleave(ctx context.Context, pinger rueidis.Client, ops []pairOp, iters int) (times [][]time.Duration, pings []time.Duration, err error) {
	times = make([][]time.Duration, len(ops))
	for i := range iters + iters/10 {
		warm := i < iters/10
		t0 := time.Now()
		if err := pinger.Do(ctx, pinger.B().Ping().Build()).Error(); err != nil {
			return nil, nil, err
		}
		if !warm {
			pings = append(pings, time.Since(t0))
		}
		for _, k := range rand.Perm(len(ops)) { // a new order every round, as in uncontended
			o := ops[k]
			t0 := time.Now()
			if err := o.run(ctx); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", o.name, err)
			}
			if !warm {
				times[k] = append(times[k], time.Since(t0))
			}
		}
	}
	return times, pings, nil
}

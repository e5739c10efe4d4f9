package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
)

// distinctPrims runs every primitive's uncontended pair on distinct keys, as the main table's
// distinct-keys cell does for the mutex (distinctGoroutines goroutines in one process, a name
// each, for dur), the floor first, one primitive at a time: what a pair costs Redis and the
// client when the two vCPUs, not the round trip, are the limit.
func distinctPrims(ctx context.Context, addr string, dur time.Duration) ([]primRow, error) {
	ps, closeAll, err := openPods(addr, 1)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	h := ps[0].h
	fl, err := openFloor(addr)
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	name := func(kind string, g int) string { return "distinct-" + kind + ":" + strconv.Itoa(g) }
	kinds := []struct {
		name string
		pair func(g int) (func(context.Context) error, error)
	}{
		{"floor: SET NX PX + EVALSHA compare-and-delete", func(g int) (func(context.Context) error, error) {
			lk := fl.New(name("floor", g))
			return pairOf(lk.Lock, lk.Unlock), nil
		}},
		{"mutex: Lock + Unlock", func(g int) (func(context.Context) error, error) {
			m, err := mutex.New(h, name("mutex", g))
			if err != nil {
				return nil, err
			}
			return pairOf(m.Lock, m.Unlock), nil
		}},
		{"fair: Lock + Unlock", func(g int) (func(context.Context) error, error) {
			m, err := fair.New(h, name("fair", g))
			if err != nil {
				return nil, err
			}
			return pairOf(m.Lock, m.Unlock), nil
		}},
		{"reentrant: Lock + Unlock", func(g int) (func(context.Context) error, error) {
			m, err := reentrant.New(h, name("reentrant", g))
			if err != nil {
				return nil, err
			}
			o := reentrant.NewOwner()
			return func(ctx context.Context) error { return pairOf(m.Lock, m.Unlock)(reentrant.WithOwner(ctx, o)) }, nil
		}},
		{"rwmutex: Lock + Unlock (write)", func(g int) (func(context.Context) error, error) {
			m, err := rwmutex.New(h, name("rw-w", g))
			if err != nil {
				return nil, err
			}
			return pairOf(m.Lock, m.Unlock), nil
		}},
		{"rwmutex: RLock + RUnlock (read)", func(g int) (func(context.Context) error, error) {
			m, err := rwmutex.New(h, name("rw-r", g))
			if err != nil {
				return nil, err
			}
			return pairOf(m.RLock, m.RUnlock), nil
		}},
		{"semaphore: Acquire(1) + Release(1), size 8", func(g int) (func(context.Context) error, error) {
			s, err := semaphore.New(h, name("semaphore", g), 8)
			if err != nil {
				return nil, err
			}
			return pairOf(func(ctx context.Context) error { return s.Acquire(ctx, 1) },
				func(ctx context.Context) error { return s.Release(ctx, 1) }), nil
		}},
	}
	var rows []primRow
	var floor distinct
	for i, k := range kinds {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		fmt.Fprintf(os.Stderr, "primitives: distinct keys, %s…\n", k.name)
		d, err := distinctRun(ctx, addr, distinctGoroutines, dur, k.pair)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.name, err)
		}
		if i == 0 {
			floor = d
		}
		rows = append(rows, primRow{
			scenario: fmt.Sprintf("distinct keys, %d goroutines: %s", distinctGoroutines, k.name),
			result: fmt.Sprintf("%.0f pairs/s, %.2f× the floor; CPU per pair: Redis %v (%.2f× the floor's), client %v",
				d.perSec, d.perSec/floor.perSec, d.redisCPU.Round(100*time.Nanosecond),
				float64(d.redisCPU)/float64(floor.redisCPU), d.clientCPU.Round(100*time.Nanosecond)),
			clientCmds: -1, redisCmds: d.redisCmds, redisCPU: d.redisCPU,
		})
	}
	return rows, nil
}

// distinctOnly prints the distinct-keys rows of every primitive alone (-primitives distinct).
func distinctOnly(ctx context.Context, addr string, quick bool) error {
	dur := 3 * time.Second
	if quick {
		dur = time.Second
	}
	rows, err := distinctPrims(ctx, addr, dur)
	if err != nil {
		return err
	}
	printPrimRows(addr, "distsync primitives, distinct keys", rows)
	return nil
}

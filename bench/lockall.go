package main

// mutex.All (several names locked together, all or none) against the same names locked one by
// one with nested Locks: uncontended and contended, on a standalone redis-server (every set in
// one script) and, on a Cluster of the run's own, with the names in one slot or in different
// ones (one script per slot, every script sent in one round trip).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/keys"
	"github.com/distsync/distsync/mutex"
)

// target is where a lockall scenario runs: one redis-server, or the nodes of a Cluster.
type target struct {
	label   string
	addrs   []string
	cluster *cluster // nil for a standalone server
}

func (t target) client() (rueidis.Client, error) {
	return rueidis.NewClient(rueidis.ClientOption{InitAddress: t.addrs})
}

// load is the summed load of every node of t (commandstats).
func (t target) load() (redisLoad, error) {
	var out redisLoad
	for _, a := range t.addrs {
		l, err := commandstats(a)
		if err != nil {
			return out, err
		}
		out.cmds += l.cmds
		out.cpu += l.cpu
	}
	return out, nil
}

// idleCPU measures the Redis CPU t uses per second with no client working (a Cluster's bus
// and cron), over d, to take out of the per-acquisition figures of a Cluster.
func (t target) idleCPU(d time.Duration) (float64, error) {
	before, err := t.load()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	time.Sleep(d)
	after, err := t.load()
	if err != nil {
		return 0, err
	}
	return float64(after.cpu-before.cpu) / time.Since(t0).Seconds(), nil
}

// openPodsOn is openPods on t: n handles, each with its own counting client.
func openPodsOn(t target, n int) ([]pod, func(), error) {
	var ps []pod
	closeAll := func() {
		for _, p := range ps {
			_ = p.h.Close(context.Background())
			p.c.Close()
		}
	}
	for range n {
		raw, err := t.client()
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		c := count(raw)
		h, err := distsync.New(c, distsync.WithKeyPrefix(keyPrefix), distsync.WithLeaseTTL(leaseTTL))
		if err != nil {
			raw.Close()
			closeAll()
			return nil, nil, err
		}
		ps = append(ps, pod{c, h})
	}
	return ps, closeAll, nil
}

// slotOf is the Cluster hash slot of the mutex name's keys.
func slotOf(name string) int { return keys.Slot("{" + keys.Escape(name) + "}") }

// namesWithSlots returns n names, starting with base, such that name i's slot is slots[i]; a slot
// of -1 means the slot of the name before it (so that the names share one slot).
func namesWithSlots(base string, slots []int) []string {
	var out []string
	for i, want := range slots {
		if want < 0 {
			want = slotOf(out[i-1])
		}
		for j := 0; ; j++ {
			name := base + ":" + strconv.Itoa(i) + ":" + strconv.Itoa(j)
			if slotOf(name) == want {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

// lockShape is one way to take a set of names: together (mutex.All) or nested Locks in the
// names' sorted order, released in reverse order.
type lockShape struct {
	label string
	names []string
	all   bool
}

// taker locks and unlocks a shape's names on one handle.
type taker struct {
	lock, unlock func(context.Context) error
}

func newTaker(h *distsync.Handle, names []string, all bool) (taker, error) {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	var ms []*mutex.Mutex
	for _, n := range sorted {
		m, err := mutex.New(h, n)
		if err != nil {
			return taker{}, err
		}
		ms = append(ms, m)
	}
	if all {
		a, err := mutex.NewAll(ms...)
		if err != nil {
			return taker{}, err
		}
		return taker{a.Lock, a.Unlock}, nil
	}
	return taker{
		lock: func(ctx context.Context) error {
			for k, m := range ms {
				if err := m.Lock(ctx); err != nil {
					for _, held := range slices.Backward(ms[:k]) {
						_ = held.Unlock(context.WithoutCancel(ctx))
					}
					return err
				}
			}
			return nil
		},
		unlock: func(ctx context.Context) error {
			var errs []error
			for _, m := range slices.Backward(ms) {
				errs = append(errs, m.Unlock(ctx))
			}
			return errors.Join(errs...)
		},
	}, nil
}

// lockAllUncontended measures one goroutine's Lock+Unlock of each shape on t, every shape on
// names of its own, interleaved pair by pair in a new order each round with a PING (the unit);
// then, one shape at a time, client commands, Redis commands and Redis CPU (every node's) per
// pair, and the process's allocations per pair. On a Cluster, the nodes' idle CPU (bus, cron)
// over the same time is taken out.
func lockAllUncontended(ctx context.Context, t target, shapes []lockShape, iters int) ([]primRow, error) {
	ps, closeAll, err := openPodsOn(t, 1)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	pinger, err := t.client()
	if err != nil {
		return nil, err
	}
	defer pinger.Close()
	var ops []pairOp
	for _, s := range shapes {
		tk, err := newTaker(ps[0].h, s.names, s.all)
		if err != nil {
			return nil, err
		}
		ops = append(ops, pairOp{s.label, func(ctx context.Context) error {
			if err := tk.lock(ctx); err != nil {
				return err
			}
			return tk.unlock(ctx)
		}})
	}
	var idle float64
	if t.cluster != nil {
		if idle, err = t.idleCPU(2 * time.Second); err != nil {
			return nil, err
		}
	}
	times, pings, err := interleave(ctx, pinger, ops, iters)
	if err != nil {
		return nil, err
	}
	rtt := pct(pings, 50)
	p50s := make([]time.Duration, len(ops))
	for k := range ops {
		p50s[k] = pct(times[k], 50)
	}
	var rows []primRow
	for k, o := range ops {
		n := iters / 2
		before, err := t.load()
		if err != nil {
			return nil, err
		}
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		c0 := ps[0].c.Total()
		t0 := time.Now()
		for range n {
			if err := o.run(ctx); err != nil {
				return nil, fmt.Errorf("%s: %w", o.name, err)
			}
		}
		took := time.Since(t0)
		c1 := ps[0].c.Total()
		runtime.ReadMemStats(&m1)
		after, err := t.load()
		if err != nil {
			return nil, err
		}
		after.cpu -= time.Duration(idle * took.Seconds())
		rc, rcpu := after.per(before, float64(n))
		result := fmt.Sprintf("%v p50 (%v p99)", p50s[k].Round(time.Microsecond), pct(times[k], 99).Round(time.Microsecond))
		// Each All shape is compared with the nested shape of as many names (the next one).
		if shapes[k].all {
			for j := range shapes {
				if !shapes[j].all && len(shapes[j].names) == len(shapes[k].names) {
					result += fmt.Sprintf(", %.2f× nested", float64(p50s[k])/float64(p50s[j]))
					break
				}
			}
		}
		result += fmt.Sprintf("; %.1f allocs, %.0f B per pair", float64(m1.Mallocs-m0.Mallocs)/float64(n), float64(m1.TotalAlloc-m0.TotalAlloc)/float64(n))
		rows = append(rows, primRow{
			scenario:   fmt.Sprintf("%s, uncontended, one goroutine: %s", t.label, o.name),
			result:     result,
			rtt:        fmt.Sprintf("%.1f", float64(p50s[k])/float64(rtt)),
			clientCmds: float64(c1-c0) / float64(n),
			redisCmds:  rc,
			redisCPU:   rcpu,
		})
	}
	rows = append(rows, primRow{scenario: t.label + ", uncontended: PING p50 between the pairs (the RTT unit)", result: rtt.Round(time.Microsecond).String(), clientCmds: -1, redisCmds: -1, redisCPU: -1})
	return rows, nil
}

// lockAllContended runs workers pods (one goroutine each, each its own client and handle: a
// process) that, for dur, each take a random k of names, hold them for hold and release them;
// together with mutex.All, or with nested Locks in the names' sorted order. It reports
// acquisitions of a set per second, the wait (the Lock call to its return) p50 and p99, and
// commands and Redis CPU per acquisition.
func lockAllContended(ctx context.Context, t target, label string, names []string, workers, k int, all bool, hold, dur time.Duration) (primRow, error) {
	ps, closeAll, err := openPodsOn(t, workers)
	if err != nil {
		return primRow{}, err
	}
	defer closeAll()
	// Every worker's takers, one per subset it may draw, made up front (no Redis).
	subsets := combinations(len(names), k)
	takers := make([][]taker, workers)
	for w, p := range ps {
		for _, sub := range subsets {
			var ns []string
			for _, i := range sub {
				ns = append(ns, names[i])
			}
			tk, err := newTaker(p.h, ns, all)
			if err != nil {
				return primRow{}, err
			}
			takers[w] = append(takers[w], tk)
		}
	}
	var idle float64
	if t.cluster != nil {
		if idle, err = t.idleCPU(time.Second); err != nil {
			return primRow{}, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, dur+time.Minute)
	defer cancel()
	before, err := t.load()
	if err != nil {
		return primRow{}, err
	}
	cl0 := clientTotal(ps)
	var (
		mu       sync.Mutex
		waits    []time.Duration
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	start := time.Now()
	until := start.Add(dur)
	for w := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() {
				mu.Lock()
				waits = append(waits, mine...)
				mu.Unlock()
			}()
			for time.Now().Before(until) {
				tk := takers[w][rand.IntN(len(takers[w]))]
				t0 := time.Now()
				if err := tk.lock(ctx); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				mine = append(mine, time.Since(t0))
				if hold > 0 {
					time.Sleep(hold)
				}
				if err := tk.unlock(ctx); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return primRow{}, err
	}
	after, err := t.load()
	if err != nil {
		return primRow{}, err
	}
	after.cpu -= time.Duration(idle * took.Seconds())
	n := float64(len(waits))
	rc, rcpu := after.per(before, n)
	how := "mutex.All"
	if !all {
		how = "nested Locks, sorted order"
	}
	return primRow{
		scenario: fmt.Sprintf("%s, contended: %s, %d processes × 1 goroutine, each takes a random %d of %d names (%s), holds %v, releases",
			t.label, how, workers, k, len(names), label, hold),
		result:     fmt.Sprintf("%.0f sets/s; wait p50 %v / p99 %v", n/took.Seconds(), pct(waits, 50).Round(time.Microsecond), pct(waits, 99).Round(time.Microsecond)),
		clientCmds: float64(clientTotal(ps)-cl0) / n,
		redisCmds:  rc,
		redisCPU:   rcpu,
	}, nil
}

// lockAllDeadlock shows why nested Locks must follow one order: workers processes each take
// a random 2 of names with nested Locks in the order drawn (not sorted), each Lock bounded by
// limit; it reports how many sets could not be had within limit (a cycle of waits, broken
// only by the timeout), against the same with mutex.All.
func lockAllDeadlock(ctx context.Context, t target, names []string, workers int, all bool, limit, dur time.Duration) (primRow, error) {
	ps, closeAll, err := openPodsOn(t, workers)
	if err != nil {
		return primRow{}, err
	}
	defer closeAll()
	ms := make([][]*mutex.Mutex, workers)
	for w, p := range ps {
		for _, n := range names {
			m, err := mutex.New(p.h, n)
			if err != nil {
				return primRow{}, err
			}
			ms[w] = append(ms[w], m)
		}
	}
	var got, stuck atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	until := time.Now().Add(dur)
	for w := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) && ctx.Err() == nil {
				i := rand.IntN(len(names))
				j := (i + 1 + rand.IntN(len(names)-1)) % len(names)
				a, b := ms[w][i], ms[w][j]
				lctx, cancel := context.WithTimeout(ctx, limit)
				var err error
				if all {
					var s *mutex.All
					if s, err = mutex.NewAll(a, b); err == nil {
						if err = s.Lock(lctx); err == nil {
							err = s.Unlock(ctx)
						}
					}
				} else if err = a.Lock(lctx); err == nil {
					if err = b.Lock(lctx); err == nil {
						err = b.Unlock(ctx)
					}
					err = errors.Join(err, a.Unlock(ctx))
				}
				cancel()
				switch {
				case err == nil:
					got.Add(1)
				case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
					stuck.Add(1)
				default:
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return primRow{}, err
	}
	how := "mutex.All"
	if !all {
		how = "nested Locks in the order drawn (not sorted)"
	}
	return primRow{
		scenario: fmt.Sprintf("%s, deadlock: %s, %d processes, each a random 2 of %d names, each Lock bounded by %v, for %v",
			t.label, how, workers, len(names), limit, dur),
		result:     fmt.Sprintf("%d sets taken, %d attempts timed out (waiting in a cycle)", got.Load(), stuck.Load()),
		clientCmds: -1, redisCmds: -1, redisCPU: -1,
	}, nil
}

// combinations returns every k-subset of 0..n-1, in lexicographic order.
func combinations(n, k int) [][]int {
	var out [][]int
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		if len(cur) == k {
			out = append(out, slices.Clone(cur))
			return
		}
		for i := start; i < n; i++ {
			rec(i+1, append(cur, i))
		}
	}
	rec(0, nil)
	return out
}

// lockAll runs every lockall scenario: on the server at addr, then on a Cluster of the run's
// own (skipped, with a row that says why, if it cannot be started), and prints their rows.
func lockAll(ctx context.Context, addr string, quick bool) error {
	iters, dur := 2000, 4*time.Second
	if quick {
		iters, dur = 300, time.Second
	}
	var rows []primRow
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		rows = append(rows, primRow{scenario: what, result: "error: " + err.Error(), clientCmds: -1, redisCmds: -1, redisCPU: -1})
	}
	run := func(what string, f func() ([]primRow, error)) {
		if ctx.Err() != nil {
			return
		}
		fmt.Fprintf(os.Stderr, "lockall: %s…\n", what)
		rs, err := f()
		if err != nil {
			fail(what, err)
			return
		}
		rows = append(rows, rs...)
	}
	one := func(f func() (primRow, error)) func() ([]primRow, error) {
		return func() ([]primRow, error) {
			r, err := f()
			return []primRow{r}, err
		}
	}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	name := func(s string) string { return "lockall:" + stamp + ":" + s }
	nm := func(pre string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, name(pre+strconv.Itoa(i)))
		}
		return out
	}

	// Standalone: every set is one run, so one script.
	sa := target{label: "standalone", addrs: []string{addr}}
	run("standalone, uncontended", func() ([]primRow, error) {
		return lockAllUncontended(ctx, sa, []lockShape{
			{"1 name: mutex Lock + Unlock (reference)", nm("u1-", 1), false},
			{"2 names: nested Locks + Unlocks", nm("u2n-", 2), false},
			{"2 names: mutex.All Lock + Unlock", nm("u2a-", 2), true},
			{"4 names: nested Locks + Unlocks", nm("u4n-", 4), false},
			{"4 names: mutex.All Lock + Unlock", nm("u4a-", 4), true},
		}, iters)
	})
	for _, c := range []struct{ names, k int }{{6, 2}, {8, 4}} {
		for _, hold := range []time.Duration{0, time.Millisecond} {
			for _, all := range []bool{false, true} {
				names := nm(fmt.Sprintf("c%d-%d-%v-%v-", c.names, c.k, hold, all), c.names)
				run(fmt.Sprintf("standalone, contended %d of %d, hold %v, all %v", c.k, c.names, hold, all), one(func() (primRow, error) {
					return lockAllContended(ctx, sa, "one slot", names, 8, c.k, all, hold, dur)
				}))
			}
		}
	}
	for _, all := range []bool{false, true} {
		names := nm(fmt.Sprintf("d-%v-", all), 3)
		run(fmt.Sprintf("standalone, deadlock, all %v", all), one(func() (primRow, error) {
			return lockAllDeadlock(ctx, sa, names, 4, all, 200*time.Millisecond, dur/2)
		}))
	}

	// A Cluster: names in one slot (one script) against names in different slots (one script
	// per slot, every script in one round trip, a node's scripts pipelined on its connection).
	if ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "lockall: starting a 3-master Cluster…\n")
		cl, err := startCluster()
		if err != nil {
			fail("cluster", err)
		} else {
			defer cl.stop()
			ct := target{label: "Cluster of 3 masters", addrs: cl.addrs(), cluster: cl}
			// Slots on different nodes: the first of each node's range, then one more on the first node.
			spread := []int{100, 5500, 11000, 200}
			same := []int{100, -1, -1, -1}
			run("cluster, uncontended", func() ([]primRow, error) {
				return lockAllUncontended(ctx, ct, []lockShape{
					{"1 name: mutex Lock + Unlock (reference)", namesWithSlots(name("k1"), spread[:1]), false},
					{"2 names, 2 slots on 2 nodes: nested Locks + Unlocks", namesWithSlots(name("k2n"), spread[:2]), false},
					{"2 names, 1 slot: mutex.All Lock + Unlock", namesWithSlots(name("k2s"), same[:2]), true},
					{"2 names, 2 slots on 2 nodes: mutex.All Lock + Unlock", namesWithSlots(name("k2d"), spread[:2]), true},
					{"4 names, 4 slots on 3 nodes: nested Locks + Unlocks", namesWithSlots(name("k4n"), spread), false},
					{"4 names, 1 slot: mutex.All Lock + Unlock", namesWithSlots(name("k4s"), same), true},
					{"4 names, 4 slots on 3 nodes: mutex.All Lock + Unlock", namesWithSlots(name("k4d"), spread), true},
				}, iters)
			})
			for _, all := range []bool{false, true} {
				// Six names in six slots, two on each node.
				names := namesWithSlots(name(fmt.Sprintf("kc-%v", all)), []int{100, 200, 5500, 5600, 11000, 11100})
				run(fmt.Sprintf("cluster, contended, all %v", all), one(func() (primRow, error) {
					return lockAllContended(ctx, ct, "6 slots on 3 nodes", names, 8, 2, all, time.Millisecond, dur)
				}))
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	printPrimRows(addr, "Several names at once: mutex.All against nested Locks", rows)
	fmt.Printf("\nNested Locks take the names in sorted order and release them in reverse order, one round trip each; mutex.All takes each slot's names in one script, all the scripts in one round trip, and releases every name at once (one release script per name, pipelined). Allocations are the process's (runtime.MemStats, its clients' goroutines included) over the pairs that also count the commands. Redis CPU is every node's; on the Cluster less the nodes' idle CPU (bus, cron) over the same time, measured before.\n")
	return nil
}

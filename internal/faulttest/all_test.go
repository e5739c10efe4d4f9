package faulttest

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distsync/distsync/internal/keys"
	"github.com/distsync/distsync/internal/redistest"
)

// Sets of mutexes locked together (mutex.All) by several processes, with no fault: issue 25's
// dining philosophers and random subsets, on miniredis (served on TCP by the test process),
// a redis-server and a 3-master Cluster. The fault suite runs All through the faults too (the
// primitive "all" of faults_test.go).

// allRun is how long each of these runs: $FAULTTEST_ALL_RUN (a Go duration) if set, else def
// (5 s with -short).
func allRun(t *testing.T, def time.Duration) time.Duration {
	if v := os.Getenv("FAULTTEST_ALL_RUN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("FAULTTEST_ALL_RUN=%q: not a positive duration", v)
		}
		return d
	}
	if testing.Short() {
		return 5 * time.Second
	}
	return def
}

// progressBound is the longest a process may go without an acquisition in these runs: far
// above what a loaded 2-core machine costs (a hold is at most 20 ms, a process waits behind
// at most a few holds of its neighbours), far below the run, so a deadlock (every process
// waiting for ever) fails it.
const progressBound = 10 * time.Second

// allBackends are the Redis each run goes on: "" is a redis-server of the run's own.
var allBackends = []string{redistest.Mini, "", redistest.ClusterB}

func backendName(b string) string {
	if b == "" {
		return redistest.Standalone
	}
	return b
}

// spreadNames returns n names whose keys fall in the Cluster's three masters' slot ranges in
// turn (redis-cli --cluster create gives each master a third of the slots), so that names next
// to each other in the list are on different masters, and in different slots anywhere.
func spreadNames(stem string, n int) []string {
	var out []string
	for i := 0; len(out) < n && i < 100000; i++ {
		name := stem + strconv.Itoa(i)
		if keys.Slot("{"+name+"}")*3/16384 == len(out)%3 {
			out = append(out, name)
		}
	}
	return out
}

// TestDiningPhilosophers: five processes, five names in a ring; each locks its two neighbours'
// names together, over and over, giving them to NewAll in a random order each time (so that
// taking them in the order given would deadlock), holding 0-20 ms. Asserted: no process goes
// progressBound without an acquisition (no deadlock, no starvation); no two holders of a name
// at once (the recorded intervals of each name are disjoint, and each name's fenced store
// rejects no write of a holder that was not told of a loss); a process queued for a name is
// overtaken there at most once by the other process that shares it (see checkNameOrder).
func TestDiningPhilosophers(t *testing.T) {
	// Not parallel with the other tests of the package: its dozens of worker processes
	// would starve the fault scenarios' timing (a holder to aim at) on 2 cores.
	for _, be := range allBackends {
		t.Run(backendName(be), func(t *testing.T) {
			t.Parallel()
			ring := spreadNames("p", 5)
			cfg := allConfig("dining", be)
			for i := range ring {
				cfg.workers = append(cfg.workers, workerRole{names: []string{ring[i], ring[(i+1)%len(ring)]}})
			}
			cfg.setMin, cfg.setMax = 2, 2
			// Every call starts on a multiple of slot, all at once: the moment a deadlock
			// needs (each holding one name and waiting for the other) comes every slot.
			cfg.slot = 100 * time.Millisecond
			runAll(t, cfg, allRun(t, 30*time.Second))
		})
	}
}

// TestRandomSubsets: eight processes lock random subsets (2 to 4) of ten names, in random
// order, and one acquisition in three is a single Mutex.Lock of one of them, which waits in
// the same queues. Asserted as for the philosophers.
func TestRandomSubsets(t *testing.T) {
	// Not parallel with the other tests of the package: its dozens of worker processes
	// would starve the fault scenarios' timing (a holder to aim at) on 2 cores.
	for _, be := range allBackends {
		t.Run(backendName(be), func(t *testing.T) {
			t.Parallel()
			cfg := allConfig("subsets", be)
			cfg.names = spreadNames("r", 10)
			cfg.setMin, cfg.setMax, cfg.singleEvery = 2, 4, 3
			cfg.workers = make([]workerRole, 8)
			runAll(t, cfg, allRun(t, 20*time.Second))
		})
	}
}

func allConfig(fault, be string) config {
	return config{prim: pAll, fault: fault + "-" + backendName(be), backend: be, ttl: 5 * time.Second, window: 1500 * time.Millisecond,
		hold: 20 * time.Millisecond, gap: 2 * time.Millisecond, jitter: true, bound: 2 * happyBound}
}

// The stall bound (nothing held anywhere while a process waits, nobody acquiring) is twice
// the fault suite's: miniredis serves eight processes from the test binary, under -race.

// runAll runs cfg for d, then checks the history: the checks of every scenario (finish: per
// name exclusion and tokens, liveness, keys, fenced store), plus progress, the fenced store's
// rejections, and the order in each name's queue.
func runAll(t *testing.T, cfg config, d time.Duration) {
	r := start(t, cfg)
	r.sleep(d)
	r.after(func(h *history) []violation {
		vs := checkProgress(h, r.t0, progressBound)
		vs = append(vs, checkDisjoint(h)...)
		vs = append(vs, r.checkRejections(h)...)
		ov, most := checkNameOrder(h)
		vs = append(vs, ov...)
		r.figure("most acquisitions of a name by one other process while a call was queued for it (bound 1)", most)
		r.figure("acquisitions per process", perProcess(h))
		_, whole := checkOrder(r.model(), h)
		r.figure("most acquisitions by one other process during one whole call (not bounded by the protocol)",
			fmt.Sprintf("%d (%s)", whole.most, whole.mostWho))
		return vs
	})
	r.finish()
}

func perProcess(h *history) string {
	n := map[string]int{}
	for _, x := range h.holds {
		n[x.w]++
	}
	return counts(n)
}

// counts lists n as "w1:3 w2:5", by worker.
func counts(n map[string]int) string {
	var ws []string
	for w := range n {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	var b strings.Builder
	for _, w := range ws {
		fmt.Fprintf(&b, "%s:%d ", w, n[w])
	}
	return strings.TrimSpace(b.String())
}

// checkProgress: every worker acquires within bound of the run's start, of each of its
// acquisitions, and of the end of the run (SIGTERM), not counting the time the machine did
// not run the processes.
func checkProgress(h *history, t0 int64, bound time.Duration) []violation {
	byW := map[string][]int64{}
	for _, x := range h.holds {
		byW[x.w] = append(byW[x.w], x.start)
	}
	ws := map[string]bool{}
	for _, e := range h.evs {
		if e.Ev == evStart {
			ws[e.W] = true
		}
	}
	var out []violation
	for w := range ws {
		ts := append([]int64{t0}, byW[w]...)
		ts = append(ts, h.f.term)
		for i := 1; i < len(ts); i++ {
			gap := ts[i] - ts[i-1] - h.f.hiccupTime(ts[i-1], ts[i])
			if gap > int64(bound) {
				out = append(out, violation{at: ts[i-1], from: ts[i-1], to: ts[i-1] + int64(time.Second),
					msg: fmt.Sprintf("%s made no acquisition for %v from %s (bound %v): deadlock or starvation",
						w, dur(gap).Round(time.Millisecond), rel(h, ts[i-1]), bound)})
				break
			}
		}
	}
	return out
}

// checkRejections: with no fault, a fenced store refuses a write only if its holder was told
// of a loss while in its critical section: a write refused otherwise means that a newer token of the name wrote while the
// holder still held it (two holders at once, or tokens out of order).
func (r *run) checkRejections(h *history) []violation {
	var out []violation
	for _, ns := range r.storeNSs() {
		_, rej := readStore(r.t, r.store, ns)
		for _, w := range rej {
			x := h.byID[w.Hold]
			if x != nil && x.told() && x.lostAt <= x.exit {
				continue // told inside its critical section: the write came after
			}
			if len(out) < 5 {
				at := h.f.t0
				var ws []string
				if x != nil {
					at, ws = x.start, []string{x.w}
				}
				out = append(out, violation{at: at, from: at, to: at + int64(100*time.Millisecond), workers: ws,
					msg: fmt.Sprintf("store %s refused the %s write of %s (token %d, largest accepted then %d), a holder never told of a loss",
						ns, w.Phase, w.Hold, w.Tok, w.Max)})
			}
		}
	}
	return out
}

// checkDisjoint: the recorded intervals of each name (from Lock's return to just before
// Unlock) are disjoint, but where the earlier holder was told of its loss before the later
// one began and had the smaller token. Stricter than checkExclusion, which accepts a loss
// told at any time (in the faults, a holder may learn it only at its release): with no fault,
// a holder told only after it left has shared the name unknowingly.
func checkDisjoint(h *history) []violation {
	var out []violation
	for _, name := range h.names() {
		p := h.project(name)
		for i, a := range p.holds {
			for _, b := range p.holds[i+1:] {
				if b.start >= a.exit {
					continue
				}
				if a.told() && a.lostAt <= b.start && a.tok < b.tok {
					continue
				}
				if len(out) < 5 {
					out = append(out, violation{at: b.start, from: a.start, to: min(a.exit, b.exit), workers: []string{a.w, b.w},
						msg: fmt.Sprintf("two holders of %q at once: %v held it %s..%s, %v from %s", name, a, rel(h, a.start), rel(h, a.exit), b, rel(h, b.start))})
				}
			}
		}
	}
	return out
}

// checkNameOrder: a call queued in a name's queue (its observer's EventQueued, after Redis
// queued it) is overtaken there at most once by each other process: the mutex's queue serves
// processes in the order of their first failed attempt, one hold each, the waiters of an All
// and of a Mutex alike, and a release hands the name to the head inside Redis, so the name is
// never free while the call waits for it. The one acquisition allowed is that of a process
// ahead in the queue (or holding the name already, in a set still being taken); after it, the
// process queues again behind the call, and once the call has the name nobody else can take
// it until the call has returned and unlocked. It returns the violations and the most
// acquisitions seen.
func checkNameOrder(h *history) ([]violation, int) {
	var out []violation
	most := 0
	for _, w := range h.waits {
		end := min(w.end, h.f.term, h.f.end)
		for name, q := range w.queuedAt {
			counts := map[string][]*hold{}
			for _, x := range h.holds {
				if x.w == w.w || x.start <= q || x.start >= end || !hasName(x, name) {
					continue
				}
				counts[x.w] = append(counts[x.w], x)
			}
			for other, xs := range counts {
				most = max(most, len(xs))
				if len(xs) <= 1 || len(out) >= 5 {
					continue
				}
				var at []string
				for _, x := range xs {
					at = append(at, fmt.Sprintf("%s at %s", x.id, rel(h, x.start)))
				}
				out = append(out, violation{at: xs[1].start, from: w.start, to: end, workers: []string{w.w, other},
					msg: fmt.Sprintf("overtaken: %s's call %s was queued for %q at %s and %s took %q %d times before the call ended at %s (%s)",
						w.w, w.id, name, rel(h, q), other, name, len(xs), rel(h, end), strings.Join(at, ", "))})
			}
		}
	}
	return out, most
}

func hasName(x *hold, name string) bool {
	for _, n := range x.names {
		if n == name {
			return true
		}
	}
	return false
}

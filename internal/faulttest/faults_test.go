package faulttest

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// Every primitive goes through every fault that applies to it. Each scenario is a parallel
// subtest with its own lock redis-server and worker processes; see TestMain for how many run
// at once.

// allPrims are the primitives that go through every fault of one Redis. The quorum mutex has
// faults of its own (TestPrimaryFaults) besides the holder's.
var allPrims = []string{pMutex, pReentrant, pRWMutex, pFair, pSemaphore, pOnce, pOnceOnce, pOnceValue, pOnceValues,
	pElection, pWaitGroup, pAll}

// withQuorum is allPrims and the quorum mutex, for the faults of a worker (or of the
// connections to its first primary).
var withQuorum = append(allPrims[:len(allPrims):len(allPrims)], pQuorum)

// base returns a scenario of prim with n workers, or, if n is 0, with 3 (4 for a rwmutex or
// a semaphore, whose workers differ). A rwmutex gets writers and readers alternately, a
// semaphore of size 3 weights 2 and 1 alternately. The hand-off window and the waiter lease
// are short, near the lease: a holder killed or stopped before it confirmed a hand-off keeps
// the claim that long. Scenarios about lost wake-ups make all three long.
//
// The once primitives that keep a success (once.Once, OnceValue, OnceValues) get a resetter
// besides (a Reset every second), and once.Once's even workers call a function of OnceFunc.
// A waitgroup always has three members, which join at the start of every 1.5 s slot and are
// done 800 ms later (so that its rounds end), and two waiters.
func base(prim, fault string, n int) config {
	c := config{prim: prim, fault: fault, ttl: time.Second, window: 1500 * time.Millisecond, wlease: 1500 * time.Millisecond,
		hold: 500 * time.Millisecond, gap: 20 * time.Millisecond, size: 3, bound: happyBound}
	if n == 0 {
		n = 3
		if prim == pRWMutex || prim == pSemaphore {
			n = 4
		}
	}
	switch {
	case prim == pWaitGroup:
		c.slot, c.hold = 1500*time.Millisecond, 800*time.Millisecond
		c.workers = []workerRole{{role: "m"}, {role: "m"}, {role: "m"}, {role: "w"}, {role: "w"}}
		return c
	case resettable(prim):
		c.gap, c.resetEvery = 100*time.Millisecond, time.Second
	}
	for i := range n {
		var wr workerRole
		switch {
		case prim == pRWMutex && i%2 == 0:
			wr.role = "w"
		case prim == pRWMutex:
			wr.role = "r"
		case prim == pSemaphore && i%2 == 0:
			wr.n = 2
		case prim == pSemaphore:
			wr.n = 1
		case prim == pOnceOnce && i%2 == 1:
			wr.role = "func"
		}
		c.workers = append(c.workers, wr)
	}
	if resettable(prim) {
		c.workers = append(c.workers, workerRole{role: "reset"})
	}
	return c
}

// into is how far into a hold a fault on Redis comes: early, but, for a waitgroup, late enough
// that the Waits its members began then ran their check before it (the checker then knows
// their round).
func into(prim string) time.Duration {
	if prim == pWaitGroup {
		return 2 * wgAnchor
	}
	return 100 * time.Millisecond
}

// withTrigger adds a worker that starts its calls only when the test triggers it, during a
// fault: a reader of a rwmutex, a 2-permit request of a semaphore, a waiter of a waitgroup, a
// candidate (and observer) of an election, a caller otherwise.
func withTrigger(c config) config {
	wr := workerRole{trigger: true}
	switch c.prim {
	case pRWMutex:
		wr.role = "r"
	case pSemaphore:
		wr.n = 2
	case pWaitGroup:
		wr.role = "w"
	}
	c.workers = append(c.workers, wr)
	return c
}

// heavy picks the holder a fault is aimed at: a writer of a rwmutex, a 2-permit holder of a
// semaphore (whose permits the others need), anyone otherwise.
func heavy(prim string) func(Event) bool {
	switch prim {
	case pRWMutex:
		return func(e Event) bool { return e.Role == "w" }
	case pSemaphore:
		return func(e Event) bool { return e.N == 2 }
	}
	return nil
}

func forEachPrim(t *testing.T, prims []string, f func(t *testing.T, prim string)) {
	t.Parallel()
	for _, prim := range prims {
		t.Run(prim, func(t *testing.T) {
			t.Parallel()
			f(t, prim)
		})
	}
}

// acquiredBy returns the first acquisition (fn-enter for once) after t by a worker other
// than not.
func acquiredBy(evs []Event, t int64, not string) (Event, bool) {
	return firstAfter(evs, t, func(e Event) bool { return isAcquire(e) && e.W != not })
}

// TestHolderKilled: a holder is SIGKILLed in its critical section. Its claim is free again
// within its lease (or, if it died before confirming a hand-off, the hand-off's grant), and a
// waiter gets it within that plus the liveness bound.
func TestHolderKilled(t *testing.T) {
	forEachPrim(t, withQuorum, func(t *testing.T, prim string) {
		cfg := withTrigger(base(prim, "holder-killed", 0))
		r := start(t, cfg)
		victim, _ := r.waitHolder(10*time.Second, 150*time.Millisecond, 1, heavy(prim))
		k := r.kill(victim, max(cfg.ttl, cfg.grant()))
		r.trigger() // a waiter that starts while the dead holder's claim lives
		evs := r.waitFor("an acquisition after the kill", cfg.ttl+10*time.Second, func(evs []Event) bool {
			_, ok := acquiredBy(evs, k, victim.id)
			return ok
		})
		next, _ := acquiredBy(evs, k, victim.id)
		r.figure("recovery after holder SIGKILL (kill -> next acquire by another)", dur(next.T-k).Round(time.Millisecond))
		r.waitServed(10 * time.Second)
		r.sleep(500 * time.Millisecond)
		r.after(func(h *history) []violation {
			lapse := max(cfg.ttl, cfg.grant())
			if next.T-h.f.hiccupTime(k, next.T) > k+int64(lapse+cfg.bound) {
				return []violation{{at: k, from: k - int64(200*time.Millisecond), to: next.T + 1,
					msg: fmt.Sprintf("after %s was killed, the next acquisition came %v later, above max(lease, grant) %v + bound %v (machine hiccups in between: %v)",
						victim.id, dur(next.T-k), lapse, cfg.bound, dur(h.f.hiccupTime(k, next.T)))}}
			}
			return nil
		})
		r.finish()
	})
}

// TestHolderStopped: a holder is SIGSTOPped past its lease and SIGCONTed. Another holder gets
// in meanwhile; the stopped one learns of the loss at once on resuming (Lease.Err when it
// leaves the critical section), and the store rejects its late write.
func TestHolderStopped(t *testing.T) {
	forEachPrim(t, withQuorum, func(t *testing.T, prim string) {
		cfg := withTrigger(base(prim, "holder-stopped", 0))
		cfg.hold = 1200 * time.Millisecond
		const pause = 2500 * time.Millisecond
		r := start(t, cfg)
		victim, held := r.waitHolder(10*time.Second, 150*time.Millisecond, 1, heavy(prim))
		s := r.stop(victim)
		r.sleep(pause / 2)
		r.trigger() // a waiter that starts while the holder is stopped
		r.sleep(pause / 2)
		c := r.cont(victim)
		isExit := func(e Event) bool { return (e.Ev == evExit || e.Ev == evFnExit) && e.Hold == held.Hold }
		evs := r.waitFor("the stopped holder to leave its critical section", 10*time.Second, func(evs []Event) bool {
			_, ok := firstAfter(evs, 0, isExit)
			return ok
		})
		if exit, _ := firstAfter(evs, 0, isExit); exit.T < s {
			t.Fatalf("%s left its critical section at %s, before it was stopped at %s: the scenario did not happen",
				victim.id, ms(exit.T-r.t0), ms(s-r.t0))
		}
		exit, _ := firstAfter(evs, 0, isExit)
		r.waitServed(10 * time.Second)
		r.sleep(300 * time.Millisecond)
		fenced := exclusive(prim) || prim == pRWMutex
		rejected := 0
		if fenced {
			rejected = r.rejectedLate(victim.id)
			r.figure("late writes of the stopped holder rejected", rejected)
		}
		r.after(func(h *history) []violation {
			var vs []violation
			x := h.byID[held.Hold]
			if x == nil {
				return []violation{{at: s, from: s, to: c, msg: "the stopped hold is not in the history"}}
			}
			if x.lostAt != 0 {
				r.figure("stopped holder told of the loss (SIGCONT -> told)", dur(x.lostAt-c).Round(time.Millisecond))
			}
			// Another holder got in while it was stopped (for a semaphore: one that needed
			// its permits).
			in := false
			for _, y := range h.holds {
				if y.w == victim.id || y.start <= s || y.start >= c {
					continue
				}
				if prim != pSemaphore {
					in = true
					break
				}
				used := x.n
				for _, z := range h.holds {
					if z != x && !z.told() && z.start <= y.start && y.start < z.exit {
						used += z.n
					}
				}
				in = in || used > cfg.size
			}
			// Whether someone could take it: the claim lapses within max(lease, grant), and the
			// time the machine did not run the processes does not count.
			frozen := dur(h.f.hiccupTime(s, c))
			inconclusive := !in && dur(c-s)-frozen < max(cfg.ttl, cfg.grant())+500*time.Millisecond
			switch {
			case inconclusive:
				t.Logf("inconclusive: the machine did not run the processes for %v of the %v %s was stopped", frozen, dur(c-s), victim.id)
			case !in:
				vs = append(vs, violation{at: s, from: s, to: c, workers: []string{victim.id},
					msg: fmt.Sprintf("nobody took %s's claim in the %v it was stopped (lease %v): the scenario did not happen", victim.id, pause, cfg.ttl)})
			case fenced && rejected == 0:
				vs = append(vs, violation{at: exit.T, from: c, to: exit.T + int64(100*time.Millisecond), workers: []string{victim.id},
					msg: fmt.Sprintf("the fenced store rejected no late write of %s, stopped past its lease while another holder wrote", victim.id)})
			}
			if !exit.Lost {
				vs = append(vs, violation{at: exit.T, from: c - int64(100*time.Millisecond), to: exit.T + int64(100*time.Millisecond),
					workers: []string{victim.id},
					msg: fmt.Sprintf("%s was stopped %v past its lease %v and, on resuming, left its critical section without being told of the loss (Lease.Err was %q)",
						victim.id, pause, cfg.ttl, exit.Err)})
			}
			return vs
		})
		r.finish()
	})
}

// TestClientKill: CLIENT KILL TYPE pubsub and TYPE normal while waiters wait. With a long
// lease, a lost wake-up would be a stall of seconds: none may exceed the bound.
func TestClientKill(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"pubsub", "normal"} {
		t.Run(typ, func(t *testing.T) {
			forEachPrim(t, withQuorum, func(t *testing.T, prim string) {
				cfg := base(prim, "client-kill-"+typ, 4)
				cfg.ttl, cfg.window, cfg.wlease = 5*time.Second, 5*time.Second, 5*time.Second
				// Short holds, so that a kill often meets one. Not for a waitgroup, whose members
				// keep their slots (so that its Waits' rounds are known), nor for a once that
				// keeps its success: it runs fn once after each Reset (a second apart), and a
				// hold as short as 200 ms is over before a loaded machine's events of it reach
				// this process 50 ms into it.
				if prim != pWaitGroup && !resettable(prim) {
					cfg.hold, cfg.gap = 200*time.Millisecond, 10*time.Millisecond
				}
				cfg = withTrigger(cfg)
				r := start(t, cfg)
				killed := int64(0)
				for i := range 3 {
					r.waitHolder(20*time.Second, 50*time.Millisecond, 1, nil)
					if i == 0 {
						r.trigger() // a waiter whose first commands race with the kill
					}
					killed += r.clientKill(typ)
					r.sleep(600 * time.Millisecond)
				}
				r.waitServed(10 * time.Second)
				r.figure("connections killed", killed)
				if killed == 0 {
					t.Errorf("CLIENT KILL TYPE %s killed no connection: the scenario did not happen", typ)
				}
				r.sleep(500 * time.Millisecond)
				r.finish()
			})
		})
	}
}

// TestRedisRestarted: Redis is killed and restarted empty on the same port while a holder
// holds and others wait. Holders are told of the loss, waiters recover, and tokens after
// the restart are larger than every token before it.
func TestRedisRestarted(t *testing.T) {
	forEachPrim(t, allPrims, func(t *testing.T, prim string) {
		cfg := withTrigger(base(prim, "redis-restarted", 0))
		cfg.ttl, cfg.hold = 1500*time.Millisecond, 600*time.Millisecond
		if prim == pWaitGroup {
			cfg.hold = 800 * time.Millisecond
		}
		r := start(t, cfg)
		r.waitHolder(10*time.Second, into(prim), 1, nil)
		// A waiter that starts while Redis is down.
		begin, done := r.restartRedisWith(func() { r.trigger(); r.sleep(300 * time.Millisecond) })
		r.waitFor("an acquisition after the restart", 10*time.Second, func(evs []Event) bool {
			_, ok := firstAfter(evs, done, isAcquire)
			return ok
		})
		evs := r.events()
		next, _ := firstAfter(evs, done, isAcquire)
		r.figure("restart (SIGKILL -> answering)", dur(done-begin).Round(time.Millisecond))
		r.figure("first acquisition after the restart (answering -> acquired)", dur(next.T-done).Round(time.Millisecond))
		r.waitServed(10 * time.Second)
		r.sleep(1500 * time.Millisecond)
		r.after(func(h *history) []violation {
			var vs []violation
			// A hold live when Redis restarted empty is lost. Its release must not succeed,
			// and a holder still inside a renewal period after Redis answers again must have
			// been told. (One that left while Redis was down could not know: its release
			// reports an error, not the loss.)
			inside := done + int64(cfg.ttl/3+500*time.Millisecond)
			for _, x := range h.holds {
				if x.start >= begin || x.exit <= begin || x.killed || onceKind(prim) {
					continue // once: checkOnce requires a run overtaken after the restart to be told
				}
				if x.released != 0 && x.relErr == "" {
					vs = append(vs, violation{at: x.released, from: x.start, to: x.released + 1, workers: []string{x.w},
						msg: fmt.Sprintf("hold %v was live when Redis restarted empty, and its release succeeded", x)})
				}
				switch {
				case x.told():
					r.figure("holder told of the restart (restart answering -> told)", dur(x.lostAt-done).Round(time.Millisecond))
				case x.exit > inside:
					vs = append(vs, violation{at: begin, from: x.start, to: x.exit + int64(200*time.Millisecond), workers: []string{x.w},
						msg: fmt.Sprintf("hold %v was live when Redis restarted empty, its holder stayed inside until %s, and it was never told of the loss",
							x, rel(h, x.exit))})
				}
			}
			if !exclusive(prim) && prim != pRWMutex {
				return vs
			}
			for _, p := range perName(prim, h) { // all: each name's tokens
				var before *hold
				for _, x := range p.holds {
					if x.writer(prim) && x.start < begin && (before == nil || x.tok > before.tok) {
						before = x
					}
				}
				for _, x := range p.holds {
					if x.dead && prim == pAll {
						continue // see checkTokens: a member may have been taken before the restart
					}
					if before != nil && x.writer(prim) && x.start > done && x.tok <= before.tok {
						vs = append(vs, violation{at: x.start, from: before.start, to: x.start + 1, workers: []string{before.w, x.w},
							msg: fmt.Sprintf("token after the restart %v is not above the largest before it %v", x, before)})
					}
				}
			}
			return vs
		})
		r.finish()
	})
}

// TestRedisPaused: Redis is SIGSTOPped for longer than the lease, then resumed. Every holder
// in its critical section is told of the loss at its lease's local deadline (at most a lease
// after the pause began), not when Redis comes back.
func TestRedisPaused(t *testing.T) {
	forEachPrim(t, allPrims, func(t *testing.T, prim string) {
		cfg := withTrigger(base(prim, "redis-paused", 0))
		cfg.hold = 2 * time.Second // longer than the lease: a holder is still inside at its deadline
		if prim == pWaitGroup {
			cfg.slot = 3 * time.Second
		}
		const pause = 3 * time.Second
		const margin = time.Second
		r := start(t, cfg)
		r.waitHolder(10*time.Second, into(prim), 1, nil)
		p := r.pauseRedis()
		r.sleep(pause / 3)
		r.trigger() // a waiter that starts while Redis is paused
		r.sleep(pause - pause/3)
		res := r.resumeRedis()
		r.waitFor("an acquisition after Redis resumed", 10*time.Second, func(evs []Event) bool {
			_, ok := firstAfter(evs, res, isAcquire)
			return ok
		})
		r.waitServed(10 * time.Second)
		r.sleep(time.Second)
		r.after(func(h *history) []violation {
			var vs []violation
			var delays []time.Duration
			for _, x := range h.holds {
				// Held at the pause, and its hold time would have kept it inside past its
				// deadline: it must be told, from the deadline.
				if x.start >= p || x.exit <= p || x.start+int64(cfg.hold) < p+int64(cfg.ttl) || x.killed {
					continue
				}
				if !x.told() {
					vs = append(vs, violation{at: p, from: x.start, to: res + int64(200*time.Millisecond), workers: []string{x.w},
						msg: fmt.Sprintf("hold %v was in its critical section when Redis paused for %v (lease %v) and was never told of the loss", x, pause, cfg.ttl)})
					continue
				}
				d := dur(x.lostAt - p)
				delays = append(delays, d)
				if d-dur(h.f.hiccupTime(p, x.lostAt)) > cfg.ttl+margin || x.lostAt >= res {
					vs = append(vs, violation{at: x.lostAt, from: p, to: x.lostAt + 1, workers: []string{x.w},
						msg: fmt.Sprintf("hold %v was told of the loss %v after Redis paused (resumed after %v): its lease %v had a local deadline well before",
							x, d.Round(time.Millisecond), dur(res-p).Round(time.Millisecond), cfg.ttl)})
				}
			}
			sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
			if len(delays) == 0 {
				vs = append(vs, violation{at: p, from: p - int64(time.Second), to: res,
					msg: "no holder was inside its critical section at the pause: the scenario did not happen"})
			} else {
				r.figure("loss signal after Redis paused (pause -> told), per holder",
					fmt.Sprint(roundAll(delays), " local deadline <= ", cfg.ttl-cfg.ttl/100-2*time.Millisecond, " after the last renewal"))
			}
			return vs
		})
		r.finish()
	})
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// TestWaiterKilled: the waiter next in line is SIGKILLed while queued, just before the lock
// is released. The others are held up no longer than the documented bound: one hand-off
// window for mutex and reentrant, one waiter lease for fair and semaphore.
func TestWaiterKilled(t *testing.T) {
	forEachPrim(t, []string{pMutex, pReentrant, pFair, pSemaphore, pElection}, func(t *testing.T, prim string) {
		cfg := base(prim, "waiter-killed", 4)
		cfg.ttl, cfg.window, cfg.wlease = 3*time.Second, time.Second, 1500*time.Millisecond
		cfg.hold = 1500 * time.Millisecond
		documented := cfg.window
		if prim != pMutex && prim != pReentrant {
			documented = cfg.wlease
		}
		cfg.bound = documented + happyBound
		if prim == pSemaphore {
			cfg.workers = []workerRole{{n: 2}, {n: 2}, {n: 2}, {n: 1}}
		}
		r := start(t, cfg)
		// The holder is half-way through; the head of the queue is the waiter that has
		// waited longest.
		r.waitHolder(10*time.Second, 700*time.Millisecond, 2, nil)
		s := stateOf(r.events())
		var head Event
		for _, e := range s.waiting {
			if head.W == "" || e.T < head.T {
				head = e
			}
		}
		k := r.kill(r.proc(head.W), documented)
		r.waitFor("three acquisitions after the kill", 20*time.Second, func(evs []Event) bool {
			n := 0
			for _, e := range evs {
				if e.T > k && isAcquire(e) {
					n++
				}
			}
			return n >= 3
		})
		r.sleep(500 * time.Millisecond)
		r.after(func(h *history) []violation {
			// The first release after the kill, and how long the next acquisition took.
			var rel int64
			for _, x := range h.holds {
				if x.released > k && (rel == 0 || x.released < rel) {
					rel = x.released
				}
			}
			if rel != 0 {
				if e, ok := firstAfter(h.evs, rel, isAcquire); ok {
					r.figure(fmt.Sprintf("stall after the release that followed the kill of the head waiter (documented bound %v)", documented),
						dur(e.T-rel).Round(time.Millisecond))
				}
			}
			return nil
		})
		r.finish()
	})
}

// TestRandomCancellation: every acquire and release gets a random deadline of 0-20ms (one in
// ten already cancelled), in a loop, for a few seconds. Nothing may be held by nobody, or
// granted to nobody, for longer than the bound (the library's fallbacks are set far above
// it), and the lock is free at once after all stop.
func TestRandomCancellation(t *testing.T) {
	forEachPrim(t, withQuorum, func(t *testing.T, prim string) {
		cfg := base(prim, "random-cancel", 4)
		cfg.ttl, cfg.window, cfg.wlease = 5*time.Second, 5*time.Second, 5*time.Second
		cfg.random = true
		r := start(t, cfg)
		r.sleep(3 * time.Second)
		r.finish()
	})
}

// TestPrimaryFaults: a mutex on a quorum of three independent primaries (Redlock), one of which
// fails while the lock is held and waited for: SIGKILLed and left down for 3 s (then started
// again, empty), SIGSTOPped for 3 s, or restarted empty at once. The lock goes on with the
// other two: exclusion up to told losses, tokens increasing, fenced writes, nobody stranded,
// and a waiter that starts while the primary is down is served.
func TestPrimaryFaults(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"killed", "stopped", "restarted"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			cfg := withTrigger(base(pQuorum, "primary-"+fault, 0))
			r := start(t, cfg)
			r.waitHolder(10*time.Second, 100*time.Millisecond, 1, nil)
			var down, up int64
			switch fault {
			case "killed":
				down = r.primaryDown(0, "kill")
				r.sleep(time.Second)
				r.trigger()
				r.sleep(2 * time.Second)
				up = r.primaryUp(0, "start")
			case "stopped":
				down = r.primaryDown(0, "stop")
				r.sleep(time.Second)
				r.trigger()
				r.sleep(2 * time.Second)
				up = r.primaryUp(0, "cont")
			case "restarted":
				down = r.primaryDown(0, "kill")
				r.trigger()
				up = r.primaryUp(0, "start")
			}
			r.waitServed(10 * time.Second)
			r.sleep(1500 * time.Millisecond)
			r.after(func(h *history) []violation {
				n := 0
				for _, x := range h.holds {
					if x.start > down && x.start < up+int64(time.Second) {
						n++
					}
				}
				r.figure("acquisitions while the primary was down (and a second after)", n)
				if n == 0 && fault != "restarted" {
					return []violation{{at: down, from: down - int64(time.Second), to: up + int64(time.Second),
						msg: fmt.Sprintf("nobody acquired the quorum lock while primary p1 was %s (%v): two primaries of three are a majority",
							fault, dur(up-down).Round(time.Millisecond))}}
				}
				return nil
			})
			r.finish()
		})
	}
}

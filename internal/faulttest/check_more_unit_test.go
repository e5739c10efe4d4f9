package faulttest

import (
	"testing"
	"time"
)

// Hand-made histories for the checks of check_more_test.go. Times are in milliseconds.

func val(v string) func(*Event) { return func(e *Event) { e.Val = v } }
func rev(r int64) func(*Event)  { return func(e *Event) { e.N = r } }

// observed is an Info that observer w received.
func observed(ms float64, w, value string, term, r int64) Event {
	return at(ms, w, evObserve, w+"/obs", val(value), tok(term), rev(r))
}

func TestCheckerOrder(t *testing.T) {
	rw := model{prim: pRWMutex, ttl: time.Second, bound: 1500 * time.Millisecond}
	runChecks(t, mutexModel, []checkCase{
		{name: "one acquisition by each other process passes", evs: hist(
			cycle("w1", "w1#0", 0, 1, 400, 401, 10),
			cycle("w3", "w3#0", 10, 802, 900, 901, 13),
			cycle("w2", "w2#0", 20, 402, 500, 501, 11),
			cycle("w1", "w1#1", 402, 502, 800, 801, 12),
		)},
		{name: "a process that acquires twice during one wait fails", fails: "overtaken: w3's acquire call w3#0", evs: hist(
			cycle("w1", "w1#0", 0, 1, 400, 401, 10),
			cycle("w3", "w3#0", 10, 1002, 1100, 1101, 14),
			cycle("w1", "w1#1", 402, 500, 600, 601, 11),
			cycle("w2", "w2#0", 20, 602, 700, 701, 12),
			cycle("w1", "w1#2", 602, 702, 1000, 1001, 13),
		)},
		// A call that gave up before its first reply came back (which would have said that it
		// queued) may never have reached Redis: nothing is asserted against it. Once it has
		// said so, the same acquisitions fail.
		{name: "a call that gave up before its first reply does not count", evs: hist(
			cycle("w1", "w1#0", 0, 1, 400, 401, 10),
			at(5, "w3", evWait, "w3#0"),
			cycle("w1", "w1#1", 402, 500, 600, 601, 11),
			cycle("w2", "w2#0", 20, 602, 700, 701, 12),
			cycle("w1", "w1#2", 602, 702, 1000, 1001, 13),
			at(1050, "w3", evFailed, "w3#0", func(e *Event) { e.Ctx = true }),
		)},
		{name: "a call that queued and gave up counts", fails: "overtaken: w3's acquire call w3#0", evs: hist(
			cycle("w1", "w1#0", 0, 1, 400, 401, 10),
			at(5, "w3", evWait, "w3#0"),
			at(8, "w3", evQueued, "w3#0"),
			cycle("w1", "w1#1", 402, 500, 600, 601, 11),
			cycle("w2", "w2#0", 20, 602, 700, 701, 12),
			cycle("w1", "w1#2", 602, 702, 1000, 1001, 13),
			at(1050, "w3", evFailed, "w3#0", func(e *Event) { e.Ctx = true }),
		)},
		// w2, killed while it waited, may be granted the lock at w1's release; after that grant
		// lapses, whoever re-checks first takes the free lock (documented for mutex).
		{name: "an acquisition after a grant to a dead waiter lapsed does not count", evs: hist(
			cycle("w1", "w1#0", 0, 1, 400, 401, 10),
			at(5, "w2", evWait, "w2#0"),
			drv(200, drvKill, "w2"),
			cycle("w3", "w3#0", 10, 2100, 2200, 2201, 13),
			cycle("w4", "w4#0", 8, 402, 800, 801, 11),
			cycle("w4", "w4#1", 802, 1802, 2000, 2001, 12),
		)},
		// w1 is cancelled at the end of the run, and its place passes to w3, behind it.
		{name: "acquisitions after the end of the run do not count", evs: hist(
			cycle("w2", "w2#0", 0, 1, 400, 401, 10),
			cycle("w3", "w3#0", 10, 402, 800, 801, 11),
			at(20, "w1", evWait, "w1#0"),
			cycle("w3", "w3#1", 802, 1000, 1100, 1101, 12),
			drv(999, drvTerm, ""),
			at(1001, "w1", evFailed, "w1#0", func(e *Event) { e.Ctx = true }),
		)},
		// After Redis was paused, a request is assumed in Redis only a grace after it resumed
		// (its queue entry may have lapsed meanwhile).
		{name: "acquisitions right after a blackout do not count", evs: hist(
			cycle("w1", "w1#0", 0, 1, 300, 301, 10),
			drv(320, drvRedisPause, ""),
			drv(1300, drvRedisResume, ""),
			cycle("w3", "w3#0", 10, 1600, 1700, 1701, 13),
			cycle("w1", "w1#1", 302, 1302, 1400, 1401, 11),
			cycle("w1", "w1#2", 1402, 1450, 1550, 1551, 12),
		)},
	})
	runChecks(t, rw, []checkCase{
		{name: "readers overtaking a reader pass", evs: hist(
			cycle("w1", "w1#0", 0, 1, 400, 401, 10, role("w")),
			cycle("w2", "w2#0", 10, 1000, 1100, 1101, 10, role("r")),
			cycle("w3", "w3#0", 20, 402, 500, 501, 10, role("r")),
			cycle("w3", "w3#1", 502, 503, 600, 601, 10, role("r")),
			cycle("w3", "w3#2", 602, 603, 700, 701, 10, role("r")),
		)},
		{name: "a writer that overtakes a reader twice fails", fails: "overtaken: w2's reader's call", evs: hist(
			cycle("w1", "w1#0", 0, 1, 400, 401, 10, role("w")),
			cycle("w2", "w2#0", 10, 1000, 1100, 1101, 12, role("r")),
			cycle("w1", "w1#1", 402, 500, 600, 601, 11, role("w")),
			cycle("w1", "w1#2", 602, 700, 800, 801, 12, role("w")),
		)},
	})
}

func TestCheckerElection(t *testing.T) {
	m := model{prim: pElection, ttl: time.Second, grant: 1500 * time.Millisecond, bound: 1500 * time.Millisecond}
	// w1 leads (term 10) then w2 (term 11); w3 observes from the start.
	leaders := func(extra ...any) []Event {
		return hist(append([]any{
			at(0, "w3", evObsStart, "w3/obs"),
			cycle("w1", "w1#0", 1, 2, 400, 401, 10),
			cycle("w2", "w2#0", 3, 402, 800, 801, 11),
			drv(3000, drvTerm, ""),
			at(3001, "w3", evClosed, ""),
		}, extra...)...)
	}
	runChecks(t, m, []checkCase{
		{name: "an observer that sees every term passes", evs: leaders(
			observed(3, "w3", "w1#0", 10, 1),
			observed(403, "w3", "w2#0", 11, 2),
		)},
		{name: "a term its candidate did not get fails", fails: "but that candidate's term was 11", evs: leaders(
			observed(3, "w3", "w1#0", 10, 1),
			observed(403, "w3", "w2#0", 9, 2),
			observed(404, "w3", "w2#0", 11, 3),
		)},
		{name: "a value nobody campaigned with fails", fails: "no candidate campaigned with that value", evs: leaders(
			observed(3, "w3", "w1#0", 10, 1),
			observed(300, "w3", "ghost", 10, 2),
			observed(403, "w3", "w2#0", 11, 3),
		)},
		{name: "a grant to a candidate killed while it waited passes", evs: leaders(
			observed(3, "w3", "w1#0", 10, 1),
			at(100, "w4", evWait, "w4#0"),
			drv(150, drvKill, "w4"),
			observed(403, "w3", "w4#0", 11, 2),
			observed(404, "w3", "w2#0", 11, 3),
		)},
		{name: "Infos out of order fail", fails: "not in increasing order", evs: leaders(
			observed(3, "w3", "w1#0", 10, 1),
			observed(403, "w3", "w2#0", 11, 2),
			observed(404, "w3", "w1#0", 10, 1),
		)},
		{name: "an observer that never sees a new term fails", fails: "had not seen term 11", evs: leaders(
			observed(3, "w3", "w1#0", 10, 1),
		)},
	})
}

func TestCheckerWaitGroup(t *testing.T) {
	m := model{prim: pWaitGroup, ttl: time.Second, bound: 1500 * time.Millisecond}
	member := func(w, hold string, wait, acq, exit, rel float64, opts ...func(*Event)) []Event {
		return []Event{
			at(wait, w, evWait, hold, role("m")),
			at(acq, w, evAcquired, hold, role("m")),
			at(exit, w, evExit, hold),
			at(rel, w, evRelease, hold, opts...),
		}
	}
	// w1 is a member from 1 to 800 whose Wait (tied) began at 2; w2 a member from 3, killed
	// at 500 (its lease lapses by 1500).
	round := func(ret ...func(*Event)) []Event {
		return hist(
			member("w1", "w1#0", 0, 1, 800, 801),
			at(2, "w1", evWGWait, "w1#0/w", call("w1#0")),
			at(2, "w2", evWait, "w2#0", role("m")),
			at(3, "w2", evAcquired, "w2#0", role("m")),
			drv(500, drvKill, "w2"),
			at(1510, "w1", evWGReturn, "w1#0/w", append([]func(*Event){call("w1#0")}, ret...)...),
		)
	}
	runChecks(t, m, []checkCase{
		{name: "a Wait that reports the lost member passes", evs: round(lost, errs("1 member lost"))},
		{name: "a Wait that returns nil for a round with a lost member fails", fails: "the lost members were counted as done", evs: round(ok)},
		{name: "a Wait that returns nil before its round ended fails", fails: "while members of its round were still pending", evs: hist(
			member("w1", "w1#0", 0, 1, 800, 801),
			at(2, "w1", evWGWait, "w1#0/w", call("w1#0")),
			at(400, "w1", evWGReturn, "w1#0/w", call("w1#0"), ok),
		)},
		{name: "a Wait that returns ErrExpired without a restart fails", fails: "although Redis did not restart",
			evs: round(func(e *Event) { e.Expired = true }, errs("round no longer in Redis"))},
		{name: "a member done across a restart fails", fails: "Redis restarted empty while it was pending", evs: hist(
			member("w1", "w1#0", 0, 1, 800, 801),
			drv(100, drvRestartBegin, ""),
			drv(200, drvRestartDone, ""),
		)},
		{name: "a Wait stranded after the round ended fails", fails: "stranded: Wait w3#0", evs: hist(
			member("w1", "w1#0", 0, 1, 500, 501),
			at(10, "w3", evWGWait, "w3#0"),
			at(4000, "w3", evWGReturn, "w3#0", ok),
		)},
		// CI met it: a member stopped (SIGSTOP) for 2.5 s, its own Wait, begun before, returned
		// just after SIGCONT, 1.517 s after the round ended during the stop.
		{name: "a Wait of a worker stopped after the round ended is not stranded by the stop", evs: hist(
			member("w1", "w1#0", 0, 1, 500, 501),
			at(10, "w3", evWGWait, "w3#0"),
			drv(400, drvStop, "w3"),
			drv(3400, drvCont, "w3"),
			at(3420, "w3", evWGReturn, "w3#0", ok),
		)},
		{name: "a Wait of a worker stopped, stranded after its stop, fails", fails: "stranded: Wait w3#0", evs: hist(
			member("w1", "w1#0", 0, 1, 500, 501),
			at(10, "w3", evWGWait, "w3#0"),
			drv(400, drvStop, "w3"),
			drv(900, drvCont, "w3"),
			at(4000, "w3", evWGReturn, "w3#0", ok),
		)},
		{name: "a Wait that returns when the round ends passes", evs: hist(
			member("w1", "w1#0", 0, 1, 500, 501),
			at(10, "w3", evWGWait, "w3#0"),
			at(502, "w3", evWGReturn, "w3#0", ok),
		)},
	})
}

func TestCheckerOnceKept(t *testing.T) {
	once := model{prim: pOnceOnce, ttl: time.Second, bound: 1500 * time.Millisecond}
	value := model{prim: pOnceValue, ttl: time.Second, bound: 1500 * time.Millisecond}
	run := func(w, c, r string, start, end float64, ret ...func(*Event)) []Event {
		return []Event{
			at(start-1, w, evDoStart, c),
			at(start, w, evFnEnter, r, call(c)),
			at(end, w, evFnExit, r),
			at(end+1, w, evDoReturn, c, ret...),
		}
	}
	runChecks(t, once, []checkCase{
		{name: "a run after a success, without a Reset, fails", fails: "fn ran again", evs: hist(
			run("w1", "w1#0", "w1@1", 1, 100, ok),
			run("w2", "w2#0", "w2@1", 500, 600, ok),
		)},
		{name: "a run after a Reset passes", evs: hist(
			run("w1", "w1#0", "w1@1", 1, 100, ok),
			at(300, "w3", evResetStart, "w3#0"),
			at(301, "w3", evReset, "w3#0"),
			run("w2", "w2#0", "w2@1", 500, 600, ok),
		)},
		{name: "a run after a restart passes (the marker is not persisted)", evs: hist(
			run("w1", "w1#0", "w1@1", 1, 100, ok),
			drv(200, drvRestartBegin, ""),
			drv(300, drvRestartDone, ""),
			run("w2", "w2#0", "w2@1", 500, 600, ok),
		)},
	})
	runChecks(t, value, []checkCase{
		{name: "callers that get the success pass", evs: hist(
			run("w1", "w1#0", "w1@1", 1, 100, ok, val("w1@1")),
			at(150, "w2", evDoStart, "w2#0"),
			at(151, "w2", evDoReturn, "w2#0", ok, val("w1@1")),
		)},
		{name: "a value no run returned fails", fails: "which no successful run returned", evs: hist(
			run("w1", "w1#0", "w1@1", 1, 100, ok, val("w1@1")),
			at(150, "w2", evDoStart, "w2#0"),
			at(151, "w2", evDoReturn, "w2#0", ok, val("w1@1 | w1@2' (a mismatched pair)")),
		)},
		{name: "two successes between two Resets fail", fails: "callers got different successes", evs: hist(
			run("w1", "w1#0", "w1@1", 1, 100, ok, val("w1@1")),
			at(150, "w2", evDoStart, "w2#0"),
			at(151, "w2", evDoReturn, "w2#0", ok, val("w1@1")),
			at(200, "w3", evDoStart, "w3#0"),
			at(201, "w3", evDoReturn, "w3#0", ok, val("w3@9")),
		)},
	})
}

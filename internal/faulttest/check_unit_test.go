package faulttest

import (
	"strings"
	"testing"
	"time"
)

// Hand-made histories for the checker: ones it must pass and ones it must fail. Times are in
// milliseconds.

func at(ms float64, w, kind, hold string, opts ...func(*Event)) Event {
	e := Event{T: int64(ms * 1e6), W: w, Ev: kind, Hold: hold}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func tok(t int64) func(*Event)   { return func(e *Event) { e.Tok = t } }
func n(k int64) func(*Event)     { return func(e *Event) { e.N = k } }
func role(r string) func(*Event) { return func(e *Event) { e.Role = r } }
func call(c string) func(*Event) { return func(e *Event) { e.Call = c } }
func errs(s string) func(*Event) { return func(e *Event) { e.Err = s } }

var (
	lost = func(e *Event) { e.Lost = true }
	ok   = func(e *Event) { e.OK = true }
	dead = func(e *Event) { e.Dead = true }
)

func drv(ms float64, kind, target string) Event {
	return Event{T: int64(ms * 1e6), W: driver, Ev: kind, Target: target}
}

// cycle is one plain hold: wait, acquire, exit and release.
func cycle(w, hold string, wait, acq, exit, rel float64, t int64, opts ...func(*Event)) []Event {
	return []Event{
		at(wait, w, evWait, hold, opts...),
		at(acq, w, evAcquired, hold, append([]func(*Event){tok(t)}, opts...)...),
		at(exit, w, evExit, hold),
		at(rel, w, evRelease, hold),
	}
}

func hist(parts ...any) []Event {
	var evs []Event
	for _, p := range parts {
		switch p := p.(type) {
		case Event:
			evs = append(evs, p)
		case []Event:
			evs = append(evs, p...)
		}
	}
	return merge(evs)
}

func mustPass(t *testing.T, m model, evs []Event) {
	t.Helper()
	h := digest(m, evs)
	if vs := check(m, h); len(vs) > 0 {
		t.Errorf("want no violation, got:\n%s", report(h, vs, 10))
	}
}

func mustFail(t *testing.T, m model, evs []Event, want string) {
	t.Helper()
	h := digest(m, evs)
	vs := check(m, h)
	for _, v := range vs {
		if strings.Contains(v.msg, want) {
			out := report(h, vs, 10)
			if !strings.Contains(out, "VIOLATION") || !strings.Contains(out, "ms ") {
				t.Errorf("report without the history:\n%s", out)
			}
			return
		}
	}
	t.Errorf("want a violation containing %q, got:\n%s", want, report(h, vs, 10))
}

// killedHolder is a history in which w1 holds the lock (token 10) from 1 ms and is killed at
// 100 ms while w2 waits (since 5 ms); w2 acquires at acq ms (token 11) and releases 100 ms
// later.
func killedHolder(acq float64) []Event {
	return hist(
		at(0, "w1", evWait, "w1#0"),
		at(1, "w1", evAcquired, "w1#0", tok(10)),
		drv(100, drvKill, "w1"),
		cycle("w2", "w2#0", 5, acq, acq+100, acq+101, 11),
	)
}

// overtakenLead is a history in which w1 leads a once key from 1 ms and is stopped at 50 ms;
// w2 takes the lead at 1200 ms and runs fn until 2200 ms; w1, continued at 2000 ms, sees its
// fn's ctx end and returns from Do with ret at 2003 ms.
func overtakenLead(ret ...func(*Event)) []Event {
	return hist(
		at(0, "w1", evDoStart, "w1#0"),
		at(0, "w2", evDoStart, "w2#0"),
		at(1, "w1", evFnEnter, "w1@1", call("w1#0")),
		drv(50, drvStop, "w1"),
		at(1200, "w2", evFnEnter, "w2@1", call("w2#0")),
		drv(2000, drvCont, "w1"),
		at(2001, "w1", evFnCtx, "w1@1", lost),
		at(2002, "w1", evFnExit, "w1@1", lost),
		at(2003, "w1", evDoReturn, "w1#0", ret...),
		at(2200, "w2", evFnExit, "w2@1"),
		at(2201, "w2", evDoReturn, "w2#0", ok),
	)
}

var (
	mutexModel   = model{prim: pMutex, ttl: time.Second, bound: 1500 * time.Millisecond}
	rwmutexModel = model{prim: pRWMutex, ttl: time.Second, bound: time.Second}
)

// checkCase is a hand-made history and what the checker must make of it.
type checkCase struct {
	name  string
	m     *model // nil: the table's model
	evs   []Event
	fails string // "": the history must pass; else it must fail with a violation containing this
}

// runChecks runs each case as a subtest: mustPass, or mustFail with c.fails.
func runChecks(t *testing.T, m model, cases []checkCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cm := m
			if c.m != nil {
				cm = *c.m
			}
			if c.fails == "" {
				mustPass(t, cm, c.evs)
			} else {
				mustFail(t, cm, c.evs, c.fails)
			}
		})
	}
}

func TestCheckerExclusion(t *testing.T) {
	runChecks(t, mutexModel, []checkCase{
		{name: "alternating holds pass", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			cycle("w2", "w2#0", 50, 102, 200, 201, 11),
		)},
		{name: "overlap without a loss fails", fails: "holds overlap without a told loss", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			cycle("w2", "w2#0", 40, 50, 150, 151, 11),
		)},
		{name: "overlap after a told loss with a smaller token passes", evs: hist(
			at(0, "w1", evWait, "w1#0"),
			at(1, "w1", evAcquired, "w1#0", tok(10)),
			drv(100, drvStop, "w1"),
			at(1050, "w2", evWait, "w2#0"),
			at(1100, "w2", evAcquired, "w2#0", tok(11)),
			drv(2000, drvCont, "w1"),
			at(2001, "w1", evLost, "w1#0"),
			at(2002, "w1", evExit, "w1#0", lost),
			at(2003, "w1", evRelease, "w1#0", lost),
			at(2100, "w2", evExit, "w2#0"),
			at(2101, "w2", evRelease, "w2#0"),
		)},
		{name: "told loss but the larger token fails", fails: "holds overlap without a told loss", evs: hist(
			at(0, "w1", evWait, "w1#0"),
			at(1, "w1", evAcquired, "w1#0", tok(12)),
			at(1050, "w2", evWait, "w2#0"),
			at(1100, "w2", evAcquired, "w2#0", tok(11)),
			at(2001, "w1", evLost, "w1#0"),
			at(2002, "w1", evExit, "w1#0", lost),
			at(2003, "w1", evRelease, "w1#0"),
			at(2100, "w2", evExit, "w2#0"),
			at(2101, "w2", evRelease, "w2#0"),
		)},
		{name: "a killed holder's hold ends at its death", evs: killedHolder(1150)},
		{name: "tokens must increase", fails: "token did not increase", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			cycle("w2", "w2#0", 50, 102, 200, 201, 10),
		)},
		{name: "rwmutex readers share", m: &rwmutexModel, evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10, role("r")),
			cycle("w2", "w2#0", 0, 2, 100, 101, 10, role("r")),
			cycle("w3", "w3#0", 0, 102, 150, 151, 11, role("w")),
		)},
		{name: "rwmutex reader and writer overlap fails", m: &rwmutexModel, fails: "holds overlap", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10, role("r")),
			cycle("w3", "w3#0", 0, 50, 150, 151, 11, role("w")),
		)},
		{name: "a lease ended at the acquire fails", fails: "already ended when the acquire returned", evs: hist(
			at(0, "w1", evWait, "w1#0"),
			at(1, "w1", evAcquired, "w1#0", tok(10), dead),
			at(2, "w1", evExit, "w1#0", lost),
			at(3, "w1", evRelease, "w1#0"),
		)},
		{name: "a lease lost at once with no fault fails", fails: "lost 3ms after it was acquired", evs: hist(
			at(0, "w1", evWait, "w1#0"),
			at(1, "w1", evAcquired, "w1#0", tok(10)),
			at(4, "w1", evLost, "w1#0"),
			at(5, "w1", evExit, "w1#0", lost),
			at(6, "w1", evRelease, "w1#0", lost),
		)},
		{name: "a lease lost at once across a restart passes", evs: hist(
			at(0, "w1", evWait, "w1#0"),
			at(1, "w1", evAcquired, "w1#0", tok(10)),
			drv(2, drvRestartBegin, ""),
			drv(60, drvRestartDone, ""),
			at(64, "w1", evLost, "w1#0"),
			at(65, "w1", evExit, "w1#0", lost),
			at(66, "w1", evRelease, "w1#0", lost),
		)},
	})
}

func TestCheckerCapacity(t *testing.T) {
	runChecks(t, model{prim: pSemaphore, size: 3, ttl: time.Second, bound: time.Second}, []checkCase{
		{name: "within size passes", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 0, n(2)),
			cycle("w2", "w2#0", 0, 2, 100, 101, 0, n(1)),
			cycle("w3", "w3#0", 0, 102, 200, 201, 0, n(2)),
		)},
		{name: "above size fails", fails: "4 permits in use", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 0, n(2)),
			cycle("w2", "w2#0", 0, 2, 100, 101, 0, n(2)),
		)},
		{name: "above size by a told loss passes", evs: hist(
			at(0, "w1", evWait, "w1#0", n(2)),
			at(1, "w1", evAcquired, "w1#0", n(2)),
			cycle("w2", "w2#0", 0, 1100, 1200, 1201, 0, n(2)),
			at(1300, "w1", evExit, "w1#0", lost),
			at(1301, "w1", evRelease, "w1#0", lost),
		)},
		{name: "a waiter that fits, stranded, fails", fails: "stranded", evs: hist(
			cycle("w1", "w1#0", 0, 1, 3100, 3101, 0, n(2)),
			cycle("w2", "w2#0", 5, 3000, 3100, 3101, 0, n(1)),
		)},
		{name: "a waiter that does not fit waits", evs: hist(
			cycle("w1", "w1#0", 0, 1, 3000, 3001, 0, n(2)),
			cycle("w2", "w2#0", 5, 3002, 3100, 3101, 0, n(2)),
		)},
		// w2 fits, but w3, which does not, starts waiting 100 ms later: its request may have
		// reached Redis first, and w2 rightly waits behind it (the load check saw this).
		{name: "a waiter that fits, behind a larger one that came meanwhile, waits", evs: hist(
			cycle("w1", "w1#0", 0, 1, 3000, 3001, 0, n(2)),
			cycle("w2", "w2#0", 5, 3050, 3100, 3101, 0, n(1)),
			cycle("w3", "w3#0", 105, 3040, 3090, 3091, 0, n(2)),
		)},
		{name: "a waiter that fits, stranded before a larger one came, fails", fails: "stranded", evs: hist(
			cycle("w1", "w1#0", 0, 1, 3000, 3001, 0, n(2)),
			cycle("w2", "w2#0", 5, 3050, 3100, 3101, 0, n(1)),
			cycle("w3", "w3#0", 1500, 3040, 3090, 3091, 0, n(2)),
		)},
	})
}

func TestCheckerOnce(t *testing.T) {
	runChecks(t, model{prim: pOnce, ttl: time.Second, bound: 1500 * time.Millisecond}, []checkCase{
		{name: "one run shared passes", evs: hist(
			at(0, "w1", evDoStart, "w1#0"),
			at(0, "w2", evDoStart, "w2#0"),
			at(1, "w1", evFnEnter, "w1@1", call("w1#0")),
			at(100, "w1", evFnExit, "w1@1"),
			at(101, "w1", evDoReturn, "w1#0", ok),
			at(101, "w2", evDoReturn, "w2#0", ok),
		)},
		{name: "two runs at once without a lost lead fail", fails: "fn ran twice at once", evs: hist(
			at(0, "w1", evDoStart, "w1#0"),
			at(0, "w2", evDoStart, "w2#0"),
			at(1, "w1", evFnEnter, "w1@1", call("w1#0")),
			at(50, "w2", evFnEnter, "w2@1", call("w2#0")),
			at(100, "w1", evFnExit, "w1@1"),
			at(101, "w1", evDoReturn, "w1#0", ok),
			at(150, "w2", evFnExit, "w2@1"),
			at(151, "w2", evDoReturn, "w2#0", ok),
		)},
		{name: "a lost lead overtaken after its ctx ended passes", evs: overtakenLead(lost, errs("lost"))},
		{name: "a lost lead told by Do after fn returned passes", evs: hist(
			at(0, "w1", evDoStart, "w1#0"),
			at(0, "w2", evDoStart, "w2#0"),
			at(1, "w1", evFnEnter, "w1@1", call("w1#0")),
			drv(20, drvRestartBegin, ""),
			drv(120, drvRestartDone, ""),
			at(130, "w2", evFnEnter, "w2@1", call("w2#0")),
			at(300, "w1", evFnExit, "w1@1"),
			at(301, "w1", evDoReturn, "w1#0", lost, errs("lead lost")),
			at(430, "w2", evFnExit, "w2@1"),
			at(431, "w2", evDoReturn, "w2#0", ok),
		)},
		{name: "a lost lead that gets a success fails", fails: "a leader whose lead was lost got a success", evs: overtakenLead(ok)},
		{name: "a waiter stranded after the leader finished fails", fails: "stranded", evs: hist(
			at(0, "w1", evDoStart, "w1#0"),
			at(1, "w1", evFnEnter, "w1@1", call("w1#0")),
			at(10, "w2", evDoStart, "w2#0"),
			at(100, "w1", evFnExit, "w1@1"),
			at(101, "w1", evDoReturn, "w1#0", ok),
			at(5000, "w2", evDoReturn, "w2#0", ok),
		)},
	})
}

func TestCheckerLiveness(t *testing.T) {
	runChecks(t, mutexModel, []checkCase{
		{name: "a release taken at once passes", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			cycle("w2", "w2#0", 50, 300, 400, 401, 11),
		)},
		{name: "a release nobody takes for 2s fails", fails: "stranded", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			cycle("w2", "w2#0", 50, 2200, 2300, 2301, 11),
		)},
		{name: "a stall until the end of the run fails", fails: "until the end of the run", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			at(50, "w2", evWait, "w2#0"),
			drv(3000, drvTerm, ""),
			at(3001, "w2", evFailed, "w2#0"),
		)},
		{name: "a killed holder's claim is waited for until its lease ends", evs: killedHolder(1300)},
		{name: "a killed holder's claim not taken after its lease fails", fails: "stranded", evs: killedHolder(3000)},
		{name: "a killed waiter is not progress", fails: "stranded", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			at(40, "w2", evWait, "w2#0"),
			drv(500, drvKill, "w2"),
			cycle("w3", "w3#0", 50, 2500, 2600, 2601, 11),
		)},
		{name: "time while Redis is paused does not count", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			drv(102, drvRedisPause, ""),
			drv(3000, drvRedisResume, ""),
			cycle("w2", "w2#0", 50, 3200, 3300, 3301, 11),
		)},
		{name: "time the machine did not run the processes does not count", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			at(2000, "w3", evHiccup, "", n(int64(1500*time.Millisecond))),
			cycle("w2", "w2#0", 50, 2200, 2300, 2301, 11),
		)},
		{name: "a stopped worker's own stop is not a machine stall", fails: "stranded", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			drv(200, drvStop, "w3"),
			drv(2200, drvCont, "w3"),
			at(2201, "w3", evHiccup, "", n(int64(2000*time.Millisecond))),
			cycle("w2", "w2#0", 50, 2300, 2400, 2401, 11),
		)},
		{name: "a stopped waiter is not waiting", evs: hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			drv(20, drvStop, "w2"),
			drv(3000, drvCont, "w2"),
			cycle("w2", "w2#0", 10, 3010, 3100, 3101, 11),
		)},
	})
}

func TestCheckerCtxErrors(t *testing.T) {
	alive := func(e *Event) { e.Ctx, e.Alive = true, true }
	mustFail(t, mutexModel, hist(
		at(0, "w1", evWait, "w1#0"),
		at(10, "w1", evFailed, "w1#0", alive, errs("not acquired: context deadline exceeded")),
	), "context error while its context was live")
	mustPass(t, mutexModel, hist(
		at(0, "w1", evWait, "w1#0"),
		at(10, "w1", evFailed, "w1#0", func(e *Event) { e.Ctx = true }, errs("not acquired: context deadline exceeded")),
	))
	// A Lock that ends before its ctx: only Redis's refusal may end it.
	live := func(e *Event) { e.Alive = true }
	mustFail(t, mutexModel, hist(
		at(0, "w1", evWait, "w1#0"),
		at(10, "w1", evFailed, "w1#0", live, errs("not acquired: acquired too late to use")),
	), "ended before its ctx")
	mustPass(t, mutexModel, hist(
		at(0, "w1", evWait, "w1#0"),
		at(10, "w1", evFailed, "w1#0", live, func(e *Event) { e.Refused = true }, errs("NOPERM this user has no permissions")),
	))
}

func TestCheckerFencedLog(t *testing.T) {
	good := []fencedWriteRec{{10, "w1#0", "entry", 0}, {10, "w1#0", "late", 0}, {11, "w2#0", "entry", 0}}
	if bad := checkFencedLog(good); len(bad) > 0 {
		t.Errorf("good log refused: %v", bad)
	}
	reissued := []fencedWriteRec{{10, "w1#0", "entry", 0}, {10, "w2#0", "entry", 0}}
	if bad := checkFencedLog(reissued); len(bad) != 1 || !strings.Contains(bad[0], "two holds") {
		t.Errorf("token for two holds: got %v", bad)
	}
	back := []fencedWriteRec{{11, "w1#0", "entry", 0}, {10, "w2#0", "entry", 0}}
	if bad := checkFencedLog(back); len(bad) != 1 || !strings.Contains(bad[0], "after token") {
		t.Errorf("decreasing tokens: got %v", bad)
	}
	if ws, err := parseWrites([]string{"12 w1#3 late 13"}); err != nil || ws[0] != (fencedWriteRec{12, "w1#3", "late", 13}) {
		t.Errorf("parseWrites: %v %v", ws, err)
	}
}

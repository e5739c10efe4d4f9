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

var mutexModel = model{prim: pMutex, ttl: time.Second, bound: 1500 * time.Millisecond}

func TestCheckerExclusion(t *testing.T) {
	t.Run("alternating holds pass", func(t *testing.T) {
		mustPass(t, mutexModel, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			at(50, "w2", evWait, "w2#0"),
			at(102, "w2", evAcquired, "w2#0", tok(11)),
			at(200, "w2", evExit, "w2#0"),
			at(201, "w2", evRelease, "w2#0"),
		))
	})
	t.Run("overlap without a loss fails", func(t *testing.T) {
		mustFail(t, mutexModel, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			cycle("w2", "w2#0", 40, 50, 150, 151, 11),
		), "holds overlap without a told loss")
	})
	t.Run("overlap after a told loss with a smaller token passes", func(t *testing.T) {
		mustPass(t, mutexModel, hist(
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
		))
	})
	t.Run("told loss but the larger token fails", func(t *testing.T) {
		mustFail(t, mutexModel, hist(
			at(0, "w1", evWait, "w1#0"),
			at(1, "w1", evAcquired, "w1#0", tok(12)),
			at(1050, "w2", evWait, "w2#0"),
			at(1100, "w2", evAcquired, "w2#0", tok(11)),
			at(2001, "w1", evLost, "w1#0"),
			at(2002, "w1", evExit, "w1#0", lost),
			at(2003, "w1", evRelease, "w1#0"),
			at(2100, "w2", evExit, "w2#0"),
			at(2101, "w2", evRelease, "w2#0"),
		), "holds overlap without a told loss")
	})
	t.Run("a killed holder's hold ends at its death", func(t *testing.T) {
		mustPass(t, mutexModel, hist(
			at(0, "w1", evWait, "w1#0"),
			at(1, "w1", evAcquired, "w1#0", tok(10)),
			at(5, "w2", evWait, "w2#0"),
			drv(100, drvKill, "w1"),
			at(1150, "w2", evAcquired, "w2#0", tok(11)),
			at(1250, "w2", evExit, "w2#0"),
			at(1251, "w2", evRelease, "w2#0"),
		))
	})
	t.Run("tokens must increase", func(t *testing.T) {
		mustFail(t, mutexModel, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			cycle("w2", "w2#0", 50, 102, 200, 201, 10),
		), "token did not increase")
	})
	t.Run("rwmutex readers share", func(t *testing.T) {
		m := model{prim: pRWMutex, ttl: time.Second, bound: time.Second}
		mustPass(t, m, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10, role("r")),
			cycle("w2", "w2#0", 0, 2, 100, 101, 10, role("r")),
			cycle("w3", "w3#0", 0, 102, 150, 151, 11, role("w")),
		))
	})
	t.Run("rwmutex reader and writer overlap fails", func(t *testing.T) {
		m := model{prim: pRWMutex, ttl: time.Second, bound: time.Second}
		mustFail(t, m, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10, role("r")),
			cycle("w3", "w3#0", 0, 50, 150, 151, 11, role("w")),
		), "holds overlap")
	})
	t.Run("a lease ended at the acquire fails", func(t *testing.T) {
		mustFail(t, mutexModel, hist(
			at(0, "w1", evWait, "w1#0"),
			at(1, "w1", evAcquired, "w1#0", tok(10), dead),
			at(2, "w1", evExit, "w1#0", lost),
			at(3, "w1", evRelease, "w1#0"),
		), "already ended when the acquire returned")
	})
	t.Run("a lease lost at once with no fault fails", func(t *testing.T) {
		mustFail(t, mutexModel, hist(
			at(0, "w1", evWait, "w1#0"),
			at(1, "w1", evAcquired, "w1#0", tok(10)),
			at(4, "w1", evLost, "w1#0"),
			at(5, "w1", evExit, "w1#0", lost),
			at(6, "w1", evRelease, "w1#0", lost),
		), "lost 3ms after it was acquired")
	})
	t.Run("a lease lost at once across a restart passes", func(t *testing.T) {
		mustPass(t, mutexModel, hist(
			at(0, "w1", evWait, "w1#0"),
			at(1, "w1", evAcquired, "w1#0", tok(10)),
			drv(2, drvRestartBegin, ""),
			drv(60, drvRestartDone, ""),
			at(64, "w1", evLost, "w1#0"),
			at(65, "w1", evExit, "w1#0", lost),
			at(66, "w1", evRelease, "w1#0", lost),
		))
	})
}

func TestCheckerCapacity(t *testing.T) {
	m := model{prim: pSemaphore, size: 3, ttl: time.Second, bound: time.Second}
	t.Run("within size passes", func(t *testing.T) {
		mustPass(t, m, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 0, n(2)),
			cycle("w2", "w2#0", 0, 2, 100, 101, 0, n(1)),
			cycle("w3", "w3#0", 0, 102, 200, 201, 0, n(2)),
		))
	})
	t.Run("above size fails", func(t *testing.T) {
		mustFail(t, m, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 0, n(2)),
			cycle("w2", "w2#0", 0, 2, 100, 101, 0, n(2)),
		), "4 permits in use")
	})
	t.Run("above size by a told loss passes", func(t *testing.T) {
		mustPass(t, m, hist(
			at(0, "w1", evWait, "w1#0", n(2)),
			at(1, "w1", evAcquired, "w1#0", n(2)),
			at(0, "w2", evWait, "w2#0", n(2)),
			at(1100, "w2", evAcquired, "w2#0", n(2)),
			at(1200, "w2", evExit, "w2#0"),
			at(1201, "w2", evRelease, "w2#0"),
			at(1300, "w1", evExit, "w1#0", lost),
			at(1301, "w1", evRelease, "w1#0", lost),
		))
	})
	t.Run("a waiter that fits, stranded, fails", func(t *testing.T) {
		mustFail(t, m, hist(
			at(0, "w1", evWait, "w1#0", n(2)),
			at(1, "w1", evAcquired, "w1#0", n(2)),
			at(5, "w2", evWait, "w2#0", n(1)),
			at(3000, "w2", evAcquired, "w2#0", n(1)),
			at(3100, "w1", evExit, "w1#0"),
			at(3101, "w1", evRelease, "w1#0"),
			at(3100, "w2", evExit, "w2#0"),
			at(3101, "w2", evRelease, "w2#0"),
		), "stranded")
	})
	t.Run("a waiter that does not fit waits", func(t *testing.T) {
		mustPass(t, m, hist(
			at(0, "w1", evWait, "w1#0", n(2)),
			at(1, "w1", evAcquired, "w1#0", n(2)),
			at(5, "w2", evWait, "w2#0", n(2)),
			at(3000, "w1", evExit, "w1#0"),
			at(3001, "w1", evRelease, "w1#0"),
			at(3002, "w2", evAcquired, "w2#0", n(2)),
			at(3100, "w2", evExit, "w2#0"),
			at(3101, "w2", evRelease, "w2#0"),
		))
	})
}

func TestCheckerOnce(t *testing.T) {
	m := model{prim: pOnce, ttl: time.Second, bound: 1500 * time.Millisecond}
	t.Run("one run shared passes", func(t *testing.T) {
		mustPass(t, m, hist(
			at(0, "w1", evDoStart, "w1#0"),
			at(0, "w2", evDoStart, "w2#0"),
			at(1, "w1", evFnEnter, "w1@1", call("w1#0")),
			at(100, "w1", evFnExit, "w1@1"),
			at(101, "w1", evDoReturn, "w1#0", ok),
			at(101, "w2", evDoReturn, "w2#0", ok),
		))
	})
	t.Run("two runs at once without a lost lead fail", func(t *testing.T) {
		mustFail(t, m, hist(
			at(0, "w1", evDoStart, "w1#0"),
			at(0, "w2", evDoStart, "w2#0"),
			at(1, "w1", evFnEnter, "w1@1", call("w1#0")),
			at(50, "w2", evFnEnter, "w2@1", call("w2#0")),
			at(100, "w1", evFnExit, "w1@1"),
			at(101, "w1", evDoReturn, "w1#0", ok),
			at(150, "w2", evFnExit, "w2@1"),
			at(151, "w2", evDoReturn, "w2#0", ok),
		), "fn ran twice at once")
	})
	t.Run("a lost lead overtaken after its ctx ended passes", func(t *testing.T) {
		mustPass(t, m, hist(
			at(0, "w1", evDoStart, "w1#0"),
			at(0, "w2", evDoStart, "w2#0"),
			at(1, "w1", evFnEnter, "w1@1", call("w1#0")),
			drv(50, drvStop, "w1"),
			at(1200, "w2", evFnEnter, "w2@1", call("w2#0")),
			drv(2000, drvCont, "w1"),
			at(2001, "w1", evFnCtx, "w1@1", lost),
			at(2002, "w1", evFnExit, "w1@1", lost),
			at(2003, "w1", evDoReturn, "w1#0", lost, errs("lost")),
			at(2200, "w2", evFnExit, "w2@1"),
			at(2201, "w2", evDoReturn, "w2#0", ok),
		))
	})
	t.Run("a lost lead told by Do after fn returned passes", func(t *testing.T) {
		mustPass(t, m, hist(
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
		))
	})
	t.Run("a lost lead that gets a success fails", func(t *testing.T) {
		mustFail(t, m, hist(
			at(0, "w1", evDoStart, "w1#0"),
			at(0, "w2", evDoStart, "w2#0"),
			at(1, "w1", evFnEnter, "w1@1", call("w1#0")),
			drv(50, drvStop, "w1"),
			at(1200, "w2", evFnEnter, "w2@1", call("w2#0")),
			drv(2000, drvCont, "w1"),
			at(2001, "w1", evFnCtx, "w1@1", lost),
			at(2002, "w1", evFnExit, "w1@1", lost),
			at(2003, "w1", evDoReturn, "w1#0", ok),
			at(2200, "w2", evFnExit, "w2@1"),
			at(2201, "w2", evDoReturn, "w2#0", ok),
		), "a leader whose lead was lost got a success")
	})
	t.Run("a waiter stranded after the leader finished fails", func(t *testing.T) {
		mustFail(t, m, hist(
			at(0, "w1", evDoStart, "w1#0"),
			at(1, "w1", evFnEnter, "w1@1", call("w1#0")),
			at(10, "w2", evDoStart, "w2#0"),
			at(100, "w1", evFnExit, "w1@1"),
			at(101, "w1", evDoReturn, "w1#0", ok),
			at(5000, "w2", evDoReturn, "w2#0", ok),
		), "stranded")
	})
}

func TestCheckerLiveness(t *testing.T) {
	t.Run("a release taken at once passes", func(t *testing.T) {
		mustPass(t, mutexModel, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			at(50, "w2", evWait, "w2#0"),
			at(300, "w2", evAcquired, "w2#0", tok(11)),
			at(400, "w2", evExit, "w2#0"),
			at(401, "w2", evRelease, "w2#0"),
		))
	})
	t.Run("a release nobody takes for 2s fails", func(t *testing.T) {
		mustFail(t, mutexModel, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			at(50, "w2", evWait, "w2#0"),
			at(2200, "w2", evAcquired, "w2#0", tok(11)),
			at(2300, "w2", evExit, "w2#0"),
			at(2301, "w2", evRelease, "w2#0"),
		), "stranded")
	})
	t.Run("a stall until the end of the run fails", func(t *testing.T) {
		mustFail(t, mutexModel, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			at(50, "w2", evWait, "w2#0"),
			drv(3000, drvTerm, ""),
			at(3001, "w2", evFailed, "w2#0"),
		), "until the end of the run")
	})
	t.Run("a killed holder's claim is waited for until its lease ends", func(t *testing.T) {
		mustPass(t, mutexModel, hist(
			at(0, "w1", evWait, "w1#0"),
			at(1, "w1", evAcquired, "w1#0", tok(10)),
			at(5, "w2", evWait, "w2#0"),
			drv(100, drvKill, "w1"),
			at(1300, "w2", evAcquired, "w2#0", tok(11)),
			at(1400, "w2", evExit, "w2#0"),
			at(1401, "w2", evRelease, "w2#0"),
		))
	})
	t.Run("a killed holder's claim not taken after its lease fails", func(t *testing.T) {
		mustFail(t, mutexModel, hist(
			at(0, "w1", evWait, "w1#0"),
			at(1, "w1", evAcquired, "w1#0", tok(10)),
			at(5, "w2", evWait, "w2#0"),
			drv(100, drvKill, "w1"),
			at(3000, "w2", evAcquired, "w2#0", tok(11)),
			at(3100, "w2", evExit, "w2#0"),
			at(3101, "w2", evRelease, "w2#0"),
		), "stranded")
	})
	t.Run("a killed waiter is not progress", func(t *testing.T) {
		mustFail(t, mutexModel, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			at(40, "w2", evWait, "w2#0"),
			at(50, "w3", evWait, "w3#0"),
			drv(500, drvKill, "w2"),
			at(2500, "w3", evAcquired, "w3#0", tok(11)),
			at(2600, "w3", evExit, "w3#0"),
			at(2601, "w3", evRelease, "w3#0"),
		), "stranded")
	})
	t.Run("time while Redis is paused does not count", func(t *testing.T) {
		mustPass(t, mutexModel, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			drv(102, drvRedisPause, ""),
			at(50, "w2", evWait, "w2#0"),
			drv(3000, drvRedisResume, ""),
			at(3200, "w2", evAcquired, "w2#0", tok(11)),
			at(3300, "w2", evExit, "w2#0"),
			at(3301, "w2", evRelease, "w2#0"),
		))
	})
	t.Run("time the machine did not run the processes does not count", func(t *testing.T) {
		mustPass(t, mutexModel, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			at(50, "w2", evWait, "w2#0"),
			at(2000, "w3", evHiccup, "", n(int64(1500*time.Millisecond))),
			at(2200, "w2", evAcquired, "w2#0", tok(11)),
			at(2300, "w2", evExit, "w2#0"),
			at(2301, "w2", evRelease, "w2#0"),
		))
	})
	t.Run("a stopped worker's own stop is not a machine stall", func(t *testing.T) {
		mustFail(t, mutexModel, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			at(50, "w2", evWait, "w2#0"),
			drv(200, drvStop, "w3"),
			drv(2200, drvCont, "w3"),
			at(2201, "w3", evHiccup, "", n(int64(2000*time.Millisecond))),
			at(2300, "w2", evAcquired, "w2#0", tok(11)),
			at(2400, "w2", evExit, "w2#0"),
			at(2401, "w2", evRelease, "w2#0"),
		), "stranded")
	})
	t.Run("a stopped waiter is not waiting", func(t *testing.T) {
		mustPass(t, mutexModel, hist(
			cycle("w1", "w1#0", 0, 1, 100, 101, 10),
			drv(20, drvStop, "w2"),
			at(10, "w2", evWait, "w2#0"),
			drv(3000, drvCont, "w2"),
			at(3010, "w2", evAcquired, "w2#0", tok(11)),
			at(3100, "w2", evExit, "w2#0"),
			at(3101, "w2", evRelease, "w2#0"),
		))
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

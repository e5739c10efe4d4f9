package redistest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// Timing checks on a busy machine.
//
// A test that asserts how soon something happens (a waiter woken at a lease's expiry, a loss
// told within a renewal period) runs on a machine that other work stalls: go test runs
// packages and tests in parallel, and CI may run two suites at once. Such a test checks its
// bound with [Late], which allows for what this process was measurably stalled meanwhile,
// and runs its scenario under [Retry], which runs it again when that check fails, so that a
// failure must repeat to count. A property broken in the code fails every attempt; a busy
// moment fails one.

// Stall measurement: a goroutine sleeps stallTick at a time and notes every sleep that overran
// by stallMin or more. What delays it (the OS running other processes, the Go scheduler busy,
// a garbage collection) delays every goroutine of the process alike.
const (
	stallTick = 5 * time.Millisecond
	stallMin  = 2 * time.Millisecond
	stallKeep = 4096 // overruns kept, the latest
)

type stall struct {
	at time.Time     // when the sleeper woke
	d  time.Duration // how late
}

var stalls struct {
	once sync.Once
	mu   sync.Mutex
	log  []stall
}

// WatchStalls starts measuring how late this process's goroutines are scheduled, once per
// process, for [Stalled]. [Main] and [Retry] start it.
func WatchStalls() {
	stalls.once.Do(func() {
		go func() {
			for {
				before := time.Now()
				time.Sleep(stallTick)
				now := time.Now()
				if over := now.Sub(before) - stallTick; over >= stallMin {
					stalls.mu.Lock()
					if len(stalls.log) == stallKeep {
						stalls.log = append(stalls.log[:0], stalls.log[stallKeep/2:]...)
					}
					stalls.log = append(stalls.log, stall{now, over})
					stalls.mu.Unlock()
				}
			}
		}()
	})
}

// Stalled returns the longest time this process's goroutines waited to run, beyond what they
// asked, at some moment between from and to (0 if none was seen; see [WatchStalls]), or the
// longest that the process serving the "miniredis" backend's servers waited, if it is longer:
// a server that waits to run stalls the tests that talk to it.
func Stalled(from, to time.Time) time.Duration {
	mini, _ := miniStalled(from, to)
	return max(localStalled(from, to), mini)
}

// StalledTotal returns how long in all this process's goroutines waited to run, beyond what
// they asked, between from and to: the sum of the stalls of which [Stalled] gives the longest
// (or the miniredis process's sum, if it is larger). A check of how much got done in a while
// (a throughput) allows for it, as a check of how soon one thing happened ([Late]) allows for
// the longest.
func StalledTotal(from, to time.Time) time.Duration {
	_, mini := miniStalled(from, to)
	return max(localStalledTotal(from, to), mini)
}

// localStalled is [Stalled] for this process alone.
func localStalled(from, to time.Time) time.Duration {
	stalls.mu.Lock()
	defer stalls.mu.Unlock()
	var worst time.Duration
	for _, s := range stalls.log {
		if s.at.Before(from) || s.at.Add(-s.d).After(to) {
			continue
		}
		worst = max(worst, s.d)
	}
	return worst
}

// localStalledTotal is [StalledTotal] for this process alone.
func localStalledTotal(from, to time.Time) time.Duration {
	stalls.mu.Lock()
	defer stalls.mu.Unlock()
	var total time.Duration
	for _, s := range stalls.log {
		if s.at.Before(from) || s.at.Add(-s.d).After(to) {
			continue
		}
		total += s.d
	}
	return total
}

// Late returns nil if late, how long after its due time something happened, is within margin
// plus the stalls of this process between from and to ([StalledTotal]); otherwise an error
// that says what was late, by how much, and the stall allowed, for [Retry] to report.
func Late(what string, late, margin time.Duration, from, to time.Time) error {
	return LateVia(what, late, margin, from, to)
}

// LateVia is [Late] for something that pods' clients waited on: it also allows for the time
// they had a command waiting for its reply between from and to (the union of the round
// trips, each pod's added). A Redis that answers late (a server that queues the commands of
// many tests at once) delays a waiter as a stall does, once per round trip of the chain it
// waits on (a re-check, then a confirm). It allows for every stall of the window, not the
// longest: the steps of that chain (a timer, each reply's handling) are each held up by the
// stalls of their moment. Time in which the process ran and no command was waiting is not
// allowed for, so a waiter that idled past its due time still fails.
func LateVia(what string, late, margin time.Duration, from, to time.Time, pods ...*Pod) error {
	stalled := StalledTotal(from, to)
	for _, p := range pods {
		stalled += p.Client.Busy(from, to)
	}
	if late <= margin+stalled {
		return nil
	}
	slow := "this process or its miniredis server was stalled"
	if len(pods) > 0 {
		slow += ", or replies were awaited,"
	}
	return fmt.Errorf("%s %v late, want within %v (+%v %s meanwhile)",
		what, late.Round(time.Millisecond), margin, stalled.Round(time.Millisecond), slow)
}

// Retry runs attempt until it returns nil, at most n times, and fails tb with every attempt's
// error if none did. attempt fails tb itself (t.Fatal) for what no load can cause, and
// returns an error for a check a busy machine can fail: a bound on how soon something
// happened ([Late]), a premise that a sleep was long enough. Each attempt makes its own keys
// (a new [Backend.Prefix]) and clients, so that none sees what an earlier one left.
func Retry(tb testing.TB, n int, attempt func() error) {
	tb.Helper()
	WatchStalls()
	var errs []string
	for i := range n {
		err := attempt()
		if err == nil {
			if i > 0 {
				tb.Logf("passed at attempt %d of %d; earlier: %s", i+1, n, strings.Join(errs, "; "))
			}
			return
		}
		if tb.Failed() {
			return
		}
		errs = append(errs, fmt.Sprintf("attempt %d: %v", i+1, err))
		tb.Logf("attempt %d of %d: %v", i+1, n, err)
	}
	tb.Fatalf("failed %d attempts in a row:\n%s", n, strings.Join(errs, "\n"))
}

// RetryScaled is [Retry] for a scenario whose timing scales with a time step, d in the first
// attempt and twice the last's in each next one: its sleeps and bounds are multiples of the
// step it is given. A stall that spoiled an attempt is a smaller part of the next one's
// step; a property broken in the code fails at every step.
func RetryScaled(tb testing.TB, n int, d time.Duration, attempt func(step time.Duration) error) {
	tb.Helper()
	Retry(tb, n, func() error {
		defer func() { d *= 2 }()
		return attempt(d)
	})
}

// Waiting waits (at most 10 s) until cond, which reads Redis, shows the calls res report
// waiting. If one of them returned instead, what it was to wait behind had lapsed (only a
// machine stalled for most of a lease lets a renewed hold lapse): it returns an error, for
// [Retry]. If neither comes within 10 s it fails tb.
func Waiting(tb testing.TB, what string, cond func() bool, res ...<-chan Returned) error {
	tb.Helper()
	var back *Returned
	ok := Eventually(10*time.Second, func() bool {
		for _, ch := range res {
			select {
			case r := <-ch:
				back = &r
			default:
			}
		}
		return back != nil || cond()
	})
	switch {
	case back != nil:
		return fmt.Errorf("%s: a call returned instead (%v): what it was to wait behind lapsed (the machine stalled?)", what, back.Err)
	case !ok:
		tb.Fatalf("%s: not within 10s", what)
	}
	return nil
}

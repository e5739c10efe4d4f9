package rate

// golang.org/x/time/rate's own tests (rate/rate_test.go at v0.16.0), ported to the limiter in
// Redis. x/time/rate's tests give each call a time t0, t1, ... (multiples of d); Redis's clock
// cannot be set, so here the calls happen in real time: "at tk" is a sleep until k·d after the
// first call's reply, and a test's calls between two sleeps happen well within d (d is 250ms,
// a margin that a loaded machine keeps). What the tests check is exact all the same: a
// reservation's time to act by Redis's clock (Reservation.at), against the first call's,
// within a few µs of rounding. Timing cannot shift it: between the bucket's being empty and
// full, its tokens grow linearly, so a reservation's time to act does not depend on when in
// that stretch it was made.
//
// Not ported: TestLimit and TestEvery (x/time/rate's own Limit and Every, which this package
// reuses); TestLimiterJumpBackwards, TestReserveJumpBack and TestReserveJumpBackCancel (a
// caller's clock that goes back: here no caller's clock takes part); TestLimiter_noTruncationErrors
// (x/time/rate's nanosecond arithmetic: Redis's clock counts µs, tested by TestTinyLimit and
// the arithmetic below); the benchmarks.

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// d is the test's time step: a limit of 10 in x/time/rate's tests (a token per 100ms there) is
// a token per d here, and their t1 is d after t0.
const d = 250 * time.Millisecond

// per scales x/time/rate's test limits to d: 10 -> 1/d.
func per(x float64) Limit { return Limit(x / 10 / d.Seconds()) }

// clock follows one test's calls: t0 is the first reservation's time to act (Redis's µs),
// base the local time its reply arrived.
type clock struct {
	t     *testing.T
	lim   *Limiter
	slack float64   // steps a time to act may be late by: see TestReserveSetLimit
	last  time.Time // when the last call's reply came
	lastK int       // the step of the last at
	t0    int64
	base  time.Time
	start bool
}

func newClock(t *testing.T, lim *Limiter) *clock { return &clock{t: t, lim: lim} }

// maker makes a limiter on the test's backend (see eachBackend).
type maker func(limit Limit, burst int) *Limiter

// at sleeps until k steps after t0, and at least k-j steps after the last call, made at tj.
// The second bound is for a bucket that filled up before that call: its refill started
// again at the call, which came a little after tj, not at tj as in x/time/rate's tests.
func (c *clock) at(k int) {
	c.t.Helper()
	if !c.start {
		c.t.Fatal("at before the first call")
	}
	until := c.base.Add(time.Duration(k) * d)
	if u := c.last.Add(time.Duration(k-c.lastK) * d); u.After(until) {
		until = u
	}
	time.Sleep(time.Until(until))
	c.lastK = k
}

// reserve reserves n tokens, allowing a wait of maxWait (<0: any), and checks the result: ok
// and a time to act of act steps after t0.
func (c *clock) reserve(n int, maxWait time.Duration, act int, ok bool) *Reservation {
	c.t.Helper()
	mw := "inf"
	if maxWait >= 0 {
		mw = formatMicros(maxWait)
	}
	r, _, err := c.lim.call(context.Background(), n, mw)
	c.last = time.Now()
	if err != nil {
		c.t.Fatalf("reserve(%d): %v", n, err)
	}
	if !c.start && r.ok {
		c.t0, c.base, c.start = r.at, time.Now(), true
	}
	if r.ok != ok {
		c.t.Fatalf("reserve(%d): ok %v, want %v", n, r.ok, ok)
	}
	if ok {
		got := float64(r.at-c.t0) / float64(d.Microseconds())
		if got < float64(act)-1e-4 || got > float64(act)+1e-4+c.slack {
			c.t.Fatalf("reserve(%d): time to act t%.5f, want t%d", n, got, act)
		}
	}
	return r
}

// allow is AllowN(n), checked against ok.
func (c *clock) allow(n int, ok bool) {
	c.t.Helper()
	r, _, err := c.lim.call(context.Background(), n, "0")
	c.last = time.Now()
	if err != nil {
		c.t.Fatalf("allow(%d): %v", n, err)
	}
	if !c.start && r.ok {
		c.t0, c.base, c.start = r.at, time.Now(), true
	}
	if r.ok != ok {
		c.t.Fatalf("allow(%d): %v, want %v", n, r.ok, ok)
	}
	if ok && r.Delay() != 0 {
		c.t.Fatalf("allow(%d): delay %v", n, r.Delay())
	}
}

func (c *clock) cancel(r *Reservation) {
	c.t.Helper()
	defer func() { c.last = time.Now() }()
	if err := r.Cancel(context.Background()); err != nil {
		c.t.Fatalf("cancel: %v", err)
	}
}

func formatMicros(w time.Duration) string { return strconv.FormatInt(w.Microseconds(), 10) }

// eachBackend runs f on every backend, with mk making limiters there (each its own name).
func eachBackend(t *testing.T, f func(t *testing.T, mk maker)) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		p := b.Pod(t, b.Prefix(t))
		n := 0
		f(t, func(limit Limit, burst int) *Limiter {
			n++
			l, err := NewLimiter(p.H, "x"+strconv.Itoa(n), limit, burst)
			if err != nil {
				t.Fatal(err)
			}
			return l
		})
	})
}

func TestLimiterBurst1(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(10), 1))
		c.allow(1, true)
		c.allow(1, false)
		c.allow(1, false)
		c.at(1)
		c.allow(1, true)
		c.allow(1, false)
		c.allow(1, false)
		c.at(2)
		c.allow(2, false) // burst size is 1, so n=2 always fails
		c.allow(1, true)
		c.allow(1, false)
	})
}

func TestLimiterBurst3(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(10), 3))
		c.allow(2, true)
		c.allow(2, false)
		c.allow(1, true)
		c.allow(1, false)
		c.at(1)
		c.allow(4, false)
		c.at(2)
		c.allow(1, true)
		c.at(3)
		c.allow(1, true)
		c.at(4)
		c.allow(1, true)
		c.allow(1, true)
		c.allow(1, false)
		c.allow(1, false)
		c.at(9)
		c.allow(3, true)
		c.allow(0, true)
	})
}

func TestSimpleReserve(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(10), 2))
		c.reserve(2, -1, 0, true)
		c.reserve(2, -1, 2, true)
		c.at(3)
		c.reserve(2, -1, 4, true)
	})
}

func TestMix(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(10), 2))
		c.reserve(3, -1, 1, false) // n > burst
		c.reserve(2, -1, 0, true)
		c.at(1)
		c.allow(2, false) // not enough tokens
		c.reserve(2, -1, 2, true)
		c.allow(1, false) // negative tokens
		c.at(3)
		c.allow(1, true)
	})
}

func TestCancelInvalid(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(10), 2))
		c.reserve(2, -1, 0, true)
		r := c.reserve(3, -1, 3, false)
		c.cancel(r)               // no effect
		c.reserve(2, -1, 2, true) // no extra tokens
	})
}

func TestCancelLast(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(10), 2))
		c.reserve(2, -1, 0, true)
		r := c.reserve(2, -1, 2, true)
		c.at(1)
		c.cancel(r) // 2 tokens back
		c.reserve(2, -1, 2, true)
	})
}

func TestCancelTooLate(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(10), 2))
		c.reserve(2, -1, 0, true)
		r := c.reserve(2, -1, 2, true)
		c.at(3)
		c.cancel(r) // too late: no effect
		c.reserve(2, -1, 4, true)
	})
}

func TestCancel0Tokens(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(10), 2))
		c.reserve(2, -1, 0, true)
		r := c.reserve(1, -1, 1, true)
		c.reserve(1, -1, 2, true)
		c.cancel(r) // 0 tokens back: the later one counted on them
		c.reserve(1, -1, 3, true)
	})
}

func TestCancel1Token(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(10), 2))
		c.reserve(2, -1, 0, true)
		r := c.reserve(2, -1, 2, true)
		c.reserve(1, -1, 3, true)
		// x/time/rate cancels at t2 exactly; here just before it, which gives the same 1
		// token back (the token a later reservation counted on stays taken).
		c.at(1)
		c.cancel(r)
		c.at(2)
		c.reserve(2, -1, 4, true)
	})
}

func TestCancelMulti(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(10), 4))
		c.reserve(4, -1, 0, true)
		rA := c.reserve(3, -1, 3, true)
		c.reserve(1, -1, 4, true)
		rC := c.reserve(1, -1, 5, true)
		c.at(1)
		c.cancel(rC) // 1 token back
		c.cancel(rA) // 2 tokens back, as if C was never reserved
		c.reserve(3, -1, 5, true)
	})
}

// TestReserveSetLimit: x/time/rate sets the limit at t2 exactly; here a little after, and
// the tokens that refilled at the old limit in between move the time to act later by half
// that (in steps). The slack allows for 0.4 steps (100ms) of it.
func TestReserveSetLimit(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(5), 2))
		c.slack = 0.4
		c.reserve(2, -1, 0, true)
		c.reserve(2, -1, 4, true)
		c.at(2)
		if err := c.lim.SetLimit(context.Background(), per(10)); err != nil {
			t.Fatal(err)
		}
		c.reserve(1, -1, 4, true) // violates Limit and Burst
	})
}

func TestReserveSetBurst(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(5), 2))
		c.reserve(2, -1, 0, true)
		c.reserve(2, -1, 4, true)
		c.at(3)
		if err := c.lim.SetBurst(context.Background(), 4); err != nil {
			t.Fatal(err)
		}
		// x/time/rate then reserves at t0, a time before the last call, and gets t9 (-0.5
		// tokens at t3, 4.5 more at 2 steps each, from t0); Redis's clock never goes back, so
		// here it is from t3: t12. Either way it violates the limit and the burst.
		c.reserve(4, -1, 12, true)
	})
}

// TestReserveSetLimitCancel: as TestReserveSetLimit, with its slack.
func TestReserveSetLimitCancel(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(5), 2))
		c.slack = 0.4
		c.reserve(2, -1, 0, true)
		r := c.reserve(2, -1, 4, true)
		c.at(2)
		if err := c.lim.SetLimit(context.Background(), per(10)); err != nil {
			t.Fatal(err)
		}
		c.cancel(r) // 2 tokens back
		c.reserve(2, -1, 3, true)
	})
}

func TestReserveMax(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(per(10), 2))
		c.reserve(2, d, 0, true)
		c.reserve(1, d, 1, true)  // close enough
		c.reserve(1, d, 2, false) // too far
	})
}

func TestZeroLimit(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(0, 1))
		c.allow(1, true)  // the bucket starts full
		c.allow(1, false) // and is never refilled
		c.reserve(1, -1, 0, false)
	})
}

func TestTinyLimit(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(1e-10, 1))
		c.allow(1, true)
		c.allow(1, false)
	})
}

// TestSimultaneousRequests: 15 goroutines Allow at once on a bucket of 5 that refills once a
// second: exactly 5 get through.
func TestSimultaneousRequests(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		lim := mk(Every(10*time.Second), 5)
		var wg sync.WaitGroup
		var n atomic.Int32
		for range 15 {
			wg.Go(func() {
				ok, err := lim.Allow(context.Background())
				if err != nil {
					t.Error(err)
				}
				if ok {
					n.Add(1)
				}
			})
		}
		wg.Wait()
		if n.Load() != 5 {
			t.Errorf("%d allowed, want 5", n.Load())
		}
	})
}

// TestWaitSimple: a cancelled ctx, n over the burst, and a wait of two steps.
func TestWaitSimple(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		lim := mk(per(10), 3)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := lim.Wait(ctx); !errors.Is(err, context.Canceled) || !errors.Is(err, distsync.ErrNotAcquired) {
			t.Errorf("already cancelled: %v", err)
		}
		if err := lim.WaitN(context.Background(), 4); !errors.Is(err, ErrExceedsBurst) {
			t.Errorf("exceed burst: %v", err)
		}
		start := time.Now()
		if err := lim.WaitN(context.Background(), 2); err != nil || time.Since(start) > d {
			t.Errorf("act now: %v after %v", err, time.Since(start))
		}
		start = time.Now()
		if err := lim.WaitN(context.Background(), 3); err != nil {
			t.Errorf("act later: %v", err)
		}
		// 1 token left, 3 wanted: 2 steps, less what passed since the last call.
		if w := time.Since(start); w < 2*d-d/2 {
			t.Errorf("act later: waited %v, want about %v", w, 2*d)
		}
	})
}

// TestWaitCancel: a Wait cancelled while it sleeps gives its 3 tokens back, so 2 are there at
// once after it.
func TestWaitCancel(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		lim := mk(per(10), 3)
		bg := context.Background()
		if err := lim.WaitN(bg, 2); err != nil { // 1 token left
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		time.AfterFunc(d/2, cancel)
		if err := lim.WaitN(ctx, 3); !errors.Is(err, context.Canceled) {
			t.Fatalf("will-cancel: %v", err)
		}
		// The 3 tokens are back: 1 + what refilled, capped at 3 (at most 2 steps passed).
		if tok, err := lim.Tokens(bg); err != nil || tok < 1.5 {
			t.Fatalf("tokens after the cancelled wait: %v, %v; want at least 1.5", tok, err)
		}
		ok, err := lim.AllowN(bg, 1)
		if err != nil || !ok {
			t.Fatalf("act now after cancel: %v, %v", ok, err)
		}
	})
}

// TestWaitTimeout: a Wait whose deadline is before its time to act fails at once, and takes
// nothing.
func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		lim := mk(per(10), 3)
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		if err := lim.WaitN(ctx, 2); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err := lim.WaitN(ctx, 3)
		if !errors.Is(err, ErrWouldExceedDeadline) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distsync.ErrNotAcquired) {
			t.Fatalf("w-timeout-err: %v", err)
		}
		if w := time.Since(start); w > d/2 {
			t.Errorf("failed after %v, want at once", w)
		}
		if tok, err := lim.Tokens(context.Background()); err != nil || tok < 1 {
			t.Errorf("tokens %v, %v: want at least the 1 left", tok, err)
		}
	})
}

// TestWaitInf: with an infinite limit, the burst is ignored.
func TestWaitInf(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		lim := mk(Inf, 0)
		if err := lim.WaitN(context.Background(), 3); err != nil {
			t.Fatal(err)
		}
		if ok, err := lim.AllowN(context.Background(), 1000); !ok || err != nil {
			t.Fatal(ok, err)
		}
	})
}

// TestSetAfterZeroLimit: a limit set above zero refills the bucket from then on.
func TestSetAfterZeroLimit(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		c := newClock(t, mk(0, 1))
		c.allow(1, true)
		c.allow(1, false)
		if err := c.lim.SetLimit(context.Background(), per(10)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := c.lim.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if w := time.Since(start); w < d/2 {
			t.Errorf("waited %v, want about %v", w, d)
		}
	})
}

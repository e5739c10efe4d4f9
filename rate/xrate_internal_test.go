package rate

// golang.org/x/time/rate's own tests (rate/rate_test.go at v0.16.0), ported to the limiter in
// Redis. x/time/rate's tests give each call a time t0, t1, ... (multiples of d); Redis's clock
// cannot be set, so here the calls happen in real time: "at tk" is a sleep until k·d after the
// first call ran (Redis's clock is this machine's), and a test's calls between two sleeps run
// within 0.8 steps of tk (within) for their outcomes to be x/time/rate's. A call later than
// that, on a stalled machine, can see a later step's bucket: a check that then fails ends the
// attempt, and steps runs the test again, with a longer step; a check that fails when every
// call came within the bound fails the test. What the tests check is exact all the same: a
// reservation's time to act by Redis's clock (Reservation.at), against the first call's,
// within a few µs of rounding. Timing within the step cannot shift it: between the bucket's
// being empty and full, its tokens grow linearly, so a reservation's time to act does not
// depend on when in that stretch it was made.
//
// Not ported: TestLimit and TestEvery (x/time/rate's own Limit and Every, which this package
// reuses); TestLimiterJumpBackwards, TestReserveJumpBack and TestReserveJumpBackCancel (a
// caller's clock that goes back: here no caller's clock takes part); TestLimiter_noTruncationErrors
// (x/time/rate's nanosecond arithmetic: Redis's clock counts µs, tested by TestTinyLimit and
// the arithmetic below); the benchmarks.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// d is the test's time step, in its first attempt: a limit of 10 in x/time/rate's tests (a
// token per 100ms there) is a token per step here, and their t1 is a step after t0. A test
// whose attempt a stall spoiled tries again with a step twice as long (scaled).
const d = 250 * time.Millisecond

// scale is an attempt's time step.
type scale struct{ d time.Duration }

// per scales x/time/rate's test limits to the step: 10 -> 1/d.
func (s scale) per(x float64) Limit { return Limit(x / 10 / s.d.Seconds()) }

// within is how long after its step (tk) a call may run for the step's outcome to be
// x/time/rate's at tk. The tests tell apart times a step apart (a token at per(10)), from calls
// up to that late in the same step; TestReserveSetLimit tells a time to act 0.4 steps late
// (its slack), which a SetLimit 0.8 steps late makes. Redis's clock and this process's are
// the same machine's.
func (s scale) within() time.Duration { return 4 * s.d / 5 }

// scaled runs f up to four times, the first with a step of d, each next with a step twice
// as long as the last, until it returns nil: f fails t for what no stall can cause, and
// returns an error if a stall may have spoiled the attempt (redistest.RetryScaled).
func scaled(t *testing.T, f func(s scale) error) {
	t.Helper()
	redistest.RetryScaled(t, 4, d, func(step time.Duration) error { return f(scale{step}) })
}

// clock follows one test's calls: t0 is the first reservation's time to act (Redis's µs).
type clock struct {
	scale
	t     *testing.T
	lim   *Limiter
	slack float64   // steps a time to act may be late by: see TestReserveSetLimit
	last  time.Time // when the last call's reply came
	lastK int       // the step of the last at
	t0    int64
	start bool
	late  string // the first call that came more than within after its step, if one did
}

// maker makes a limiter on the test's backend (see eachBackend).
type maker func(limit Limit, burst int) *Limiter

// lateCall ends an attempt of steps whose check failed after a call came too late after its
// step (within).
type lateCall struct{ err error }

// steps runs f on every backend with a clock on a new limiter of x/time/rate's limit x
// (scaled: per) and burst, and again, with a longer step (scaled), while an attempt ends
// because a check failed after a call came too late for its step: a busy machine's stall,
// which the outcomes checked cannot allow for.
func steps(t *testing.T, x float64, burst int, f func(c *clock)) {
	eachBackend(t, func(t *testing.T, mk maker) {
		scaled(t, func(s scale) (err error) {
			defer func() {
				if r := recover(); r != nil {
					late, ok := r.(lateCall)
					if !ok {
						panic(r)
					}
					err = late.err
				}
			}()
			f(&clock{scale: s, t: t, lim: mk(s.per(x), burst)})
			return nil
		})
	})
}

// at sleeps until k steps after t0 (by Redis's clock, which is this machine's), and at least
// k-j steps after the last call's reply, the call made at tj. The second bound is for a
// bucket that filled up before that call: its refill started again at the call, which came
// a little after tj, not at tj as in x/time/rate's tests. It also keeps a reservation's time
// to act, which its holder counts from the reply, before a cancel meant to come after it.
func (c *clock) at(k int) {
	c.t.Helper()
	if !c.start {
		c.t.Fatal("at before the first call")
	}
	until := time.UnixMicro(c.t0).Add(time.Duration(k) * c.d)
	if u := c.last.Add(time.Duration(k-c.lastK) * c.d); u.After(until) {
		until = u
	}
	time.Sleep(time.Until(until))
	c.lastK = k
}

// made notes a call whose reply just came, starts the clock at the first one
// that took tokens (r, if not nil), and notes if Redis ran the call more than within after
// tk, k its step: its outcome, and every later one's, may then be another step's (see fail).
// A reservation tells when Redis ran it (its time to act less its wait); of a refusal or a
// cancel, the reply's arrival is the latest it can have run. tk is t0 + k·d, the step of a
// bucket that never filled up; after one that did, the step is later (see at), and the call
// less late than it seems: measured from t0 + k·d, no call is found less late than it was.
func (c *clock) made(r *Reservation) {
	c.t.Helper()
	c.last = time.Now()
	late := c.last
	if r != nil && r.ok {
		late = time.UnixMicro(r.at - r.wait.Microseconds())
	}
	if !c.start && r != nil && r.ok {
		c.t0, c.start = r.at, true
	}
	if !c.start {
		return
	}
	if after := late.Sub(time.UnixMicro(c.t0).Add(time.Duration(c.lastK) * c.d)); after > c.within() && c.late == "" {
		c.late = fmt.Sprintf("step %v: a call at t%d ran up to %v after it, more than %v (a stall)",
			c.d, c.lastK, after.Round(time.Millisecond), c.within())
	}
}

// fail fails the test with what a check found, unless a call came too late for its step
// (made) in this attempt: then the outcome may be a later step's, and it ends the attempt.
func (c *clock) fail(format string, args ...any) {
	c.t.Helper()
	if c.late != "" {
		panic(lateCall{fmt.Errorf("%s, after %s", fmt.Sprintf(format, args...), c.late)})
	}
	c.t.Fatalf(format, args...)
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
	if err != nil {
		c.t.Fatalf("reserve(%d): %v", n, err)
	}
	c.made(r)
	if r.ok != ok {
		c.fail("reserve(%d): ok %v, want %v", n, r.ok, ok)
	}
	if ok {
		got := float64(r.at-c.t0) / float64(c.d.Microseconds())
		if got < float64(act)-1e-4 || got > float64(act)+1e-4+c.slack {
			c.fail("reserve(%d): time to act t%.5f, want t%d", n, got, act)
		}
	}
	return r
}

// allow is AllowN(n), checked against ok.
func (c *clock) allow(n int, ok bool) {
	c.t.Helper()
	r, _, err := c.lim.call(context.Background(), n, "0")
	if err != nil {
		c.t.Fatalf("allow(%d): %v", n, err)
	}
	c.made(r)
	if r.ok != ok {
		c.fail("allow(%d): %v, want %v", n, r.ok, ok)
	}
	if ok && r.Delay() != 0 {
		c.t.Fatalf("allow(%d): delay %v", n, r.Delay())
	}
}

func (c *clock) cancel(r *Reservation) {
	c.t.Helper()
	if err := r.Cancel(context.Background()); err != nil {
		c.t.Fatalf("cancel: %v", err)
	}
	c.made(nil)
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
	steps(t, 10, 1, func(c *clock) {
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
	steps(t, 10, 3, func(c *clock) {
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
	steps(t, 10, 2, func(c *clock) {
		c.reserve(2, -1, 0, true)
		c.reserve(2, -1, 2, true)
		c.at(3)
		c.reserve(2, -1, 4, true)
	})
}

func TestMix(t *testing.T) {
	t.Parallel()
	steps(t, 10, 2, func(c *clock) {
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
	steps(t, 10, 2, func(c *clock) {
		c.reserve(2, -1, 0, true)
		r := c.reserve(3, -1, 3, false)
		c.cancel(r)               // no effect
		c.reserve(2, -1, 2, true) // no extra tokens
	})
}

func TestCancelLast(t *testing.T) {
	t.Parallel()
	steps(t, 10, 2, func(c *clock) {
		c.reserve(2, -1, 0, true)
		r := c.reserve(2, -1, 2, true)
		c.at(1)
		c.cancel(r) // 2 tokens back
		c.reserve(2, -1, 2, true)
	})
}

func TestCancelTooLate(t *testing.T) {
	t.Parallel()
	steps(t, 10, 2, func(c *clock) {
		c.reserve(2, -1, 0, true)
		r := c.reserve(2, -1, 2, true)
		c.at(3)
		c.cancel(r) // too late: no effect
		c.reserve(2, -1, 4, true)
	})
}

func TestCancel0Tokens(t *testing.T) {
	t.Parallel()
	steps(t, 10, 2, func(c *clock) {
		c.reserve(2, -1, 0, true)
		r := c.reserve(1, -1, 1, true)
		c.reserve(1, -1, 2, true)
		c.cancel(r) // 0 tokens back: the later one counted on them
		c.reserve(1, -1, 3, true)
	})
}

func TestCancel1Token(t *testing.T) {
	t.Parallel()
	steps(t, 10, 2, func(c *clock) {
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
	steps(t, 10, 4, func(c *clock) {
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
	steps(t, 5, 2, func(c *clock) {
		c.slack = 0.4
		c.reserve(2, -1, 0, true)
		c.reserve(2, -1, 4, true)
		c.at(2)
		if err := c.lim.SetLimit(context.Background(), c.per(10)); err != nil {
			c.t.Fatal(err)
		}
		c.reserve(1, -1, 4, true) // violates Limit and Burst
	})
}

func TestReserveSetBurst(t *testing.T) {
	t.Parallel()
	steps(t, 5, 2, func(c *clock) {
		c.reserve(2, -1, 0, true)
		c.reserve(2, -1, 4, true)
		c.at(3)
		if err := c.lim.SetBurst(context.Background(), 4); err != nil {
			c.t.Fatal(err)
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
	steps(t, 5, 2, func(c *clock) {
		c.slack = 0.4
		c.reserve(2, -1, 0, true)
		r := c.reserve(2, -1, 4, true)
		c.at(2)
		if err := c.lim.SetLimit(context.Background(), c.per(10)); err != nil {
			c.t.Fatal(err)
		}
		c.cancel(r) // 2 tokens back
		c.reserve(2, -1, 3, true)
	})
}

func TestReserveMax(t *testing.T) {
	t.Parallel()
	steps(t, 10, 2, func(c *clock) {
		c.reserve(2, c.d, 0, true)
		c.reserve(1, c.d, 1, true)  // close enough
		c.reserve(1, c.d, 2, false) // too far
	})
}

func TestZeroLimit(t *testing.T) {
	t.Parallel()
	steps(t, 0, 1, func(c *clock) {
		c.allow(1, true)  // the bucket starts full
		c.allow(1, false) // and is never refilled
		c.reserve(1, -1, 0, false)
	})
}

func TestTinyLimit(t *testing.T) {
	t.Parallel()
	steps(t, 1e-10, 1, func(c *clock) {
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
		scaled(t, func(s scale) error {
			d := s.d // this attempt's step
			lim := mk(s.per(10), 3)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := lim.Wait(ctx); !errors.Is(err, context.Canceled) || !errors.Is(err, distsync.ErrNotAcquired) {
				t.Errorf("already cancelled: %v", err)
			}
			if err := lim.WaitN(context.Background(), 4); !errors.Is(err, ErrExceedsBurst) {
				t.Errorf("exceed burst: %v", err)
			}
			start := time.Now()
			if err := lim.WaitN(context.Background(), 2); err != nil {
				t.Fatalf("act now: %v", err)
			}
			now := time.Now()
			if err := lim.WaitN(context.Background(), 3); err != nil {
				t.Errorf("act later: %v", err)
			}
			// 1 token left, 3 wanted: 2 steps after the first WaitN took its 2, by Redis's
			// clock, which was after start: no stall can make that sooner.
			if w := time.Since(start); w < 2*d-d/2 {
				t.Errorf("act later: waited %v since the first WaitN, want about %v", w, 2*d)
			}
			return redistest.Late("act now: WaitN(2) on a full bucket returned", now.Sub(start), d, start, now)
		})
	})
}

// TestWaitCancel: a Wait cancelled while it sleeps gives its 3 tokens back, so 2 are there at
// once after it. It is cancelled when it reports the delay it will sleep (its observer).
func TestWaitCancel(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		var cancelDelayed atomic.Pointer[context.CancelFunc]
		p := b.Pod(t, b.Prefix(t), distsync.WithObserver(func(e distsync.Event) {
			if f := cancelDelayed.Load(); e.Kind == distsync.EventDelayed && f != nil && cancelDelayed.CompareAndSwap(f, nil) {
				(*f)()
			}
		}))
		attempt := 0
		scaled(t, func(s scale) error {
			d := s.d // this attempt's step
			attempt++
			lim, err := NewLimiter(p.H, "x"+strconv.Itoa(attempt), s.per(10), 3)
			if err != nil {
				t.Fatal(err)
			}
			bg := context.Background()
			start := time.Now()
			if err := lim.WaitN(bg, 2); err != nil { // 1 token left
				t.Fatal(err)
			}
			took := time.Now()
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			cancelDelayed.Store(&cancel)
			err = lim.WaitN(ctx, 3)
			returned := time.Now()
			cancelDelayed.Store(nil)
			if err == nil {
				// Its turn had come by the time it was decided, or by the time it went to
				// sleep: 2 steps went by in between (a stall), or it ignored its ctx. The
				// latter fails every attempt.
				return fmt.Errorf("will-cancel: the Wait cancelled as it was delayed returned nil after %v",
					time.Since(took).Round(time.Millisecond))
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("will-cancel: %v", err)
			}
			// The 3 tokens are back: 1 + what refilled since the first WaitN took its 2,
			// capped at 3. Without them, 3 fewer.
			asked := time.Now()
			tok, err := lim.Tokens(bg)
			if want := min(3, 1+float64(asked.Sub(took))/float64(d)) - 1e-3; err != nil || tok < want {
				if err == nil && returned.Sub(start) >= 2*d {
					// Its time to act, 2 steps after the first WaitN, may have come before
					// it gave the tokens back: then there is nothing to give back.
					return fmt.Errorf("tokens after the cancelled wait: %v, want at least %.3f; it returned %v after the first WaitN, which may be past its time to act (a stall)",
						tok, want, returned.Sub(start).Round(time.Millisecond))
				}
				t.Fatalf("tokens after the cancelled wait: %v, %v; want at least %.3f", tok, err, want)
			}
			ok, err := lim.AllowN(bg, 1)
			if err != nil || !ok {
				t.Fatalf("act now after cancel: %v, %v", ok, err)
			}
			return nil
		})
	})
}

// TestWaitTimeout: a Wait whose deadline is before its time to act fails at once, and takes
// nothing. x/time/rate's has a token a step and a deadline a step away, which its second Wait
// (two steps) exceeds; here the tokens come ten times slower, and the deadline is ten steps
// away, so that the first Wait, and the second's decision, come well before it on a busy
// machine too.
func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, mk maker) {
		scaled(t, func(s scale) error {
			d := s.d // this attempt's step
			lim := mk(s.per(1), 3)
			began := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*d)
			defer cancel()
			if err := lim.WaitN(ctx, 2); err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("WaitN(2) on a full bucket with a deadline %v away came after it (a stall): %v", 10*d, err)
				}
				t.Fatal(err)
			}
			start := time.Now()
			err := lim.WaitN(ctx, 3)
			end := time.Now()
			if !errors.Is(err, ErrWouldExceedDeadline) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distsync.ErrNotAcquired) {
				if !errors.Is(err, ErrWouldExceedDeadline) && ctx.Err() != nil {
					// The deadline passed before it was decided: a stall, or a Wait that
					// sleeps until its deadline (which fails every attempt).
					return fmt.Errorf("w-timeout-err: %v, %v after the ctx was made with %v", err, end.Sub(began).Round(time.Millisecond), 10*d)
				}
				t.Fatalf("w-timeout-err: %v", err)
			}
			if tok, err := lim.Tokens(context.Background()); err != nil || tok < 1 {
				t.Errorf("tokens %v, %v: want at least the 1 left", tok, err)
			}
			return redistest.Late("w-timeout: the refusal, which should come at once,", end.Sub(start), d/2, start, end)
		})
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
	steps(t, 0, 1, func(c *clock) {
		c.allow(1, true)
		c.allow(1, false)
		// From before SetLimit: the refill starts when it runs, and no stall can make the
		// token come sooner than a step after that.
		start := time.Now()
		if err := c.lim.SetLimit(context.Background(), c.per(10)); err != nil {
			c.t.Fatal(err)
		}
		if err := c.lim.Wait(context.Background()); err != nil {
			c.t.Fatal(err)
		}
		if w := time.Since(start); w < c.d/2 {
			c.t.Errorf("waited %v, want about %v", w, c.d)
		}
	})
}

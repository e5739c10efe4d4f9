package rate_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/rate"
)

func newLimiter(t *testing.T, p *redistest.Pod, name string, limit rate.Limit, burst int) *rate.Limiter {
	t.Helper()
	l, err := rate.NewLimiter(p.H, name, limit, burst)
	if err != nil {
		t.Fatalf("NewLimiter(%q): %v", name, err)
	}
	return l
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func allow(t *testing.T, l *rate.Limiter, n int) bool {
	t.Helper()
	ok, err := l.AllowN(ctxFor(t, 10*time.Second), n)
	if err != nil {
		t.Fatalf("AllowN(%d): %v", n, err)
	}
	return ok
}

// TestBadInput: bad arguments give ErrInvalid and send nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Mini)
	p := b.Pod(t, b.Prefix(t))
	ctx := ctxFor(t, 10*time.Second)
	for _, c := range []struct {
		name  string
		limit rate.Limit
		burst int
	}{{"", 1, 1}, {"x", -1, 1}, {"x", rate.Limit(math.NaN()), 1}, {"x", 1, -1}} {
		if _, err := rate.NewLimiter(p.H, c.name, c.limit, c.burst); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("NewLimiter(%q, %v, %d): %v, want ErrInvalid", c.name, c.limit, c.burst, err)
		}
	}
	if _, err := rate.NewLimiter(nil, "x", 1, 1); !errors.Is(err, distsync.ErrInvalid) {
		t.Errorf("nil handle: %v", err)
	}
	l := newLimiter(t, p, "x", 1, 1)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", what, err)
		}
	}
	_, err := l.AllowN(ctx, -1)
	check("AllowN(-1)", err)
	_, err = l.ReserveN(ctx, -1)
	check("ReserveN(-1)", err)
	check("WaitN(-1)", l.WaitN(ctx, -1))
	check("SetLimit(-1)", l.SetLimit(ctx, -1))
	check("SetLimit(NaN)", l.SetLimit(ctx, rate.Limit(math.NaN())))
	check("SetBurst(-1)", l.SetBurst(ctx, -1))
	if n := p.Client.Total(); n != 0 {
		t.Errorf("bad input sent %d commands: %v", n, p.Client.Counts())
	}
}

// TestWaitersWakeEachAtTheirTime: n waiters in two processes send one script each and wake
// one at a time, a token's time apart: no polling, no herd.
func TestWaitersWakeEachAtTheirTime(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		pods := []*redistest.Pod{b.Pod(t, prefix), b.Pod(t, prefix)}
		const every = 100 * time.Millisecond
		lims := []*rate.Limiter{newLimiter(t, pods[0], "w", rate.Every(every), 1), newLimiter(t, pods[1], "w", rate.Every(every), 1)}
		// From before the first Allow: the tokens come every after it ran, by Redis's clock,
		// which is this machine's; no stall can bring them sooner.
		start := time.Now()
		if !allow(t, lims[0], 1) { // the bucket is empty now
			t.Fatal("first Allow refused")
		}
		for _, p := range pods {
			p.Client.Reset()
		}
		const n = 6
		woke := make([]time.Duration, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if err := lims[i%2].Wait(ctxFor(t, 20*time.Second)); err != nil {
					t.Error(err)
				}
				woke[i] = time.Since(start)
			})
		}
		wg.Wait()
		slices.Sort(woke)
		for i, w := range woke {
			// The i-th wakes no sooner than its token, (i+1) tokens after the first Allow,
			// which ran after start (half a token spare).
			if min := time.Duration(i+1)*every - every/2; w < min {
				t.Errorf("waiter %d woke after %v, before %v", i, w, min)
			}
		}
		for i, p := range pods {
			if c := p.Client.Counts(); c["EVALSHA"] != n/2 {
				t.Errorf("pod %d sent %v for %d Waits, want one EVALSHA each", i, c, n/2)
			}
		}
	})
}

// TestNeverOverTheRate: goroutines of two processes Wait as fast as they can; the events
// admitted by any time t since the start are at most limit·t + burst, and, demand exceeding
// the rate, most of that. Demand is what the goroutines' round trips let through: on a
// machine too busy for it, the attempt is run again at half the rate, for twice as long.
func TestNeverOverTheRate(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.RetryScaled(t, 4, 20*time.Millisecond, func(every time.Duration) error {
			prefix := b.Prefix(t)
			const burst = 5
			limit := float64(time.Second / every) // 50 a second at first
			run := 100 * every                    // 2 s at first
			start := time.Now()
			ctx := ctxFor(t, run)
			var mu sync.Mutex
			var admitted []time.Duration
			var wg sync.WaitGroup
			for range 2 {
				l := newLimiter(t, b.Pod(t, prefix), "never-over", rate.Limit(limit), burst)
				for range 8 {
					wg.Go(func() {
						for range 1000 { // bounded: about 110 can be admitted
							if err := l.Wait(ctx); err != nil {
								if !errors.Is(err, context.DeadlineExceeded) {
									t.Error(err)
								}
								return
							}
							at := time.Since(start)
							mu.Lock()
							admitted = append(admitted, at)
							mu.Unlock()
						}
					})
				}
			}
			wg.Wait()
			elapsed := time.Since(start)
			slices.Sort(admitted)
			for i, at := range admitted {
				// Recorded after the event's time to act, so never early: a margin of one event.
				if allowed := limit*at.Seconds() + burst + 1; float64(i+1) > allowed {
					t.Fatalf("%d events admitted by %v, at most %.1f allowed", i+1, at, allowed)
				}
			}
			// Tokens nobody took while this process stalled are lost (the bucket keeps a
			// burst): the shortfall, in time at the limit, is allowed the stalls in all.
			ideal := limit*min(elapsed, run).Seconds() + burst
			short := time.Duration((ideal - float64(len(admitted))) / limit * float64(time.Second))
			margin := time.Duration(0.15 * ideal / limit * float64(time.Second))
			if stalled := redistest.StalledTotal(start, start.Add(elapsed)); short > margin+stalled {
				return fmt.Errorf("%d admitted in %v, want most of %.0f: the tokens missing are %v of the limit's, want within %v (+%v this process was stalled in all meanwhile)",
					len(admitted), elapsed, ideal, short.Round(time.Millisecond), margin, stalled.Round(time.Millisecond))
			}
			return nil
		})
	})
}

// Redisson's RRateLimiter bugs, each as a test that would fail if this limiter had it.

// TestRedisson1524AcquireBlocksForever: a Wait on an empty bucket returns once a token is
// due, and does not block forever.
func TestRedisson1524AcquireBlocksForever(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			l := newLimiter(t, b.Pod(t, b.Prefix(t)), "r1524", 10, 1)
			for range 3 {
				start := time.Now()
				if err := l.Wait(ctxFor(t, 10*time.Second)); err != nil {
					t.Fatal(err)
				}
				end := time.Now()
				if err := redistest.Late("Wait, which should take about 100ms,", end.Sub(start), 2*time.Second, start, end); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// TestRedisson1659TryAcquireWithTimeoutBlocksForever: a Wait with a deadline returns by it:
// at once if the token is due after it, with the token if before.
func TestRedisson1659TryAcquireWithTimeoutBlocksForever(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		p := b.Pod(t, b.Prefix(t))
		n := 0
		redistest.Retry(t, 3, func() error {
			n++
			slow := newLimiter(t, p, "r1659-slow"+strconv.Itoa(n), rate.Every(time.Minute), 1)
			if !allow(t, slow, 1) {
				t.Fatal("first Allow refused")
			}
			// A deadline well before the token, a minute away, and well after the call.
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := slow.Wait(ctx); !errors.Is(err, rate.ErrWouldExceedDeadline) {
				t.Fatalf("Wait with a deadline before the token: %v", err)
			}
			end := time.Now()
			return redistest.Late("Wait with a deadline before the token, which should fail at once,", end.Sub(start), 400*time.Millisecond, start, end)
		})
		fast := newLimiter(t, p, "r1659-fast", 10, 1)
		if !allow(t, fast, 1) {
			t.Fatal("first Allow refused")
		}
		if err := fast.Wait(ctxFor(t, 5*time.Second)); err != nil {
			t.Fatalf("Wait with a deadline after the token: %v", err)
		}
	})
}

// TestRedisson2072FirstCallExceedsPermits: a new limiter's first calls get the burst, no
// more, even all at once.
func TestRedisson2072FirstCallExceedsPermits(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		p := b.Pod(t, b.Prefix(t))
		l := newLimiter(t, p, "r2072", rate.Every(time.Minute), 3)
		if allow(t, l, 4) {
			t.Fatal("AllowN(4) on a burst of 3")
		}
		if r, err := l.ReserveN(ctxFor(t, 5*time.Second), 4); err != nil || r.OK() {
			t.Fatalf("ReserveN(4) on a burst of 3: %v, %v", r.OK(), err)
		}
		l2 := newLimiter(t, p, "r2072-concurrent", rate.Every(time.Minute), 3)
		var n atomic.Int32
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if ok, err := l2.Allow(ctxFor(t, 5*time.Second)); err != nil {
					t.Error(err)
				} else if ok {
					n.Add(1)
				}
			})
		}
		wg.Wait()
		if n.Load() != 3 {
			t.Fatalf("%d of 20 first calls allowed, want 3", n.Load())
		}
	})
}

// TestRedisson2931RateExceededAcrossIntervals: no window of ten tokens' time, wherever it
// starts, admits more than its ten + burst: a fixed window would admit 2·burst around its
// boundary. A token every 100ms (a window of a second), and again with slower ones if a stall
// left too few events to tell.
func TestRedisson2931RateExceededAcrossIntervals(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.RetryScaled(t, 4, 100*time.Millisecond, func(every time.Duration) error {
			l := newLimiter(t, b.Pod(t, b.Prefix(t)), "r2931", rate.Every(every), 5)
			start := time.Now()
			var got []time.Duration
			for i := 0; i < 5000 && time.Since(start) < 15*every; i++ {
				if allow(t, l, 1) {
					got = append(got, time.Since(start))
				}
				time.Sleep(time.Millisecond)
			}
			end := time.Now()
			// The i-th event by the first window's start, at most one a token's time after 5
			// at once.
			for i, at := range got {
				if allowed := float64(at)/float64(every) + 5 + 1; float64(i+1) > allowed {
					t.Fatalf("%d events by %v, at most %.1f allowed", i+1, at, allowed)
				}
			}
			// At least 15 of the 20 due: a token missing is a token's time in which this
			// process may have stalled, and the bucket, full, lost what came.
			return redistest.Late(fmt.Sprintf("%d events in %v, want at least 15 of the 20 due: the tokens missing are", len(got), 15*every),
				time.Duration(20-len(got))*every, 5*every, start, end)
		})
	})
}

// TestRedisson5687PermitsStopRefreshing: the bucket refills, cycle after cycle, and after its
// key expired.
func TestRedisson5687PermitsStopRefreshing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A token every 50ms, and again with a slower one (twice as slow each time) if a
		// stall let a token come between two calls made at once.
		redistest.RetryScaled(t, 6, 50*time.Millisecond, func(every time.Duration) error {
			prefix := b.Prefix(t)
			l := newLimiter(t, b.Pod(t, prefix), "r5687", rate.Every(every), 2)
			key := prefix + "{r5687}:rate"
			for cycle := range 4 {
				start := time.Now()
				if !allow(t, l, 2) {
					t.Fatalf("cycle %d: the full burst refused", cycle)
				}
				if allow(t, l, 1) {
					// A token comes every after the burst was taken: if the two calls took
					// longer, by this machine's clock, which is Redis's, it may be that one.
					if took := time.Since(start); took >= every {
						return fmt.Errorf("cycle %d: a token over the burst, %v after the burst was taken, a token every %v (a stall)", cycle, took, every)
					}
					t.Fatalf("cycle %d: a token over the burst", cycle)
				}
				time.Sleep(3 * every) // the bucket is full after two tokens' time, and its key gone
				if n, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Exists().Key(key).Build() }).AsInt64(); err != nil || n != 0 {
					t.Fatalf("cycle %d: the full bucket's key is still there (%d, %v)", cycle, n, err)
				}
			}
			return nil
		})
	})
}

// TestRedisson5487SetRateBreaksTryAcquire: after SetLimit and SetBurst, in another process,
// Allow follows the new settings.
func TestRedisson5487SetRateBreaksTryAcquire(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		a := newLimiter(t, b.Pod(t, prefix), "r5487", rate.Every(time.Minute), 1)
		o := newLimiter(t, b.Pod(t, prefix), "r5487", rate.Every(time.Minute), 1)
		if !allow(t, o, 1) || allow(t, o, 1) {
			t.Fatal("the first token: want one")
		}
		ctx := ctxFor(t, 10*time.Second)
		if err := a.SetLimit(ctx, 20); err != nil {
			t.Fatal(err)
		}
		if err := a.SetBurst(ctx, 3); err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond) // 5 tokens at 20/s: the bucket is full, 3
		if !allow(t, o, 3) {
			t.Fatal("AllowN(3) after SetLimit(20) and SetBurst(3) in another process: refused")
		}
		if o.Limit() != 20 || o.Burst() != 3 {
			t.Errorf("the other process sees limit %v burst %d, want 20 and 3", o.Limit(), o.Burst())
		}
		if err := o.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.SetLimit(ctx, rate.Inf); err != nil {
			t.Fatal(err)
		}
		if !allow(t, o, 100) {
			t.Fatal("AllowN(100) after SetLimit(Inf): refused")
		}
		// Stored settings keep the bucket for SettingsRetention.
		pttl, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Pttl().Key(prefix + "{r5487}:rate").Build() }).AsInt64()
		if err != nil || time.Duration(pttl)*time.Millisecond < rate.SettingsRetention-time.Minute {
			t.Errorf("PTTL %d ms, %v: want about SettingsRetention", pttl, err)
		}
	})
}

// TestClosedHandle: a Wait sleeping for its token returns ErrClosed when the Handle closes,
// having given its reservation back. A token a minute: the Wait sleeps all through the test,
// and the tokens, at -1 while it does, refill by a sixtieth a second.
func TestClosedHandle(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Mini)
	prefix := b.Prefix(t)
	p, other := b.Pod(t, prefix), b.Pod(t, prefix)
	l := newLimiter(t, p, "closed", rate.Every(time.Minute), 1)
	seen := newLimiter(t, other, "closed", rate.Every(time.Minute), 1)
	if !allow(t, l, 1) {
		t.Fatal("first Allow refused")
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctxFor(t, 10*time.Minute)) }()
	// The Wait has reserved its token, and sleeps: the tokens are below zero.
	if !redistest.Eventually(10*time.Second, func() bool {
		tok, err := seen.Tokens(ctxFor(t, 5*time.Second))
		return err == nil && tok < -0.5
	}) {
		t.Fatal("the Wait reserved no token within 10s")
	}
	if err := p.H.Close(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, distsync.ErrClosed) {
			t.Fatalf("Wait: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Wait did not return within 10s of Close")
	}
	tok, err := seen.Tokens(ctxFor(t, 5*time.Second))
	if err != nil || tok < -0.5 {
		t.Fatalf("tokens %v, %v: the closed Wait's token was not given back", tok, err)
	}
}

// lateReply runs the commands that match for real, calls ran (if set) once Redis has run
// one, and, as rueidis does, returns ctx's error if ctx ends before their reply (held back by
// delay) is read.
type lateReply struct {
	rueidis.Client
	delay time.Duration
	match func(cmd []string) bool
	ran   func()
}

func (c lateReply) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if !c.match(cmd.Commands()) {
		return c.Client.Do(ctx, cmd)
	}
	res := c.Client.Do(context.WithoutCancel(ctx), cmd)
	if c.ran != nil {
		c.ran()
	}
	arrives := time.Now().Add(c.delay)
	select {
	case <-time.After(c.delay):
		return res
	case <-ctx.Done():
		if !time.Now().Before(arrives) {
			// Both came while this process stalled: the reply, due first, was read first.
			return res
		}
		return c.Client.Do(ctx, c.Client.B().Ping().Build()) // ctx's error, unsent
	}
}

// A Wait cancelled while its reservation is on its way reads the reply and gives the
// reservation back before it returns: the tokens are not lost. It is cancelled once Redis has
// made the reservation, while the reply is held back.
func TestWaitCancelledInFlightGivesTheTokensBack(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		slow := lateReply{Client: b.Client(t), delay: 300 * time.Millisecond,
			match: redistest.ScriptCall(scripts.RateReserve), ran: cancel}
		l := newLimiter(t, b.PodOn(t, slow, prefix), "inflight", rate.Every(10*time.Second), 1)
		check := newLimiter(t, b.Pod(t, prefix), "inflight", rate.Every(10*time.Second), 1)
		if !allow(t, check, 1) {
			t.Fatal("the first Allow was refused")
		}
		err := l.Wait(ctx)
		if !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want ErrNotAcquired and Canceled", err)
		}
		tok, err := check.Tokens(ctxFor(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if tok < -0.5 {
			t.Errorf("tokens %.3f after the cancelled Wait returned: its reservation was not given back", tok)
		}
	})
}

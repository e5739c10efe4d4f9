package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/semaphore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newSem(t *testing.T, p *redistest.Pod, name string, size int64, opts ...distsync.Option) *semaphore.Semaphore {
	t.Helper()
	s, err := semaphore.New(p.H, name, size, opts...)
	if err != nil {
		t.Fatalf("semaphore.New(%q, %d): %v", name, size, err)
	}
	return s
}

func key(prefix, name, part string) string {
	k := prefix + "{" + name + "}:semaphore"
	if part != "" {
		k += ":" + part
	}
	return k
}

func acquire(t *testing.T, s *semaphore.Semaphore, n int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.Acquire(ctx, n); err != nil {
		t.Fatalf("Acquire(%d): %v", n, err)
	}
}

func release(t *testing.T, s *semaphore.Semaphore, n int64) {
	t.Helper()
	if err := s.Release(context.Background(), n); err != nil {
		t.Fatalf("Release(%d): %v", n, err)
	}
}

func async(s *semaphore.Semaphore, n int64) <-chan error {
	ch := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ch <- s.Acquire(ctx, n)
	}()
	return ch
}

func waitQueued(t *testing.T, b *redistest.Backend, prefix, name string, n int64) {
	t.Helper()
	var got int64
	if !redistest.Eventually(5*time.Second, func() bool {
		got, _ = b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Zcard().Key(key(prefix, name, "q")).Build() }).AsInt64()
		return got == n
	}) {
		t.Fatalf("%d waiters queued, want %d", got, n)
	}
}

// Pods × goroutines acquiring random weights: the permits held never add up to more than the
// size, and they do add up to more than one at times (the semaphore is not a mutex).
func TestNeverMoreThanSize(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const size, pods, goroutines, rounds = 5, 3, 4, 8
		prefix := b.Prefix(t)
		var inUse, peak atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, pods*goroutines*rounds)
		for range pods {
			s := newSem(t, b.Pod(t, prefix), "api", size)
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					for range rounds {
						n := int64(1 + rand.IntN(3))
						if err := s.Acquire(ctx, n); err != nil {
							errs <- err
							return
						}
						u := inUse.Add(n)
						if u > size {
							errs <- fmt.Errorf("%d permits in use, size %d", u, size)
						}
						for p := peak.Load(); u > p && !peak.CompareAndSwap(p, u); p = peak.Load() {
						}
						time.Sleep(2 * time.Millisecond)
						inUse.Add(-n)
						if err := s.Release(ctx, n); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if peak.Load() < 2 {
			t.Fatalf("at most %d permit in use at once: the semaphore serialised everything", peak.Load())
		}
		t.Logf("peak %d of %d permits in use", peak.Load(), size)
	})
}

// A release hands permits to the waiters at the head whose requests fit, in order: a small
// request behind a large one that does not fit yet waits (no overtaking).
func TestReleaseServesTheHeadInOrder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		holder := newSem(t, b.Pod(t, prefix), "fifo", 3)
		acquire(t, holder, 3)
		large := async(newSem(t, b.Pod(t, prefix), "fifo", 3), 2)
		waitQueued(t, b, prefix, "fifo", 1)
		small := async(newSem(t, b.Pod(t, prefix), "fifo", 3), 1)
		waitQueued(t, b, prefix, "fifo", 2)

		release(t, holder, 1) // 1 free: the head wants 2, and the small one must not overtake it
		redistest.Blocks(t, "the small request behind a large one", small, 300*time.Millisecond)
		redistest.Blocks(t, "the large request", large, 0)
		release(t, holder, 1) // 2 free: the large request goes
		redistest.Returns(t, "the large request", large, 2*time.Second)
		redistest.Blocks(t, "the small request", small, 200*time.Millisecond)
		release(t, holder, 1)
		redistest.Returns(t, "the small request", small, 2*time.Second)
	})
}

// A large request at the head is not starved by a stream of small ones from other pods.
func TestLargeRequestIsNotStarved(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const size = 4
		prefix := b.Prefix(t)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var small atomic.Int64
		for range 2 {
			s := newSem(t, b.Pod(t, prefix), "big", size)
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						if s.Acquire(ctx, 1) == nil {
							small.Add(1)
							time.Sleep(time.Duration(5+rand.IntN(10)) * time.Millisecond)
							_ = s.Release(ctx, 1)
						}
						cancel()
					}
				}()
			}
		}
		defer func() { close(stop); wg.Wait() }()
		time.Sleep(300 * time.Millisecond)
		big := newSem(t, b.Pod(t, prefix), "big", size)
		start := time.Now()
		acquire(t, big, size)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("the request for all %d permits waited %v behind 1-permit holds of 15ms at most", size, d)
		}
		t.Logf("all %d permits acquired after %v, among %d small acquisitions", size, time.Since(start), small.Load())
		release(t, big, size)
	})
}

// Permits of a holder that vanished (network cut) come back after their lease.
func TestCrashedHoldersPermitsReturn(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = time.Second
		prefix := b.Prefix(t)
		net := redistest.NewNetwork()
		crashed := newSem(t, b.PodVia(t, prefix, net, distsync.WithLeaseTTL(ttl)), "crash", 2)
		acquire(t, crashed, 2)
		other := newSem(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "crash", 2)
		net.Cut()
		start := time.Now()
		acquire(t, other, 2)
		if d := time.Since(start); d < ttl/2 || d > 3*ttl {
			t.Fatalf("permits came back %v after the crash; lease %v", d, ttl)
		}
		release(t, other, 2)
		net.Restore() // so that the crashed pod's handle closes without waiting out its timeouts
	})
}

// Bad input and misuse: clear errors, Redis unchanged.
func TestMisuse(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := b.Pod(t, prefix)
		s := newSem(t, p, "misuse", 3)
		ctx := context.Background()
		for _, n := range []int64{-1, 4} {
			if err := s.Acquire(ctx, n); !errors.Is(err, distsync.ErrInvalid) {
				t.Errorf("Acquire(%d) of size 3: %v, want ErrInvalid", n, err)
			}
			if _, err := s.TryAcquire(ctx, n); !errors.Is(err, distsync.ErrInvalid) {
				t.Errorf("TryAcquire(%d): %v", n, err)
			}
		}
		for _, n := range []int64{0, -1, 4} {
			if _, err := s.AcquireLease(ctx, n); !errors.Is(err, distsync.ErrInvalid) {
				t.Errorf("AcquireLease(%d): %v, want ErrInvalid", n, err)
			}
			if _, _, err := s.TryAcquireLease(ctx, n); !errors.Is(err, distsync.ErrInvalid) {
				t.Errorf("TryAcquireLease(%d): %v, want ErrInvalid", n, err)
			}
		}
		// Zero permits, as in x/sync: Acquire and TryAcquire succeed, Release does nothing.
		if err := s.Acquire(ctx, 0); err != nil {
			t.Errorf("Acquire(0): %v", err)
		}
		if ok, err := s.TryAcquire(ctx, 0); !ok || err != nil {
			t.Errorf("TryAcquire(0): %v %v", ok, err)
		}
		if err := s.Release(ctx, 0); err != nil {
			t.Errorf("Release(0): %v", err)
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Acquire(done, 0); !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire(0) with a cancelled ctx: %v", err)
		}
		if keys := b.Keys(t, prefix); len(keys) != 0 {
			t.Fatalf("bad requests wrote to Redis: %v", keys)
		}
		if err := s.Release(ctx, 1); !errors.Is(err, distsync.ErrNotHeld) {
			t.Errorf("Release without Acquire: %v", err)
		}
		acquire(t, s, 2)
		snapshot := func() string {
			kv, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Hgetall().Key(key(prefix, "misuse", "n")).Build()
			}).AsStrMap()
			return fmt.Sprint(kv)
		}
		before := snapshot()
		if err := s.Release(ctx, 3); !errors.Is(err, distsync.ErrNotHeld) {
			t.Errorf("Release(3) of 2 held: %v", err)
		}
		if err := s.Release(ctx, -1); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("Release(-1): %v", err)
		}
		if after := snapshot(); after != before {
			t.Errorf("a refused Release changed Redis: %s -> %s", before, after)
		}
		release(t, s, 1)
		release(t, s, 1)
		for _, bad := range []int64{0, -3} {
			if _, err := semaphore.New(p.H, "x", bad); !errors.Is(err, distsync.ErrInvalid) {
				t.Errorf("New with size %d: %v", bad, err)
			}
		}
		if _, err := semaphore.New(p.H, "", 1); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New with an empty name: %v", err)
		}
	})
}

// Two programs that disagree on the size get a clear error; Resize changes it on purpose.
func TestSizeIsPartOfTheIdentity(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		three := newSem(t, b.Pod(t, prefix), "sized", 3)
		four := newSem(t, b.Pod(t, prefix), "sized", 4)
		acquire(t, three, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := four.Acquire(ctx, 1)
		if !errors.Is(err, semaphore.ErrSizeMismatch) {
			t.Fatalf("Acquire with another size: %v, want ErrSizeMismatch", err)
		}
		if _, err := four.TryAcquire(ctx, 1); !errors.Is(err, semaphore.ErrSizeMismatch) {
			t.Fatalf("TryAcquire with another size: %v", err)
		}
		if err := three.Resize(ctx, 4); err != nil {
			t.Fatal(err)
		}
		if ok, err := four.TryAcquire(ctx, 1); err != nil || !ok {
			t.Fatalf("TryAcquire after Resize to its size: %v %v (3 of 4 held)", ok, err)
		}
		if _, err := newSem(t, b.Pod(t, prefix), "sized", 3).TryAcquire(ctx, 1); !errors.Is(err, semaphore.ErrSizeMismatch) {
			t.Fatalf("the old size after Resize: %v", err)
		}
		release(t, four, 1)
		release(t, three, 3)
	})
}

// Waiters whose context ends leave no entry; permits granted to them go on to others.
func TestCancelledWaitersLeaveNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		holder := newSem(t, b.Pod(t, prefix), "cancel", 2)
		acquire(t, holder, 2)
		w := newSem(t, b.Pod(t, prefix), "cancel", 2)
		for _, n := range []int64{2, 1} {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			err := w.Acquire(ctx, n)
			cancel()
			if !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("cancelled Acquire: %v", err)
			}
		}
		waitQueued(t, b, prefix, "cancel", 0)
		if !redistest.Eventually(2*time.Second, func() bool {
			n, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Hlen().Key(key(prefix, "cancel", "qn")).Build() }).AsInt64()
			return n == 0
		}) {
			t.Fatal("requests of cancelled waiters left behind")
		}
		entries, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Zrange().Key(key(prefix, "cancel", "qx")).Min("0").Max("-1").Build()
		}).AsStrSlice()
		for _, e := range entries {
			if !strings.HasPrefix(e, "!") {
				t.Errorf("place %q of a cancelled waiter left", e)
			}
		}
		release(t, holder, 2)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if ok, err := w.TryAcquire(ctx, 2); err != nil || !ok {
			t.Fatalf("TryAcquire(2) after the cancelled waiters: %v %v", ok, err)
		}
		release(t, w, 2)
		if keys := b.KeysWithoutTTL(t, prefix); len(keys) > 0 {
			t.Errorf("keys without a TTL: %v", keys)
		}
	})
}

// Idle waiters send nothing but the renewals of their places (batched) and the backstop.
func TestIdleWaitersDoNotPoll(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The holder's lease is long enough for a loaded machine never to lose it.
		const ttl, wlease, waiters = 3 * time.Second, 900 * time.Millisecond, 3
		prefix := b.Prefix(t)
		opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(wlease)}
		holder := newSem(t, b.Pod(t, prefix, opts...), "idle", 2)
		acquire(t, holder, 2)
		wp := b.Pod(t, prefix, opts...)
		w := newSem(t, wp, "idle", 2)
		res := make(chan error, waiters)
		for range waiters {
			go func() { res <- <-async(w, 1) }()
		}
		waitQueued(t, b, prefix, "idle", waiters)
		time.Sleep(200 * time.Millisecond)
		const window = 3 * time.Second
		wp.Client.Reset()
		time.Sleep(window)
		// As for fair: place renewals (one per waiter per renewal period), backstop re-checks
		// (one per waiter per holder lease), at most one pipeline per eighth of a renewal
		// period; a loaded machine only sends fewer.
		periods := int(window/(wlease/3)) + 1
		backstops := waiters * (int(window/ttl) + 1)
		if limit := (periods+1)*waiters + backstops; wp.Client.Total() > limit {
			t.Errorf("idle waiters sent %d commands in %v, want at most %d", wp.Client.Total(), window, limit)
		}
		if n, limit := len(wp.Client.Pipelines()), 8*periods+backstops; n > limit {
			t.Errorf("%d renewal pipelines in %v, want at most %d", n, window, limit)
		}
		release(t, holder, 2) // two of the waiters get in, then the third
		redistest.Returns(t, "a waiter", res, 2*time.Second)
		redistest.Returns(t, "another waiter", res, 2*time.Second)
		redistest.Blocks(t, "the third waiter", res, 100*time.Millisecond)
		release(t, w, 1)
		redistest.Returns(t, "the third waiter", res, 2*time.Second)
		release(t, w, 2)
	})
}

// Permits lost behind their holder's back end its lease; Release reports the loss.
func TestLossIsSignalled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 900 * time.Millisecond
		prefix := b.Prefix(t)
		s := newSem(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "loss", 2)
		ctx := context.Background()
		lease, err := s.AcquireLease(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(key(prefix, "loss", "")).Build() })
		select {
		case <-lease.Done():
		case <-time.After(ttl/3 + time.Second):
			t.Fatal("loss not signalled within a renewal period")
		}
		if err := s.Release(ctx, 2); !errors.Is(err, distsync.ErrNotHeld) || !errors.Is(err, distsync.ErrLost) {
			t.Fatalf("Release after the loss: %v", err)
		}
	})
}

// A cancelled Acquire has left the semaphore as it was when it returns: with every permit
// free right after, TryAcquire of all of them succeeds at once. (x/sync promises the same:
// go.dev/issue/63615.)
func TestCancelledAcquireHasLeftWhenItReturns(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		s := newSem(t, b.Pod(t, prefix), "gone", 2)
		for round := range 15 {
			acquire(t, s, 1)
			ctx, cancel := context.WithCancel(context.Background())
			ch := make(chan error, 1)
			go func() { ch <- s.Acquire(ctx, 2) }()
			waitQueued(t, b, prefix, "gone", 1)
			cancel()
			release(t, s, 1) // races with the leaving: the permits may be granted to the waiter
			select {
			case err := <-ch:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Fatalf("cancelled Acquire = %v", err)
				}
				if err == nil {
					release(t, s, 2) // it got them before it saw the cancel
					continue
				}
			case <-time.After(5 * time.Second):
				t.Fatal("cancelled Acquire did not return")
			}
			ok, err := s.TryAcquire(context.Background(), 2)
			if err != nil || !ok {
				t.Fatalf("round %d: TryAcquire(2) right after the cancelled Acquire returned = %v, %v: it had not left", round, ok, err)
			}
			release(t, s, 2)
		}
	})
}

// Two dead waiters in a row at the head (one dead process had two calls queued): the permits
// granted to the first lapse, and the second, which watched the grant, is dead too. The live
// waiter behind them still gets its permit within about a waiter lease and a renewal period
// (its own place renewal, once it is the head, serves the queue), not at its backstop, a
// holder's lease later.
func TestDeadWaitersInARowDoNotStallTheQueue(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const wlease = time.Second
		prefix := b.Prefix(t)
		opts := []distsync.Option{distsync.WithWaiterLease(wlease)}
		holder := newSem(t, b.Pod(t, prefix, opts...), "row", 2)
		acquire(t, holder, 2)
		net := redistest.NewNetwork()
		dead := newSem(t, b.PodVia(t, prefix, net, opts...), "row", 2)
		dctx, dcancel := context.WithCancel(context.Background())
		defer dcancel()
		for i := range 2 {
			go func() { _ = dead.Acquire(dctx, 2) }()
			waitQueued(t, b, prefix, "row", int64(i+1))
		}
		live := newSem(t, b.Pod(t, prefix, opts...), "row", 2)
		res := async(live, 1)
		waitQueued(t, b, prefix, "row", 3)
		net.Cut() // both calls of the dead process are gone; their places have not lapsed yet
		start := time.Now()
		release(t, holder, 2) // grants the first dead call, which the second (dead) watches
		select {
		case err := <-res:
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 2*wlease+time.Second {
				t.Fatalf("the live waiter got its permit %v after the release; waiter lease %v", d, wlease)
			} else {
				t.Logf("two dead waiters skipped in %v (waiter lease %v)", d, wlease)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the live waiter never got its permit")
		}
		release(t, live, 1)
		net.Restore()
	})
}

// An Acquire blocked when its Handle closes returns ErrClosed, having left the queue.
func TestCloseEndsBlockedAcquire(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		holder := newSem(t, b.Pod(t, prefix), "closing", 1)
		acquire(t, holder, 1)
		p := b.Pod(t, prefix)
		s := newSem(t, p, "closing", 1)
		res := make(chan error, 1)
		go func() { res <- s.Acquire(context.Background(), 1) }()
		waitQueued(t, b, prefix, "closing", 1)
		if err := p.H.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-res:
			if !errors.Is(err, distsync.ErrClosed) {
				t.Fatalf("Acquire blocked on a closing Handle = %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Acquire did not return when its Handle closed")
		}
		waitQueued(t, b, prefix, "closing", 0)
		release(t, holder, 1)
	})
}

// Status counts the permits in use and the waiters across processes, and changes nothing.
func TestStatus(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		a := newSem(t, b.Pod(t, prefix), "status", 4)
		c := newSem(t, b.Pod(t, prefix), "status", 4)
		ctx := context.Background()
		st, err := a.Status(ctx)
		if err != nil || st != (semaphore.Status{Available: 4}) {
			t.Fatalf("Status of an unused semaphore: %+v %v", st, err)
		}
		if keys := b.Keys(t, prefix); len(keys) != 0 {
			t.Fatalf("Status wrote to Redis: %v", keys)
		}
		acquire(t, a, 1)
		acquire(t, c, 2)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- c.Acquire(wctx, 3) }()
		want := semaphore.Status{Size: 4, InUse: 3, Available: 1, Waiters: 1, Wanted: 3}
		var got semaphore.Status
		if !redistest.Eventually(10*time.Second, func() bool { got, err = a.Status(ctx); return err == nil && got == want }) {
			t.Fatalf("Status with 3 held and 3 wanted: %+v %v, want %+v", got, err, want)
		}
		cancel()
		<-done
		release(t, a, 1)
		release(t, c, 2)
		if got, err := c.Status(ctx); err != nil || got.InUse != 0 || got.Waiters != 0 || got.Available != 4 {
			t.Fatalf("Status after everything was given back: %+v %v", got, err)
		}
	})
}

// lastExpiry returns when the last lease in zset k lapses (k holds owner -> expiry in ms on
// the server's clock), as a local time.
func lastExpiry(t *testing.T, b *redistest.Backend, k string) time.Time {
	t.Helper()
	e, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Zrange().Key(k).Min("-1").Max("-1").Withscores().Build()
	}).AsZScores()
	if err != nil || len(e) != 1 {
		t.Fatalf("the last lease in %s: %v, %v", k, e, err)
	}
	local := time.Now()
	tm, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Time().Build() }).AsStrSlice()
	if err != nil || len(tm) != 2 {
		t.Fatalf("TIME: %v, %v", tm, err)
	}
	s, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	now := s*1000 + us/1000
	return local.Add(time.Duration(int64(e[0].Score)-now) * time.Millisecond)
}

// Holders that die (their network cut) are replaced a round trip after their leases run out:
// each renewal of a holder tells the head of the queue when its request would fit if no holder
// renewed again, and the head re-checks right after that, not at its backstop (up to a third
// of a lease later). The waiter lease is long, so that the head's place renewal (which also
// serves the queue) does not mask it.
func TestDeadHoldersPermitsAreServedAtTheirExpiry(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 3 * time.Second
		prefix := b.Prefix(t)
		opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(30 * time.Second)}
		net := redistest.NewNetwork()
		dead := []*semaphore.Semaphore{
			newSem(t, b.PodVia(t, prefix, net, opts...), "dead", 2),
			newSem(t, b.PodVia(t, prefix, net, opts...), "dead", 2),
		}
		waiter := newSem(t, b.Pod(t, prefix, opts...), "dead", 2)
		acquired := time.Now()
		for _, s := range dead {
			acquire(t, s, 1)
		}
		res := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res <- waiter.Acquire(ctx, 2) // fits once both dead holders' permits are back
		}()
		waitQueued(t, b, prefix, "dead", 1)
		// Past the holders' second renewal: a head that only knew the leases it saw when it
		// queued would now wake half a second after they ran out, at the earliest.
		time.Sleep(time.Until(acquired.Add(2*ttl/3 + 200*time.Millisecond)))
		net.Cut()
		expiry := lastExpiry(t, b, key(prefix, "dead", ""))
		select {
		case err := <-res:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(ttl + 20*time.Second):
			t.Fatal("the waiter never got the dead holders' permits")
		}
		late := time.Since(expiry)
		t.Logf("the waiter got the dead holders' permits %v after their leases ran out", late)
		if late > 350*time.Millisecond {
			t.Fatalf("the waiter got the permits %v after the dead holders' leases ran out, want within a few round trips", late)
		}
		release(t, waiter, 2)
		net.Restore()
	})
}

// The head of the queue sends nothing while the holders renew: each renewal tells it when its
// request would fit if no holder renewed again, and that moment only moves later. Here two
// holders renew out of phase, and the head's request of 1 fits at whichever lease runs out
// first, which changes at every renewal. (The waiter lease is long: its place renewal, once
// per 20 s, is what the head may send.)
func TestIdleHeadSendsNothingWhileHoldersRenew(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl, window = 2 * time.Second, 6 * time.Second
		prefix := b.Prefix(t)
		opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(time.Minute)}
		holders := []*semaphore.Semaphore{newSem(t, b.Pod(t, prefix, opts...), "quiet", 2), newSem(t, b.Pod(t, prefix, opts...), "quiet", 2)}
		acquire(t, holders[0], 1)
		time.Sleep(ttl / 6)
		acquire(t, holders[1], 1)
		wp := b.Pod(t, prefix, opts...)
		head := newSem(t, wp, "quiet", 2)
		res := async(head, 1)
		waitQueued(t, b, prefix, "quiet", 1)
		time.Sleep(200 * time.Millisecond)
		from := time.Now()
		time.Sleep(window)
		if sent := wp.Client.Since(from); len(sent) > 1 {
			t.Errorf("the idle head sent %d commands in %v while the holders renewed (lease %v), want at most its place renewal: %v", len(sent), window, ttl, sent)
		}
		release(t, holders[0], 1)
		redistest.Returns(t, "the head, after a release", res, 2*time.Second)
		release(t, holders[1], 1)
		release(t, head, 1)
	})
}

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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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

// giveBack is release for a scenario run under [redistest.Retry]: permits lost because their
// holder's process stalled past their lease (a loaded machine) are an error to retry on.
func giveBack(t *testing.T, s *semaphore.Semaphore, n int64) error {
	t.Helper()
	err := s.Release(context.Background(), n)
	if errors.Is(err, distsync.ErrLost) {
		return fmt.Errorf("Release(%d): %w", n, err)
	}
	if err != nil {
		t.Fatalf("Release(%d): %v", n, err)
	}
	return nil
}

// async runs Acquire(n) in the background, bounded so that a hang fails rather than stalls.
func async(s *semaphore.Semaphore, n int64) <-chan redistest.Returned {
	return redistest.Async(context.Background(), func(context.Context) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return s.Acquire(ctx, n)
	})
}

// blocks fails t if the Acquire ch runs returns within d.
func blocks(t *testing.T, what string, ch <-chan redistest.Returned, d time.Duration) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned (%v) while it should wait", what, r.Err)
	case <-time.After(d):
	}
}

// served waits for the Acquire ch runs, fails t if it fails or hangs, and returns an error,
// for [redistest.Retry], if it returned more than margin after from (plus what this process
// was stalled meanwhile).
func served(t *testing.T, what string, ch <-chan redistest.Returned, from time.Time, margin time.Duration) error {
	t.Helper()
	r := redistest.Await(t, ch, 20*time.Second)
	if r.Err != nil {
		t.Fatalf("%s: %v", what, r.Err)
	}
	return redistest.Late(what, r.At.Sub(from), margin, from, r.At)
}

// waitSubscribed waits until a process listens for the waiters of name: the calls that
// queued have subscribed, and re-check once more, at once.
func waitSubscribed(t *testing.T, b *redistest.Backend, prefix, name string) {
	t.Helper()
	if !redistest.Eventually(30*time.Second, func() bool { return len(b.Channels(t, key(prefix, name, "ch")+":*")) > 0 }) {
		t.Fatalf("nobody subscribed to the waiters' channels of %q", name)
	}
}

func waitQueued(t *testing.T, b *redistest.Backend, prefix, name string, n int64) {
	t.Helper()
	if got, ok := queued(t, b, prefix, name, n); !ok {
		t.Fatalf("%d waiters queued, want %d", got, n)
	}
}

// queued waits (30 s at most) until n waiters are queued, and reports whether they were, with
// how many were.
func queued(t *testing.T, b *redistest.Backend, prefix, name string, n int64) (int64, bool) {
	t.Helper()
	var got int64
	ok := redistest.Eventually(30*time.Second, func() bool {
		got, _ = b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Zcard().Key(key(prefix, name, "q")).Build() }).AsInt64()
		return got == n
	})
	return got, ok
}

// leaseLost returns an error, for [redistest.Retry], if one of the leases was lost: its
// holder's process stalled past it (a loaded machine), and what the test saw came of that.
func leaseLost(leases ...*distsync.Lease) error {
	for _, l := range leases {
		if err := l.Err(); errors.Is(err, distsync.ErrLost) {
			return fmt.Errorf("a holder's lease was lost: %w", err)
		}
	}
	return nil
}

// Pods × goroutines acquiring random weights: the permits held never add up to more than the
// size, and they do add up to more than one at times (the semaphore is not a mutex).
func TestNeverMoreThanSize(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const size, pods, goroutines, rounds = 5, 3, 4, 8
		prefix := b.Prefix(t)
		var (
			mu   sync.Mutex
			held = map[*distsync.Lease]int64{} // the permits the goroutines hold, by lease
			peak int64
		)
		var wg sync.WaitGroup
		errs := make(chan error, pods*goroutines*rounds)
		for range pods {
			p := b.Pod(t, prefix)
			for range goroutines {
				s := newSem(t, p, "api", size) // a value each: its Release gives back its own hold
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					for range rounds {
						n := int64(1 + rand.IntN(3))
						lease, err := s.AcquireLease(ctx, n)
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						held[lease] = n
						var u int64
						lost := false
						for l, k := range held {
							u += k
							// A hold whose process stalled past its lease (a loaded machine) is
							// lost, and its permits rightly go on: it no longer counts as held.
							lost = lost || l.Err() != nil
						}
						if u > size && !lost {
							errs <- fmt.Errorf("%d permits in use, size %d", u, size)
						}
						peak = max(peak, u)
						mu.Unlock()
						time.Sleep(2 * time.Millisecond)
						mu.Lock()
						delete(held, lease)
						mu.Unlock()
						if err := s.Release(ctx, n); err != nil && !(errors.Is(err, distsync.ErrLost) && errors.Is(lease.Err(), distsync.ErrLost)) {
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
		if peak < 2 {
			t.Fatalf("at most %d permit in use at once: the semaphore serialised everything", peak)
		}
		t.Logf("peak %d of %d permits in use", peak, size)
	})
}

// A release hands permits to the waiters at the head whose requests fit, in order: a small
// request behind a large one that does not fit yet waits (no overtaking). The waiters it
// serves return at once, not at their backstop, a holder's lease (10 s) later.
func TestReleaseServesTheHeadInOrder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			holder := newSem(t, b.Pod(t, prefix), "fifo", 3)
			acquire(t, holder, 3)
			// The waiters' places last a minute: on a loaded machine, a place that lapsed for a
			// late renewal would let the small request, behind it, head the queue.
			wopts := []distsync.Option{distsync.WithWaiterLease(time.Minute)}
			large := async(newSem(t, b.Pod(t, prefix, wopts...), "fifo", 3), 2)
			waitQueued(t, b, prefix, "fifo", 1)
			small := async(newSem(t, b.Pod(t, prefix, wopts...), "fifo", 3), 1)
			waitQueued(t, b, prefix, "fifo", 2)

			release(t, holder, 1) // 1 free: the head wants 2, and the small one must not overtake it
			// Release grants inside Redis: had it let the small request in, Redis would say
			// so now, however late its Acquire hears of it.
			want := semaphore.Status{Size: 3, InUse: 2, Available: 1, Waiters: 2, Wanted: 3}
			if st, err := holder.Status(context.Background()); err != nil || st != want {
				t.Fatalf("Status after a release that fits only the small request: %+v, %v; want %+v", st, err, want)
			}
			blocks(t, "the small request behind a large one", small, 300*time.Millisecond)
			blocks(t, "the large request", large, 0)
			released := time.Now()
			release(t, holder, 1) // 2 free: the large request goes
			if err := served(t, "the large request", large, released, 2*time.Second); err != nil {
				return err
			}
			blocks(t, "the small request", small, 200*time.Millisecond)
			released = time.Now()
			release(t, holder, 1)
			return served(t, "the small request", small, released, 2*time.Second)
		})
	})
}

// A large request at the head is not starved by a stream of small ones from other pods.
func TestLargeRequestIsNotStarved(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const size = 4
		redistest.Retry(t, 3, func() error {
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
			// The stream is flowing before the large request joins it.
			if !redistest.Eventually(30*time.Second, func() bool { return small.Load() >= 20 }) {
				t.Fatalf("%d small acquisitions in 30 s", small.Load())
			}
			big := newSem(t, b.Pod(t, prefix), "big", size)
			start := time.Now()
			acquire(t, big, size)
			got := time.Now()
			t.Logf("all %d permits acquired after %v, among %d small acquisitions", size, got.Sub(start), small.Load())
			release(t, big, size)
			return redistest.Late(fmt.Sprintf("the request for all %d permits, behind 1-permit holds of 15ms at most, came", size),
				got.Sub(start), 2*time.Second, start, got)
		})
	})
}

// Permits of a holder that vanished (network cut) come back after their lease: not before it
// ran out in Redis, and not long after.
func TestCrashedHoldersPermitsReturn(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A lease of a second, doubled at each attempt: a stall that outlasted the lease
		// before the cut spoils an attempt, not the next.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			// So that the crashed pod's handle closes without waiting out its timeouts.
			t.Cleanup(net.Restore)
			crashed := newSem(t, b.PodVia(t, prefix, net, distsync.WithLeaseTTL(ttl)), "crash", 2)
			other := newSem(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "crash", 2)
			acquire(t, crashed, 2)
			holds := key(prefix, "crash", "")
			holders, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Zrange().Key(holds).Min("0").Max("-1").Build()
			}).AsStrSlice()
			if err == nil && len(holders) == 0 {
				return errors.New("the holder's lease was over when it was read after Acquire returned")
			}
			if err != nil || len(holders) != 1 {
				t.Fatalf("the holders: %v, %v", holders, err)
			}
			net.Cut()
			cut := time.Now()
			// Read after the cut: a renewal still on its way could only make the lease end
			// later, never earlier.
			expiry, _, ok := leaseEnds(t, b, holds, holders)
			if !ok {
				// A loaded machine stalled the holder past its lease before the cut, or this
				// read past the lease.
				return errors.New("the holder's lease was over when it was read after the cut")
			}
			acquire(t, other, 2)
			back := time.Now()
			if back.Before(expiry) {
				t.Fatalf("permits came back %v before the crashed holder's lease ran out in Redis (lease %v)", expiry.Sub(back), ttl)
			}
			if err := giveBack(t, other, 2); err != nil {
				return err
			}
			net.Restore()
			t.Logf("permits came back %v after the crash, %v after the lease ran out", back.Sub(cut), back.Sub(expiry))
			// The check this test had from the cut, 3 leases, less the lease that could be
			// left at the cut.
			return redistest.Late("the crashed holder's permits came back", back.Sub(expiry), 2*ttl, cut, back)
		})
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
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
		// The waiters' places would lapse a minute after the calls: what is gone before, their
		// calls took away.
		w := newSem(t, b.Pod(t, prefix, distsync.WithWaiterLease(time.Minute)), "cancel", 2)
		for _, n := range []int64{2, 1} {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			err := w.Acquire(ctx, n)
			cancel()
			if !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("cancelled Acquire: %v", err)
			}
		}
		waitQueued(t, b, prefix, "cancel", 0)
		if !redistest.Eventually(10*time.Second, func() bool {
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
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
		const wlease, waiters = 900 * time.Millisecond, 3
		// The holder's lease (and the window, as long) is 3 s, doubled at each attempt: a
		// loaded machine that stalled the holder past it spoils an attempt, not the next.
		redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(wlease)}
			prefix := b.Prefix(t)
			holder := newSem(t, b.Pod(t, prefix, opts...), "idle", 2)
			held, err := holder.AcquireLease(context.Background(), 2)
			if err != nil {
				t.Fatal(err)
			}
			wp := b.Pod(t, prefix, opts...)
			w := newSem(t, wp, "idle", 2)
			res := make(chan redistest.Returned, waiters)
			for range waiters {
				go func() { res <- <-async(w, 1) }()
			}
			if got, ok := queued(t, b, prefix, "idle", waiters); !ok {
				if err := leaseLost(held); err != nil {
					return err // the waiters took its permits
				}
				t.Fatalf("%d waiters queued, want %d", got, waiters)
			}
			waitSubscribed(t, b, prefix, "idle")
			window := ttl
			wp.Client.Reset()
			from := time.Now()
			time.Sleep(window)
			total, pipelines := wp.Client.Total(), len(wp.Client.Pipelines())
			elapsed := time.Since(from) // a loaded machine oversleeps: the bounds count from what passed
			// As for fair: place renewals (one per waiter per renewal period), backstop
			// re-checks (one per waiter per holder lease), at most one pipeline per eighth of a
			// renewal period; a loaded machine only sends fewer. (Retried: what the waiters
			// sent on subscribing may come late into the window.)
			periods := int(elapsed/(wlease/3)) + 1
			backstops := waiters * (int(elapsed/ttl) + 1)
			if limit := (periods+1)*waiters + backstops; total > limit {
				return fmt.Errorf("idle waiters sent %d commands in %v, want at most %d", total, elapsed, limit)
			}
			if limit := 8*periods + backstops; pipelines > limit {
				return fmt.Errorf("%d renewal pipelines in %v, want at most %d", pipelines, elapsed, limit)
			}
			released := time.Now()
			// Two of the waiters get in, then the third.
			if err := holder.Release(context.Background(), 2); err != nil {
				if lerr := leaseLost(held); lerr != nil {
					return lerr // the waiters' re-checks came of it
				}
				t.Fatalf("Release(2): %v", err)
			}
			if err := served(t, "a waiter", res, released, 2*time.Second); err != nil {
				return err
			}
			if err := served(t, "another waiter", res, released, 2*time.Second); err != nil {
				return err
			}
			select {
			case r := <-res:
				// Only if a grant's first renewal came too late (a stall of a waiter lease):
				// then its permit went on, and the hold it made is lost.
				if err := w.Release(context.Background(), 3); errors.Is(err, distsync.ErrLost) {
					return fmt.Errorf("the third waiter got in (%v) past a grant that lapsed: %w", r.Err, err)
				}
				t.Fatalf("the third waiter returned (%v) while it should wait", r.Err)
			case <-time.After(100 * time.Millisecond):
			}
			released = time.Now()
			if err := giveBack(t, w, 1); err != nil {
				return err
			}
			if err := served(t, "the third waiter", res, released, 2*time.Second); err != nil {
				return err
			}
			return giveBack(t, w, 2)
		})
	})
}

// Permits lost behind their holder's back end its lease; Release reports the loss within a
// renewal period.
func TestLossIsSignalled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 900 * time.Millisecond
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			s := newSem(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "loss", 2)
			ctx := context.Background()
			lease, err := s.AcquireLease(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(key(prefix, "loss", "")).Build() })
			deleted := time.Now()
			select {
			case <-lease.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("loss not signalled")
			}
			told := time.Now()
			if err := s.Release(ctx, 2); !errors.Is(err, distsync.ErrNotHeld) || !errors.Is(err, distsync.ErrLost) {
				t.Fatalf("Release after the loss: %v", err)
			}
			return redistest.Late("the loss was signalled", told.Sub(deleted), ttl/3+time.Second, deleted, told)
		})
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
			case <-time.After(20 * time.Second):
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
		opts := []distsync.Option{distsync.WithWaiterLease(wlease)}
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			holder := newSem(t, b.Pod(t, prefix, opts...), "row", 2)
			acquire(t, holder, 2)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
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
			// Not at the live waiter's backstop, a holder's lease (10 s) later.
			late := served(t, "the live waiter, behind two dead ones, got its permit", res, start, 2*wlease+time.Second)
			if late == nil {
				t.Logf("two dead waiters skipped in %v (waiter lease %v)", time.Since(start), wlease)
			}
			release(t, live, 1)
			net.Restore()
			return late
		})
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
		case <-time.After(20 * time.Second):
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

// Holders that die (their network cut) are replaced a round trip after their leases run out:
// each renewal of a holder tells the head of the queue when its request would fit if no holder
// renewed again, and the head re-checks right after that, not at its backstop (up to a third
// of a lease later). The waiter lease is long, so that the head's place renewal (which also
// serves the queue) does not mask it.
func TestDeadHoldersPermitsAreServedAtTheirExpiry(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A lease of 3 s, doubled at each attempt, and the margin with it: a head that waited
		// for its backstop would be late by a sixth of a lease or more, well over the margin.
		redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
			margin := 350 * time.Millisecond * ttl / (3 * time.Second)
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(30 * time.Second)}
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			dead := []*semaphore.Semaphore{
				newSem(t, b.PodVia(t, prefix, net, opts...), "dead", 2),
				newSem(t, b.PodVia(t, prefix, net, opts...), "dead", 2),
			}
			waiter := newSem(t, b.Pod(t, prefix, opts...), "dead", 2)
			for _, s := range dead {
				acquire(t, s, 1)
			}
			holds := key(prefix, "dead", "")
			holders, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Zrange().Key(holds).Min("0").Max("-1").Build()
			}).AsStrSlice()
			if err == nil && len(holders) < 2 {
				return errors.New("a holder's lease was over when it was read after Acquire returned")
			}
			if err != nil || len(holders) != 2 {
				t.Fatalf("the holders: %v, %v", holders, err)
			}
			initial, _, ok := leaseEnds(t, b, holds, holders)
			if !ok {
				return errors.New("a holder's lease was over when it was read after Acquire returned")
			}
			res := redistest.Async(context.Background(), func(context.Context) error {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				return waiter.Acquire(ctx, 2) // fits once both dead holders' permits are back
			})
			waitQueued(t, b, prefix, "dead", 1)
			// Past the holders' second renewal, as Redis shows it: the earlier lease now ends
			// half a lease after the later one did at first. A head that only knew the leases
			// it saw when it queued would now wake half a second after they ran out, at the
			// earliest.
			if !redistest.Eventually(3*ttl, func() bool {
				_, earliest, ok := leaseEnds(t, b, holds, holders)
				return !ok || !earliest.Before(initial.Add(ttl/2))
			}) {
				t.Fatalf("the holders did not renew twice in %v", 3*ttl)
			}
			net.Cut()
			cut := time.Now()
			// Read after the cut: a renewal still on its way could only make the leases end
			// later.
			expiry, _, ok := leaseEnds(t, b, holds, holders)
			if !ok {
				// A loaded machine stalled a holder past its lease before the cut, or this read
				// past the leases.
				return errors.New("a holder's lease was over when it was read after the cut")
			}
			r := redistest.Await(t, res, ttl+20*time.Second)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			late := r.At.Sub(expiry)
			t.Logf("the waiter got the dead holders' permits %v after their leases ran out", late)
			if late < 0 {
				t.Fatalf("the waiter got the permits %v before the dead holders' leases ran out in Redis", -late)
			}
			if err := giveBack(t, waiter, 2); err != nil {
				return err
			}
			net.Restore()
			return redistest.Late("the waiter got the dead holders' permits", late, margin, cut, r.At)
		})
	})
}

// leaseEnds returns when the last and the first of the leases of holders in zset k (holder ->
// expiry in ms on the server's clock) run out, as local times no later than the true ones
// (the local time is read before the server's); ok is false if one of them has run out, or is
// gone.
func leaseEnds(t *testing.T, b *redistest.Backend, k string, holders []string) (last, first time.Time, ok bool) {
	t.Helper()
	local := time.Now()
	// One script, so that the clock and the leases are read at once.
	vs, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Eval().Script(`local out = redis.call('TIME')
for _, h in ipairs(ARGV) do out[#out+1] = redis.call('ZSCORE', KEYS[1], h) or '' end
return out`).Numkeys(1).Key(k).Arg(holders...).Build()
	}).AsStrSlice()
	if err != nil || len(vs) != 2+len(holders) {
		t.Fatalf("the leases in %s: %v, %v", k, vs, err)
	}
	s, _ := strconv.ParseInt(vs[0], 10, 64)
	us, _ := strconv.ParseInt(vs[1], 10, 64)
	now := s*1_000_000 + us // in µs: TIME truncated to ms could put the expiry up to 1 ms late
	for i, v := range vs[2:] {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms*1000 <= now {
			return time.Time{}, time.Time{}, false
		}
		end := local.Add(time.Duration(ms*1000-now) * time.Microsecond)
		if i == 0 || end.After(last) {
			last = end
		}
		if i == 0 || end.Before(first) {
			first = end
		}
	}
	return last, first, true
}

// The head of the queue sends nothing while the holders renew: each renewal tells it when its
// request would fit if no holder renewed again, and that moment only moves later. Here two
// holders renew out of phase, and the head's request of 1 fits at whichever lease runs out
// first, which changes at every renewal. (The waiter lease is long: its place renewal, once
// per 20 s, is what the head may send.)
func TestIdleHeadSendsNothingWhileHoldersRenew(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const wlease = time.Minute
		// The holders' leases are 2 s (the window three of them), doubled at each attempt: a
		// loaded machine that stalled a holder past its lease spoils an attempt, not the next.
		redistest.RetryScaled(t, 3, 2*time.Second, func(ttl time.Duration) error {
			window := 3 * ttl
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(wlease)}
			prefix := b.Prefix(t)
			holders := []*semaphore.Semaphore{newSem(t, b.Pod(t, prefix, opts...), "quiet", 2), newSem(t, b.Pod(t, prefix, opts...), "quiet", 2)}
			var held []*distsync.Lease
			for i, s := range holders {
				if i > 0 {
					time.Sleep(ttl / 6) // out of phase
				}
				l, err := s.AcquireLease(context.Background(), 1)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, l)
			}
			wp := b.Pod(t, prefix, opts...)
			head := newSem(t, wp, "quiet", 2)
			res := async(head, 1)
			if got, ok := queued(t, b, prefix, "quiet", 1); !ok {
				if err := leaseLost(held...); err != nil {
					return err // the head took its permit
				}
				t.Fatalf("%d waiters queued, want 1", got)
			}
			waitSubscribed(t, b, prefix, "quiet")
			from := time.Now()
			time.Sleep(window)
			sent := wp.Client.Since(from)
			elapsed := time.Since(from) // a loaded machine oversleeps: the bound counts from what passed
			// (Retried: what the head sent on subscribing may come late into the window, and a
			// holder's renewal delayed past its lease's end makes the head re-check.)
			if limit := int(elapsed/(wlease/3)) + 1; len(sent) > limit {
				if err := leaseLost(held...); err != nil {
					return err // the head's re-check came of it
				}
				return fmt.Errorf("the idle head sent %d commands in %v while the holders renewed (lease %v), want at most its place renewal: %v",
					len(sent), elapsed, ttl, sent)
			}
			released := time.Now()
			if err := holders[0].Release(context.Background(), 1); err != nil {
				if lerr := leaseLost(held...); lerr != nil {
					return lerr // the head's re-check came of it
				}
				t.Fatalf("Release(1): %v", err)
			}
			if err := served(t, "the head, after a release,", res, released, 2*time.Second); err != nil {
				return err
			}
			if err := giveBack(t, holders[1], 1); err != nil {
				return err
			}
			return giveBack(t, head, 1)
		})
	})
}

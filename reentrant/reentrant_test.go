package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/reentrant"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newMutex(t *testing.T, p *redistest.Pod, name string, opts ...distsync.Option) *reentrant.Mutex {
	t.Helper()
	m, err := reentrant.New(p.H, name, opts...)
	if err != nil {
		t.Fatalf("reentrant.New(%q): %v", name, err)
	}
	return m
}

func owned(o reentrant.Owner) context.Context { return reentrant.WithOwner(context.Background(), o) }

func within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

func lock(t *testing.T, m *reentrant.Mutex, ctx context.Context) {
	t.Helper()
	ctx, cancel := within(ctx, 10*time.Second)
	defer cancel()
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("Lock(%s): %v", m.Name(), err)
	}
}

// reenter takes m once more for the owner in ctx, which holds it; if the hold had been lost,
// which only a machine stalled for most of a lease does to a hold that is renewed, it returns
// an error, for redistest.Retry.
func reenter(t *testing.T, m *reentrant.Mutex, ctx context.Context) error {
	t.Helper()
	ctx, cancel := within(ctx, 10*time.Second)
	defer cancel()
	switch err := m.Lock(ctx); {
	case errors.Is(err, distsync.ErrLost):
		return fmt.Errorf("the re-entry found the hold lost (the machine stalled?): %w", err)
	case err != nil:
		t.Fatalf("Lock(%s): %v", m.Name(), err)
	}
	return nil
}

// released unlocks m for the owner in ctx, a hold the test kept; if the hold had been lost,
// which only a machine stalled for most of a lease does to a hold that is renewed, it returns
// an error, for redistest.Retry.
func released(t *testing.T, m *reentrant.Mutex, ctx context.Context) error {
	t.Helper()
	switch err := m.Unlock(ctx); {
	case errors.Is(err, distsync.ErrLost):
		return fmt.Errorf("a hold the test kept was lost (the machine stalled?): %w", err)
	case err != nil:
		t.Fatalf("Unlock(%s): %v", m.Name(), err)
	}
	return nil
}

func unlock(t *testing.T, m *reentrant.Mutex, ctx context.Context) {
	t.Helper()
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("Unlock(%s): %v", m.Name(), err)
	}
}

func tryLock(t *testing.T, m *reentrant.Mutex, ctx context.Context) bool {
	t.Helper()
	ok, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock(%s): %v", m.Name(), err)
	}
	return ok
}

func key(prefix, name string) string { return prefix + "{" + name + "}:reentrant" }

// count returns the hold count Redis has for owner o (0 when the mutex is free).
func count(t *testing.T, b *redistest.Backend, prefix, name string, o reentrant.Owner) int64 {
	t.Helper()
	res := b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Hget().Key(key(prefix, name)).Field("o:" + string(o)).Build()
	})
	if rueidis.IsRedisNil(res.Error()) {
		return 0
	}
	n, err := res.AsInt64()
	if err != nil {
		t.Fatalf("HGET count: %v", err)
	}
	return n
}

// Nested calls by one owner count up and down in Redis; another owner is kept out until the
// last Unlock; every nested Lock has the outermost Lock's token.
func TestReentryCountsNestedCalls(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		m := newMutex(t, b.Pod(t, prefix), "nest")
		other := newMutex(t, b.Pod(t, prefix), "nest")
		a, z := owned(reentrant.NewOwner()), owned(reentrant.NewOwner())
		ao, _ := reentrant.OwnerFrom(a)

		var token int64
		for depth := 1; depth <= 3; depth++ {
			lock(t, m, a)
			if got := count(t, b, prefix, "nest", ao); got != int64(depth) {
				t.Fatalf("after %d Locks Redis counts %d", depth, got)
			}
			if got := m.HoldCount(a); got != depth {
				t.Fatalf("HoldCount = %d after %d Locks", got, depth)
			}
			tok := m.Lease(a).Token()
			if depth == 1 {
				token = tok
			} else if tok != token {
				t.Fatalf("nested Lock %d has token %d, the outermost %d", depth, tok, token)
			}
			if tryLock(t, other, z) {
				t.Fatalf("another owner took the mutex held %d times", depth)
			}
		}
		for depth := 2; depth >= 0; depth-- {
			unlock(t, m, a)
			if got := count(t, b, prefix, "nest", ao); got != int64(depth) {
				t.Fatalf("after Unlock down to %d Redis counts %d", depth, got)
			}
			if depth > 0 && tryLock(t, other, z) {
				t.Fatalf("another owner took the mutex still held %d times", depth)
			}
		}
		if m.Lease(a) != nil || m.HoldCount(a) != 0 {
			t.Fatal("the owner still has a hold after its last Unlock")
		}
		if !tryLock(t, other, z) {
			t.Fatal("another owner could not take the mutex after the last Unlock")
		}
		if tok := other.Lease(z).Token(); tok <= token {
			t.Fatalf("next outermost token %d not above %d", tok, token)
		}
		unlock(t, other, z)
	})
}

// Goroutines sharing one owner re-enter each other's hold concurrently; the count ends
// where it started and another owner never gets in while any of them holds.
func TestGoroutinesSharingAnOwner(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const goroutines, rounds = 8, 10
		prefix := b.Prefix(t)
		m := newMutex(t, b.Pod(t, prefix), "shared")
		other := newMutex(t, b.Pod(t, prefix), "shared")
		o := reentrant.NewOwner()
		a := owned(o)
		lock(t, m, a) // the base hold: the others re-enter it

		var wg sync.WaitGroup
		errs := make(chan error, goroutines*rounds)
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					ctx, cancel := within(a, time.Minute)
					if err := m.Lock(ctx); err != nil {
						errs <- err
						cancel()
						return
					}
					if err := m.Unlock(ctx); err != nil {
						errs <- err
					}
					cancel()
				}
			}()
		}
		z := owned(reentrant.NewOwner())
		for range 5 {
			if tryLock(t, other, z) {
				t.Error("another owner took the mutex while goroutines of its owner held it")
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got := count(t, b, prefix, "shared", o); got != 1 {
			t.Fatalf("count %d after %d balanced Lock/Unlock pairs on a hold of 1", got, goroutines*rounds)
		}
		unlock(t, m, a)
		if !tryLock(t, other, z) {
			t.Fatal("mutex not free after the base hold was unlocked")
		}
		unlock(t, other, z)
	})
}

// A second process given the owner re-enters the first's hold; the mutex is free (and a
// waiter woken) only when both have unlocked.
func TestTwoProcessesShareAnOwner(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			p1 := newMutex(t, b.Pod(t, prefix), "handover")
			p2 := newMutex(t, b.Pod(t, prefix), "handover")
			waiter := newMutex(t, b.Pod(t, prefix), "handover")
			o := reentrant.NewOwner()
			lock(t, p1, owned(o))
			token := p1.Lease(owned(o)).Token()

			// The token travels as a string, as it would in a message to another process.
			carried := reentrant.Owner(string(o))
			if !tryLock(t, p2, owned(carried)) {
				t.Fatal("a second process with the owner could not re-enter")
			}
			if got := p2.Lease(owned(carried)).Token(); got != token {
				t.Fatalf("re-entry from another process has token %d, want the outermost %d", got, token)
			}
			if got := count(t, b, prefix, "handover", o); got != 2 {
				t.Fatalf("count %d, want 2", got)
			}

			z := owned(reentrant.NewOwner())
			ctx, cancel := within(z, 30*time.Second)
			defer cancel()
			done := lockAsync(ctx, waiter)
			waitQueued(t, b, prefix, "handover", 1)

			unlock(t, p1, owned(o))
			select {
			case r := <-done:
				t.Fatalf("waiter returned (%v) while the second process still held the owner's hold", r.Err)
			case <-time.After(300 * time.Millisecond):
			}
			unlock(t, p2, owned(carried))
			unlocked := time.Now()
			r := wait(t, done, 20*time.Second)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			t.Logf("waiter woken %v after the last Unlock", r.At.Sub(unlocked))
			unlock(t, waiter, z)
			// Without the wake-up it would re-check only at its backstop, about a lease (10 s) later.
			return redistest.Late("the waiter, woken by the last Unlock, got in", r.At.Sub(unlocked), 5*time.Second, unlocked, r.At)
		})
	})
}

// Several pods, several owners each, nested Locks of random depth: never two owners inside at
// once, and each outermost acquisition's token is above the one before.
func TestOwnersExcludeEachOther(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const pods, goroutines, rounds = 3, 3, 8
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			var inside atomic.Int32
			var mu sync.Mutex
			var tokens []int64
			var wg sync.WaitGroup
			errs := make(chan error, pods*goroutines*rounds)
			for range pods {
				m := newMutex(t, b.Pod(t, prefix), "hot")
				for range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := within(owned(reentrant.NewOwner()), time.Minute)
						defer cancel()
						for range rounds {
							depth := 1 + rand.IntN(3)
							for d := range depth {
								if err := m.Lock(ctx); err != nil {
									errs <- err
									return
								}
								if d == 0 {
									if n := inside.Add(1); n != 1 {
										errs <- fmt.Errorf("%d owners inside", n)
									}
									mu.Lock()
									tokens = append(tokens, m.Lease(ctx).Token())
									mu.Unlock()
								}
							}
							inside.Add(-1)
							for range depth {
								if err := m.Unlock(ctx); err != nil {
									errs <- err
									return
								}
							}
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			var all []error
			for err := range errs {
				all = append(all, err)
			}
			// A hold lost (which only a machine stalled for most of a lease does to a hold that is
			// renewed) lets the next holder in while its holder is still inside: the premise of
			// the scenario is gone, not the property.
			if err := errors.Join(all...); errors.Is(err, distsync.ErrLost) {
				return fmt.Errorf("a hold was lost: %w", err)
			} else if err != nil {
				t.Error(err)
			}
			if len(tokens) != pods*goroutines*rounds {
				t.Fatalf("%d outermost acquisitions, want %d", len(tokens), pods*goroutines*rounds)
			}
			if !slices.IsSorted(tokens) || len(slices.Compact(slices.Clone(tokens))) != len(tokens) {
				t.Fatalf("tokens do not strictly increase: %v", tokens)
			}
			return nil
		})
	})
}

// A Lock or Unlock whose reply is lost is retried and still counts once.
func TestLostRepliesCountOnce(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		d := redistest.NewFaulty(b.Client(t))
		m := newMutex(t, b.PodOn(t, d, prefix), "flaky")
		o := reentrant.NewOwner()
		a := owned(o)
		want := func(n int64) {
			t.Helper()
			if got := count(t, b, prefix, "flaky", o); got != n {
				t.Fatalf("Redis counts %d, want %d", got, n)
			}
			if got := m.HoldCount(a); int64(got) != n {
				t.Fatalf("HoldCount %d, want %d", got, n)
			}
		}

		d.Drop(1, redistest.ScriptCall(scripts.ReentrantLock))
		lock(t, m, a) // outermost, through the waiting room
		want(1)
		d.Drop(1, redistest.ScriptCall(scripts.ReentrantLock))
		lock(t, m, a) // re-entry
		want(2)
		d.Drop(1, redistest.ScriptCall(scripts.ReentrantUnlock))
		unlock(t, m, a)
		want(1)
		d.Drop(2, redistest.ScriptCall(scripts.ReentrantUnlock))
		unlock(t, m, a)
		want(0)
		if got := d.Dropped(); got != 5 {
			t.Fatalf("%d replies dropped, want 5: the test did not inject what it meant to", got)
		}
		if n := b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Exists().Key(key(prefix, "flaky")).Build()
		}); must(n.AsInt64()) != 0 {
			t.Fatal("mutex key left behind")
		}
	})
}

func must(n int64, err error) int64 {
	if err != nil {
		panic(err)
	}
	return n
}

// Unlock by an owner that does not hold, more Unlocks than Locks, a call without an owner:
// clear errors, and Redis unchanged.
func TestMisuse(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := b.Pod(t, prefix)
		m := newMutex(t, p, "misuse")
		o := reentrant.NewOwner()
		a := owned(o)
		lock(t, m, a)
		snapshot := func() string {
			res := b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Hgetall().Key(key(prefix, "misuse")).Build()
			})
			kv, err := res.AsStrMap()
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprint(kv)
		}
		before := snapshot()
		check := func(what string, err error, target error) {
			t.Helper()
			if !errors.Is(err, target) {
				t.Errorf("%s: %v, want %v", what, err, target)
			}
			if after := snapshot(); after != before {
				t.Errorf("%s changed Redis: %s -> %s", what, before, after)
			}
		}
		check("Unlock by a non-owner", m.Unlock(owned(reentrant.NewOwner())), distsync.ErrNotHeld)
		check("Unlock without an owner", m.Unlock(context.Background()), distsync.ErrInvalid)
		check("Lock without an owner", m.Lock(context.Background()), distsync.ErrInvalid)
		_, err := m.TryLock(context.Background())
		check("TryLock without an owner", err, distsync.ErrInvalid)
		// The same owner through another process that never locked: not its hold to give back.
		check("Unlock by a process that holds nothing", newMutex(t, b.Pod(t, prefix), "misuse").Unlock(a), distsync.ErrNotHeld)

		unlock(t, m, a)
		before = snapshot()
		check("Unlock after the last Unlock", m.Unlock(a), distsync.ErrNotHeld)

		if _, err := reentrant.New(p.H, ""); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New with an empty name: %v", err)
		}
		if _, err := reentrant.New(p.H, "x", distsync.WithLeaseTTL(0)); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New with a zero TTL: %v", err)
		}
		if _, err := reentrant.New(p.H, "x", distsync.WithFixedLease(-time.Second)); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New with a negative lease: %v", err)
		}
	})
}

// An idle waiter sends at most the backstop re-check (one per lease) while the holder renews,
// and is woken soon after the Unlock, long before the lease would have run out.
func TestIdleWaiterDoesNotPollAndWakesPromptly(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Every time scales with the lease: 1 s in the first attempt, longer in the next.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			holder := newMutex(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "idle")
			wp := b.Pod(t, prefix, distsync.WithLeaseTTL(ttl))
			waiter := newMutex(t, wp, "idle")
			a, z := owned(reentrant.NewOwner()), owned(reentrant.NewOwner())
			lock(t, holder, a)
			if err := reenter(t, holder, a); err != nil {
				return err
			}

			ctx, cancel := within(z, 30*time.Second)
			defer cancel()
			res := lockAsync(ctx, waiter)
			// Queued and subscribed: the waiter then has at most its re-check after subscribing
			// left to send (one round trip), which the bound below leaves room for.
			if err := redistest.Waiting(t, "the waiter queues and subscribes", func() bool {
				return queued(t, b, prefix, "idle") == 1 && len(b.Channels(t, key(prefix, "idle")+":ch:*")) > 0
			}, res); err != nil {
				return err
			}
			window := 3 * ttl
			from := time.Now()
			time.Sleep(window)
			sent := wp.Client.Since(from)
			// A premise only a machine stalled for most of a lease breaks: the holder kept it.
			if err := holder.Lease(a).Err(); err != nil {
				return fmt.Errorf("the holder lost its renewed hold (%v) while the waiter was watched", err)
			}
			if limit := int(window/ttl) + 1; len(sent) > limit {
				t.Fatalf("idle waiter sent %d commands in %v (lease %v), want at most %d", len(sent), window, ttl, limit)
			}
			for range 2 {
				if err := released(t, holder, a); err != nil {
					return err
				}
			}
			released := time.Now()
			r := wait(t, res, 10*time.Second)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			unlock(t, waiter, z)
			return redistest.Late(fmt.Sprintf("the waiter, woken by the Unlock (lease %v), got in", ttl), r.At.Sub(released), ttl/2, released, r.At)
		})
	})
}

// A waiter whose context ends returns an error matching both ErrNotAcquired and the context's
// error, and leaves no count behind: the holder's count is untouched, and after the holder's
// Unlock the mutex is free.
func TestCancelledWaiterLeavesNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		holder := newMutex(t, b.Pod(t, prefix), "cancel")
		wp := b.Pod(t, prefix)
		waiter := newMutex(t, wp, "cancel")
		o := reentrant.NewOwner()
		lock(t, holder, owned(o))
		ctx, cancel := within(owned(reentrant.NewOwner()), 300*time.Millisecond)
		defer cancel()
		err := waiter.Lock(ctx)
		if !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled Lock returned %v", err)
		}
		if got := count(t, b, prefix, "cancel", o); got != 1 {
			t.Fatalf("holder's count %d after a waiter gave up", got)
		}
		unlock(t, holder, owned(o))
		ok := redistest.Eventually(5*time.Second, func() bool {
			for _, k := range b.Keys(t, prefix) {
				if k == key(prefix, "cancel") {
					return false
				}
			}
			return true
		})
		if !ok {
			t.Fatalf("keys left: %v", b.Keys(t, prefix))
		}
		if keys := b.KeysWithoutTTL(t, prefix); len(keys) > 0 {
			t.Errorf("keys without a TTL: %v", keys)
		}
	})
}

// Deleting the hold behind the holder's back fires its loss signal within a renewal period;
// Unlock then reports the loss, and re-entering a lost hold fails rather than hide it.
func TestLossIsSignalled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 900 * time.Millisecond
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			m := newMutex(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "loss")
			a := owned(reentrant.NewOwner())
			lock(t, m, a)
			if err := reenter(t, m, a); err != nil {
				return err
			}
			lease := m.Lease(a)
			b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(key(prefix, "loss")).Build() })
			deleted := time.Now()
			select {
			case <-lease.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("loss not signalled")
			}
			signalled := time.Now()
			if !errors.Is(lease.Err(), distsync.ErrLost) {
				t.Fatalf("lease ended with %v, want ErrLost", lease.Err())
			}
			if err := m.Lock(a); !errors.Is(err, distsync.ErrLost) {
				t.Fatalf("re-entering a lost hold: %v, want ErrLost", err)
			}
			if err := m.Unlock(a); !errors.Is(err, distsync.ErrNotHeld) || !errors.Is(err, distsync.ErrLost) {
				t.Fatalf("Unlock after the loss: %v, want ErrNotHeld and ErrLost", err)
			}
			if err := m.Unlock(a); !errors.Is(err, distsync.ErrNotHeld) || !errors.Is(err, distsync.ErrLost) {
				t.Fatalf("second Unlock after the loss: %v", err)
			}
			if err := m.Unlock(a); !errors.Is(err, distsync.ErrNotHeld) || errors.Is(err, distsync.ErrLost) {
				t.Fatalf("Unlock beyond the Locks: %v, want plain ErrNotHeld", err)
			}
			lock(t, m, a) // a fresh outermost hold works
			unlock(t, m, a)
			return redistest.Late("counted from the deletion, the loss was signalled", signalled.Sub(deleted), ttl/3+time.Second, deleted, signalled)
		})
	})
}

// A holder that vanishes (network cut: no renewal, no Unlock) is replaced after its lease:
// once it ran out, and not before.
func TestCrashedHolderIsReplacedAfterTTL(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Every time scales with the lease: 1 s in the first attempt, longer in the next.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			holder := newMutex(t, b.PodVia(t, prefix, net, distsync.WithLeaseTTL(ttl)), "crash")
			waiter := newMutex(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "crash")
			obs := b.Client(t)
			a, z := owned(reentrant.NewOwner()), owned(reentrant.NewOwner())
			lock(t, holder, a)
			if err := reenter(t, holder, a); err != nil {
				return err
			}
			tok := holder.Lease(a).Token()
			net.Cut()
			// When the hold runs out, by Redis's clock: read after the cut, so that no renewal
			// moves it later.
			expiry, err := expiresAt(t, obs, key(prefix, "crash"), tok)
			if err != nil {
				return err
			}
			lock(t, waiter, z)
			in := time.Now()
			if early := expiry.Sub(in); early > 0 {
				t.Fatalf("waiter got the mutex %v before the crashed holder's lease ran out; lease %v", early, ttl)
			}
			select {
			case <-holder.Lease(a).Done():
			case <-time.After(2 * ttl):
				t.Fatal("the crashed holder's lease did not end")
			}
			if err := released(t, waiter, z); err != nil {
				return err
			}
			t.Logf("waiter got the mutex %v after the crashed holder's lease ran out", in.Sub(expiry))
			return redistest.Late("the waiter, after the crashed holder's lease ran out, got the mutex", in.Sub(expiry), 2*ttl, expiry, in)
		})
	})
}

func TestLocker(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		m := newMutex(t, b.Pod(t, b.Prefix(t)), "locker")
		l := m.Locker(reentrant.NewOwner())
		l.Lock()
		l.Lock()
		l.Unlock() //lint:ignore SA2001 the Locker's Lock and Unlock are what is tested
		l.Unlock()
		defer func() {
			if recover() == nil {
				t.Fatal("Locker.Unlock of an unheld mutex did not panic")
			}
		}()
		l.Unlock()
	})
}

// A re-entry that is in flight while its hold's lease runs out (Redis is paused past the
// lease) does not count in the hold that is gone, nor start a new one: it returns the loss,
// the Unlocks still to come report it too, the local count and Redis's never diverge, no
// token is handed out twice, and other owners get the mutex once the old hold lapsed.
func TestReentryInFlightAcrossALostLease(t *testing.T) {
	// Not parallel: it pauses the shared redis-server, which every other test of the package
	// uses on that backend.
	b := redistest.Open(t, redistest.Standalone)
	const ttl = 600 * time.Millisecond
	redistest.Retry(t, 3, func() error {
		prefix := b.Prefix(t)
		sent := redistest.NewSendLog(b.Client(t), redistest.ScriptCall(scripts.ReentrantLock))
		m := newMutex(t, b.PodOn(t, sent, prefix, distsync.WithLeaseTTL(ttl)), "paused")
		other := newMutex(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "paused")
		a := owned(reentrant.NewOwner())
		lock(t, m, a)
		lock(t, m, a)
		tok := m.Lease(a).Token()

		if err := b.Server.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		paused := time.Now()
		resumed := false
		defer func() {
			if !resumed {
				_ = b.Server.Signal(syscall.SIGCONT)
			}
		}()
		before := sent.Sent()
		rctx, cancel := within(a, 20*time.Second)
		defer cancel()
		res := lockAsync(rctx, m) // waits in the socket while Redis is paused
		// The re-entry is in flight once sent; if the hold's local deadline passed before it
		// could be (the process stalled for most of a lease), it fails without being sent, and
		// the case did not happen.
		if !redistest.Eventually(10*time.Second, func() bool { return sent.Sent() > before || len(res) > 0 }) {
			t.Fatal("the re-entry was neither sent nor did it return")
		}
		if sent.Sent() == before {
			r := <-res
			return fmt.Errorf("the re-entry returned (%v) without being sent: the hold had ended first (the machine stalled)", r.Err)
		}
		time.Sleep(time.Until(paused.Add(ttl + 400*time.Millisecond))) // the lease runs out meanwhile
		if err := b.Server.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		resumed = true
		if r := wait(t, res, 15*time.Second); r.Err == nil || !errors.Is(r.Err, distsync.ErrLost) {
			t.Fatalf("a re-entry whose hold's lease ran out while it was in flight = %v, want ErrLost", r.Err)
		}
		for i := range 2 {
			if err := m.Unlock(a); !errors.Is(err, distsync.ErrNotHeld) || !errors.Is(err, distsync.ErrLost) {
				t.Fatalf("Unlock %d after the loss = %v, want ErrNotHeld and ErrLost", i+1, err)
			}
		}
		if n := m.HoldCount(a); n != 0 {
			t.Fatalf("HoldCount = %d after every Unlock", n)
		}
		if n := count(t, b, prefix, "paused", ownerOf(a)); n != 0 {
			t.Fatalf("Redis still counts %d for the owner", n)
		}
		bctx := owned(reentrant.NewOwner())
		ctx, cancel := within(bctx, 5*time.Second)
		defer cancel()
		if err := other.Lock(ctx); err != nil {
			t.Fatalf("another owner could not take the mutex after the lost hold: %v", err)
		}
		tok2 := other.Lease(bctx).Token()
		unlock(t, other, bctx)
		lock(t, m, a)
		if tok3 := m.Lease(a).Token(); tok2 <= tok || tok3 <= tok2 {
			t.Fatalf("tokens %d, %d, %d: a token was handed out again", tok, tok2, tok3)
		}
		unlock(t, m, a)
		return nil
	})
}

// expiresAt returns when the hold under key k expires, by Redis's clock, which is this
// host's (the servers run here): exact, however long the read took. c is a client made
// beforehand, so that the read comes at once. The hold is the one with token tok; if k holds
// another now, or nothing (the hold lapsed first, on a machine that stalled for most of a
// lease), it returns an error, for redistest.Retry.
func expiresAt(t *testing.T, c rueidis.Client, k string, tok int64) (time.Time, error) {
	t.Helper()
	vals, err := c.Do(context.Background(), c.B().Eval().Script(tokenAndExpiry).Numkeys(1).Key(k).Build()).ToArray()
	if err != nil || len(vals) != 2 {
		t.Fatalf("the token and the expiry of %s: %v, %v", k, vals, err)
	}
	v, _ := vals[0].ToString()
	ms, _ := vals[1].AsInt64()
	switch {
	case v != strconv.FormatInt(tok, 10):
		return time.Time{}, fmt.Errorf("%s held token %q, not the hold's %d, when its expiry was read: the hold had lapsed (the machine stalled?)", k, v, tok)
	case ms < 0:
		t.Fatalf("%s has no TTL (%d)", k, ms)
	}
	return time.UnixMilli(ms), nil
}

// tokenAndExpiry reads a mutex hash's token and its expiry at one moment: as PEXPIRETIME would give it,
// from TIME and PTTL (Redis 6.2 has no PEXPIRETIME), a millisecond early to cover rounding.
const tokenAndExpiry = `local t, p = redis.call('TIME'), redis.call('PTTL', KEYS[1])
if p >= 0 then p = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + p - 1 end
return {redis.call('HGET', KEYS[1], 't') or '', p}`

func ownerOf(ctx context.Context) reentrant.Owner {
	o, _ := reentrant.OwnerFrom(ctx)
	return o
}

// An owner's Lock right after an Unlock that is still being finished in the background (its
// attempts could not be sent) waits for it, and starts a new hold with a new token: it never
// joins the hold being released and reuses its token.
func TestLockAfterAnUnfinishedUnlockStartsANewHold(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		f := redistest.NewFaulty(b.Client(t))
		m := newMutex(t, b.PodOn(t, f, prefix), "unfinished")
		o := reentrant.NewOwner()
		a := owned(o)
		lock(t, m, a)
		tok := m.Lease(a).Token()
		f.Expire(4, redistest.ScriptCall(scripts.ReentrantUnlock)) // the first four are never sent
		if err := m.Unlock(a); err == nil {
			t.Fatal("Unlock whose attempts could not be sent returned nil")
		}
		lock(t, m, a)
		if tok2 := m.Lease(a).Token(); tok2 <= tok {
			t.Fatalf("Lock after the unfinished Unlock got token %d, the released hold's was %d", tok2, tok)
		}
		if n := count(t, b, prefix, "unfinished", o); n != 1 {
			t.Fatalf("Redis counts %d for the owner, want 1", n)
		}
		unlock(t, m, a)
	})
}

// Goroutines of one process sharing an owner lock and unlock freely, with no base hold, so that
// the hold is given up and taken again all the time, sometimes while another goroutine
// re-enters it: no call fails, every Unlock finds its hold, tokens change only with a new hold,
// and nothing is left in Redis at the end.
func TestGoroutinesSharingAnOwnerWithoutABaseHold(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const goroutines, rounds = 8, 30
		prefix := b.Prefix(t)
		m := newMutex(t, b.Pod(t, prefix), "churn")
		o := reentrant.NewOwner()
		a := owned(o)
		var wg sync.WaitGroup
		errs := make(chan error, goroutines*rounds)
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					ctx, cancel := within(a, time.Minute)
					if err := m.Lock(ctx); err != nil {
						errs <- fmt.Errorf("Lock: %w", err)
						cancel()
						return
					}
					if m.Lease(a) == nil {
						errs <- errors.New("Lock returned without a hold")
					}
					if err := m.Unlock(ctx); err != nil {
						errs <- fmt.Errorf("Unlock: %w", err)
					}
					cancel()
				}
			}()
		}
		wg.Wait()
		close(errs)
		n := 0
		for err := range errs {
			if n++; n <= 5 {
				t.Error(err)
			}
		}
		if n > 5 {
			t.Errorf("and %d more errors", n-5)
		}
		if c := count(t, b, prefix, "churn", o); c != 0 {
			t.Fatalf("Redis counts %d for the owner after every Unlock", c)
		}
	})
}

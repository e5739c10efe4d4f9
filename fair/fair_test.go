package fair_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newFair(t *testing.T, p *redistest.Pod, name string, opts ...distsync.Option) *fair.Mutex {
	t.Helper()
	m, err := fair.New(p.H, name, opts...)
	if err != nil {
		t.Fatalf("fair.New(%q): %v", name, err)
	}
	return m
}

func key(prefix, name, part string) string {
	k := prefix + "{" + name + "}:fair"
	if part != "" {
		k += ":" + part
	}
	return k
}

func lock(t *testing.T, m *fair.Mutex) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("Lock: %v", err)
	}
}

func unlock(t *testing.T, m *fair.Mutex) {
	t.Helper()
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// queued returns the waiter ids queued in Redis, in their order.
func queued(t *testing.T, b *redistest.Backend, prefix, name string) []string {
	t.Helper()
	ids, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Zrange().Key(key(prefix, name, "q")).Min("0").Max("-1").Build()
	}).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func waitQueued(t *testing.T, b *redistest.Backend, prefix, name string, n int) []string {
	t.Helper()
	var ids []string
	if !redistest.Eventually(5*time.Second, func() bool { ids = queued(t, b, prefix, name); return len(ids) == n }) {
		t.Fatalf("%d waiters queued, want %d: %v", len(ids), n, ids)
	}
	return ids
}

// queuedUp is waitQueued for a scenario whose premise is that the waiters keep their places:
// if fewer than n are queued after 10 s, places lapsed (their renewals came too late: the
// machine stalled for most of a waiter lease) or the lock came free, and it returns an error,
// for redistest.Retry.
func queuedUp(t *testing.T, b *redistest.Backend, prefix, name string, n int) error {
	t.Helper()
	var ids []string
	if !redistest.Eventually(10*time.Second, func() bool { ids = queued(t, b, prefix, name); return len(ids) >= n }) {
		return fmt.Errorf("%d waiters queued, want %d: %v (places lapsed, or the lock came free: the machine stalled?)", len(ids), n, ids)
	}
	if len(ids) > n {
		t.Fatalf("%d waiters queued, want %d: %v", len(ids), n, ids)
	}
	return nil
}

// released unlocks m, a hold the test kept; if the hold had been lost, which only a machine
// stalled for most of a lease (or, for a lock handed over, of its hand-off window) does to it,
// it returns an error, for redistest.Retry.
func released(t *testing.T, m *fair.Mutex) error {
	t.Helper()
	switch err := m.Unlock(context.Background()); {
	case errors.Is(err, distsync.ErrLost):
		return fmt.Errorf("a hold the test kept was lost (the machine stalled?): %w", err)
	case err != nil:
		t.Fatalf("Unlock: %v", err)
	}
	return nil
}

// Waiters from several processes, two goroutines each, are granted the lock exactly in the
// order their requests arrived at Redis (read from the queue there).
func TestGrantsFollowArrivalOrder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A waiter whose place lapses is taken for dead, and queues again at the tail: the
		// waiter lease (3 s in the first attempt, longer in the next) bounds the stall a
		// waiter keeps its place through.
		redistest.RetryScaled(t, 3, 3*time.Second, func(wlease time.Duration) error {
			return arrivalOrder(t, b, distsync.WithWaiterLease(wlease))
		})
	})
}

// arrivalOrder is one attempt of TestGrantsFollowArrivalOrder.
func arrivalOrder(t *testing.T, b *redistest.Backend, wlease distsync.Option) error {
	prefix := b.Prefix(t)
	holder := newFair(t, b.Pod(t, prefix, wlease), "order")
	lock(t, holder)
	var ms []*fair.Mutex
	for range 3 {
		m := newFair(t, b.Pod(t, prefix, wlease), "order")
		ms = append(ms, m, m) // two goroutines on each Mutex value
	}
	// Start the waiters in an interleaved order across processes, each once the previous
	// one is queued at Redis, and read the arrival order from the queue.
	start := []int{0, 2, 4, 1, 5, 3}
	var mu sync.Mutex
	var got []int
	var wg sync.WaitGroup
	errs := make(chan error, len(start))
	for i, idx := range start {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := ms[idx].Lock(ctx); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			got = append(got, idx)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			if err := ms[idx].Unlock(ctx); err != nil {
				errs <- err
			}
		}()
		if err := queuedUp(t, b, prefix, "order", i+1); err != nil {
			return err
		}
	}
	if err := released(t, holder); err != nil {
		return err
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(start) {
		t.Fatalf("grants in order %v, arrivals at Redis in order %v", got, start)
	}
	return nil
}

// A hand-off wakes the head waiter only: the other waiting processes send nothing for it.
func TestHandoffWakesOnlyTheHead(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		// Leases far longer than the test, however slow the machine, so that no renewal of a
		// place (every third of the waiter lease) and no backstop re-check (about a holder's
		// lease after a waiter's last attempt) falls inside the window watched.
		opts := []distsync.Option{distsync.WithLeaseTTL(5 * time.Minute), distsync.WithWaiterLease(5 * time.Minute)}
		holder := newFair(t, b.Pod(t, prefix, opts...), "wake")
		lock(t, holder)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Each waiter holds the lock until the test has looked: no other hand-off can happen
		// in the window watched, however late the look comes.
		got := make(chan int, 3)
		release := make(chan struct{})
		let := sync.OnceFunc(func() { close(release) })
		defer let()
		var pods []*redistest.Pod
		res := make(chan error, 3)
		for i := range 3 {
			p := b.Pod(t, prefix, opts...)
			pods = append(pods, p)
			m := newFair(t, p, "wake")
			go func() {
				err := m.Lock(ctx)
				if err == nil {
					got <- i
					<-release
					err = m.Unlock(ctx)
				}
				res <- err
			}()
			waitQueued(t, b, prefix, "wake", len(pods))
			// A new waiter's first attempt queues it; it then subscribes and attempts once
			// more (a release in between would have reached nobody). Wait for that too: on a
			// loaded machine it can come late.
			if !redistest.Eventually(5*time.Second, func() bool {
				c := p.Client.Counts()
				return c["EVALSHA"] >= 2 // (an EVAL after NOSCRIPT is the same attempt)
			}) {
				t.Fatalf("waiter %d did not re-check after subscribing: %v", len(pods)-1, p.Client.Counts())
			}
		}
		from := time.Now()
		unlock(t, holder)
		select {
		case i := <-got:
			if i != 0 {
				t.Fatalf("waiter %d got the lock first, want the head, waiter 0", i)
			}
		case err := <-res:
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatal("the head did not get the lock")
		}
		time.Sleep(200 * time.Millisecond) // for a waiter woken wrongly to show itself
		for i, p := range pods {
			var sent []string
			for _, c := range p.Client.Since(from) {
				if c.Name != "EVAL" { // EVAL follows an EVALSHA that met NOSCRIPT: the same call
					sent = append(sent, c.Name)
				}
			}
			switch {
			case i == 0 && len(sent) > 1:
				t.Errorf("the head sent %d commands for its grant, want at most its confirm: %v", len(sent), sent)
			case i > 0 && len(sent) > 0:
				t.Errorf("waiter %d, not the head, sent %v after the release", i, sent)
			}
		}
		let()
		for range pods {
			if err := <-res; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A head waiter whose process died (network cut) is skipped within about a waiter lease: the
// lock handed to it comes back, and the next waiter gets it.
func TestDeadHeadWaiterIsSkipped(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Every time scales with the waiter lease (1 s in the first attempt, longer in the
		// next), the holders' lease too: a waiter that misses the lapse re-checks at its
		// backstop, about a holder's lease later.
		redistest.RetryScaled(t, 3, time.Second, func(wlease time.Duration) error {
			opts := []distsync.Option{distsync.WithWaiterLease(wlease), distsync.WithLeaseTTL(10 * wlease)}
			prefix := b.Prefix(t)
			holder := newFair(t, b.Pod(t, prefix, opts...), "dead")
			lock(t, holder)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			dead := newFair(t, b.PodVia(t, prefix, net, opts...), "dead")
			dctx, dcancel := context.WithCancel(context.Background())
			defer dcancel()
			go func() { _ = dead.Lock(dctx) }()
			if err := queuedUp(t, b, prefix, "dead", 1); err != nil {
				return err
			}
			next := newFair(t, b.Pod(t, prefix, opts...), "dead")
			res := redistest.Async(context.Background(), func(context.Context) error {
				ctx, cancel := context.WithTimeout(context.Background(), 20*wlease)
				defer cancel()
				return next.Lock(ctx)
			})
			if err := queuedUp(t, b, prefix, "dead", 2); err != nil {
				return err
			}
			net.Cut() // the head's process is gone; its place has not lapsed yet
			start := time.Now()
			unlock(t, holder) // hands the lock to the dead head
			var r redistest.Returned
			select {
			case r = <-res:
				if r.Err != nil {
					t.Fatal(r.Err)
				}
			case <-time.After(10 * wlease):
				owner, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Get().Key(key(prefix, "dead", "")).Build() }).ToString()
				pttl, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Pttl().Key(key(prefix, "dead", "")).Build() }).AsInt64()
				t.Fatalf("the next waiter never got the lock; the lock is %q for %d ms, the queue %v", owner, pttl, queued(t, b, prefix, "dead"))
			}
			d := r.At.Sub(start)
			t.Logf("dead head skipped in %v (waiter lease %v)", d, wlease)
			if err := released(t, next); err != nil {
				return err
			}
			net.Restore()
			return redistest.Late("counted from the release to the dead head, the next waiter got the lock", d, 2*wlease+wlease/2, start, r.At)
		})
	})
}

// Waiters whose context ends leave the queue at once; nothing of theirs stays but a void mark
// with a TTL, and the next Lock is not held up by them.
func TestCancelledWaitersLeaveNoEntry(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		holder := newFair(t, b.Pod(t, prefix), "cancel")
		lock(t, holder)
		w := newFair(t, b.Pod(t, prefix), "cancel")
		for range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			err := w.Lock(ctx)
			cancel()
			if !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("cancelled Lock: %v", err)
			}
		}
		waitQueued(t, b, prefix, "cancel", 0)
		entries, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Zrange().Key(key(prefix, "cancel", "qx")).Min("0").Max("-1").Build()
		}).AsStrSlice()
		for _, e := range entries {
			if !strings.HasPrefix(e, "!") {
				t.Errorf("entry %q of a cancelled waiter left in qx", e)
			}
		}
		unlock(t, holder)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds a hang only
		defer cancel()
		if ok, err := w.TryLock(ctx); err != nil || !ok {
			t.Fatalf("TryLock after the cancelled waiters: %v %v", ok, err)
		}
		unlock(t, w)
		if keys := b.KeysWithoutTTL(t, prefix); len(keys) > 0 {
			t.Errorf("keys without a TTL: %v", keys)
		}
	})
}

// Several pods × goroutines: never two holders, tokens strictly increase.
func TestMutualExclusion(t *testing.T) {
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
				m := newFair(t, b.Pod(t, prefix), "hot")
				for range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						defer cancel()
						for range rounds {
							if err := m.Lock(ctx); err != nil {
								errs <- err
								return
							}
							if n := inside.Add(1); n != 1 {
								errs <- fmt.Errorf("%d holders inside", n)
							}
							mu.Lock()
							tokens = append(tokens, m.Lease().Token())
							mu.Unlock()
							inside.Add(-1)
							if err := m.Unlock(ctx); err != nil {
								errs <- err
								return
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
			// A hold lost (which only a machine stalled for most of a lease does to a hold that
			// is renewed) lets the next holder in while its holder is still inside: the
			// premise of the scenario is gone, not the property.
			if err := errors.Join(all...); errors.Is(err, distsync.ErrLost) {
				return fmt.Errorf("a hold was lost: %w", err)
			} else if err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(tokens); i++ {
				if tokens[i] <= tokens[i-1] {
					t.Fatalf("token %d after %d", tokens[i], tokens[i-1])
				}
			}
			return nil
		})
	})
}

// Idle waiters send nothing but the renewals of their places, batched per handle (one
// pipeline per tick for all of a process's waiters), and the backstop re-check.
func TestIdleWaitersOnlyRenewTheirPlaces(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const waiters = 3
		// Every time scales with the holder's lease (3 s in the first attempt, longer in the
		// next): the waiter lease is 3/10 of it, the window watched as long.
		redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
			wlease, window := ttl*3/10, ttl
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(wlease)}
			prefix := b.Prefix(t)
			holder := newFair(t, b.Pod(t, prefix, opts...), "idle")
			lock(t, holder)
			wp := b.Pod(t, prefix, opts...)
			m := newFair(t, wp, "idle")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := make(chan error, waiters)
			for range waiters {
				go func() {
					err := m.Lock(ctx)
					if err == nil {
						err = m.Unlock(ctx)
					}
					res <- err
				}()
			}
			if err := queuedUp(t, b, prefix, "idle", waiters); err != nil {
				return err
			}
			// Once the process's channel is subscribed, each waiter has at most its re-check
			// after subscribing left to send (one round trip): the bound below leaves one
			// command per waiter for it.
			if !redistest.Eventually(5*time.Second, func() bool { return len(b.Channels(t, key(prefix, "idle", "ch")+":*")) > 0 }) {
				t.Fatal("the waiters never subscribed")
			}
			wp.Client.Reset()
			from := time.Now()
			time.Sleep(window)
			total := wp.Client.Total()
			pipelines := wp.Client.Pipelines()
			// A premise only a machine stalled for most of a lease breaks: the holder kept its
			// lock.
			if err := holder.Lease().Err(); err != nil {
				return fmt.Errorf("the holder lost its lease (%v) while the waiters were watched", err)
			}
			// What a loaded machine cannot break: every command is a place renewal (one per
			// waiter per renewal period) or a backstop re-check (one per waiter per holder
			// lease), and the renewal loop sends at most one pipeline per eighth of a renewal
			// period. Polling would be far above either bound; a late timer only sends fewer.
			// Only a stall of two renewal periods can add to them: a place lapses, and its
			// waiter re-checks (and queues again).
			periods := int(window/(wlease/3)) + 1
			backstops := waiters * (int(window/ttl) + 1)
			pipeLimit, limit := 8*periods+backstops, (periods+1)*waiters+backstops
			if len(pipelines) > pipeLimit || total > limit {
				if stalled := redistest.Stalled(from, time.Now()); stalled >= wlease-wlease/3 {
					return fmt.Errorf("idle waiters sent %d commands in %d pipelines in %v, want at most %d in %d, but this process stalled %v meanwhile: a place may have lapsed",
						total, len(pipelines), window, limit, pipeLimit, stalled)
				}
			}
			if len(pipelines) > pipeLimit {
				t.Errorf("%d renewal pipelines in %v, want at most %d", len(pipelines), window, pipeLimit)
			}
			if total > limit {
				t.Errorf("idle waiters sent %d commands in %v, want at most %d", total, window, limit)
			}
			t.Logf("%d commands in %d pipelines %v", total, len(pipelines), pipelines)
			if err := holder.Unlock(context.Background()); errors.Is(err, distsync.ErrLost) {
				return fmt.Errorf("the holder lost its lease (%v) after the waiters were watched", err)
			} else if err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			for range waiters {
				if err := <-res; err != nil {
					t.Fatal(err)
				}
			}
			return nil
		})
	})
}

// Deleting the lock behind the holder's back fires its loss signal within a renewal period;
// Unlock reports it.
func TestLossIsSignalled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 900 * time.Millisecond
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			m := newFair(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "loss")
			lock(t, m)
			l := m.Lease()
			b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(key(prefix, "loss", "")).Build() })
			deleted := time.Now()
			select {
			case <-l.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("loss not signalled")
			}
			signalled := time.Now()
			if err := m.Unlock(context.Background()); !errors.Is(err, distsync.ErrNotHeld) || !errors.Is(err, distsync.ErrLost) {
				t.Fatalf("Unlock after the loss: %v", err)
			}
			return redistest.Late("counted from the deletion, the loss was signalled", signalled.Sub(deleted), ttl/3+time.Second, deleted, signalled)
		})
	})
}

func TestBadInputAndLocker(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		p := b.Pod(t, b.Prefix(t))
		if _, err := fair.New(p.H, ""); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New with an empty name: %v", err)
		}
		if _, err := fair.New(p.H, "x", distsync.WithLeaseTTL(0)); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New with a zero TTL: %v", err)
		}
		m := newFair(t, p, "locker")
		if err := m.Unlock(context.Background()); !errors.Is(err, distsync.ErrNotHeld) {
			t.Errorf("Unlock of an unlocked mutex: %v", err)
		}
		l := m.Locker()
		l.Lock()
		l.Unlock() //lint:ignore SA2001 the Locker's Lock and Unlock are what is tested
		defer func() {
			if recover() == nil {
				t.Fatal("Locker.Unlock of an unlocked mutex did not panic")
			}
		}()
		l.Unlock()
	})
}

// A cancelled Lock has left the queue when it returns: after the holder's Unlock right after
// it, TryLock succeeds at once.
func TestCancelledLockHasLeftWhenItReturns(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			holder := newFair(t, b.Pod(t, prefix), "gone")
			waiter := newFair(t, b.Pod(t, prefix), "gone")
			for round := range 15 {
				lock(t, holder)
				ctx, cancel := context.WithCancel(context.Background())
				ch := redistest.Async(ctx, waiter.Lock)
				waitQueued(t, b, prefix, "gone", 1)
				cancelled := time.Now()
				cancel()
				unlock(t, holder) // races with the leaving: the lock may be handed to the waiter
				r := redistest.Await(t, ch, 5*time.Second)
				if r.Err != nil && !errors.Is(r.Err, context.Canceled) {
					t.Fatalf("cancelled Lock = %v", r.Err)
				}
				if r.Err == nil {
					unlock(t, waiter) // it got the lock before it saw the cancel
					continue
				}
				ok, err := holder.TryLock(context.Background())
				if err != nil || !ok {
					// The leave is tried once, for at most a second, before Lock returns; if
					// Redis did not answer by then, it goes on in the background: on a machine
					// that slow, the premise is gone.
					if took := r.At.Sub(cancelled); took >= time.Second {
						return fmt.Errorf("round %d: TryLock right after the cancelled Lock returned = %v, %v, but it returned %v after the cancel: its leave went on in the background",
							round, ok, err, took)
					}
					t.Fatalf("round %d: TryLock right after the cancelled Lock returned = %v, %v: it had not left", round, ok, err)
				}
				unlock(t, holder)
			}
			return nil
		})
	})
}

// A connection error that reads "context deadline exceeded" while the caller's own context is
// live (rueidis fails every command queued on a connection that another command's deadline
// closed) does not end a Lock: only the caller's context does.
func TestForeignDeadlineDoesNotEndLock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		holder := newFair(t, b.Pod(t, prefix), "foreign")
		f := redistest.NewFaulty(b.Client(t))
		waiter := newFair(t, b.PodOn(t, f, prefix), "foreign")
		lock(t, holder)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		f.Expire(2, redistest.ScriptCall(scripts.FairAcquire))
		ch := make(chan error, 1)
		go func() { ch <- waiter.Lock(ctx) }()
		waitQueued(t, b, prefix, "foreign", 1) // queued by the third attempt
		unlock(t, holder)
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("Lock ended by an error that was not its context's: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("Lock did not return")
		}
		if f.Dropped() != 2 {
			t.Fatalf("%d attempts met a foreign deadline, want 2", f.Dropped())
		}
		unlock(t, waiter)
	})
}

// Two dead waiters in a row at the head (one dead process had two calls queued): the lock
// handed to the first lapses, and the second, which watched the grant, is dead too. The live
// waiter behind them still gets the lock within about a waiter lease and a renewal period
// (its own place renewal hands the free lock on), not at its backstop, a holder's lease later.
func TestDeadWaitersInARowDoNotStallTheQueue(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Every time scales with the waiter lease (1 s in the first attempt, longer in the
		// next), the holders' lease too: a waiter that misses the lapse re-checks at its
		// backstop, about a holder's lease later.
		redistest.RetryScaled(t, 3, time.Second, func(wlease time.Duration) error {
			opts := []distsync.Option{distsync.WithWaiterLease(wlease), distsync.WithLeaseTTL(10 * wlease)}
			prefix := b.Prefix(t)
			holder := newFair(t, b.Pod(t, prefix, opts...), "row")
			lock(t, holder)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			dead := newFair(t, b.PodVia(t, prefix, net, opts...), "row")
			dctx, dcancel := context.WithCancel(context.Background())
			defer dcancel()
			for i := range 2 {
				go func() { _ = dead.Lock(dctx) }()
				if err := queuedUp(t, b, prefix, "row", i+1); err != nil {
					return err
				}
			}
			next := newFair(t, b.Pod(t, prefix, opts...), "row")
			res := redistest.Async(context.Background(), func(context.Context) error {
				ctx, cancel := context.WithTimeout(context.Background(), 30*wlease)
				defer cancel()
				return next.Lock(ctx)
			})
			if err := queuedUp(t, b, prefix, "row", 3); err != nil {
				return err
			}
			net.Cut() // both calls of the head's process are gone; their places have not lapsed yet
			start := time.Now()
			unlock(t, holder)
			r := redistest.Await(t, res, 20*wlease)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			d := r.At.Sub(start)
			t.Logf("two dead waiters skipped in %v (waiter lease %v)", d, wlease)
			if err := released(t, next); err != nil {
				return err
			}
			net.Restore()
			return redistest.Late("counted from the release, the live waiter got the lock", d, 3*wlease, start, r.At)
		})
	})
}

// A Lock whose claim came too late to use (the reply was delayed past the lease) and whose
// give-back could not be sent at once tries again only after the give-back is done: the
// give-back, under the same waiter id, must not release the hold the retry gets.
func TestRetryAfterALateClaimKeepsItsHold(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 1500 * time.Millisecond
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			given := &ranClient{Client: b.Client(t), match: redistest.ScriptCall(scripts.MutexRelease)}
			f := redistest.NewFaulty(given)
			m := newFair(t, b.PodOn(t, f, prefix, distsync.WithLeaseTTL(ttl)), "late")
			other := newFair(t, b.Pod(t, prefix), "late")
			f.Delay(1, ttl+200*time.Millisecond, redistest.ScriptCall(scripts.FairAcquire))
			f.Expire(3, redistest.ScriptCall(scripts.MutexRelease)) // the give-back is retried in the background
			lock(t, m)
			// The give-back has run in Redis before the retry, if the retry waits for it as it
			// must; if it did not wait, the give-back runs now, and releases the retry's hold.
			if !redistest.Eventually(10*time.Second, func() bool { return given.ran.Load() > 0 }) {
				return errors.New("the give-back never ran: it was given up, a lease after the late claim, before it could be sent")
			}
			l := m.Lease()
			lost := l.Err()
			ok, err := other.TryLock(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if lost != nil || ok {
				// Until its local deadline the hold is surely in Redis; past it, a machine
				// stalled for most of a lease may have let it lapse.
				if seen := time.Now(); seen.Before(l.Deadline()) {
					t.Fatalf("the hold after the retry ended (%v), or another process took the lock it holds (TryLock = %v), before its deadline", lost, ok)
				}
				return fmt.Errorf("the hold after the retry ended (%v; TryLock by another process = %v) past its local deadline: the machine stalled for most of a lease", lost, ok)
			}
			return released(t, m)
		})
	})
}

// ranClient is a rueidis.Client that counts the calls that match and ran in Redis (whose reply
// is not an error), for a test that waits for such a call.
type ranClient struct {
	rueidis.Client
	match func(cmd []string) bool
	ran   atomic.Int32
}

// Do implements rueidis.Client.
func (c *ranClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	match := c.match(cmd.Commands())
	res := c.Client.Do(ctx, cmd)
	if match && res.Error() == nil {
		c.ran.Add(1)
	}
	return res
}

// DoMulti implements rueidis.Client.
func (c *ranClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	match := make([]bool, len(multi))
	for i, cmd := range multi {
		match[i] = c.match(cmd.Commands())
	}
	res := c.Client.DoMulti(ctx, multi...)
	for i := range res {
		if match[i] && res[i].Error() == nil {
			c.ran.Add(1)
		}
	}
	return res
}

// A Lock blocked when its Handle closes returns ErrClosed, having left the queue.
func TestCloseEndsBlockedLock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		holder := newFair(t, b.Pod(t, prefix), "closing")
		lock(t, holder)
		p := b.Pod(t, prefix)
		m := newFair(t, p, "closing")
		res := make(chan error, 1)
		go func() { res <- m.Lock(context.Background()) }()
		waitQueued(t, b, prefix, "closing", 1)
		if err := p.H.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-res:
			if !errors.Is(err, distsync.ErrClosed) {
				t.Fatalf("Lock blocked on a closing Handle = %v, want ErrClosed", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Lock did not return when its Handle closed")
		}
		waitQueued(t, b, prefix, "closing", 0)
		unlock(t, holder)
	})
}

// A holder that dies (its network cut) is replaced as soon as its lease runs out, as a mutex
// holder is: each renewal tells the head of the queue when the lease now ends, so the head
// re-checks right after that, not up to a third of a lease later (its backstop), nor at its
// place's next renewal (a third of the waiter lease, long here).
func TestDeadHoldersLockIsTakenAtItsExpiry(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Every time scales with the lease (3 s in the first attempt, longer in the next).
		redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(10 * ttl)}
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			holder := newFair(t, b.PodVia(t, prefix, net, opts...), "dead")
			sends := redistest.NewSendLog(b.Client(t), redistest.ScriptCall(scripts.FairAcquire))
			waiter := newFair(t, b.PodOn(t, sends, prefix, opts...), "dead")
			obs := b.Client(t)
			locked := time.Now()
			lock(t, holder)
			held, err := obs.Do(context.Background(), obs.B().Get().Key(key(prefix, "dead", "")).Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			res := redistest.Async(context.Background(), func(context.Context) error {
				ctx, cancel := context.WithTimeout(context.Background(), ttl+30*time.Second)
				defer cancel()
				return waiter.Lock(ctx)
			})
			if err := queuedUp(t, b, prefix, "dead", 1); err != nil {
				return err
			}
			// Past the holder's third renewal, at a lease: a head that did not hear of the
			// renewals re-checks at its backstop, a lease and a third after it queued (two
			// thirds of the lease left then), and next a lease after that: a third of a lease
			// after the expiry. (Cut after the second renewal, it would be a sixth, too little
			// above the margin to tell on a loaded machine.)
			time.Sleep(time.Until(locked.Add(ttl + ttl/15)))
			net.Cut()
			cut := time.Now()
			expiry, err := expiresAt(t, obs, key(prefix, "dead", ""), held)
			if err != nil {
				return err
			}
			r := redistest.Await(t, res, ttl+20*time.Second)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.At.Before(expiry) {
				t.Fatalf("the waiter took the dead holder's lock %v before its lease ran out", expiry.Sub(r.At))
			}
			// When the waiter sent the attempt that took the lock: its re-check, which is what
			// is timed, without the round trip after it. (None since the cut: the lock came
			// otherwise, as a grant at a place renewal, and is timed as it came.)
			sent := sends.Last(r.At)
			if sent.Before(cut) {
				sent = r.At
			}
			late := sent.Sub(expiry)
			t.Logf("the waiter sent the attempt that took the dead holder's lock %v after its lease ran out (%v after the cut), and had the lock %v after that",
				late, expiry.Sub(cut), r.At.Sub(sent))
			if err := released(t, waiter); err != nil {
				return err
			}
			margin := ttl * 7 / 60 // 350 ms for a lease of 3 s
			return redistest.Late("the waiter's attempt to take the dead holder's lock was sent", late, margin, cut, sent)
		})
	})
}

// expiresAt returns when the hold under key k expires, by Redis's clock, which is this
// host's (the servers run here): exact, however long the read took. c is a client made
// beforehand, so that the read comes at once. The hold is the one whose value k had when it
// was read (held: GET k while it held); if k holds another now, or nothing (the hold lapsed
// first, on a machine that stalled for most of a lease), it returns an error, for
// redistest.Retry.
func expiresAt(t *testing.T, c rueidis.Client, k, held string) (time.Time, error) {
	t.Helper()
	vals, err := c.Do(context.Background(), c.B().Eval().Script(valueAndExpiry).Numkeys(1).Key(k).Build()).ToArray()
	if err != nil || len(vals) != 2 {
		t.Fatalf("the value and the expiry of %s: %v, %v", k, vals, err)
	}
	v, _ := vals[0].ToString()
	ms, _ := vals[1].AsInt64()
	switch {
	case v != held && v != held+"+": // '+': a waiter queued behind the hold (lib/queue.lua)
		return time.Time{}, fmt.Errorf("%s held %q, not the hold's %q, when its expiry was read: the hold had lapsed (the machine stalled?)", k, v, held)
	case ms < 0:
		t.Fatalf("%s has no TTL (%d)", k, ms)
	}
	return time.UnixMilli(ms), nil
}

// valueAndExpiry reads a string key's value and its expiry at one moment: as PEXPIRETIME would give it,
// from TIME and PTTL (Redis 6.2 has no PEXPIRETIME), a millisecond early to cover rounding.
const valueAndExpiry = `local t, p = redis.call('TIME'), redis.call('PTTL', KEYS[1])
if p >= 0 then p = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + p - 1 end
return {redis.call('GET', KEYS[1]) or '', p}`

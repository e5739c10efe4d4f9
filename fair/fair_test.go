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

// Waiters from several processes, two goroutines each, are granted the lock exactly in the
// order their requests arrived at Redis (read from the queue there).
func TestGrantsFollowArrivalOrder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		holder := newFair(t, b.Pod(t, prefix), "order")
		lock(t, holder)
		var ms []*fair.Mutex
		for range 3 {
			m := newFair(t, b.Pod(t, prefix), "order")
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
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
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
			waitQueued(t, b, prefix, "order", i+1)
		}
		unlock(t, holder)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(start) {
			t.Fatalf("grants in order %v, arrivals at Redis in order %v", got, start)
		}
	})
}

// A hand-off wakes the head waiter only: the other waiting processes send nothing for it.
func TestHandoffWakesOnlyTheHead(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		// Long waiter leases, so that no renewal of a place falls inside the window watched.
		opts := []distsync.Option{distsync.WithWaiterLease(30 * time.Second)}
		holder := newFair(t, b.Pod(t, prefix, opts...), "wake")
		lock(t, holder)
		var pods []*redistest.Pod
		res := make(chan error, 3)
		for range 3 {
			p := b.Pod(t, prefix, opts...)
			pods = append(pods, p)
			m := newFair(t, p, "wake")
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				err := m.Lock(ctx)
				if err == nil {
					time.Sleep(300 * time.Millisecond)
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
		time.Sleep(100 * time.Millisecond)
		from := time.Now()
		unlock(t, holder)
		time.Sleep(200 * time.Millisecond) // the head holds for 300 ms: no other hand-off yet
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
		const wlease = time.Second
		prefix := b.Prefix(t)
		opts := []distsync.Option{distsync.WithWaiterLease(wlease)}
		holder := newFair(t, b.Pod(t, prefix, opts...), "dead")
		lock(t, holder)
		net := redistest.NewNetwork()
		dead := newFair(t, b.PodVia(t, prefix, net, opts...), "dead")
		dctx, dcancel := context.WithCancel(context.Background())
		defer dcancel()
		go func() { _ = dead.Lock(dctx) }()
		waitQueued(t, b, prefix, "dead", 1)
		next := newFair(t, b.Pod(t, prefix, opts...), "dead")
		res := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res <- next.Lock(ctx)
		}()
		waitQueued(t, b, prefix, "dead", 2)
		net.Cut() // the head's process is gone; its place has not lapsed yet
		start := time.Now()
		unlock(t, holder) // hands the lock to the dead head
		select {
		case err := <-res:
			if err != nil {
				t.Fatal(err)
			}
			d := time.Since(start)
			if d > 2*wlease+500*time.Millisecond {
				t.Fatalf("the next waiter got the lock %v after the release; waiter lease %v", d, wlease)
			}
			t.Logf("dead head skipped in %v (waiter lease %v)", d, wlease)
		case <-time.After(10 * wlease):
			owner, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Get().Key(key(prefix, "dead", "")).Build() }).ToString()
			pttl, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Pttl().Key(key(prefix, "dead", "")).Build() }).AsInt64()
			t.Fatalf("the next waiter never got the lock; the lock is %q for %d ms, the queue %v", owner, pttl, queued(t, b, prefix, "dead"))
		}
		unlock(t, next)
		net.Restore()
		dcancel()
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
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
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
		for err := range errs {
			t.Fatal(err)
		}
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("token %d after %d", tokens[i], tokens[i-1])
			}
		}
	})
}

// Idle waiters send nothing but the renewals of their places, batched per handle (one
// pipeline per tick for all of a process's waiters), and the backstop re-check.
func TestIdleWaitersOnlyRenewTheirPlaces(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The holder's lease is long enough for a loaded machine never to lose it.
		const ttl, wlease, waiters = 3 * time.Second, 900 * time.Millisecond, 3
		prefix := b.Prefix(t)
		opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(wlease)}
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
		waitQueued(t, b, prefix, "idle", waiters)
		time.Sleep(200 * time.Millisecond)
		const window = 3 * time.Second
		wp.Client.Reset()
		time.Sleep(window)
		total := wp.Client.Total()
		pipelines := wp.Client.Pipelines()
		// What a loaded machine cannot break: every command is a place renewal (one per waiter
		// per renewal period) or a backstop re-check (one per waiter per holder lease), and the
		// renewal loop sends at most one pipeline per eighth of a renewal period. Polling would
		// be far above either bound; a late timer only sends fewer.
		periods := int(window/(wlease/3)) + 1
		backstops := waiters * (int(window/ttl) + 1)
		if limit := 8*periods + backstops; len(pipelines) > limit {
			t.Errorf("%d renewal pipelines in %v, want at most %d", len(pipelines), window, limit)
		}
		if limit := (periods+1)*waiters + backstops; total > limit {
			t.Errorf("idle waiters sent %d commands in %v, want at most %d", total, window, limit)
		}
		t.Logf("%d commands in %d pipelines %v", total, len(pipelines), pipelines)
		unlock(t, holder)
		for range waiters {
			if err := <-res; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Deleting the lock behind the holder's back fires its loss signal; Unlock reports it.
func TestLossIsSignalled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 900 * time.Millisecond
		prefix := b.Prefix(t)
		m := newFair(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "loss")
		lock(t, m)
		l := m.Lease()
		b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(key(prefix, "loss", "")).Build() })
		select {
		case <-l.Done():
		case <-time.After(ttl/3 + time.Second):
			t.Fatal("loss not signalled within a renewal period")
		}
		if err := m.Unlock(context.Background()); !errors.Is(err, distsync.ErrNotHeld) || !errors.Is(err, distsync.ErrLost) {
			t.Fatalf("Unlock after the loss: %v", err)
		}
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
		prefix := b.Prefix(t)
		holder := newFair(t, b.Pod(t, prefix), "gone")
		waiter := newFair(t, b.Pod(t, prefix), "gone")
		for round := range 15 {
			lock(t, holder)
			ctx, cancel := context.WithCancel(context.Background())
			ch := make(chan error, 1)
			go func() { ch <- waiter.Lock(ctx) }()
			waitQueued(t, b, prefix, "gone", 1)
			cancel()
			unlock(t, holder) // races with the leaving: the lock may be handed to the waiter
			select {
			case err := <-ch:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Fatalf("cancelled Lock = %v", err)
				}
				if err == nil {
					unlock(t, waiter) // it got the lock before it saw the cancel
					continue
				}
			case <-time.After(5 * time.Second):
				t.Fatal("cancelled Lock did not return")
			}
			ok, err := holder.TryLock(context.Background())
			if err != nil || !ok {
				t.Fatalf("round %d: TryLock right after the cancelled Lock returned = %v, %v: it had not left", round, ok, err)
			}
			unlock(t, holder)
		}
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
		const wlease = time.Second
		prefix := b.Prefix(t)
		opts := []distsync.Option{distsync.WithWaiterLease(wlease)}
		holder := newFair(t, b.Pod(t, prefix, opts...), "row")
		lock(t, holder)
		net := redistest.NewNetwork()
		dead := newFair(t, b.PodVia(t, prefix, net, opts...), "row")
		dctx, dcancel := context.WithCancel(context.Background())
		defer dcancel()
		for i := range 2 {
			go func() { _ = dead.Lock(dctx) }()
			waitQueued(t, b, prefix, "row", i+1)
		}
		next := newFair(t, b.Pod(t, prefix, opts...), "row")
		res := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res <- next.Lock(ctx)
		}()
		waitQueued(t, b, prefix, "row", 3)
		net.Cut() // both calls of the head's process are gone; their places have not lapsed yet
		start := time.Now()
		unlock(t, holder)
		select {
		case err := <-res:
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 2*wlease+time.Second {
				t.Fatalf("the live waiter got the lock %v after the release; waiter lease %v", d, wlease)
			} else {
				t.Logf("two dead waiters skipped in %v (waiter lease %v)", d, wlease)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the live waiter never got the lock")
		}
		unlock(t, next)
		net.Restore()
	})
}

// A Lock whose claim came too late to use (the reply was delayed past the lease) and whose
// give-back could not be sent at once tries again only after the give-back is done: the
// give-back, under the same waiter id, must not release the hold the retry gets.
func TestRetryAfterALateClaimKeepsItsHold(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Long enough that the retry's hold, renewed every 500 ms, cannot lapse on a loaded
		// machine while the test looks at it (400 ms did, with two suites running).
		const ttl = 1500 * time.Millisecond
		prefix := b.Prefix(t)
		f := redistest.NewFaulty(b.Client(t))
		m := newFair(t, b.PodOn(t, f, prefix, distsync.WithLeaseTTL(ttl)), "late")
		other := newFair(t, b.Pod(t, prefix), "late")
		f.Delay(1, ttl+200*time.Millisecond, redistest.ScriptCall(scripts.FairAcquire))
		f.Expire(3, redistest.ScriptCall(scripts.MutexRelease)) // the give-back is retried in the background
		lock(t, m)
		time.Sleep(300 * time.Millisecond) // the background give-back is done by now
		if err := m.Lease().Err(); err != nil {
			t.Fatalf("the hold after the retry ended: %v", err)
		}
		if ok, err := other.TryLock(context.Background()); ok || err != nil {
			t.Fatalf("another process took the lock the retry holds: TryLock = %v, %v", ok, err)
		}
		unlock(t, m)
	})
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
		case <-time.After(5 * time.Second):
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
		const ttl = 3 * time.Second
		prefix := b.Prefix(t)
		opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(30 * time.Second)}
		net := redistest.NewNetwork()
		holder := newFair(t, b.PodVia(t, prefix, net, opts...), "dead")
		waiter := newFair(t, b.Pod(t, prefix, opts...), "dead")
		locked := time.Now()
		lock(t, holder)
		res := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res <- waiter.Lock(ctx)
		}()
		waitQueued(t, b, prefix, "dead", 1)
		// Past the holder's second renewal: a head that only knew the lease it saw when it
		// queued would now wake half a second after the expiry, at the earliest.
		time.Sleep(time.Until(locked.Add(2*ttl/3 + 200*time.Millisecond)))
		net.Cut()
		cut := time.Now()
		left, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Pttl().Key(key(prefix, "dead", "")).Build()
		}).AsInt64()
		if err != nil || left <= 0 {
			t.Fatalf("PTTL of the dead holder's lock: %d, %v", left, err)
		}
		expiry := cut.Add(time.Duration(left) * time.Millisecond)
		select {
		case err := <-res:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(ttl + 20*time.Second):
			t.Fatal("the waiter never took the dead holder's lock")
		}
		late := time.Since(expiry)
		t.Logf("the waiter took the dead holder's lock %v after its lease ran out (%v left at the cut)", late, time.Duration(left)*time.Millisecond)
		if late > 350*time.Millisecond {
			t.Fatalf("the waiter took the lock %v after the dead holder's lease ran out, want within a few round trips", late)
		}
		unlock(t, waiter)
		net.Restore()
	})
}

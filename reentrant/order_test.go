package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/reentrant"
)

// lockAsync starts Lock in a goroutine and returns a channel that yields its error and the
// time it returned.
func lockAsync(ctx context.Context, m *reentrant.Mutex) <-chan redistest.Returned {
	return redistest.Async(ctx, m.Lock)
}

// wait returns what ch yields, failing t if Lock does not return within limit.
func wait(t *testing.T, ch <-chan redistest.Returned, limit time.Duration) redistest.Returned {
	t.Helper()
	return redistest.Await(t, ch, limit)
}

// queued returns how many processes the mutex's Redis queue holds.
func queued(t *testing.T, b *redistest.Backend, prefix, name string) int64 {
	t.Helper()
	n, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Zcard().Key(key(prefix, name) + ":q").Build()
	}).AsInt64()
	return n
}

// waitQueued waits until the mutex's Redis queue holds n waiting processes.
func waitQueued(t *testing.T, b *redistest.Backend, prefix, name string, n int64) {
	t.Helper()
	var got int64
	if !redistest.Eventually(5*time.Second, func() bool { got = queued(t, b, prefix, name); return got == n }) {
		t.Fatalf("queue of %q holds %d waiting processes, want %d", name, got, n)
	}
}

// grantOf returns the grant the mutex holds ("~<waiter>:<token>"), "" if none.
func grantOf(t *testing.T, b *redistest.Backend, prefix, name string) string {
	t.Helper()
	v, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Hget().Key(key(prefix, name)).Field("g").Build()
	}).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	return v
}

// Waiting processes get the mutex in the order they started waiting, one hold each.
func TestWaitingProcessesAreServedInOrder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A process that does not take up the grant handed to it within the hand-off window is
		// taken for dead, and the next one served: the window (500 ms, the default, in the
		// first attempt, longer in the next) bounds the delay a waiter keeps its turn through.
		redistest.RetryScaled(t, 3, 500*time.Millisecond, func(window time.Duration) error {
			prefix := b.Prefix(t)
			holder := newMutex(t, b.Pod(t, prefix, distsync.WithHandoffWindow(window)), "order")
			a := owned(reentrant.NewOwner())
			lock(t, holder, a)
			var mu sync.Mutex
			var order []int
			var wg sync.WaitGroup
			for i := range 4 {
				m := newMutex(t, b.Pod(t, prefix, distsync.WithHandoffWindow(window)), "order")
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := within(owned(reentrant.NewOwner()), time.Minute)
					defer cancel()
					if err := m.Lock(ctx); err != nil {
						t.Errorf("waiter %d: %v", i, err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					if err := m.Unlock(ctx); err != nil {
						t.Errorf("waiter %d: %v", i, err)
					}
				}()
				waitQueued(t, b, prefix, "order", int64(i+1))
			}
			unlock(t, holder, a)
			wg.Wait()
			for i, got := range order {
				if got != i {
					return fmt.Errorf("processes got the mutex in order %v, want 0 1 2 3", order)
				}
			}
			return nil
		})
	})
}

// contend runs one goroutine per mutex, each locking (for an owner of its own) and unlocking
// in a loop, holding for hold, until stop is closed or it has done rounds; it returns the
// acquisitions (the index of the process, in order), each wait (the process, where the log
// stood when its Lock was called, when that was, and when it returned), and how many Unlocks
// failed, which is allowed only if lossOK (a hold lost, or a release that Redis, restarting,
// could not confirm).
type waitRec struct {
	proc, from, at int
	began, ended   time.Time
}

func contend(t *testing.T, ms []*reentrant.Mutex, rounds int, hold time.Duration, stop <-chan struct{}, lossOK bool) ([]int, []waitRec, int) {
	t.Helper()
	var mu sync.Mutex
	var log []int
	lost := 0
	var waits []waitRec
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := within(owned(reentrant.NewOwner()), 2*time.Minute)
			defer cancel()
			for round := 0; rounds == 0 || round < rounds; round++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				w := waitRec{proc: i, from: len(log), began: time.Now()}
				mu.Unlock()
				if err := m.Lock(ctx); err != nil {
					t.Errorf("process %d: Lock: %v", i, err)
					return
				}
				mu.Lock()
				w.at, w.ended = len(log), time.Now()
				log = append(log, i)
				waits = append(waits, w)
				mu.Unlock()
				time.Sleep(hold)
				if err := m.Unlock(ctx); err != nil {
					if !lossOK {
						t.Errorf("process %d: Unlock: %v", i, err)
						return
					}
					mu.Lock()
					lost++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return log, waits, lost
}

// overtakes returns, for the wait w, how many holds each other process took while w waited,
// leaving out the first: a hand-off made before w's Lock reached Redis (the hold in place when
// it was called ends while it is on its way).
func overtakes(log []int, w waitRec) map[int]int {
	n := map[int]int{}
	for k := w.from + 1; k < w.at; k++ {
		if log[k] != w.proc {
			n[log[k]]++
		}
	}
	return n
}

// Processes that lock in a loop, each holding briefly, take turns: while a process waits, each
// other process takes the mutex at most once (after the hand-off already on its way when it
// called Lock). Holds are long against a round trip, so that a Lock that reaches Redis a little
// late on a loaded machine is not overtaken for that.
func TestWaitingProcessesTakeTurns(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const procs, rounds = 4, 10
		// The hold is 100 ms in the first attempt, longer in the next: a machine that delays
		// round trips by about a hold makes a Lock late enough to be overtaken for that.
		redistest.RetryScaled(t, 3, 100*time.Millisecond, func(hold time.Duration) error {
			prefix := b.Prefix(t)
			var ms []*reentrant.Mutex
			for range procs {
				ms = append(ms, newMutex(t, b.Pod(t, prefix), "turns"))
			}
			log, waits, _ := contend(t, ms, rounds, hold, nil, false)
			worst := 0
			var errs []error
			for _, w := range waits {
				for j, n := range overtakes(log, w) {
					worst = max(worst, n)
					if n > 1 {
						errs = append(errs, fmt.Errorf("process %d was overtaken %d times by process %d while it waited (acquisitions %d..%d of %v)",
							w.proc, n, j, w.from, w.at, log))
					}
				}
			}
			t.Logf("hold %v: most overtakes by one process during one wait: %d; order %v", hold, worst, log)
			return errors.Join(errs...)
		})
	})
}

// After Redis restarts empty (every hold, queue entry and message in flight lost), the
// waiting processes are served in turn again, and none starves: the fault suite's case (five
// processes, lease 2 s), where one process waited 13 s while the others took the lock 14 times.
func TestWaitersAreServedInOrderAfterARestart(t *testing.T) {
	t.Parallel()
	srv := redistest.StartRedis(t)
	const procs = 5
	attempt := 0
	// Every time scales with the hold: 100 ms in the first attempt (a lease of 2 s, 6 s watched
	// after the restart), longer in the next, so that the restart itself, and the round trips,
	// count for less.
	redistest.RetryScaled(t, 3, 100*time.Millisecond, func(hold time.Duration) error {
		attempt++
		ttl, watched := 20*hold, 60*hold
		var ms []*reentrant.Mutex
		for range procs {
			h := redistest.Handle(t, srv.Client(t), distsync.WithLeaseTTL(ttl))
			m, err := reentrant.New(h, fmt.Sprintf("restart%d", attempt))
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		stop := make(chan struct{})
		var restarted time.Time
		go func() {
			time.Sleep(15 * hold)
			restarted = time.Now()
			if err := srv.Restart(30 * time.Second); err != nil {
				t.Error(err)
			}
			time.Sleep(watched)
			close(stop)
		}()
		log, waits, lost := contend(t, ms, 0, hold, stop, true)
		settled := restarted.Add(10 * hold)
		var longest time.Duration
		after := make([]int, procs)
		worst := 0
		var errs []error
		for _, w := range waits {
			longest = max(longest, w.ended.Sub(w.began))
			if w.began.After(restarted) {
				after[w.proc]++
			}
			if !w.began.After(settled) {
				continue
			}
			for j, n := range overtakes(log, w) {
				worst = max(worst, n)
				if n > 1 {
					errs = append(errs, fmt.Errorf("after the restart, process %d was overtaken %d times by process %d while it waited", w.proc, n, j))
				}
			}
		}
		for i, n := range after {
			if n < 3 {
				errs = append(errs, fmt.Errorf("process %d took the mutex %d times in the %v after the restart (%v)", i, n, watched, after))
			}
		}
		// A wait across the restart lasts the reconnection, and a turn of every other process.
		if longest > watched {
			errs = append(errs, fmt.Errorf("a Lock waited %v, want at most %v", longest, watched))
		}
		t.Logf("hold %v: longest wait %v; holds per process after the restart %v; most overtakes by one process in one wait after it: %d; Unlocks failed in the restart: %d",
			hold, longest, after, worst, lost)
		return errors.Join(errs...)
	})
}

// A waiter whose process died while queued costs the others at most one hand-off window: the
// next waiter in line watches the grant and takes the mutex when it lapses.
func TestDeadWaiterCostsOneHandoffWindow(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl, window = 30 * time.Second, 300 * time.Millisecond
		opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithHandoffWindow(window)}
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			holder := newMutex(t, b.Pod(t, prefix, opts...), "dead")
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			dying := newMutex(t, b.PodVia(t, prefix, net, opts...), "dead")
			live := newMutex(t, b.Pod(t, prefix, opts...), "dead")
			a := owned(reentrant.NewOwner())
			lock(t, holder, a)
			dyingCtx, kill := context.WithCancel(owned(reentrant.NewOwner()))
			defer kill()
			deadRes := lockAsync(dyingCtx, dying)
			waitQueued(t, b, prefix, "dead", 1)
			z := owned(reentrant.NewOwner())
			liveRes := lockAsync(z, live)
			waitQueued(t, b, prefix, "dead", 2)
			// The dying process loses Redis, then gives up: its clean-up cannot get through, so
			// its entry stays queued, as a crashed process's would.
			net.Cut()
			kill()
			if r := wait(t, deadRes, 5*time.Second); r.Err == nil {
				t.Fatal("Lock cut off from Redis succeeded")
			}

			start := time.Now()
			unlock(t, holder, a) // grants the mutex to the dead waiter, asks the live one to watch
			r := wait(t, liveRes, ttl)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			// The grant lasts its window in Redis from the Unlock on, whatever the load.
			d := r.At.Sub(start)
			if d < window/2 {
				t.Fatalf("live waiter got the mutex %v after Unlock, inside the grant to the dead waiter (%v)", d, window)
			}
			t.Logf("dead waiter skipped after %v (window %v)", d, window)
			unlock(t, live, z)
			return redistest.Late(fmt.Sprintf("counted from the Unlock that granted the mutex to a dead waiter (window %v), the live waiter got it", window),
				d, window+2*time.Second, start, r.At)
		})
	})
}

// A holder that dies (its network cut) is replaced as soon as its lease runs out: each renewal
// tells the head waiter when the lease now ends, so the head re-checks right after that, not
// up to a third of a lease later as a waiter that only knows the lease it saw must.
func TestDeadHoldersLockIsTakenAtItsExpiry(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Every time scales with the lease: 3 s in the first attempt, longer in the next.
		redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			holder := newMutex(t, b.PodVia(t, prefix, net, distsync.WithLeaseTTL(ttl)), "dead")
			sends := redistest.NewSendLog(b.Client(t), redistest.ScriptCall(scripts.ReentrantLock))
			waiter := newMutex(t, b.PodOn(t, sends, prefix, distsync.WithLeaseTTL(ttl)), "dead")
			obs := b.Client(t)
			a, z := owned(reentrant.NewOwner()), owned(reentrant.NewOwner())
			locked := time.Now()
			lock(t, holder, a)
			if err := reenter(t, holder, a); err != nil {
				return err
			}
			tok := holder.Lease(a).Token()
			ctx, cancel := within(z, ttl+30*time.Second)
			defer cancel()
			res := lockAsync(ctx, waiter)
			// The waiter queues and subscribes, so that the holder's renewals reach it.
			waitQueued(t, b, prefix, "dead", 1)
			if !redistest.Eventually(10*time.Second, func() bool { return len(b.Channels(t, key(prefix, "dead")+":ch:*")) > 0 }) {
				t.Fatal("the waiter never subscribed")
			}
			// Past the holder's second renewal (at a third and two thirds of the lease): a waiter
			// that only knew the lease it saw when it queued would now wake a sixth of a lease
			// after the expiry, at the earliest.
			time.Sleep(time.Until(locked.Add(2*ttl/3 + ttl/15)))
			net.Cut() // the holder is gone; its lease runs on in Redis
			cut := time.Now()
			expiry, err := expiresAt(t, obs, key(prefix, "dead"), tok)
			if err != nil {
				return err
			}
			r := wait(t, res, ttl+10*time.Second)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.At.Before(expiry) {
				t.Fatalf("the waiter took the dead holder's mutex %v before its lease ran out", expiry.Sub(r.At))
			}
			// When the waiter sent the attempt that took the mutex: its re-check, which is what
			// is timed, without the round trip after it. (None since the cut: the mutex came
			// otherwise, and is timed as it came.)
			sent := sends.Last(r.At)
			if sent.Before(cut) {
				sent = r.At
			}
			late := sent.Sub(expiry)
			t.Logf("the waiter sent the attempt that took the dead holder's mutex %v after its lease ran out (%v after the cut), and had it %v after that",
				late, expiry.Sub(cut), r.At.Sub(sent))
			if err := released(t, waiter, z); err != nil {
				return err
			}
			net.Restore()
			margin := ttl * 7 / 60 // 350 ms for a lease of 3 s
			return redistest.Late("the waiter's attempt to take the dead holder's mutex was sent", late, margin, cut, sent)
		})
	})
}

// A Lock whose context ends after the mutex was handed to its process, before it could take
// it up, passes the grant on before it returns: the next waiter gets the mutex at once, not
// after the hand-off window (a minute here, so that a stranded grant cannot go unnoticed).
func TestCancelledLockPassesOnTheGrantItGot(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		window := distsync.WithHandoffWindow(time.Minute)
		redistest.Retry(t, 3, func() error { return passOnTheGrant(t, b, window) })
	})
}

// passOnTheGrant is one attempt of TestCancelledLockPassesOnTheGrantItGot.
func passOnTheGrant(t *testing.T, b *redistest.Backend, window distsync.Option) error {
	prefix := b.Prefix(t)
	holder := newMutex(t, b.Pod(t, prefix, window), "granted")
	// The granted process's attempts fail unsent from some moment on. An attempt it sent just
	// before (its second, once subscribed) may still reach Redis after the Unlock and take the
	// grant: then the case did not happen, and the round is run again.
	for round := 1; ; round++ {
		if round > 5 {
			t.Fatal("in 5 rounds the granted process always took up its grant before its attempts were made to fail")
		}
		f := redistest.NewFaulty(b.Client(t))
		granted := newMutex(t, b.PodOn(t, f, prefix, window), "granted")
		next := newMutex(t, b.Pod(t, prefix, window), "granted")
		a := owned(reentrant.NewOwner())
		lock(t, holder, a)
		g := owned(reentrant.NewOwner())
		ctx, cancel := context.WithCancel(g)
		res := lockAsync(ctx, granted)
		waitQueued(t, b, prefix, "granted", 1)
		z := owned(reentrant.NewOwner())
		nextRes := lockAsync(z, next)
		waitQueued(t, b, prefix, "granted", 2)
		f.Expire(1000, redistest.ScriptCall(scripts.ReentrantLock))
		unlock(t, holder, a) // grants the mutex to the first waiter
		var took *redistest.Returned
		redistest.Eventually(10*time.Second, func() bool {
			select {
			case r := <-res:
				took = &r
			default:
			}
			return took != nil || f.Dropped() > 0
		})
		if took != nil {
			cancel()
			if took.Err != nil {
				t.Fatalf("Lock of the granted process = %v", took.Err)
			}
			t.Logf("round %d: the granted process took up its grant with an attempt sent before the fault", round)
			unlock(t, granted, g)
			if r := wait(t, nextRes, 10*time.Second); r.Err != nil {
				t.Fatal(r.Err)
			}
			unlock(t, next, z)
			continue
		}
		if f.Dropped() == 0 {
			t.Fatal("the granted process did not try to take up its grant")
		}
		cancel()
		if r := wait(t, res, 5*time.Second); !errors.Is(r.Err, distsync.ErrNotAcquired) || !errors.Is(r.Err, context.Canceled) {
			t.Fatalf("cancelled Lock = %v", r.Err)
		}
		left := time.Now()
		// The cancelled process's grant went on to the next waiter (the next in line, dequeued
		// by the grant), and its entry is gone: nobody is queued any more.
		if n := queued(t, b, prefix, "granted"); n != 0 {
			t.Fatalf("when the cancelled Lock returned, %d processes were queued and the mutex was handed to %q",
				n, grantOf(t, b, prefix, "granted"))
		}
		r := wait(t, nextRes, 10*time.Second)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		unlock(t, next, z)
		return redistest.Late("counted from the cancelled Lock's return (the window is a minute), the next waiter got the mutex", r.At.Sub(left), 3*time.Second, left, r.At)
	}
}

// A re-entry, and a Lock of an owner that holds the mutex through another process, never wait
// in the queue, however many processes wait in it; nor do they change it.
func TestJoiningAHoldDoesNotQueue(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The first waiter must get the mutex in turn: a grant that lapsed while a loaded machine
		// kept it from its waiter would go to the next one (by design), who keeps it.
		window := distsync.WithHandoffWindow(time.Minute)
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			p1 := newMutex(t, b.Pod(t, prefix, window), "join")
			o := reentrant.NewOwner()
			lock(t, p1, owned(o))
			var waiters []<-chan redistest.Returned
			var cancels []context.CancelFunc
			for i := range 3 {
				ctx, cancel := within(owned(reentrant.NewOwner()), time.Minute) // bounds a hang only
				cancels = append(cancels, cancel)
				waiters = append(waiters, lockAsync(ctx, newMutex(t, b.Pod(t, prefix, window), "join")))
				waitQueued(t, b, prefix, "join", int64(i+1))
			}
			defer func() {
				for _, c := range cancels {
					c()
				}
			}()
			p2 := newMutex(t, b.Pod(t, prefix, window), "join")
			start := time.Now()
			lock(t, p1, owned(o)) // re-entry
			lock(t, p2, owned(o)) // the owner's hold, through another process
			ctx, cancel := within(owned(o), 5*time.Second)
			defer cancel()
			if err := p2.Lock(ctx); err != nil { // and a re-entry there
				t.Fatal(err)
			}
			joined := time.Now()
			if got := count(t, b, prefix, "join", o); got != 4 {
				t.Fatalf("Redis counts %d for the owner, want 4", got)
			}
			if n := queued(t, b, prefix, "join"); n != 3 {
				t.Fatalf("%d processes queued after the joins, want the 3 waiters", n)
			}
			for range 2 {
				unlock(t, p2, owned(o))
				unlock(t, p1, owned(o))
			}
			// The first waiter gets the mutex, in turn (30 s bounds a hang only).
			r := wait(t, waiters[0], 30*time.Second)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			// A join that queued would wait behind the waiters, who wait for the owner's hold: for
			// ever (the limits above: 10 s and 5 s).
			return redistest.Late("joining the owner's hold took", joined.Sub(start), 2*time.Second, start, joined)
		})
	})
}

// Goroutines of one process that wait together for the same owner do not queue behind each
// other: once one of them takes the mutex, the others re-enter its hold at once, even while it
// holds on for them (here: until they are in).
func TestGoroutinesOfAnOwnerWaitingTogetherEnterTogether(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		other := newMutex(t, b.Pod(t, prefix), "together")
		z := owned(reentrant.NewOwner())
		lock(t, other, z)
		m := newMutex(t, b.Pod(t, prefix), "together")
		o := reentrant.NewOwner()
		var results []<-chan redistest.Returned
		for i := range 3 {
			ctx, cancel := within(owned(o), 20*time.Second)
			defer cancel()
			results = append(results, lockAsync(ctx, m))
			if i == 0 {
				waitQueued(t, b, prefix, "together", 1)
			}
			// Each waits in the process's room, behind the first, before the next starts.
			if !redistest.Eventually(10*time.Second, func() bool { return m.Waiting() == i+1 }) {
				t.Fatalf("%d Locks wait in the room, want %d", m.Waiting(), i+1)
			}
		}
		unlock(t, other, z)
		for i, ch := range results {
			if r := wait(t, ch, 10*time.Second); r.Err != nil {
				t.Fatalf("goroutine %d: %v", i, r.Err)
			}
		}
		if got := m.HoldCount(owned(o)); got != 3 {
			t.Fatalf("HoldCount = %d, want 3", got)
		}
		if got := count(t, b, prefix, "together", o); got != 3 {
			t.Fatalf("Redis counts %d, want 3", got)
		}
		for range 3 {
			unlock(t, m, owned(o))
		}
		if n := queued(t, b, prefix, "together"); n != 0 {
			t.Fatalf("%d processes queued after every Lock returned", n)
		}
	})
}

// Close releases what the Handle holds, so that a process waiting elsewhere gets the mutex at
// once (the hand-off window is a minute: a grant stranded on the closing process would show),
// and ends the waits of its own Mutex values with ErrClosed.
func TestHandleCloseReleasesAndEndsWaits(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			window := distsync.WithHandoffWindow(time.Minute)
			closing := b.Pod(t, prefix, window)
			held := newMutex(t, closing, "closing")
			blocked := newMutex(t, closing, "closing")
			elsewhere := newMutex(t, b.Pod(t, prefix, window), "closing")
			a := owned(reentrant.NewOwner())
			lock(t, held, a)
			lock(t, held, a)
			blockedRes := lockAsync(owned(reentrant.NewOwner()), blocked)
			waitQueued(t, b, prefix, "closing", 1) // first in line: Close's release grants it the mutex
			z := owned(reentrant.NewOwner())
			elsewhereRes := lockAsync(z, elsewhere)
			waitQueued(t, b, prefix, "closing", 2)

			start := time.Now()
			if err := closing.H.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if r := wait(t, blockedRes, 5*time.Second); !errors.Is(r.Err, distsync.ErrClosed) {
				t.Fatalf("Lock blocked on a closed handle = %v, want ErrClosed", r.Err)
			}
			r := wait(t, elsewhereRes, 30*time.Second)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if err := held.Lock(a); !errors.Is(err, distsync.ErrClosed) {
				t.Fatalf("Lock after Close = %v, want ErrClosed", err)
			}
			unlock(t, elsewhere, z)
			// A grant stranded on the closing process would hold it up for the window, a minute.
			return redistest.Late("counted from Close, the waiter elsewhere got the mutex", r.At.Sub(start), 5*time.Second, start, r.At)
		})
	})
}

// After contention, cancelled waiters and a crashed holder, every key of the mutex has a TTL,
// and the queue is gone once nobody waits.
func TestQueueLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The lease is 1 s in the first attempt, longer in the next.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithHandoffWindow(100 * time.Millisecond)}
			prefix := b.Prefix(t)
			var ms []*reentrant.Mutex
			var pods []*redistest.Pod
			var handles []*distsync.Handle
			for range 3 {
				p := b.Pod(t, prefix, opts...)
				pods = append(pods, p)
				handles = append(handles, p.H)
				ms = append(ms, newMutex(t, p, "leak"))
			}
			// A hold lost here (a machine stalled for most of a lease) would end the scenario's
			// premise, not fail what it checks: failed Unlocks are counted, not failed.
			if _, _, lost := contend(t, ms, 8, 5*time.Millisecond, nil, true); lost > 0 {
				return fmt.Errorf("%d Unlocks failed while the processes contended: holds were lost (the machine stalled for most of a lease?)", lost)
			}
			// Waiters that give up, one of them in the holder's process.
			a := owned(reentrant.NewOwner())
			lock(t, ms[0], a)
			for i, p := range pods {
				ctx, cancel := within(owned(reentrant.NewOwner()), 150*time.Millisecond)
				err := newMutex(t, p, "leak").Lock(ctx)
				cancel()
				if err == nil && ms[0].Lease(a).Err() != nil {
					return fmt.Errorf("waiter %d got the mutex: the holder had lost it (%v), the machine stalled for most of a lease", i, ms[0].Lease(a).Err())
				}
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("waiter %d: %v", i, err)
				}
			}
			if err := released(t, ms[0], a); err != nil {
				return err
			}
			// A holder that crashes while a process waits.
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			crashPod := b.PodVia(t, prefix, net, opts...)
			handles = append(handles, crashPod.H)
			crash := newMutex(t, crashPod, "leak")
			lock(t, crash, a)
			z := owned(reentrant.NewOwner())
			res := lockAsync(z, ms[1])
			if err := redistest.Waiting(t, "the waiter queues behind the holder", func() bool { return queued(t, b, prefix, "leak") == 1 }, res); err != nil {
				return err
			}
			net.Cut()
			if r := wait(t, res, 10*time.Second); r.Err != nil {
				t.Fatal(r.Err)
			}
			if err := released(t, ms[1], z); err != nil {
				return err
			}
			if keys := b.KeysWithoutTTL(t, prefix); len(keys) > 0 {
				t.Fatalf("keys without a TTL: %v", keys)
			}
			// The library's own clean-up in the background (a leave or an unsubscribe that Redis
			// was slow to answer) takes up to 10 s, after a second's linger for a subscription:
			// 15 s bounds a hang only.
			var left []string
			if !redistest.Eventually(15*time.Second, func() bool {
				left = nil
				for _, k := range b.Keys(t, prefix) {
					if k == key(prefix, "leak") || k == key(prefix, "leak")+":q" || k == key(prefix, "leak")+":qx" {
						left = append(left, k)
					}
				}
				return len(left) == 0
			}) {
				t.Fatalf("keys left once nobody holds or waits: %v", left)
			}
			var chans []string
			if !redistest.Eventually(15*time.Second, func() bool {
				chans = b.LeftChannels(t, key(prefix, "leak")+":ch:*", handles...)
				return len(chans) == 0
			}) {
				t.Fatalf("subscriptions left once nobody waits: %v", chans)
			}
			return nil
		})
	})
}

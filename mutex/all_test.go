package mutex_test

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
	"github.com/distsync/distsync/internal/keys"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/mutex"
)

func (p *pod) all(t *testing.T, names ...string) (*mutex.All, []*mutex.Mutex) {
	t.Helper()
	ms := make([]*mutex.Mutex, len(names))
	for i, n := range names {
		ms[i] = p.mutex(t, n)
	}
	a, err := mutex.NewAll(ms...)
	if err != nil {
		t.Fatalf("NewAll(%v): %v", names, err)
	}
	return a, ms
}

// sameSlot returns n names whose keys under prefix share one Redis Cluster hash slot.
func sameSlot(prefix string, n int) []string {
	bySlot := map[int][]string{}
	for i := 0; ; i++ {
		name := "s" + strconv.Itoa(i)
		s := keys.Slot(keyOf(prefix, name, ""))
		bySlot[s] = append(bySlot[s], name)
		if len(bySlot[s]) == n {
			return bySlot[s]
		}
	}
}

// Bad input to NewAll: an error matching ErrInvalid, and nothing sent.
func TestAllBadInput(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Mini)
	prefix := b.Prefix(t)
	p, q := newPod(t, b, prefix), newPod(t, b, prefix)
	a, b2 := p.mutex(t, "a"), p.mutex(t, "b")
	fixed := p.mutex(t, "c", distsync.WithFixedLease(time.Second))
	other := newPod(t, b, prefix)
	quorum := p.mutex(t, "d", mutex.WithQuorum(q.h, other.h))
	for _, c := range []struct {
		what string
		ms   []*mutex.Mutex
	}{
		{"no mutexes", nil},
		{"a nil", []*mutex.Mutex{a, nil}},
		{"a name twice", []*mutex.Mutex{a, b2, p.mutex(t, "a")}},
		{"one Mutex twice", []*mutex.Mutex{a, a}},
		{"two Handles", []*mutex.Mutex{a, q.mutex(t, "b")}},
		{"renewed and fixed", []*mutex.Mutex{a, fixed}},
		{"a quorum", []*mutex.Mutex{a, quorum}},
	} {
		if all, err := mutex.NewAll(c.ms...); !errors.Is(err, distsync.ErrInvalid) || all != nil {
			t.Errorf("NewAll with %s = %v, %v; want ErrInvalid", c.what, all, err)
		} else if strings.Count(err.Error(), "\n") != 0 {
			t.Errorf("NewAll with %s: error of several lines: %q", c.what, err)
		}
	}
	all, _ := p.all(t, "a", "b")
	if err := all.Unlock(context.Background()); !errors.Is(err, distsync.ErrNotHeld) {
		t.Errorf("Unlock without Lock = %v, want ErrNotHeld", err)
	}
	if all.Tokens() != nil {
		t.Errorf("Tokens without Lock = %v, want nil", all.Tokens())
	}
	for _, pd := range []*pod{p, q, other} {
		if n := pd.client.Total(); n != 0 {
			t.Errorf("bad input sent %d commands to Redis", n)
		}
	}
	if ks := b.Keys(t, prefix); len(ks) != 0 {
		t.Errorf("bad input wrote keys %v", ks)
	}
}

// A held All excludes the single-name mutexes of its names, and a held single-name mutex
// excludes an All that names it; a TryLock that fails holds nothing.
func TestAllInteroperatesWithMutex(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		// A hand-off stays its grantee's until it confirms it, as long as this: on a stalled
		// machine a grantee that confirms late would lose the hold.
		window := distsync.WithHandoffWindow(time.Minute)
		p, q := newPod(t, b, prefix, window), newPod(t, b, prefix, window)
		ctx := context.Background()
		for _, names := range [][]string{{"x", "y", "z"}, sameSlot(prefix, 2)} {
			all, _ := p.all(t, names...)
			singles := make([]*mutex.Mutex, len(names))
			for i, n := range names {
				singles[i] = q.mutex(t, n)
			}
			l, err := all.LockLease(ctx)
			if err != nil {
				t.Fatalf("LockLease(%v): %v", names, err)
			}
			tokens := all.Tokens()
			if len(tokens) != len(names) || tokens[0] != l.Token() {
				t.Fatalf("Tokens = %v, lease token %d", tokens, l.Token())
			}
			for i, s := range singles {
				if ok, err := s.TryLock(ctx); ok || err != nil {
					t.Fatalf("TryLock(%s) while the All holds it = %v, %v", names[i], ok, err)
				}
				if tok := fenceOf(t, b, prefix, names[i]); tok != tokens[i] {
					t.Errorf("%s: token %d, fence %d", names[i], tokens[i], tok)
				}
			}
			if err := all.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			if err := l.Err(); !errors.Is(err, distsync.ErrReleased) {
				t.Errorf("lease after Unlock: %v, want ErrReleased", err)
			}

			// The last name held alone: TryLock fails and gives back the rest.
			last := singles[len(singles)-1]
			lockWithin(t, last, 5*time.Second)
			if ok, err := all.TryLock(ctx); ok || err != nil {
				t.Fatalf("All.TryLock with %s held = %v, %v", names[len(names)-1], ok, err)
			}
			for i, s := range singles[:len(singles)-1] {
				if ok, err := s.TryLock(ctx); !ok || err != nil {
					t.Fatalf("TryLock(%s) after the All's failed TryLock = %v, %v: it kept it", names[i], ok, err)
				}
				unlock(t, s)
			}
			// Lock waits for it, woken by its Unlock.
			ch := redistest.Async(ctx, all.Lock)
			waitQueued(t, b, prefix, names[len(names)-1], 1)
			unlock(t, last)
			if r := wait(t, ch, 10*time.Second); r.Err != nil {
				t.Fatalf("All.Lock after the single Unlock: %v", r.Err)
			}
			for i, s := range singles {
				if ok, _ := s.TryLock(ctx); ok {
					t.Fatalf("TryLock(%s) succeeded while the All holds it", names[i])
				}
			}
			if err := all.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
		}
	})
}

func fenceOf(t *testing.T, b *redistest.Backend, prefix, name string) int64 {
	t.Helper()
	n, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Get().Key(keyOf(prefix, name, "fence")).Build()
	}).AsInt64()
	if err != nil {
		t.Fatalf("fence of %s: %v", name, err)
	}
	return n
}

// Two sets locked in opposite orders, with single-name lockers among them, all finish, and no
// name ever has two holders.
func TestAllOppositeOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		names := []string{"n0", "n1", "n2", "n3"}
		inside := make([]atomic.Int32, len(names))
		// A bound on a deadlock: the rounds take seconds, minutes on a loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		enter := func(idx []int) {
			for _, i := range idx {
				if n := inside[i].Add(1); n != 1 {
					errs <- fmt.Errorf("%d holders of %s", n, names[i])
				}
			}
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
			for _, i := range idx {
				inside[i].Add(-1)
			}
		}
		const rounds = 12
		for w := range 6 {
			// A hand-off stays the grantee's until it confirms it, as long as this: on a stalled
			// machine a grant that lapsed before that would be a hold lost, not what this tests.
			p := newPod(t, b, prefix, distsync.WithHandoffWindow(time.Minute))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					idx := rand.Perm(len(names))[:2+rand.IntN(3)%3]
					if w%3 == 2 {
						idx = idx[:1] // a single-name locker
						m := p.mutex(t, names[idx[0]])
						if err := m.Lock(ctx); err != nil {
							errs <- fmt.Errorf("worker %d round %d: Lock: %w", w, r, err)
							return
						}
						enter(idx)
						if err := m.Unlock(ctx); err != nil {
							errs <- err
						}
						continue
					}
					sel := make([]string, len(idx))
					for k, i := range idx {
						sel[k] = names[i]
					}
					all, _ := p.all(t, sel...)
					if err := all.Lock(ctx); err != nil {
						errs <- fmt.Errorf("worker %d round %d: Lock(%v): %w", w, r, sel, err)
						return
					}
					enter(idx)
					if err := all.Unlock(ctx); err != nil {
						errs <- fmt.Errorf("worker %d: Unlock(%v): %w", w, sel, err)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// A Lock cancelled while it waits for one name holds none of the others when it returns, and
// has left that name's queue.
func TestAllCancelledLockHoldsNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p, q := newPod(t, b, prefix), newPod(t, b, prefix)
		all, _ := p.all(t, "c0", "c1", "c2")
		blocker := q.mutex(t, "c2") // last in the order: c0 and c1 are held while waiting for it
		lockWithin(t, blocker, 5*time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := redistest.Async(ctx, all.Lock)
		waitQueued(t, b, prefix, "c2", 1) // cancelled while it waits for c2
		cancel()
		err := wait(t, ch, 10*time.Second).Err
		if !isBoth(err, distsync.ErrNotAcquired, context.Canceled) {
			t.Fatalf("Lock = %v, want ErrNotAcquired and Canceled", err)
		}
		if !strings.Contains(err.Error(), `waiting for "c2"`) {
			t.Errorf("Lock = %v: the error does not say which mutex it waited for", err)
		}
		// Checked at once: nothing may be left for the background.
		for _, n := range []string{"c0", "c1"} {
			if ex, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Exists().Key(keyOf(prefix, n, "")).Build()
			}).AsInt64(); ex != 0 {
				t.Errorf("%s is still held after the cancelled Lock returned", n)
			}
		}
		if ex, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Exists().Key(keyOf(prefix, "c2", "q")).Build()
		}).AsInt64(); ex != 0 {
			t.Error("the cancelled Lock is still queued for c2")
		}
		if all.Tokens() != nil {
			t.Error("a cancelled Lock left tokens")
		}
		unlock(t, blocker)
		lockWithin(t, p.mutex(t, "c2"), 5*time.Second)
	})
}

// A set whose member is lost is lost: Done closes with ErrLost, naming it, and Unlock reports
// the loss and releases the others.
func TestAllLossOfOneMemberIsTheSetsLoss(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The lease, a second, longer in the attempts after one that a stalled machine (or
		// Redis) spoiled.
		redistest.RetryScaled(t, 4, time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			p := newPod(t, b, prefix, distsync.WithLeaseTTL(ttl))
			all, _ := p.all(t, "l0", "l1")
			l, err := all.LockLease(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			locked := time.Now()
			b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(keyOf(prefix, "l1", "")).Build() })
			select {
			case <-l.Done():
			case <-time.After(ttl + 10*time.Second):
				t.Fatal("the set's lease did not end after a member's key was deleted")
			}
			if err := l.Err(); errors.Is(err, distsync.ErrLost) && strings.Contains(err.Error(), "0 of its 2") {
				// The premise: l0's lease outlived the loss of l1. Renewals 2/3 of a lease late
				// (a stalled machine, or Redis) lose both.
				_ = all.Unlock(context.Background())
				return fmt.Errorf("both members were lost (this process stalled %v meanwhile): %w", redistest.Stalled(locked, time.Now()), err)
			}
			if err := l.Err(); !errors.Is(err, distsync.ErrLost) || !strings.Contains(err.Error(), "1 of its 2") {
				t.Fatalf("lease error %v, want ErrLost saying 1 of 2 held", err)
			}
			if err := all.Unlock(context.Background()); !isBoth(err, distsync.ErrNotHeld, distsync.ErrLost) {
				t.Fatalf("Unlock after the loss = %v, want ErrNotHeld and ErrLost", err)
			}
			if ex, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Exists().Key(keyOf(prefix, "l0", "")).Build()
			}).AsInt64(); ex != 0 {
				t.Error("Unlock after the loss left the other member held")
			}
			return nil
		})
	})
}

// Uncontended, Lock is one round trip: one script per run of one slot, all in one pipeline
// (one run on a Redis that is not a Cluster).
func TestAllUncontendedIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := newPod(t, b, prefix)
		names := []string{"u0", "u1", "u2", "u3"}
		runs := 1
		if b.Name == redistest.ClusterB {
			slots := map[int]bool{}
			for _, n := range names {
				slots[keys.Slot(keyOf(prefix, n, ""))] = true
			}
			runs = len(slots)
		}
		all, _ := p.all(t, names...)
		for range 2 { // the first loads the script (NOSCRIPT, then EVAL)
			p.client.Reset()
			if err := all.Lock(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := all.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		p.client.Reset()
		if err := all.Lock(context.Background()); err != nil {
			t.Fatal(err)
		}
		counts, pipes := p.client.Counts(), p.client.Pipelines()
		if counts["EVALSHA"] != runs || p.client.Total() != runs || len(pipes) != 1 || pipes[0] != runs {
			t.Errorf("uncontended Lock of %d names in %d slot runs sent %v in pipelines %v; want %d EVALSHA in one pipeline",
				len(names), runs, counts, pipes, runs)
		}
		if err := all.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// A set waits for a busy member in that member's queue, in its order: a single-name waiter
// that came first is served first, one that came after is served after.
func TestAllWaitsInTheMembersQueue(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Each hand-off stays its grantee's until it confirms it: a grantee that a stalled
		// machine makes late is not taken for dead and passed over.
		window := distsync.WithHandoffWindow(time.Minute)
		holder := newPod(t, b, prefix, window).mutex(t, "q1")
		lockWithin(t, holder, 5*time.Second)
		var order []string
		var mu sync.Mutex
		served := func(who string) {
			mu.Lock()
			order = append(order, who)
			mu.Unlock()
		}
		before := newPod(t, b, prefix, window).mutex(t, "q1")
		ch1 := redistest.Async(ctx, func(ctx context.Context) error {
			if err := before.Lock(ctx); err != nil {
				return err
			}
			served("before")
			time.Sleep(20 * time.Millisecond)
			return before.Unlock(ctx)
		})
		waitQueued(t, b, prefix, "q1", 1)
		all, _ := newPod(t, b, prefix, window).all(t, "q1", "q0")
		ch2 := redistest.Async(ctx, func(ctx context.Context) error {
			if err := all.Lock(ctx); err != nil {
				return err
			}
			served("all")
			time.Sleep(20 * time.Millisecond)
			return all.Unlock(ctx)
		})
		waitQueued(t, b, prefix, "q1", 2)
		after := newPod(t, b, prefix, window).mutex(t, "q1")
		ch3 := redistest.Async(ctx, func(ctx context.Context) error {
			if err := after.Lock(ctx); err != nil {
				return err
			}
			served("after")
			return after.Unlock(ctx)
		})
		waitQueued(t, b, prefix, "q1", 3)
		unlock(t, holder)
		for _, ch := range []<-chan redistest.Returned{ch1, ch2, ch3} {
			if r := wait(t, ch, 20*time.Second); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		if got := strings.Join(order, " "); got != "before all after" {
			t.Errorf("served in the order %q, want \"before all after\"", got)
		}
	})
}

// setWaiting is a set of two names whose Lock (ch) took the first, early, and waits in the
// queue of the second behind blocker, a hold of pod q.
type setWaiting struct {
	early   string
	blocker *mutex.Mutex
	all     *mutex.All
	ch      <-chan redistest.Returned
	q       *pod
}

// waitingForLate starts a set of the names first and second under prefix that takes one of
// them (early: first, or, on a Cluster, the one whose key comes first) and then waits for the
// other, held by another pod. Its Lock has 20 s.
func waitingForLate(t *testing.T, b *redistest.Backend, prefix, first, second string) setWaiting {
	t.Helper()
	early, late := first, second
	if b.Name == redistest.ClusterB && keys.Slot(keyOf(prefix, late, "")) < keys.Slot(keyOf(prefix, early, "")) {
		early, late = late, early // the set takes early first, and waits for late holding it
	}
	p, q := newPod(t, b, prefix), newPod(t, b, prefix)
	blocker := q.mutex(t, late)
	lockWithin(t, blocker, 5*time.Second)
	all, _ := p.all(t, early, late)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	ch := redistest.Async(ctx, all.Lock)
	waitQueued(t, b, prefix, late, 1)
	return setWaiting{early: early, blocker: blocker, all: all, ch: ch, q: q}
}

// A member taken early and lost while the set waited for a later one (its key gone, and
// someone else held the name since, with a larger token) is taken again before Lock returns:
// the set's token for it is above every earlier token of the name.
func TestAllRetakesAMemberLostWhileWaiting(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		s := waitingForLate(t, b, prefix, "w0", "w1")
		early, blocker, all, ch, q := s.early, s.blocker, s.all, s.ch, s.q
		// The set holds early now. Its key goes (as in a Redis restarted empty), and another
		// process holds the name in between.
		b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(keyOf(prefix, early, "")).Build() })
		other := q.mutex(t, early)
		lockWithin(t, other, 5*time.Second)
		between := other.Lease().Token()
		unlock(t, other)
		unlock(t, blocker)
		if r := wait(t, ch, 15*time.Second); r.Err != nil {
			t.Fatalf("Lock: %v", r.Err)
		}
		defer func() { _ = all.Unlock(context.Background()) }()
		if tok := all.Tokens()[0]; tok <= between {
			t.Errorf("the set's token for %s is %d, not above %d, taken by another process while the set waited", early, tok, between)
		}
		if ex, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Exists().Key(keyOf(prefix, early, "")).Build()
		}).AsInt64(); ex != 1 {
			t.Errorf("Lock returned with %s not held in Redis", early)
		}
	})
}

// A member taken early keeps its hold while the set waits for a later one, also when another
// process queues behind it (which marks the holder's value, lib/queue.lua): the set does not
// take it again, so its token for it is the one it took first.
func TestAllKeepsAMemberWaitedFor(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		s := waitingForLate(t, b, prefix, "k0", "k1")
		early, blocker, all, ch, q := s.early, s.blocker, s.all, s.ch, s.q
		first := fenceOf(t, b, prefix, early) // the set's token for early: the last handed out
		// Another process queues behind the set's hold of early.
		wctx, wcancel := context.WithCancel(context.Background())
		defer wcancel()
		wch := redistest.Async(wctx, q.mutex(t, early).Lock)
		waitQueued(t, b, prefix, early, 1)
		unlock(t, blocker)
		if r := wait(t, ch, 15*time.Second); r.Err != nil {
			t.Fatalf("Lock: %v", r.Err)
		}
		if tok := all.Tokens()[0]; tok != first {
			t.Errorf("the set's token for %s is %d, want %d, the one it took first: it took the member again", early, tok, first)
		}
		if err := all.Unlock(context.Background()); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		if r := wait(t, wch, 15*time.Second); r.Err != nil {
			t.Fatalf("the waiter behind the set: %v", r.Err)
		}
	})
}

// A set whose acquisition's reply comes after its leases' deadline (Redis or the network
// stalled for a lease) gives it back, as a Mutex does: TryLock reports it not taken, and Lock
// takes the set again and returns with live leases, not with an error while its context lasts.
func TestAllAcquisitionTooLateToUseIsTakenAgain(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 400 * time.Millisecond
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			f := redistest.NewFaulty(b.Client(t))
			h := b.PodOn(t, f, prefix, distsync.WithLeaseTTL(ttl)).H
			var ms []*mutex.Mutex
			for _, n := range sameSlot(prefix, 2) { // one script takes them
				m, err := mutex.New(h, n)
				if err != nil {
					t.Fatal(err)
				}
				ms = append(ms, m)
			}
			all, err := mutex.NewAll(ms...)
			if err != nil {
				t.Fatal(err)
			}
			isAcquire := redistest.ScriptCall(scripts.MutexAcquireAll)

			f.Delay(1, ttl+200*time.Millisecond, isAcquire)
			if ok, err := all.TryLock(context.Background()); ok || !errors.Is(err, distsync.ErrNotAcquired) {
				t.Fatalf("TryLock whose reply came after the leases' deadline = %v, %v; want false and ErrNotAcquired", ok, err)
			}
			if all.Tokens() != nil {
				t.Fatal("a late TryLock left a hold behind")
			}

			f.Delay(1, ttl+200*time.Millisecond, isAcquire)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			called := time.Now()
			l, err := all.LockLease(ctx)
			returned := time.Now()
			if err != nil {
				t.Fatalf("Lock whose first reply came after the leases' deadline = %v; want it to take the set again", err)
			}
			defer func() { _ = all.Unlock(context.Background()) }()
			// As in TestAcquisitionTooLateToUseIsGivenBack: returned after its deadline only if
			// this process was stalled that long.
			return redistest.Late("Lock returned a set that is already lost: it returned after the set's deadline,",
				returned.Sub(l.Deadline()), 0, called, returned)
		})
	})
}

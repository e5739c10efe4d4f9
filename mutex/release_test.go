package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/mutex"
)

// An Unlock whose release cannot reach Redis goes on in the background. If the claim is lost
// before a background attempt gets through (here: deleted), that attempt finds it gone, and
// the hold ends as lost, not as released: a loss is never reported as a release.
func TestBackgroundReleaseThatFindsTheLockGoneReportsALoss(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			f := redistest.NewFaulty(b.Client(t))
			m, err := mutex.New(b.PodOn(t, f, prefix).H, "gone")
			if err != nil {
				t.Fatal(err)
			}
			l, err := m.LockLease(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var cut atomic.Bool // every release fails, unsent, until the lock is gone
			cut.Store(true)
			isRelease := redistest.ScriptCall(scripts.MutexRelease)
			f.Expire(1000, func(cmd []string) bool { return cut.Load() && isRelease(cmd) })
			if err := m.Unlock(context.Background()); err == nil {
				t.Fatal("Unlock succeeded although no release could be sent")
			}
			if l.Err() != nil {
				t.Fatalf("the lease ended before any release reached Redis: %v", l.Err())
			}
			b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(keyOf(prefix, "gone", "")).Build() })
			deleted := time.Now()
			cut.Store(false)
			select {
			case <-l.Done():
			case <-time.After(20 * time.Second): // past the lease's deadline, which ends it anyway
				t.Fatal("the background release found the lock gone, and the lease did not end")
			}
			ended := time.Now()
			if err := l.Err(); !errors.Is(err, distsync.ErrLost) || errors.Is(err, distsync.ErrReleased) {
				t.Fatalf("a hold whose background release found the lock gone ended with %v, want ErrLost", err)
			}
			t.Logf("the lease ended %v after the lock was deleted, %v before its deadline", ended.Sub(deleted), l.Deadline().Sub(ended))
			// Well before the lease's deadline (10 s), which would end it as lost too.
			return redistest.Late("the lease ended after the lock was deleted", ended.Sub(deleted), 5*time.Second, deleted, ended)
		})
	})
}

// A release whose reply was lost on the wire went through: its retry finds the lock gone, and
// the record of the release (rel) says that this hold released it, so Unlock succeeds, even
// after other holds of the name came and went meanwhile (a few of them). After many more
// releases of the name the record no longer has it: the retry then reports a loss, the safe
// side.
func TestRetriedReleaseTellsItsOwnReleaseFromALoss(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, c := range []struct {
			others int
			lost   bool
		}{{0, false}, {5, false}, {40, true}} {
			redistest.Retry(t, 3, func() error {
				prefix := b.Prefix(t)
				f := redistest.NewFaulty(b.Client(t))
				// The release is retried until the lease would have run out: the others' holds
				// must all come and go within it, on a loaded machine too.
				m, err := mutex.New(b.PodOn(t, f, prefix, distsync.WithLeaseTTL(2*time.Minute)).H, "rel")
				if err != nil {
					t.Fatal(err)
				}
				other := newPod(t, b, prefix).mutex(t, "rel")
				l, err := m.LockLease(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				var hold atomic.Bool // the retries wait, unsent, until the others are done
				hold.Store(true)
				isRelease := redistest.ScriptCall(scripts.MutexRelease)
				f.DropAll(1, isRelease)
				f.Expire(1000, func(cmd []string) bool { return hold.Load() && isRelease(cmd) })
				done := make(chan error, 1)
				go func() { done <- m.Unlock(context.Background()) }()
				for range c.others {
					lockWithin(t, other, 10*time.Second)
					unlock(t, other)
				}
				hold.Store(false)
				err = <-done
				if err != nil {
					// The foreground retries were spent while the others locked: the background
					// goes on, and the lease tells the outcome.
					select {
					case <-l.Done():
					case <-time.After(40 * time.Second): // the background tries again within a second
						t.Fatalf("%d others: the background release did not end the lease", c.others)
					}
					if err = l.Err(); errors.Is(err, distsync.ErrLost) && !time.Now().Before(l.Deadline()) {
						// The premise: the retry got through before the lease ran out; a
						// machine too slow for that gives up on it, the safe side.
						return fmt.Errorf("%d others: the release's retry did not get through before the lease ran out: %w", c.others, err)
					}
					if errors.Is(err, distsync.ErrReleased) {
						err = nil
					}
				}
				switch {
				case !c.lost && err != nil:
					t.Fatalf("%d others between the release and its retry: Unlock = %v, want released", c.others, err)
				case c.lost && !errors.Is(err, distsync.ErrLost):
					t.Fatalf("%d others between the release and its retry: Unlock = %v, want a loss (the record is gone)", c.others, err)
				}
				return nil
			})
		}
	})
}

// Two processes dead in a row at the head of the queue cost a hand-off window each, not a
// lease: the release grants the lock to the first, asks the second to watch the grant for a
// window and the third for two; the third, alive, takes the lock once both have lapsed.
func TestTwoDeadWaitersInARowCostTwoWindows(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl, window = 30 * time.Second, 300 * time.Millisecond
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithHandoffWindow(window)}
			holder := newPod(t, b, prefix, opts...).mutex(t, "dead2")
			lockWithin(t, holder, 5*time.Second)
			for i := range 2 {
				// Each dying process queues, then loses Redis and gives up: its clean-up cannot get
				// through, so its entry stays queued, as a crashed process's would.
				net := redistest.NewNetwork()
				t.Cleanup(net.Restore)
				dying := newPodVia(t, b, prefix, net, opts...)
				ctx, kill := context.WithCancel(context.Background())
				res := lockAsync(ctx, dying.mutex(t, "dead2"))
				waitQueued(t, b, prefix, "dead2", int64(i+1))
				net.Cut()
				kill()
				if r := wait(t, res, 5*time.Second); r.Err == nil {
					t.Fatal("Lock cut off from Redis succeeded")
				}
			}
			live := newPod(t, b, prefix, opts...).mutex(t, "dead2")
			liveRes := lockAsync(context.Background(), live)
			waitQueued(t, b, prefix, "dead2", 3)

			start := time.Now()
			unlock(t, holder)                     // grants the lock to the first dead waiter
			r := wait(t, liveRes, 25*time.Second) // short of its backstop, a lease (30 s) away
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			d := r.At.Sub(start)
			// Redis keeps the grant for the window from the release, which ran after start.
			if d < window {
				t.Fatalf("live waiter got the lock %v after Unlock, inside the grant to the dead waiter (%v)", d, window)
			}
			t.Logf("two dead waiters skipped after %v (window %v)", d, window)
			unlock(t, live)
			// Two windows, not a lease.
			return redistest.Late("the live waiter, two windows after Unlock, got the lock", d-2*window, 3*time.Second, start, r.At)
		})
	})
}

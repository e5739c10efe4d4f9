package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/mutex"
)

// Several pods, several goroutines each, one mutex: never two inside at once, and every
// acquisition's fencing token is larger than the one before it.
func TestMutualExclusionAndIncreasingTokens(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const pods, goroutines, rounds = 4, 4, 15
		prefix := b.Prefix(t)
		var inside atomic.Int32
		var mu sync.Mutex
		var tokens []int64
		var wg sync.WaitGroup
		errs := make(chan error, pods*goroutines)
		for p := range pods {
			// A hand-off stays the grantee's until it confirms it, as long as this: on a stalled
			// machine a grant that lapsed before that would be a hold lost, not what this tests.
			pd := newPod(t, b, prefix, distsync.WithHandoffWindow(time.Minute))
			m := pd.mutex(t, "hot")
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// A bound on a hang: the rounds take seconds, minutes on a loaded machine.
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
					defer cancel()
					for i := range rounds {
						if err := m.Lock(ctx); err != nil {
							errs <- fmt.Errorf("pod %d goroutine %d round %d: %w", p, g, i, err)
							return
						}
						if n := inside.Add(1); n != 1 {
							errs <- fmt.Errorf("%d holders inside the critical section", n)
						}
						mu.Lock()
						tokens = append(tokens, m.Lease().Token())
						mu.Unlock()
						if rand.IntN(4) == 0 {
							time.Sleep(time.Millisecond)
						}
						inside.Add(-1)
						if err := m.Unlock(ctx); err != nil {
							errs <- fmt.Errorf("unlock: %w", err)
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if len(tokens) != pods*goroutines*rounds {
			t.Fatalf("%d acquisitions, want %d", len(tokens), pods*goroutines*rounds)
		}
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("token %d = %d after %d: fencing tokens must strictly increase", i, tokens[i], tokens[i-1])
			}
		}
	})
}

// Tokens increase across clients taking turns, and across a lock that expired.
func TestFencingTokensIncreaseAcrossClients(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		ms := []*mutex.Mutex{
			newPod(t, b, prefix).mutex(t, "fenced"),
			newPod(t, b, prefix).mutex(t, "fenced"),
			// Short, and longer than a round trip on a loaded machine: an acquisition whose reply
			// comes after its lease is given back, and Lock tries again.
			newPod(t, b, prefix).mutex(t, "fenced", distsync.WithFixedLease(500*time.Millisecond)),
		}
		var last int64
		for i := range 12 {
			m := ms[i%len(ms)]
			lockWithin(t, m, 10*time.Second)
			tok := m.Lease().Token()
			if tok <= last {
				t.Fatalf("acquisition %d: token %d not above %d", i, tok, last)
			}
			last = tok
			if i%len(ms) == 2 {
				<-m.Lease().Done() // let the fixed lease expire instead of unlocking
				_ = m.Unlock(context.Background())
				continue
			}
			unlock(t, m)
		}
	})
}

// A waiter sends nothing while the lock is held, apart from one re-check per lease.
func TestIdleWaiterDoesNotPoll(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The lease, 1 s, longer in the attempts after one that a stalled machine spoiled.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			holder := newPod(t, b, prefix, distsync.WithLeaseTTL(ttl)).mutex(t, "idle")
			waiterPod := newPod(t, b, prefix, distsync.WithLeaseTTL(ttl))
			waiter := waiterPod.mutex(t, "idle")

			if err := lockShort(t, holder); err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := lockAsync(ctx, waiter)
			if !waitQueuedOr(t, b, prefix, "idle", 1, res) {
				return heldTooShort(t, holder.Lease())
			}
			waitSubscribed(t, waiterPod) // its subscribe and the re-check after it are not idle

			window := 3 * ttl
			from := time.Now()
			time.Sleep(window)
			sent := waiterPod.client.Since(from)
			if err := holder.Lease().Err(); err != nil {
				// The premise: a holder whose renewals came too late for its lease (a stalled
				// machine) leaves the waiter good reason to re-check.
				return fmt.Errorf("the holder lost its lease while renewing (stalled %v meanwhile): %w",
					redistest.Stalled(from, time.Now()), err)
			}
			// One backstop re-check per lease TTL at most (+1 for the window's edges).
			limit := int(window/ttl) + 1
			if len(sent) > limit {
				t.Fatalf("idle waiter sent %d commands in %v (lease %v), want at most %d: %v", len(sent), window, ttl, limit, sent)
			}
			if len(sent) == 0 {
				t.Fatalf("idle waiter sent no backstop re-check in %v; the counter may be broken", window)
			}
			t.Logf("idle waiter: %d commands in %v with a %v lease: %v", len(sent), window, ttl, sent)
			unlockOrLost(t, holder) // held through the window; since then a stalled machine may have lost it
			if r := wait(t, res, 10*time.Second); r.Err != nil {
				t.Fatal(r.Err)
			}
			unlockOrLost(t, waiter)
			return nil
		})
	})
}

// A holder that dies (its network cut) is replaced as soon as its lease runs out: each renewal
// tells the head waiter when the lease now ends, so the head re-checks right after that, not
// up to a third of a lease later as a waiter that only knows the lease it saw must.
func TestDeadHoldersLockIsTakenAtItsExpiry(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The lease, 3 s, longer in the attempts after one that a stalled machine spoiled; the
		// other times are in proportion.
		redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			holder := newPodVia(t, b, prefix, net, distsync.WithLeaseTTL(ttl)).mutex(t, "dead")
			waiterPod := newPod(t, b, prefix, distsync.WithLeaseTTL(ttl))
			waiter := waiterPod.mutex(t, "dead")
			locked := time.Now()
			lockWithin(t, holder, 5*time.Second)
			token := holder.Lease().Token()
			ctx, cancel := context.WithTimeout(context.Background(), 3*ttl+20*time.Second)
			defer cancel()
			res := lockAsync(ctx, waiter)
			if !waitQueuedOr(t, b, prefix, "dead", 1, res) {
				return heldTooShort(t, holder.Lease())
			}
			// Past the holder's second renewal (at a third and two thirds of the lease): a waiter
			// that only knew the lease it saw when it queued would now wake a sixth of a lease
			// (half a second of 3 s) after the expiry, at the earliest. The second renewal
			// makes the lease end 5/3 of a lease after the Lock, or nearly (a renewal may go an
			// eighth of a period early); after the first alone it ends 4/3 after.
			renewed := locked.Add(ttl + ttl/2)
			time.Sleep(time.Until(locked.Add(2 * ttl / 3)))
			var expiry time.Time
			if !redistest.Eventually(ttl/3, func() bool {
				var err error
				expiry, err = expiryOf(t, waiter, token)
				return err == nil && !expiry.Before(renewed)
			}) {
				return fmt.Errorf("a lease after the Lock the lease ended %v after it, want %v or more: the holder's second renewal had not run",
					expiry.Sub(locked).Round(time.Millisecond), renewed.Sub(locked))
			}
			net.Cut() // the holder is gone; its lease runs on in Redis
			cut := time.Now()
			expiry, err := expiryOf(t, waiter, token)
			if err != nil {
				return err
			}
			r := wait(t, res, ttl+20*time.Second)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			late := r.At.Sub(expiry)
			t.Logf("the waiter took the dead holder's lock %v after its lease ran out (%v left at the cut)", late, expiry.Sub(cut))
			for _, c := range waiterPod.client.Since(cut) {
				t.Logf("the waiter sent %s %v after the expiry", c.Name, c.At.Sub(expiry))
			}
			unlockOrLost(t, waiter)
			net.Restore()
			// Within a few round trips: 350 ms for a 3 s lease.
			return redistest.Late("the waiter took the dead holder's lock", late, ttl*7/60, cut, r.At)
		})
	})
}

// With a long lease, Unlock wakes the waiter at once: no waiting for the lease to run out.
func TestWaiterWakesPromptlyOnUnlock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 30 * time.Second
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			// The hand-off stays the waiter's until it confirms it, as long as this: on a stalled
			// machine a waiter that confirms late would lose the hold.
			window := distsync.WithHandoffWindow(time.Minute)
			holder := newPod(t, b, prefix, window).mutex(t, "prompt", distsync.WithLeaseTTL(ttl))
			waiterPod := newPod(t, b, prefix, window)
			waiter := waiterPod.mutex(t, "prompt", distsync.WithLeaseTTL(ttl))
			lockWithin(t, holder, 5*time.Second)
			res := lockAsync(context.Background(), waiter)
			waitQueued(t, b, prefix, "prompt", 1)
			waitSubscribed(t, waiterPod) // woken by the release's message, not by its own re-check

			start := time.Now()
			unlock(t, holder)
			r := wait(t, res, ttl)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			d := r.At.Sub(start)
			t.Logf("hand-off took %v", d)
			unlock(t, waiter)
			return redistest.Late(fmt.Sprintf("the hand-off (lease %v)", ttl), d, ttl/10, start, r.At)
		})
	})
}

// A release published while the waiter's subscription connection is down is not lost: the
// waiter re-checks when its subscription comes back. Two ways down: the server kills the
// subscription connection (CLIENT KILL TYPE pubsub; on miniredis, a restart), and a partition
// between the waiter and Redis during which the holder unlocks.
func TestNoLostWakeUpWhenSubscriptionDrops(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 30 * time.Second
		for _, how := range []string{"client-kill", "partition"} {
			t.Run(how, func(t *testing.T) {
				prefix := b.Prefix(t)
				net := redistest.NewNetwork()
				holder := newPod(t, b, prefix).mutex(t, "dropped", distsync.WithLeaseTTL(ttl))
				waiterPod := newPodVia(t, b, prefix, net)
				waiter := waiterPod.mutex(t, "dropped", distsync.WithLeaseTTL(ttl))
				lockWithin(t, holder, 5*time.Second)
				res := lockAsync(context.Background(), waiter)
				waitQueued(t, b, prefix, "dropped", 1)
				waitSubscribed(t, waiterPod) // the subscription is there to drop

				var start time.Time
				if how == "client-kill" {
					b.KillPubSub(t)
					start = time.Now()
					// On miniredis the restart dropped the holder's connection too: its first
					// command may fail while rueidis reconnects, and Unlock then finishes in the
					// background.
					if err := holder.Unlock(context.Background()); err != nil && b.Name != redistest.Mini {
						t.Fatal(err)
					}
				} else {
					net.Cut()
					unlock(t, holder) // published while the waiter cannot hear it
					time.Sleep(300 * time.Millisecond)
					start = time.Now()
					net.Restore()
				}
				r := wait(t, res, ttl)
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				// Without the re-check on re-subscription, the waiter would sleep until its
				// backstop, past the 30 s lease.
				d := r.At.Sub(start)
				t.Logf("waiter got the lock %v after the connection came back", d)
				if err := redistest.Late("the waiter's Lock", d, 5*time.Second, start, r.At); err != nil {
					t.Fatalf("%v; the lease was %v: the wake-up was lost", err, ttl)
				}
				unlock(t, waiter)
			})
		}
	})
}

// A holder that cannot reach Redis learns that its claim is lost no later than its lease's
// deadline, even though it never hears back from Redis.
func TestLossWhenRedisIsUnreachable(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The lease, 1 s, longer in the attempts after one that a stalled machine spoiled.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			m := newPodVia(t, b, prefix, net).mutex(t, "cut-off", distsync.WithLeaseTTL(ttl))
			locking := time.Now()
			if err := lockShort(t, m); err != nil {
				return err
			}
			lease := m.Lease()
			time.Sleep(ttl / 2)
			net.Cut()
			cut := time.Now()
			select {
			case <-lease.Done():
			case <-time.After(ttl + 10*time.Second):
				t.Fatalf("lease alive %v after the holder was cut off from Redis (lease %v)", time.Since(cut), ttl)
			}
			ended := time.Now()
			if !errors.Is(lease.Err(), distsync.ErrLost) {
				t.Fatalf("lease ended with %v, want ErrLost", lease.Err())
			}
			// The loss says why no renewal got through: the last one's failure (unless the
			// machine stalled past the deadline before any renewal was tried: then again).
			if why := lease.Err().Error(); !strings.Contains(why, "the last one failed: ") {
				return fmt.Errorf("the loss %q does not say how the last renewal failed", why)
			}
			// The deadline counts from the sending of the last renewal that got through, before
			// the cut (a cut is clean): the lease cannot have lasted longer than that.
			deadline := lease.Deadline()
			if d := deadline.Sub(cut); d > ttl {
				t.Fatalf("the lease's deadline was %v after the cut, later than the lease (%v) could last", d, ttl)
			}
			net.Restore()
			if err := m.Unlock(context.Background()); !isBoth(err, distsync.ErrNotHeld, distsync.ErrLost) {
				t.Fatalf("Unlock after the loss = %v, want ErrNotHeld and ErrLost", err)
			}
			t.Logf("loss signalled %v after the cut, %v after the deadline", ended.Sub(cut), ended.Sub(deadline))
			// (A stall since the Lock may have passed the deadline before the cut.)
			return redistest.Late("the loss was signalled", ended.Sub(deadline), ttl/10, locking, ended)
		})
	})
}

// A holder that vanishes without Unlock (cut off from Redis: no renewal) is replaced once its
// lease runs out, not before; it learns of the loss itself.
func TestCrashedHolderIsReplacedAfterTTL(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The lease, 1 s, longer in the attempts after one that a stalled machine spoiled.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			holder := newPodVia(t, b, prefix, net, distsync.WithLeaseTTL(ttl)).mutex(t, "crash")
			waiter := newPod(t, b, prefix, distsync.WithLeaseTTL(ttl)).mutex(t, "crash")
			if err := lockShort(t, holder); err != nil {
				return err
			}
			lease := holder.Lease()
			res := lockAsync(context.Background(), waiter)
			if !waitQueuedOr(t, b, prefix, "crash", 1, res) {
				return heldTooShort(t, lease)
			}

			net.Cut() // the holder's process is gone, as far as Redis can tell: no renewal, no Unlock
			cut := time.Now()
			expiry, err := expiryOf(t, waiter, lease.Token())
			if err != nil {
				return err
			}
			r := wait(t, res, 10*ttl)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.At.Before(expiry) {
				t.Fatalf("waiter got the lock %v after the crash, %v before the holder's lease ran out in Redis",
					r.At.Sub(cut), expiry.Sub(r.At))
			}
			t.Logf("replaced %v after the crash, %v after the lease ran out (lease %v)", r.At.Sub(cut), r.At.Sub(expiry), ttl)
			defer unlockOrLost(t, waiter) // the property holds when it took the lock
			select {
			case <-lease.Done():
				if !errors.Is(lease.Err(), distsync.ErrLost) {
					t.Fatalf("crashed holder's lease ended with %v, want ErrLost", lease.Err())
				}
			case <-time.After(10 * time.Second): // its deadline was before Redis's expiry
				t.Fatal("crashed holder's lease did not end")
			}
			return redistest.Late("the waiter took the crashed holder's lock", r.At.Sub(expiry), 3*ttl, cut, r.At)
		})
	})
}

// Deleting or overwriting the lock behind the holder's back ends its lease within one renewal
// period, and its Unlock reports the loss.
func TestLossIsSignalled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, how := range []string{"deleted", "overwritten"} {
			t.Run(how, func(t *testing.T) {
				// The lease, 900 ms, longer in the attempts after one that a stalled machine
				// spoiled (a renewal, or its reply, late).
				redistest.RetryScaled(t, 3, 900*time.Millisecond, func(ttl time.Duration) error {
					prefix := b.Prefix(t)
					m := newPod(t, b, prefix).mutex(t, "lost", distsync.WithLeaseTTL(ttl))
					if err := lockShort(t, m); err != nil {
						return err
					}
					lease := m.Lease()
					workCtx, cancel := lease.Context(context.Background())
					defer cancel()
					key := keyOf(prefix, "lost", "")
					start := time.Now()
					b.Do(t, func(c rueidis.Client) rueidis.Completed {
						if how == "deleted" {
							return c.B().Del().Key(key).Build()
						}
						return c.B().Set().Key(key).Value("someone-else").Build()
					})
					select {
					case <-lease.Done():
					case <-time.After(ttl + 10*time.Second):
						t.Fatalf("lease still alive %v after its key was %s (renewal period %v)", time.Since(start), how, ttl/3)
					}
					noticed := time.Now()
					if !errors.Is(lease.Err(), distsync.ErrLost) {
						t.Fatalf("lease.Err() = %v, want ErrLost", lease.Err())
					}
					<-workCtx.Done()
					if !errors.Is(context.Cause(workCtx), distsync.ErrLost) {
						t.Fatalf("work context cause = %v, want ErrLost", context.Cause(workCtx))
					}
					err := m.Unlock(context.Background())
					if !isBoth(err, distsync.ErrNotHeld, distsync.ErrLost) {
						t.Fatalf("Unlock after loss = %v, want ErrNotHeld and ErrLost", err)
					}
					if how == "overwritten" {
						v, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Get().Key(key).Build() }).ToString()
						if v != "someone-else" {
							t.Fatalf("Unlock after loss changed the key to %q", v)
						}
					}
					d := noticed.Sub(start)
					t.Logf("loss noticed after %v (renewal period %v)", d, ttl/3)
					// Within one renewal period (and as long again for a late timer and the round
					// trip): before the lease's deadline would have ended it.
					return redistest.Late(fmt.Sprintf("the loss was noticed, beyond one renewal period (%v),", ttl/3),
						d-ttl/3, ttl/3, start, noticed)
				})
			})
		}
	})
}

// A Lock on a Mutex value that is held waits for its Unlock, as with sync.Mutex, even when
// the hold was lost in Redis: otherwise that Unlock would release the new hold.
func TestLockWaitsForLocalUnlockAfterLoss(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The lease, 600 ms, longer in the attempts after one that a stalled machine spoiled.
		redistest.RetryScaled(t, 4, 600*time.Millisecond, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			m := newPod(t, b, prefix).mutex(t, "local", distsync.WithLeaseTTL(ttl))
			if err := lockShort(t, m); err != nil {
				return err
			}
			lease := m.Lease()
			b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(keyOf(prefix, "local", "")).Build() })
			<-lease.Done()
			if ok, err := m.TryLock(context.Background()); ok || err != nil {
				t.Fatalf("TryLock on a held Mutex value = %v, %v; want false, nil", ok, err)
			}
			res := lockAsync(context.Background(), m)
			select {
			case r := <-res:
				t.Fatalf("Lock returned (%v) before the lost hold was unlocked", r.Err)
			case <-time.After(3 * ttl):
			}
			if err := m.Unlock(context.Background()); !isBoth(err, distsync.ErrNotHeld, distsync.ErrLost) {
				t.Fatalf("Unlock of the lost hold = %v", err)
			}
			if r := wait(t, res, 10*time.Second); r.Err != nil {
				t.Fatal(r.Err)
			}
			held := m.Lease()
			if held == nil || held.Token() <= lease.Token() {
				t.Fatalf("Lock after the Unlock of the lost hold (token %d) holds %v", lease.Token(), held)
			}
			if err := held.Err(); err != nil {
				// The premise: a renewal in time, which a stalled machine may miss.
				_ = m.Unlock(context.Background())
				return fmt.Errorf("the new hold: %w", err)
			}
			unlockOrLost(t, m) // alive just now; a stalled machine may have lost it since
			return nil
		})
	})
}

// A held lock stays held past many TTLs while the Handle renews it.
func TestRenewalKeepsTheLock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The lease, 600 ms, longer in the attempts after one that a stalled machine spoiled (a
		// renewal, or its reply, too late).
		redistest.RetryScaled(t, 4, 600*time.Millisecond, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			m := newPod(t, b, prefix).mutex(t, "renewed", distsync.WithLeaseTTL(ttl))
			other := newPod(t, b, prefix).mutex(t, "renewed", distsync.WithLeaseTTL(ttl))
			if err := lockShort(t, m); err != nil {
				return err
			}
			lease := m.Lease()
			from := time.Now()
			for deadline := from.Add(4 * ttl); time.Now().Before(deadline); time.Sleep(ttl / 4) {
				ok, err := other.TryLock(context.Background())
				if err != nil || ok {
					if lease.Err() == nil {
						t.Fatalf("TryLock by another pod while the holder's lease was alive = %v, %v", ok, err)
					}
					if ok {
						unlockOrLost(t, other)
					}
					// The premise: renewals in time. One that comes back later than 2/3 of the
					// lease after the one before (a stalled machine, or Redis) loses the lease,
					// and another pod may take the lock.
					return fmt.Errorf("the renewed lease ended, and another pod took the lock (this process stalled %v meanwhile): %v; TryLock: %v",
						redistest.Stalled(from, time.Now()), lease.Err(), err)
				}
			}
			if err := lease.Err(); err != nil {
				return fmt.Errorf("the renewed lease ended (this process stalled %v meanwhile): %w", redistest.Stalled(from, time.Now()), err)
			}
			unlockOrLost(t, m) // alive just now; a stalled machine may have lost it since
			switch ok, err := other.TryLock(context.Background()); {
			case ok:
				unlockOrLost(t, other)
			case errors.Is(err, distsync.ErrNotAcquired):
				// It took the free lock, but its reply came after its short lease's deadline
				// (a stalled machine): it gave it back.
			default:
				t.Fatalf("TryLock after Unlock = %v, %v", ok, err)
			}
			return nil
		})
	})
}

// A fixed lease is not renewed: it ends (as a loss) when its TTL passes, and Redis frees the
// lock then.
func TestFixedLeaseExpires(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The lease, 400 ms, longer in the attempts after one that a stalled machine spoiled.
		redistest.RetryScaled(t, 3, 400*time.Millisecond, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			m := newPod(t, b, prefix).mutex(t, "fixed", distsync.WithFixedLease(ttl))
			other := newPod(t, b, prefix).mutex(t, "fixed")
			if err := lockShort(t, m); err != nil {
				return err
			}
			locked := time.Now() // the lease counts from before: from when the acquire was sent
			lease := m.Lease()
			deadline := lease.Deadline()
			if d := deadline.Sub(locked); d > ttl {
				t.Fatalf("fixed lease's deadline is %v after Lock returned, beyond its %v TTL", d, ttl)
			}
			select {
			case <-lease.Done():
			case <-time.After(ttl + 10*time.Second):
				t.Fatal("fixed lease did not end")
			}
			ended := time.Now()
			if !errors.Is(lease.Err(), distsync.ErrLost) {
				t.Fatalf("fixed lease ended with %v, want ErrLost", lease.Err())
			}
			start := time.Now()
			lockWithin(t, other, 10*time.Second) // Redis has freed the lock, or does soon
			locked2 := time.Now()
			unlock(t, other)
			t.Logf("fixed lease ended %v after Lock returned, %v after its deadline; another pod locked %v later",
				ended.Sub(locked), ended.Sub(deadline), locked2.Sub(start))
			// Ended at its deadline (and a late timer).
			if err := redistest.Late("the fixed lease ended", ended.Sub(deadline), ttl*3/4, locked, ended); err != nil {
				return err
			}
			return redistest.Late("another pod's Lock after the fixed lease ended", locked2.Sub(start), 3*ttl, start, locked2)
		})
	})
}

// A waiter whose context ends returns at once with an error matching both ErrNotAcquired and
// the context's error, and leaves no queue entry, no subscription and no goroutine behind.
func TestCancelledWaiterLeavesNothingBehind(t *testing.T) {
	eachInTurn(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		holderPod := newPod(t, b, prefix)
		holder := holderPod.mutex(t, "cancel")
		waiterPod := newPod(t, b, prefix)
		lockWithin(t, holder, 5*time.Second)
		baseline := redistest.LibraryGoroutines()

		for _, how := range []string{"deadline", "cancel"} {
			redistest.Retry(t, 3, func() error {
				waiter := waiterPod.mutex(t, "cancel")
				var ctx context.Context
				var cancel context.CancelFunc
				if how == "deadline" {
					ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
				} else {
					ctx, cancel = context.WithCancel(context.Background())
					time.AfterFunc(300*time.Millisecond, cancel)
				}
				start := time.Now()
				err := waiter.Lock(ctx)
				returned := time.Now()
				cancel()
				want := context.DeadlineExceeded
				if how == "cancel" {
					want = context.Canceled
				}
				if !isBoth(err, distsync.ErrNotAcquired, want) {
					t.Fatalf("%s: Lock = %v, want ErrNotAcquired and %v", how, err, want)
				}
				if waiter.Lease() != nil {
					t.Fatalf("%s: cancelled waiter has a lease", how)
				}
				// At once: its clean-up's round trip, not a wait.
				return redistest.Late(how+": Lock returned after its context ended,", returned.Sub(start)-300*time.Millisecond,
					1700*time.Millisecond, start, returned)
			})
		}

		if !redistest.Eventually(5*time.Second, func() bool {
			n, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Exists().Key(keyOf(prefix, "cancel", "q")).Build()
			}).AsInt64()
			return n == 0
		}) {
			t.Fatal("the cancelled waiter's queue entry is still in Redis")
		}
		var left []string
		if !redistest.Eventually(5*time.Second, func() bool {
			left = b.LeftChannels(t, keyOf(prefix, "cancel", "ch")+":*", holderPod.h, waiterPod.h)
			return len(left) == 0
		}) {
			t.Fatalf("the cancelled waiter's subscription is still there: %v", left)
		}
		redistest.WaitGoroutines(t, baseline, 5*time.Second)

		// Nothing was granted to the departed waiter: Unlock frees the lock outright.
		unlock(t, holder)
		if n, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Exists().Key(keyOf(prefix, "cancel", "")).Build()
		}).AsInt64(); n != 0 {
			t.Fatal("Unlock granted the lock to a waiter that had left")
		}
	})
}

// Waiting processes get the lock in the order they started waiting.
func TestWaitingProcessesAreServedInOrder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		// Each hand-off stays its grantee's until it confirms it: a grantee that a stalled
		// machine makes late is not taken for dead and passed over.
		window := distsync.WithHandoffWindow(time.Minute)
		holder := newPod(t, b, prefix, window).mutex(t, "order")
		lockWithin(t, holder, 5*time.Second)
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range 4 {
			m := newPod(t, b, prefix, window).mutex(t, "order")
			wg.Add(1)
			go func() {
				defer wg.Done()
				lockWithin(t, m, 20*time.Second)
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				unlock(t, m)
			}()
			waitQueued(t, b, prefix, "order", int64(i+1))
		}
		unlock(t, holder)
		wg.Wait()
		for i, got := range order {
			if got != i {
				t.Fatalf("processes got the lock in order %v, want 0 1 2 3", order)
			}
		}
	})
}

// A waiter whose process died while queued costs the others at most one hand-off window: the
// next waiter in line watches the grant and takes the lock when it lapses.
func TestDeadWaiterCostsOneHandoffWindow(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl, window = 30 * time.Second, 300 * time.Millisecond
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithHandoffWindow(window)}
			holder := newPod(t, b, prefix, opts...).mutex(t, "dead")
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			dying := newPodVia(t, b, prefix, net, opts...)
			live := newPod(t, b, prefix, opts...).mutex(t, "dead")
			lockWithin(t, holder, 5*time.Second)
			dyingCtx, kill := context.WithCancel(context.Background())
			deadRes := lockAsync(dyingCtx, dying.mutex(t, "dead"))
			waitQueued(t, b, prefix, "dead", 1)
			liveRes := lockAsync(context.Background(), live)
			waitQueued(t, b, prefix, "dead", 2)
			// The dying process loses Redis, then gives up: its clean-up cannot get through, so its
			// entry stays queued, as a crashed process's would.
			net.Cut()
			kill()
			if r := wait(t, deadRes, 5*time.Second); r.Err == nil {
				t.Fatal("Lock cut off from Redis succeeded")
			}

			start := time.Now()
			unlock(t, holder) // grants the lock to the dead waiter, asks the live one to watch
			r := wait(t, liveRes, ttl)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			d := r.At.Sub(start)
			// Redis keeps the grant for the window from the release, which ran after start.
			if d < window/2 {
				t.Fatalf("live waiter got the lock %v after Unlock, inside the grant to the dead waiter (%v)", d, window)
			}
			t.Logf("dead waiter skipped after %v (window %v)", d, window)
			unlock(t, live)
			// One window, not a lease.
			return redistest.Late("the live waiter, one window after Unlock, got the lock", d-window, 2*time.Second, start, r.At)
		})
	})
}

// Goroutines of one process get the lock in the order they called Lock.
func TestGoroutinesOfOneProcessAreServedInOrder(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Mini)
	prefix := b.Prefix(t)
	// The hand-off stays the process's until it confirms it, as long as this: on a stalled
	// machine a process that confirms late would lose the hold.
	window := distsync.WithHandoffWindow(time.Minute)
	p := newPod(t, b, prefix, window)
	m := p.mutex(t, "local")
	other := newPod(t, b, prefix, window).mutex(t, "local")
	lockWithin(t, other, 5*time.Second)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lockWithin(t, m, 20*time.Second)
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			unlock(t, m)
		}()
		// Lock calls in a known order: each in the process's queue before the next starts.
		if !redistest.Eventually(10*time.Second, func() bool { return m.Waiting() == i+1 }) {
			t.Fatalf("%d goroutines wait in Lock, want %d", m.Waiting(), i+1)
		}
	}
	unlock(t, other)
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("goroutines got the lock in order %v, want 0..4", order)
		}
	}
}

// Close releases what the Handle holds, so waiters elsewhere get it at once, and ends the
// waits of its own primitives with ErrClosed.
func TestHandleCloseReleasesAndEndsWaits(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 30 * time.Second
		prefix := b.Prefix(t)
		// A grant stranded on the closing process's waiter would hold the lock this long.
		window := distsync.WithHandoffWindow(time.Minute)
		closing := newPod(t, b, prefix, window)
		held := closing.mutex(t, "closing", distsync.WithLeaseTTL(ttl))
		blocked := closing.mutex(t, "closing", distsync.WithLeaseTTL(ttl))
		elsewhere := newPod(t, b, prefix, window).mutex(t, "closing", distsync.WithLeaseTTL(ttl))
		lockWithin(t, held, 5*time.Second)
		blockedRes := lockAsync(context.Background(), blocked)
		waitQueued(t, b, prefix, "closing", 1) // first in line: Close's release grants it the lock
		elsewhereRes := lockAsync(context.Background(), elsewhere)
		waitQueued(t, b, prefix, "closing", 2)

		start := time.Now()
		if err := closing.h.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := wait(t, blockedRes, 5*time.Second); !errors.Is(r.Err, distsync.ErrClosed) {
			t.Fatalf("Lock blocked on a closed handle = %v, want ErrClosed", r.Err)
		}
		if r := wait(t, elsewhereRes, ttl); r.Err != nil {
			t.Fatal(r.Err)
		} else if err := redistest.Late("the waiter elsewhere got the lock after Close", r.At.Sub(start), 5*time.Second, start, r.At); err != nil {
			t.Fatalf("%v; the lease was %v", err, ttl)
		}
		if err := held.Unlock(context.Background()); !isBoth(err, distsync.ErrNotHeld, distsync.ErrClosed) {
			t.Fatalf("Unlock after Close = %v, want ErrNotHeld and ErrClosed", err)
		}
		if err := held.Lock(context.Background()); !errors.Is(err, distsync.ErrClosed) {
			t.Fatalf("Lock after Close = %v, want ErrClosed", err)
		}
		unlock(t, elsewhere)
	})
}

func TestTryLock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		m1 := newPod(t, b, prefix).mutex(t, "try")
		m2 := newPod(t, b, prefix).mutex(t, "try")
		ctx := context.Background()
		if ok, err := m1.TryLock(ctx); !ok || err != nil {
			t.Fatalf("TryLock on a free mutex = %v, %v", ok, err)
		}
		if ok, err := m2.TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock on a held mutex = %v, %v; want false, nil", ok, err)
		}
		if m2.Lease() != nil {
			t.Fatal("failed TryLock left a lease")
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if ok, err := m2.TryLock(cancelled); ok || !isBoth(err, distsync.ErrNotAcquired, context.Canceled) {
			t.Fatalf("TryLock with a cancelled context = %v, %v", ok, err)
		}
		unlock(t, m1)
		if ok, err := m2.TryLock(ctx); !ok || err != nil {
			t.Fatalf("TryLock after Unlock = %v, %v", ok, err)
		}
		unlock(t, m2)
	})
}

// Bad input: a clear error at once, and nothing written to Redis.
func TestBadInput(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := newPod(t, b, prefix)
		for _, c := range []struct {
			name string
			opts []distsync.Option
		}{
			{"", nil},
			{"x", []distsync.Option{distsync.WithLeaseTTL(0)}},
			{"x", []distsync.Option{distsync.WithLeaseTTL(-time.Second)}},
			{"x", []distsync.Option{distsync.WithFixedLease(0)}},
			{"x", []distsync.Option{distsync.WithLeaseTTL(time.Microsecond)}},
			{"x", []distsync.Option{distsync.WithFixedLease(2 * time.Millisecond)}}, // below MinLeaseTTL: no use to a holder
		} {
			if _, err := mutex.New(p.h, c.name, c.opts...); !errors.Is(err, distsync.ErrInvalid) {
				t.Errorf("New(%q, %d options) = %v, want ErrInvalid", c.name, len(c.opts), err)
			}
		}
		if _, err := mutex.New(nil, "x"); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New(nil handle) = %v, want ErrInvalid", err)
		}
		for _, opt := range []distsync.Option{
			distsync.WithKeyPrefix("a{b"), distsync.WithLeaseTTL(0), distsync.WithFenceRetention(-1),
			distsync.WithHandoffWindow(0), distsync.WithLeaseTTL(5 * time.Millisecond),
		} {
			if _, err := distsync.New(p.raw, opt); !errors.Is(err, distsync.ErrInvalid) {
				t.Errorf("distsync.New with a bad option = %v, want ErrInvalid", err)
			}
		}
		if _, err := distsync.New(nil); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("distsync.New(nil) = %v, want ErrInvalid", err)
		}

		m := p.mutex(t, "misuse")
		if err := m.Unlock(context.Background()); !errors.Is(err, distsync.ErrNotHeld) {
			t.Errorf("Unlock without Lock = %v, want ErrNotHeld", err)
		}
		if n := p.client.Total(); n != 0 {
			t.Errorf("bad input sent %d commands to Redis", n)
		}
		lockWithin(t, m, 5*time.Second)
		unlock(t, m)
		if err := m.Unlock(context.Background()); !errors.Is(err, distsync.ErrNotHeld) {
			t.Errorf("second Unlock = %v, want ErrNotHeld", err)
		}
		keys := b.Keys(t, prefix)
		slices.Sort(keys)
		if want := []string{keyOf(prefix, "misuse", "fence"), keyOf(prefix, "misuse", "rel")}; !slices.Equal(keys, want) {
			t.Errorf("after misuse, keys = %v, want only the fence counter and the last release %v", keys, want)
		}
	})
}

// The sync.Locker adapter locks and unlocks, and panics where sync.Mutex would be misused.
func TestLocker(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Mini)
	prefix := b.Prefix(t)
	m := newPod(t, b, prefix).mutex(t, "locker")
	var l sync.Locker = m.Locker()
	l.Lock()
	if m.Lease() == nil {
		t.Fatal("Locker().Lock did not lock")
	}
	l.Unlock()
	defer func() {
		if recover() == nil {
			t.Fatal("Locker().Unlock of an unlocked mutex did not panic")
		}
	}()
	l.Unlock()
}

// Names with braces, percent signs or binary bytes work on Cluster (every key of a mutex in
// one slot) and do not collide with each other.
func TestAnyNameWorks(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := newPod(t, b, prefix)
		names := []string{"}", "{", "}{", "{}", "a}b{c", "{x}", "%7B", "%", "\x00\xff\n", "orders:42", string(make([]byte, 300))}
		var held []*mutex.Mutex
		for _, name := range names {
			m := p.mutex(t, name)
			if ok, err := m.TryLock(context.Background()); err != nil || !ok {
				t.Fatalf("TryLock(%q) = %v, %v: names must not collide or cross slots", name, ok, err)
			}
			held = append(held, m)
		}
		for _, m := range held {
			unlock(t, m)
		}
	})
}

// After contention, a cancelled waiter and a crashed holder, once every client is gone and
// the leases have run out, the library's keyspace is empty: every key it wrote had a TTL (the
// fence counter too, after its retention; the marks of voided attempts, after theirs).
func TestNoLeakedKeys(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Short, for keys that go soon. A hold they lose on a stalled machine (a renewal, or
		// the confirmation of a hand-off, too late) leaves keys that must go all the same: its
		// Unlock may report the loss.
		const ttl = time.Second
		prefix := b.Prefix(t)
		opts := []distsync.Option{
			distsync.WithLeaseTTL(ttl), distsync.WithHandoffWindow(100 * time.Millisecond),
			distsync.WithFenceRetention(2 * time.Second),
		}
		var pods []*pod
		for range 3 {
			pods = append(pods, newPod(t, b, prefix, opts...))
		}
		var wg sync.WaitGroup
		for i, p := range pods {
			m := p.mutex(t, "leak")
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					lockWithin(t, m, 30*time.Second)
					unlockOrLost(t, m)
				}
				if i == 0 { // a waiter that gives up
					lockWithin(t, m, 30*time.Second)
					other := pods[1].mutex(t, "leak")
					ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
					_ = other.Lock(ctx)
					cancel()
					unlockOrLost(t, m)
				}
			}()
		}
		wg.Wait()
		net := redistest.NewNetwork()
		crash := newPodVia(t, b, prefix, net, opts...).mutex(t, "leak-crash")
		lockWithin(t, crash, 5*time.Second)
		waiter := pods[1].mutex(t, "leak-crash")
		res := lockAsync(context.Background(), waiter)
		// The holder crashes, unless a stalled machine let its lease run out already: either
		// way its keys must go.
		waitQueuedOr(t, b, prefix, "leak-crash", 1, res)
		net.Cut()
		if r := wait(t, res, 10*time.Second); r.Err != nil {
			t.Fatal(r.Err)
		}
		for _, p := range pods {
			_ = p.h.Close(context.Background())
		}

		var left []string
		if !redistest.Eventually(8*time.Second, func() bool {
			left = slices.DeleteFunc(b.Keys(t, prefix), func(k string) bool { return voidMarksOnly(t, b, k) })
			return len(left) == 0
		}) {
			t.Fatalf("keys left after every lease and the fence retention passed: %v", left)
		}
	})
}

// voidMarksOnly reports whether key is a queue's expiry key that holds nothing but the marks
// of voided attempts, or a fence marked for them, with a TTL no longer than theirs. A waiter that gives up while its
// attempt is in flight (the 100 ms one above, on a loaded machine) voids that attempt with
// such a mark, kept for mutex.VoidTTL (a minute) so that the attempt fails when it arrives:
// the key outlives the test's wait, but it has a TTL.
func voidMarksOnly(t *testing.T, b *redistest.Backend, key string) bool {
	t.Helper()
	if strings.HasSuffix(key, ":mutex:fence") {
		// The fence of a name with a void mark is marked too (a '0' before its token), and
		// lives as long as the void mark.
		v, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Get().Key(key).Build() }).ToString()
		if err != nil || !strings.HasPrefix(v, "0") {
			return false
		}
		ms, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Pttl().Key(key).Build() }).AsInt64()
		return err == nil && ms > 0 && time.Duration(ms)*time.Millisecond <= mutex.VoidTTL
	}
	if !strings.HasSuffix(key, ":mutex:qx") {
		return false
	}
	members, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Zrange().Key(key).Min("0").Max("-1").Build()
	}).AsStrSlice()
	if err != nil || len(members) == 0 {
		return false
	}
	for _, m := range members {
		if !strings.HasPrefix(m, "!") {
			return false
		}
	}
	ms, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Pttl().Key(key).Build() }).AsInt64()
	return err == nil && ms > 0 && time.Duration(ms)*time.Millisecond <= mutex.VoidTTL
}

// Leases held together are renewed together: one pipeline per tick, not one command each.
func TestRenewalsAreBatched(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The property, whatever the machine's load: the loop sends a renewal pipeline at most
		// once per eighth of a renewal period (it renews every lease due within the next
		// eighth at once), so the pipelines per period are bounded by 8 however many leases
		// there are; one command per lease per tick would be n pipelines per period.
		const ttl, n = 1500 * time.Millisecond, 64
		const period = ttl / 3
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			p := newPod(t, b, prefix, distsync.WithLeaseTTL(ttl))
			var ms []*mutex.Mutex
			for i := range n {
				m := p.mutex(t, fmt.Sprint("batch", i))
				lockWithin(t, m, 5*time.Second)
				ms = append(ms, m)
			}
			defer func() {
				for _, m := range ms {
					_ = m.Unlock(context.Background()) // a lease lost to a starved machine is not what this tests
				}
			}()
			before := len(p.client.Pipelines())
			start := time.Now()
			// Three periods, and on until every lease was renewed twice on average (later if
			// the timers fire late): the bound below counts the periods that took.
			time.Sleep(3 * period)
			var renewals []int
			var total int
			if !redistest.Eventually(10*time.Second+6*period, func() bool {
				renewals, total = p.client.Pipelines()[before:], 0
				for _, size := range renewals {
					total += size
				}
				return total >= 2*n
			}) {
				// Leases lost to a machine too slow for them are renewed no more.
				return fmt.Errorf("%d renewals of %d leases in %v (renewal period %v; this process stalled %v meanwhile)",
					total, n, time.Since(start), period, redistest.Stalled(start, time.Now()))
			}
			elapsed := time.Since(start)
			if limit := 8*int(elapsed/period+1) + 2; len(renewals) > limit {
				t.Fatalf("%d renewal pipelines in %v for %d leases (sizes %v), want at most %d: renewals are not batched",
					len(renewals), elapsed, n, renewals, limit)
			}
			t.Logf("%d leases renewed in %d pipelines over %v: %v", n, len(renewals), elapsed, renewals)
			return nil
		})
	})
}

// A waiter that gives up has left the queue when its Lock returns: an Unlock right after it
// frees the lock, and a third party takes it at once, rather than the release granting it to
// the departed waiter and everyone waiting out the hand-off window (set long here, so that a
// stranded grant cannot go unnoticed).
func TestUnlockRightAfterACancelledLockFreesTheLock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			window := distsync.WithHandoffWindow(time.Minute)
			holderPod, otherPod := newPod(t, b, prefix, window), newPod(t, b, prefix, window)
			third := newPod(t, b, prefix, window).mutex(t, "gone")
			for round := range 8 {
				for _, sameProcess := range []bool{false, true} {
					holder := holderPod.mutex(t, "gone")
					waiterPod := otherPod
					if sameProcess {
						waiterPod = holderPod
					}
					waiter := waiterPod.mutex(t, "gone")
					lockWithin(t, holder, 5*time.Second)
					ctx, cancel := context.WithCancel(context.Background())
					ch := lockAsync(ctx, waiter)
					waitQueued(t, b, prefix, "gone", 1)
					cancelled := time.Now()
					cancel()
					r := wait(t, ch, 10*time.Second)
					if !isBoth(r.Err, distsync.ErrNotAcquired, context.Canceled) {
						t.Fatalf("cancelled Lock = %v", r.Err)
					}
					unlock(t, holder)
					ok, err := third.TryLock(context.Background())
					if err != nil || !ok {
						if d := r.At.Sub(cancelled); d >= time.Second {
							// The premise: Lock returns once its clean-up is done. A clean-up
							// that Redis does not answer within a second (a loaded machine) goes
							// on in the background, as for a Redis that cannot be reached.
							return fmt.Errorf("round %d: the cancelled Lock returned %v after the cancel, its clean-up in the background; TryLock = %v, %v", round, d, ok, err)
						}
						t.Fatalf("round %d (waiter in the holder's process: %v): TryLock right after the Unlock = %v, %v; lock = %q",
							round, sameProcess, ok, err, lockValue(t, b, prefix, "gone"))
					}
					unlock(t, third)
				}
			}
			return nil
		})
	})
}

// An acquisition whose reply comes after its lease's local deadline (Redis or the network
// stalled for a lease) is given back, not reported as a hold that is already lost: TryLock
// says it did not acquire, the lock is free again at once, and Lock tries again and returns
// with a live lease.
func TestAcquisitionTooLateToUseIsGivenBack(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The lease, 400 ms, longer in the attempts after one that a stalled machine spoiled;
		// replies come half a lease after its deadline.
		redistest.RetryScaled(t, 3, 400*time.Millisecond, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			f := redistest.NewFaulty(b.Client(t))
			mu, err := mutex.New(b.PodOn(t, f, prefix, distsync.WithLeaseTTL(ttl)).H, "late")
			if err != nil {
				t.Fatal(err)
			}
			other := newPod(t, b, prefix).mutex(t, "late")

			f.Delay(1, ttl+ttl/2, redistest.ScriptCall(scripts.MutexAcquire))
			ok, err := mu.TryLock(context.Background())
			if ok || !errors.Is(err, distsync.ErrNotAcquired) {
				t.Fatalf("TryLock whose reply came after the lease's deadline = %v, %v; want false and ErrNotAcquired", ok, err)
			}
			if mu.Lease() != nil {
				t.Fatal("a late TryLock left a hold behind")
			}
			ok, err = other.TryLock(context.Background())
			if err != nil || !ok {
				t.Fatalf("the late acquisition was not given back: TryLock elsewhere = %v, %v", ok, err)
			}
			unlock(t, other)

			f.Delay(1, ttl+ttl/2, redistest.ScriptCall(scripts.MutexAcquire))
			called := time.Now()
			if err := lockShort(t, mu); err != nil {
				return err
			}
			returned := time.Now()
			lease := mu.Lease()
			// The first acquisition's deadline passed half a lease before its reply came: a Lock that
			// returned that hold returns after its deadline. The next acquisition's deadline is a
			// lease after it was sent: Lock returns after it only if this process was stalled
			// that long.
			if err := redistest.Late("Lock returned a hold that is already lost: it returned after the hold's deadline,",
				returned.Sub(lease.Deadline()), 0, called, returned); err != nil {
				return err
			}
			time.Sleep(ttl / 4) // past the first acquisition's deadline, well within the second's
			if err := lease.Err(); err != nil {
				if deadline := lease.Deadline(); time.Now().Before(deadline) {
					t.Fatalf("the hold Lock returned was lost %v before its deadline: %v", time.Until(deadline), err)
				}
				// A renewal too late for the lease.
				return fmt.Errorf("the hold Lock returned reached its deadline without a renewal (this process stalled %v meanwhile): %w",
					redistest.Stalled(returned, time.Now()), err)
			}
			unlockOrLost(t, mu) // it was live; since then a stalled machine may have lost it
			return nil
		})
	})
}

// lockValue returns the value of a mutex's lock key ("" if none).
func lockValue(t *testing.T, b *redistest.Backend, prefix, name string) string {
	t.Helper()
	v, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Get().Key(keyOf(prefix, name, "")).Build() }).ToString()
	return v
}

// grantScene is the start of the tests of late grant messages: three Mutexes on one name, each
// in a pod of its own; holder holds the lock, m's first Lock waits at the head of the queue as
// waiter w (until cancel), and other is idle.
type grantScene struct {
	b                *redistest.Backend
	prefix, name     string
	holder, m, other *mutex.Mutex
	first            <-chan redistest.Returned
	cancel           context.CancelFunc
	w                string
}

func newGrantScene(t *testing.T, b *redistest.Backend, name string) *grantScene {
	t.Helper()
	prefix := b.Prefix(t)
	// The pods' own hand-offs stay their grantees' until confirmed, as long as this: on a
	// stalled machine a grantee that confirms late would lose the hold.
	window := distsync.WithHandoffWindow(time.Minute)
	mPod := newPod(t, b, prefix, window)
	s := &grantScene{
		b: b, prefix: prefix, name: name,
		holder: newPod(t, b, prefix, window).mutex(t, name),
		m:      mPod.mutex(t, name),
		other:  newPod(t, b, prefix, window).mutex(t, name),
	}
	lockWithin(t, s.holder, 5*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.first = lockAsync(ctx, s.m)
	waitQueued(t, b, prefix, name, 1)
	ids, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Zrange().Key(s.key("q")).Min("0").Max("0").Build()
	}).AsStrSlice()
	if err != nil || len(ids) != 1 {
		t.Fatalf("queue: %v, %v", ids, err)
	}
	s.w = ids[0]
	// m subscribes after its first attempt queued it, then attempts again (a release between
	// the two reached nobody): the tests' own grants must come after that second attempt, or
	// it adopts them.
	waitSubscribed(t, mPod)
	if n := b.Subscribers(t, s.key("ch")+":"+s.w); n == 0 {
		t.Fatalf("m's process is not subscribed to its channel")
	}
	return s
}

// key returns the key of a part of the mutex ("" for the lock).
func (s *grantScene) key(part string) string { return keyOf(s.prefix, s.name, part) }

// cancelFirst cancels m's first Lock and checks that it returns context.Canceled. It returns
// an error, for Retry, if the Lock took the lock first: m re-checked by itself meanwhile (its
// subscription connection dropped and came back, say, on a loaded machine) and found the
// grant the test made to it, or the lock free; that is its right.
func (s *grantScene) cancelFirst(t *testing.T) error {
	t.Helper()
	s.cancel()
	r := wait(t, s.first, 10*time.Second)
	if r.Err == nil {
		_ = s.m.Unlock(context.Background())
		return errors.New("m's first Lock took the lock before it was cancelled")
	}
	if !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v", r.Err)
	}
	return nil
}

// lateMessageIsNotTaken runs the end of the tests, with other holding the lock: m locks again
// and queues behind other; then the message of the grant of token (what) arrives, and m must
// not take the lock on it; m takes it once other unlocks, with a larger token; and holder,
// whose hold the test's grant replaced, has lost it.
func (s *grantScene) lateMessageIsNotTaken(t *testing.T, token int64, what string) error {
	t.Helper()
	second := lockAsync(context.Background(), s.m)
	waitQueued(t, s.b, s.prefix, s.name, 1)
	cmd := s.b.Pub()
	heard, err := s.b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Arbitrary(cmd).Keys(s.key("ch") + ":" + s.w).Args(fmt.Sprintf("g %d  500 %s", token, s.w)).Build()
	}).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if heard == 0 {
		// The premise: m's process listens. It keeps its channel subscribed for a second
		// after its first Lock gave up (pubsub.DefaultLinger), where the second Lock finds it;
		// on a machine that took longer, the second subscribes again, and was not yet.
		return fmt.Errorf("%s's message reached no subscriber", what)
	}
	select {
	case r := <-second:
		t.Fatalf("Lock took %s (err %v) while another holds the lock", what, r.Err)
	case <-time.After(300 * time.Millisecond):
	}
	unlock(t, s.other)
	if r := wait(t, second, 5*time.Second); r.Err != nil {
		t.Fatal(r.Err)
	}
	if tok := s.m.Lease().Token(); tok <= token {
		t.Fatalf("token %d after %s's %d", tok, what, token)
	}
	unlock(t, s.m)
	if err := s.holder.Unlock(context.Background()); !errors.Is(err, distsync.ErrLost) {
		t.Fatalf("Unlock of the hold the test's grant replaced = %v, want ErrLost", err)
	}
	return nil
}

// A grant that a cancelled Lock's clean-up passed on is not taken later by the same Mutex
// value's next Lock when its message arrives late: the clean-up remembers the token it passed
// on. (Here the grant is written and its message published by the test, so that the message
// surely comes after the clean-up; in the field, pub/sub delivers it whenever it does.)
func TestStaleGrantAfterACancelIsNotTaken(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			s := newGrantScene(t, b, "stale")
			otherRes := lockAsync(context.Background(), s.other)
			waitQueued(t, b, s.prefix, s.name, 2)
			// A release grants the lock to m's process, as Unlock would; its message is late.
			token := time.Now().UnixMicro()
			b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Set().Key(s.key("")).Value(fmt.Sprintf("~%s:%d", s.w, token)).Px(time.Minute).Build()
			})
			b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Zrem().Key(s.key("q")).Member(s.w).Build()
			})
			if err := s.cancelFirst(t); err != nil { // m gives up: its clean-up passes the grant on to other
				return err
			}
			if r := wait(t, otherRes, 10*time.Second); r.Err != nil {
				t.Fatalf("the grant was not passed on: %v", r.Err)
			}
			return s.lateMessageIsNotTaken(t, token, "the stale grant")
		})
	})
}

// A grant that lapsed long ago (its waiter never confirmed it, someone else took the lock) is
// not taken when its message comes at last, even by a Lock that queued again since: a grant
// older than the queueing is looked for in Redis, never taken as held.
func TestLateMessageOfALapsedGrantIsNotTaken(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			s := newGrantScene(t, b, "lapsed")
			// A release grants the lock to m's process, as Unlock would (computing the token into
			// the fence key); the message is lost for now, and the grant lapses unconfirmed.
			token := time.Now().UnixMicro()
			b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Set().Key(s.key("fence")).Value(strconv.FormatInt(token, 10)).Px(time.Minute).Build()
			})
			b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Zrem().Key(s.key("q")).Member(s.w).Build()
			})
			b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Set().Key(s.key("")).Value(fmt.Sprintf("~%s:%d", s.w, token)).Px(30 * time.Millisecond).Build()
			})
			if !redistest.Eventually(10*time.Second, func() bool {
				ok, err := s.other.TryLock(context.Background())
				return err == nil && ok || len(s.first) > 0
			}) {
				t.Fatalf("the lapsed grant's lock could not be taken; lock = %q", lockValue(t, b, s.prefix, s.name))
			}
			if err := s.cancelFirst(t); err != nil { // nothing of m's is left to pass on
				return err
			}
			return s.lateMessageIsNotTaken(t, token, "the lapsed grant")
		})
	})
}

package waitgroup_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/waitgroup"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newWG(t *testing.T, p *redistest.Pod, name string, opts ...distsync.Option) *waitgroup.WaitGroup {
	t.Helper()
	wg, err := waitgroup.New(p.H, name, opts...)
	if err != nil {
		t.Fatalf("waitgroup.New(%q): %v", name, err)
	}
	return wg
}

func key(prefix, name, part string) string {
	k := prefix + "{" + name + "}:waitgroup"
	if part != "" {
		k += ":" + part
	}
	return k
}

func channel(prefix, name string) string { return key(prefix, name, "ch") }

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wait runs wg.Wait in the background (bounded, so that a hang fails rather than stalls).
func wait(wg *waitgroup.WaitGroup, limit time.Duration) <-chan error {
	ch := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		ch <- wg.Wait(ctx)
	}()
	return ch
}

// stalled is must for a scenario run under [redistest.Retry] with short leases: a Join or
// Claim whose reply came after its lease's local deadline (not acquired, with a live ctx) and
// a member lost are what a stall of a loaded machine past the lease makes of a call, an
// error to retry on; any other error fails t.
func stalled(t *testing.T, what string, err error) error {
	t.Helper()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, distsync.ErrNotAcquired), errors.Is(err, distsync.ErrLost):
		return fmt.Errorf("%s: %w", what, err)
	}
	t.Fatalf("%s: %v", what, err)
	return nil
}

// subscribedUnless is subscribed that gives up, returning false, once returned reports that
// the Wait it waits for has returned without subscribing first.
func subscribedUnless(t *testing.T, b *redistest.Backend, prefix, name string, n int64, returned func() bool) bool {
	t.Helper()
	var got int64
	if !redistest.Eventually(30*time.Second, func() bool {
		got = b.Subscribers(t, channel(prefix, name))
		return got == n || returned()
	}) {
		t.Fatalf("%d processes subscribed, want %d", got, n)
	}
	return got == n
}

// waitTimed is wait that also tells when Wait returned.
func waitTimed(wg *waitgroup.WaitGroup, limit time.Duration) <-chan redistest.Returned {
	return redistest.Async(context.Background(), func(context.Context) error {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		return wg.Wait(ctx)
	})
}

// closedBy waits (20 s at most) for ch to close, failing t if it does not, and returns an
// error, for [redistest.Retry], if it closed more than margin after from (plus what this
// process was stalled meanwhile).
func closedBy(t *testing.T, what string, ch <-chan struct{}, from time.Time, margin time.Duration) error {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not in 20 s", what)
	}
	now := time.Now()
	return redistest.Late(what, now.Sub(from), margin, from, now)
}

// result returns what ch yields within limit, failing t otherwise.
func result(t *testing.T, what string, ch <-chan error, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
		return nil
	}
}

// subscribed waits until n processes subscribe to the group's channel.
func subscribed(t *testing.T, b *redistest.Backend, prefix, name string, n int64) {
	t.Helper()
	var got int64
	if !redistest.Eventually(30*time.Second, func() bool {
		got = b.Subscribers(t, channel(prefix, name))
		return got == n
	}) {
		t.Fatalf("%d processes subscribed, want %d", got, n)
	}
}

// snapshot is the group's state in Redis: every key's contents (not TTLs).
func snapshot(t *testing.T, b *redistest.Backend, prefix, name string) string {
	t.Helper()
	s := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Hgetall().Key(key(prefix, name, "")).Build() })
	h, err := s.AsStrMap()
	if err != nil {
		t.Fatalf("HGETALL: %v", err)
	}
	var parts []string
	for _, part := range []string{"m", "ops"} {
		z, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Zrange().Key(key(prefix, name, part)).Min("0").Max("-1").Withscores().Build()
		}).AsStrSlice()
		if err != nil {
			t.Fatalf("ZRANGE: %v", err)
		}
		parts = append(parts, fmt.Sprint(z))
	}
	return fmt.Sprint(h, parts, b.Keys(t, prefix))
}

func groupPTTL(t *testing.T, b *redistest.Backend, prefix, name string) int64 {
	t.Helper()
	ms, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Pttl().Key(key(prefix, name, "")).Build() }).AsInt64()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	return ms
}

func noKeysWithoutTTL(t *testing.T, b *redistest.Backend, prefix string) {
	t.Helper()
	if keys := b.KeysWithoutTTL(t, prefix); len(keys) > 0 {
		t.Errorf("keys without a TTL: %v", keys)
	}
}

// Four processes wait; a fifth does the last Done: none returns before it, all return
// promptly after it, on the round's one message.
func TestWaitAcrossProcesses(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			doer := newWG(t, b.Pod(t, prefix), "batch")
			ctx := ctxFor(t, 30*time.Second)
			must(t, "Add(2)", doer.Add(ctx, 2))
			var waits []<-chan redistest.Returned
			for range 4 {
				w := newWG(t, b.Pod(t, prefix), "batch")
				waits = append(waits, waitTimed(w, 20*time.Second))
			}
			subscribed(t, b, prefix, "batch", 4)
			must(t, "Done", doer.Done(ctx))
			for i, ch := range waits {
				select {
				case r := <-ch:
					t.Fatalf("waiter %d returned (%v) after the first Done", i, r.Err)
				case <-time.After(50 * time.Millisecond):
				}
			}
			time.Sleep(100 * time.Millisecond)
			t0 := time.Now()
			must(t, "last Done", doer.Done(ctx))
			var late error
			for i, ch := range waits {
				r := redistest.Await(t, ch, 5*time.Second)
				if r.Err != nil {
					t.Errorf("waiter %d: %v", i, r.Err)
				}
				// However late it hears of it, no waiter returns before the last Done.
				if r.At.Before(t0) {
					t.Errorf("waiter %d returned %v before the last Done", i, t0.Sub(r.At))
				}
				// Woken by the round's message, not at its backstop (with no member, when the
				// keys would expire: a day later).
				if err := redistest.Late(fmt.Sprintf("waiter %d returned after the last Done,", i), r.At.Sub(t0), 2*time.Second, t0, r.At); err != nil && late == nil {
					late = err
				}
			}
			noKeysWithoutTTL(t, b, prefix)
			return late
		})
	})
}

// A Wait on a zero counter returns at once, with one command and no subscription, with the
// last round's outcome.
func TestWaitOnZeroReturnsAtOnce(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			p := b.Pod(t, prefix)
			wg := newWG(t, p, "zero")
			ctx := ctxFor(t, 10*time.Second)
			for round := range 2 {
				p.Client.Reset()
				start := time.Now()
				r := redistest.Await(t, waitTimed(wg, 10*time.Second), 10*time.Second)
				if r.Err != nil {
					t.Fatalf("round %d: Wait on zero: %v", round, r.Err)
				}
				// (An EVAL follows the EVALSHA the first time the server sees the script.)
				if n := p.Client.Total() - p.Client.Counts()["EVAL"]; n != 1 {
					t.Errorf("round %d: Wait on zero sent %d commands, want 1: %v", round, n, p.Client.Counts())
				}
				if n := b.Subscribers(t, channel(prefix, "zero")); n != 0 {
					t.Errorf("round %d: %d subscribers", round, n)
				}
				if err := redistest.Late(fmt.Sprintf("round %d: Wait on zero returned", round), r.At.Sub(start), time.Second, start, r.At); err != nil {
					return err
				}
				must(t, "Add", wg.Add(ctx, 1))
				must(t, "Done", wg.Done(ctx))
			}
			return nil
		})
	})
}

// A negative counter is an error that changes nothing in Redis; bad input is ErrInvalid.
func TestNegativeAddChangesNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		// The member's lease is long: a renewal, which moves its expiry, must not fall between
		// the two snapshots, however slowly a loaded machine takes them.
		p := b.Pod(t, prefix, distsync.WithLeaseTTL(time.Minute))
		wg := newWG(t, p, "neg")
		ctx := ctxFor(t, 30*time.Second)
		if err := wg.Done(ctx); !errors.Is(err, waitgroup.ErrNegative) || !strings.Contains(err.Error(), `"neg"`) {
			t.Fatalf("Done on an unused group: %v", err)
		}
		if keys := b.Keys(t, prefix); len(keys) != 0 {
			t.Fatalf("a refused Done wrote %v", keys)
		}
		must(t, "Add(2)", wg.Add(ctx, 2))
		m, err := wg.Join(ctx)
		must(t, "Join", err)
		before := snapshot(t, b, prefix, "neg")
		for _, delta := range []int64{-3, -100} {
			if err := wg.Add(ctx, delta); !errors.Is(err, waitgroup.ErrNegative) {
				t.Fatalf("Add(%d) with 2 units: %v", delta, err)
			}
		}
		must(t, "Add(0)", wg.Add(ctx, 0))
		if after := snapshot(t, b, prefix, "neg"); after != before {
			t.Fatalf("Redis changed:\nbefore %s\nafter  %s", before, after)
		}
		must(t, "Add(-2)", wg.Add(ctx, -2))
		// A member is not a plain unit: Done of the group does not end it.
		if err := wg.Done(ctx); !errors.Is(err, waitgroup.ErrNegative) {
			t.Fatalf("Done with only a member pending: %v", err)
		}
		must(t, "member Done", m.Done(ctx))
		if err := m.Done(ctx); !errors.Is(err, distsync.ErrNotHeld) {
			t.Fatalf("second member Done: %v", err)
		}
		must(t, "Wait", wg.Wait(ctx))

		for _, bad := range []struct {
			name string
			opts []distsync.Option
		}{
			{"", nil},
			{"x", []distsync.Option{waitgroup.WithExpiry(0)}},
			{"x", []distsync.Option{waitgroup.WithExpiry(-time.Second)}},
			{"x", []distsync.Option{distsync.WithWaiterLease(time.Second)}},
			{"x", []distsync.Option{distsync.WithLeaseTTL(time.Microsecond)}},
		} {
			if _, err := waitgroup.New(p.H, bad.name, bad.opts...); !errors.Is(err, distsync.ErrInvalid) {
				t.Errorf("New(%q, %d options): %v", bad.name, len(bad.opts), err)
			}
		}
		if _, err := waitgroup.New(nil, "x"); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New(nil handle): %v", err)
		}
	})
}

// A member cut off from Redis is reported lost by Wait in another process within about its
// lease, and never counted as done; the member learns of the loss, and its Done says so. A
// Wait that starts after the loss, on what is by then a zero counter, hears of it too.
func TestDeadMemberIsReported(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A lease of a second, doubled at each attempt: a stall that outlasted the lease
		// where the test needs it live spoils an attempt, not the next.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl)}
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			doomed := newWG(t, b.PodVia(t, prefix, net, opts...), "dead", opts...)
			ctx := ctxFor(t, 30*time.Second)
			m, err := doomed.Join(ctx)
			if err := stalled(t, "Join", err); err != nil {
				return err
			}
			// The live member's lease is long: a stall of a loaded machine must not lose it too.
			live := newWG(t, b.Pod(t, prefix, distsync.WithLeaseTTL(20*time.Second)), "dead")
			ok, err := live.Join(ctx)
			must(t, "Join", err)
			coordinator := newWG(t, b.Pod(t, prefix, opts...), "dead")
			w := waitTimed(coordinator, 20*time.Second)
			if !subscribedUnless(t, b, prefix, "dead", 1, func() bool { return len(w) > 0 }) {
				r := <-w
				if !time.Now().Before(m.Lease().Deadline()) {
					// Its process stalled past its lease: the member is lost, rightly.
					return fmt.Errorf("the member's lease ran out before Wait waited (Wait: %v)", r.Err)
				}
				t.Fatalf("Wait returned (%v) with two live members", r.Err)
			}
			must(t, "live member Done", ok.Done(ctx))
			select {
			case r := <-w:
				if !time.Now().Before(m.Lease().Deadline()) {
					// Its process stalled past its lease: the member is lost, rightly.
					return fmt.Errorf("the member's lease ran out before the cut (Wait: %v)", r.Err)
				}
				t.Fatalf("Wait with a live member returned (%v) while it should wait", r.Err)
			case <-time.After(300 * time.Millisecond):
			}
			t0 := time.Now()
			net.Cut()
			r := redistest.Await(t, w, 10*ttl)
			var lost *waitgroup.LostError
			if !errors.Is(r.Err, waitgroup.ErrMembersLost) || !errors.As(r.Err, &lost) || lost.Members != 1 {
				t.Fatalf("Wait: %v, want 1 member lost", r.Err)
			}
			if errors.Is(r.Err, waitgroup.ErrMemberFailed) {
				t.Errorf("Wait: %v, also a failure", r.Err)
			}
			if err := redistest.Late("the loss was reported after the cut", r.At.Sub(t0), 4*ttl, t0, r.At); err != nil {
				return err
			}
			if err := closedBy(t, "the lost member's loss signal came after Wait reported it", m.Lease().Done(), r.At, 2*ttl); err != nil {
				return err
			}
			if err := m.Lease().Err(); !errors.Is(err, distsync.ErrLost) {
				t.Errorf("lost member's lease: %v", err)
			}
			if err := m.Done(ctx); !errors.Is(err, distsync.ErrLost) {
				t.Errorf("Done of the lost member: %v", err)
			}
			net.Restore()

			// Every member lapses while nobody waits: the first Wait, on what is by then zero,
			// is the one that finds them gone, and reports them.
			for range 2 {
				_, err := doomed.Join(ctx)
				if err := stalled(t, "Join", err); err != nil {
					return err
				}
			}
			net.Cut()
			lapsed(t, b, prefix, "dead")
			err = result(t, "late Wait", wait(coordinator, 10*time.Second), 5*time.Second)
			if !errors.As(err, &lost) || lost.Members != 2 {
				t.Fatalf("late Wait: %v, want 2 members lost", err)
			}
			noKeysWithoutTTL(t, b, prefix)
			return nil
		})
	})
}

// lapsed waits until every member of group name has its lease run out, by Redis's clock (a
// renewal still on its way when the network was cut may have moved it past ttl after the
// cut).
func lapsed(t *testing.T, b *redistest.Backend, prefix, name string) {
	t.Helper()
	var left []string
	if !redistest.Eventually(20*time.Second, func() bool {
		left = nil
		ms, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Zrange().Key(key(prefix, name, "m")).Min("0").Max("-1").Withscores().Build()
		}).AsZScores()
		if err != nil {
			t.Fatalf("the members: %v", err)
		}
		tm, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Time().Build() }).AsStrSlice()
		if err != nil || len(tm) != 2 {
			t.Fatalf("TIME: %v, %v", tm, err)
		}
		sec, _ := strconv.ParseInt(tm[0], 10, 64)
		us, _ := strconv.ParseInt(tm[1], 10, 64)
		for _, m := range ms {
			if int64(m.Score) >= sec*1000+us/1000 {
				left = append(left, m.Member)
			}
		}
		return len(left) == 0
	}) {
		t.Fatalf("members still live in Redis 20 s after the cut: %v", left)
	}
}

// A member whose lease is ended by Redis (its entry expired behind its back) is lost as well;
// a group whose keys vanish while waited for makes Wait fail with ErrExpired, never nil.
func TestExpiredMemberAndVanishedKeys(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A lease of a second, doubled at each attempt: a stall that outlasted the lease
		// where the test needs it live spoils an attempt, not the next.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl)}
			prefix := b.Prefix(t)
			wg := newWG(t, b.Pod(t, prefix, opts...), "exp")
			ctx := ctxFor(t, 30*time.Second)
			m, err := wg.Join(ctx)
			if err := stalled(t, "Join", err); err != nil {
				return err
			}
			w := wait(newWG(t, b.Pod(t, prefix, opts...), "exp"), 20*time.Second)
			if !subscribedUnless(t, b, prefix, "exp", 1, func() bool { return len(w) > 0 }) {
				err := <-w
				if !time.Now().Before(m.Lease().Deadline()) {
					// Its process stalled past its lease: the member is lost, rightly.
					return fmt.Errorf("the member's lease ran out before Wait waited (Wait: %v)", err)
				}
				t.Fatalf("Wait returned (%v) with a live member", err)
			}
			// Its entry now says, on Redis's clock, that its lease ended long ago.
			id, ok := lone(t, b, prefix)
			if !ok {
				return errors.New("the member's lease ran out before its entry was read")
			}
			b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Zadd().Key(key(prefix, "exp", "m")).Xx().ScoreMember().ScoreMember(1000, id).Build()
			})
			if err := result(t, "Wait", w, 5*ttl); !errors.Is(err, waitgroup.ErrMembersLost) {
				t.Fatalf("Wait after the member's entry expired: %v", err)
			}
			// At its next renewal, a third of a lease away (the bound the test had: two leases).
			if err := closedBy(t, "the member's loss signal came after Wait reported it", m.Lease().Done(), time.Now(), 2*ttl); err != nil {
				return err
			}

			// The keys vanish under a waiting Wait: it fails, with ErrExpired. (It sees a
			// deletion at its backstop, within the member's lease: a short one.)
			m, err = wg.Join(ctx)
			if err := stalled(t, "Join", err); err != nil {
				return err
			}
			w = wait(newWG(t, b.Pod(t, prefix, opts...), "exp"), 20*time.Second)
			select {
			case err := <-w:
				if !time.Now().Before(m.Lease().Deadline()) {
					// Its process stalled past its lease: the member is lost, rightly.
					return fmt.Errorf("the member's lease ran out before its keys were deleted (Wait: %v)", err)
				}
				t.Fatalf("Wait returned (%v) while the member lives", err)
			case <-time.After(300 * time.Millisecond):
			}
			for _, part := range []string{"", "m", "ops"} {
				b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(key(prefix, "exp", part)).Build() })
			}
			if err := result(t, "Wait", w, 5*ttl); !errors.Is(err, waitgroup.ErrExpired) {
				t.Fatalf("Wait after the keys were deleted: %v", err)
			}

			// Plain units of a worker that never comes back: the keys expire, and so does Wait.
			const expiry = 500 * time.Millisecond
			short := newWG(t, b.Pod(t, prefix, opts...), "short", waitgroup.WithExpiry(expiry))
			added := time.Now()
			must(t, "Add", short.Add(ctx, 1))
			r := redistest.Await(t, waitTimed(short, 20*time.Second), 5*time.Second)
			if r.Err == nil && r.At.Sub(added) >= expiry {
				// Its first look may have come after the keys expired: no group to wait for then.
				return fmt.Errorf("Wait on plain units returned nil %v after their Add, with an expiry of %v", r.At.Sub(added), expiry)
			}
			if !errors.Is(r.Err, waitgroup.ErrExpired) {
				t.Fatalf("Wait on expired plain units: %v", r.Err)
			}
			return nil
		})
	})
}

// lone returns the only member id in group "exp", if there is one.
func lone(t *testing.T, b *redistest.Backend, prefix string) (string, bool) {
	t.Helper()
	ids, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Zrange().Key(key(prefix, "exp", "m")).Min("0").Max("-1").Build()
	}).AsStrSlice()
	if err == nil && len(ids) == 0 {
		return "", false // it lapsed (its process stalled past its lease) and was pruned
	}
	if err != nil || len(ids) != 1 {
		t.Fatalf("members: %v %v", ids, err)
	}
	return ids[0], true
}

// Go: fn's error reaches a Wait in another process, as text; a clean round after it is clean.
func TestGoErrorReachesWait(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		worker := newWG(t, b.Pod(t, prefix), "go")
		coordinator := newWG(t, b.Pod(t, prefix), "go")
		ctx := ctxFor(t, 30*time.Second)
		release := make(chan struct{})
		var ran sync.WaitGroup
		for i := range 3 {
			ran.Add(1)
			must(t, "Go", worker.Go(ctx, func(ctx context.Context) error {
				defer ran.Done()
				<-release
				if i == 1 {
					return errors.New("disk full on node 7")
				}
				return nil
			}))
		}
		w := wait(coordinator, 20*time.Second)
		redistest.Blocks(t, "Wait while fn runs", w, 200*time.Millisecond)
		close(release)
		err := result(t, "Wait", w, 5*time.Second)
		if !errors.Is(err, waitgroup.ErrMemberFailed) || !strings.Contains(err.Error(), "disk full on node 7") {
			t.Fatalf("Wait: %v", err)
		}
		if errors.Is(err, waitgroup.ErrMembersLost) {
			t.Errorf("Wait: %v, also a loss", err)
		}
		ran.Wait()
		must(t, "Go", worker.Go(ctx, func(context.Context) error { return nil }))
		if err := result(t, "Wait", wait(coordinator, 20*time.Second), 5*time.Second); err != nil {
			t.Fatalf("Wait of a clean round after a failed one: %v", err)
		}
	})
}

// Claim takes over the units that Add added, one each; a claimer that dies is reported lost.
func TestClaim(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The claimers that live have long leases: a stall of a loaded machine must not lose
		// them.
		long := []distsync.Option{distsync.WithLeaseTTL(20 * time.Second)}
		// A lease of a second, doubled at each attempt: a stall that outlasted the lease
		// where the test needs it live spoils an attempt, not the next.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl)}
			prefix := b.Prefix(t)
			coordinator := newWG(t, b.Pod(t, prefix, opts...), "jobs")
			ctx := ctxFor(t, 30*time.Second)
			must(t, "Add(3)", coordinator.Add(ctx, 3))
			var members []*waitgroup.Member
			var workers []*waitgroup.WaitGroup
			for range 3 {
				w := newWG(t, b.Pod(t, prefix, long...), "jobs")
				m, err := w.Claim(ctx)
				must(t, "Claim", err)
				members, workers = append(members, m), append(workers, w)
			}
			if _, err := workers[0].Claim(ctx); !errors.Is(err, waitgroup.ErrNothingToClaim) {
				t.Fatalf("fourth Claim: %v", err)
			}
			if err := coordinator.Done(ctx); !errors.Is(err, waitgroup.ErrNegative) {
				t.Fatalf("Done of a claimed unit: %v", err)
			}
			w := wait(coordinator, 20*time.Second)
			for i, m := range members {
				redistest.Blocks(t, "Wait", w, 100*time.Millisecond)
				must(t, fmt.Sprint("Done ", i), m.Done(ctx))
			}
			if err := result(t, "Wait", w, 5*time.Second); err != nil {
				t.Fatalf("Wait: %v", err)
			}

			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			doomed := newWG(t, b.PodVia(t, prefix, net, opts...), "jobs")
			must(t, "Add(1)", coordinator.Add(ctx, 1))
			dm, err := doomed.Claim(ctx)
			if err := stalled(t, "Claim", err); err != nil {
				return err
			}
			w = wait(coordinator, 20*time.Second)
			select {
			case err := <-w:
				if !time.Now().Before(dm.Lease().Deadline()) {
					// Its process stalled past its lease: the claimer is lost, rightly.
					return fmt.Errorf("the claimer's lease ran out before the cut (Wait: %v)", err)
				}
				t.Fatalf("Wait returned (%v) while the claimer lives", err)
			case <-time.After(200 * time.Millisecond):
			}
			net.Cut()
			if err := result(t, "Wait", w, 10*ttl); !errors.Is(err, waitgroup.ErrMembersLost) {
				t.Fatalf("Wait after the claimer died: %v", err)
			}
			net.Restore()
			noKeysWithoutTTL(t, b, prefix)
			return nil
		})
	})
}

// A member still pending when its Handle closes leaves unfinished: it is reported lost at
// once, not a lease later, and never counted as done.
func TestClosedHandleReportsItsMembersLost(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 20 * time.Second // far longer than the test: a lapse cannot be what Wait sees
		prefix := b.Prefix(t)
		opts := []distsync.Option{distsync.WithLeaseTTL(ttl)}
		p := b.Pod(t, prefix, opts...)
		wg := newWG(t, p, "close")
		ctx := ctxFor(t, 30*time.Second)
		m, err := wg.Join(ctx)
		must(t, "Join", err)
		w := wait(newWG(t, b.Pod(t, prefix), "close"), 20*time.Second)
		redistest.Blocks(t, "Wait", w, 200*time.Millisecond)
		must(t, "Close", p.H.Close(ctx))
		var lost *waitgroup.LostError
		if err := result(t, "Wait", w, 5*time.Second); !errors.As(err, &lost) || lost.Members != 1 {
			t.Fatalf("Wait after the member's Handle closed: %v", err)
		}
		if err := m.Done(ctx); !errors.Is(err, distsync.ErrClosed) {
			t.Errorf("Done after Close: %v", err)
		}
	})
}

// A cancelled Wait writes nothing and leaves no subscription behind.
func TestCancelledWaitsLeaveNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		doer := newWG(t, b.Pod(t, prefix), "cancel")
		ctx := ctxFor(t, 30*time.Second)
		must(t, "Add", doer.Add(ctx, 1))
		before, pttl := snapshot(t, b, prefix, "cancel"), groupPTTL(t, b, prefix, "cancel")
		measured := time.Now()
		time.Sleep(300 * time.Millisecond) // a Wait that refreshed the TTL would add this back
		wp := b.Pod(t, prefix)
		w := newWG(t, wp, "cancel")
		var all sync.WaitGroup
		for range 3 {
			all.Add(1)
			go func() {
				defer all.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				if err := w.Wait(ctx); !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("cancelled Wait: %v", err)
				}
			}()
		}
		all.Wait()
		cctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := w.Wait(cctx); !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Errorf("Wait with a cancelled ctx: %v", err)
		}
		if after := snapshot(t, b, prefix, "cancel"); after != before {
			t.Errorf("cancelled Waits changed Redis:\nbefore %s\nafter  %s", before, after)
		}
		// Without a refresh, Redis's clock ran at least as long as this one since the first PTTL.
		elapsed := time.Since(measured).Milliseconds()
		if after := groupPTTL(t, b, prefix, "cancel"); after > pttl-elapsed+150 {
			t.Errorf("cancelled Waits extended the group's life: PTTL %d, then %d after %d ms", pttl, after, elapsed)
		}
		// (On miniredis, a Wait's deadline that passed while a command was in flight may leave
		// the subscription on a connection rueidis replaced: see LeftChannels.)
		var left []string
		if !redistest.Eventually(10*time.Second, func() bool {
			left = b.LeftChannels(t, channel(prefix, "cancel"), wp.H)
			return len(left) == 0
		}) {
			t.Errorf("the channel is still subscribed after the cancelled Waits: %q", left)
		}
		must(t, "Done", doer.Done(ctx))
		noKeysWithoutTTL(t, b, prefix)
	})
}

// Idle waiters send nothing but their backstop re-check, at most one per member lease, while
// a member in another process renews.
func TestIdleWaitersDoNotPoll(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const waiters = 2
		// The member's lease is 3 s (the window two thirds of it), doubled at each attempt: a
		// loaded machine that stalled the member past it spoils an attempt, not the next.
		redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
			window := 2 * ttl / 3
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl)}
			prefix := b.Prefix(t)
			member := newWG(t, b.Pod(t, prefix, opts...), "idle")
			ctx := ctxFor(t, 30*time.Second)
			m, err := member.Join(ctx)
			if err := stalled(t, "Join", err); err != nil {
				return err
			}
			wp := b.Pod(t, prefix, opts...)
			w := newWG(t, wp, "idle")
			var waits []<-chan error
			for range waiters {
				waits = append(waits, wait(w, 20*time.Second))
			}
			// Subscribed: each waiter checks once more at once, then waits.
			returned := func() bool {
				for _, ch := range waits {
					if len(ch) > 0 {
						return true
					}
				}
				return false
			}
			if !subscribedUnless(t, b, prefix, "idle", 1, returned) {
				if !time.Now().Before(m.Lease().Deadline()) {
					// Its process stalled past its lease: the member is lost, rightly.
					return errors.New("the member's lease ran out before the waiters waited")
				}
				t.Fatal("a Wait returned with a live member")
			}
			time.Sleep(200 * time.Millisecond)
			wp.Client.Reset()
			from := time.Now()
			time.Sleep(window)
			n, counts := wp.Client.Total(), wp.Client.Counts()
			elapsed := time.Since(from) // a loaded machine oversleeps: the bound counts from what passed
			// One backstop re-check per waiter per lease at most (the member renews at ttl/3, so
			// its expiry is at least 2/3 ttl away, and the backstop adds ttl/3). (Retried: the
			// check after subscribing may come late into the window, and a renewal that comes
			// late moves the member's expiry less far.)
			if limit := waiters * (int(elapsed/ttl) + 1); n > limit {
				return fmt.Errorf("idle waiters sent %d commands in %v, want at most %d: %v", n, elapsed, limit, counts)
			}
			if err := stalled(t, "Done", m.Done(ctx)); err != nil {
				return err
			}
			for i, ch := range waits {
				if err := result(t, fmt.Sprint("waiter ", i), ch, 5*time.Second); err != nil {
					t.Errorf("waiter %d: %v", i, err)
				}
			}
			return nil
		})
	})
}

// A waiter whose subscription connection drops re-checks, and does not miss the end.
func TestResubscribedWaiterDoesNotMissTheEnd(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		doer := newWG(t, b.Pod(t, prefix), "resub")
		ctx := ctxFor(t, 30*time.Second)
		must(t, "Add", doer.Add(ctx, 1))
		w := wait(newWG(t, b.Pod(t, prefix), "resub"), 20*time.Second)
		subscribed(t, b, prefix, "resub", 1)
		b.KillPubSub(t)
		must(t, "Done", doer.Done(ctx)) // published while the waiter may be unsubscribed
		if err := result(t, "Wait", w, 10*time.Second); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	})
}

// Once everything ends and the expiry passes, the group leaves no key behind; no key is ever
// without a TTL.
func TestNoKeysLeft(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Steps that each list the keys and read their TTLs (a client per command, on every
		// node of a Cluster) take a loaded machine a while: an expiry of a second could run
		// out between two. Three seconds at first, twice as long at each next attempt.
		redistest.RetryScaled(t, 3, 3*time.Second, func(expiry time.Duration) error {
			opts := []distsync.Option{distsync.WithLeaseTTL(expiry)}
			prefix := b.Prefix(t)
			wg := newWG(t, b.Pod(t, prefix, opts...), "gone", waitgroup.WithExpiry(expiry))
			other := newWG(t, b.Pod(t, prefix, opts...), "gone", waitgroup.WithExpiry(expiry))
			ctx := ctxFor(t, 30*time.Second)
			added := time.Now()
			must(t, "Add", wg.Add(ctx, 2))
			noKeysWithoutTTL(t, b, prefix)
			m, err := other.Claim(ctx)
			if errors.Is(err, waitgroup.ErrNothingToClaim) && time.Since(added) >= expiry {
				return fmt.Errorf("Claim %v after the Add: the units may have expired", time.Since(added))
			}
			if err := stalled(t, "Claim", err); err != nil {
				return err
			}
			g, err := other.Join(ctx)
			if err := stalled(t, "Join", err); err != nil {
				return err
			}
			w := wait(wg, 20*time.Second)
			noKeysWithoutTTL(t, b, prefix)
			must(t, "Done", wg.Done(ctx))
			if err := stalled(t, "Fail", m.Fail(ctx, errors.New("boom"))); err != nil {
				return err
			}
			noKeysWithoutTTL(t, b, prefix)
			ended := time.Now()
			if err := stalled(t, "Done", g.Done(ctx)); err != nil {
				return err
			}
			if err := result(t, "Wait", w, 5*time.Second); !errors.Is(err, waitgroup.ErrMemberFailed) {
				t.Fatalf("Wait: %v", err)
			}
			// Within the expiry, a Wait on zero still hears of the last round.
			if err := wg.Wait(ctx); !errors.Is(err, waitgroup.ErrMemberFailed) {
				if err == nil && time.Since(ended) >= expiry {
					return fmt.Errorf("Wait on zero %v after the round: the keys may have expired", time.Since(ended))
				}
				t.Fatalf("Wait on zero after the round: %v", err)
			}
			noKeysWithoutTTL(t, b, prefix)
			if !redistest.Eventually(3*expiry, func() bool { return len(b.Keys(t, prefix)) == 0 }) {
				t.Fatalf("keys left after the expiry: %v", b.Keys(t, prefix))
			}
			if err := wg.Wait(ctx); err != nil {
				t.Fatalf("Wait on an expired, ended group: %v", err)
			}
			return nil
		})
	})
}

// Rounds follow each other; a Wait returns its own round's outcome even if it learns late.
func TestRoundsAreKeptApart(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		wg := newWG(t, b.Pod(t, prefix), "rounds")
		ctx := ctxFor(t, 30*time.Second)
		for i := range 20 {
			m, err := wg.Join(ctx)
			must(t, "Join", err)
			var want error
			if i%2 == 1 {
				want = errors.New("odd round")
			}
			must(t, "Fail", m.Fail(ctx, want))
			err = wg.Wait(ctx)
			if (err == nil) != (want == nil) || want != nil && !strings.Contains(err.Error(), "odd round") {
				t.Fatalf("round %d: Wait on zero: %v, want %v", i, err, want)
			}
		}
		if !reflect.DeepEqual(b.KeysWithoutTTL(t, prefix), []string(nil)) {
			t.Errorf("keys without a TTL")
		}
	})
}

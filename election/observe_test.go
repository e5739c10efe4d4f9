package election_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/internal/redistest"
)

// collector gathers what an observer sends.
type collector struct {
	mu    sync.Mutex
	infos []election.Info
}

func observe(t *testing.T, e *election.Election) *collector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := e.Observe(ctx)
	c := &collector{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for info := range ch {
			c.mu.Lock()
			c.infos = append(c.infos, info)
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Observe's channel was not closed after its ctx ended")
		}
	})
	return c
}

func (c *collector) values() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var vs []string
	for _, i := range c.infos {
		vs = append(vs, i.Value)
	}
	return vs
}

// waitFor waits until the observer's last value is v.
func (c *collector) waitFor(t *testing.T, v string) {
	t.Helper()
	if !redistest.Eventually(15*time.Second, func() bool {
		vs := c.values()
		return len(vs) > 0 && vs[len(vs)-1] == v
	}) {
		t.Fatalf("the observer did not converge on %q: it saw %q", v, c.values())
	}
}

// checkOrder fails if the Infos are not strictly increasing in (Term, Rev).
func (c *collector) checkOrder(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 1; i < len(c.infos); i++ {
		a, b := c.infos[i-1], c.infos[i]
		if b.Term < a.Term || b.Term == a.Term && b.Rev <= a.Rev {
			t.Errorf("observer sent %+v after %+v", b, a)
		}
	}
}

// chain queues candidates behind term's leader, each of which proclaims a second value and
// resigns as soon as it leads, then resigns term: leadership passes down the chain as fast as
// Redis hands it on. It returns the values in the order they are announced.
func chain(t *testing.T, b *redistest.Backend, prefix, name string, p *redistest.Pod, term *election.Term, tag string, n int) []string {
	t.Helper()
	want := []string{}
	errs := make(chan error, n)
	for i := range n {
		v := fmt.Sprintf("%s%d", tag, i)
		want = append(want, v, v+"!")
		e := newElection(t, p, name) // a candidate each
		go func() {
			tm, err := e.Campaign(context.Background(), v)
			if err == nil {
				err = tm.Proclaim(context.Background(), v+"!")
			}
			if err == nil {
				err = tm.Resign(context.Background())
			}
			errs <- err
		}()
		waitQueued(t, b, prefix, name, i+1) // strictly in this order
	}
	resign(t, term)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// An observer sees every leader and every value, in order, while its subscription holds;
// across a forced re-subscription (CLIENT KILL TYPE pubsub) it converges on the current
// leader, and goes on seeing every change after it.
func TestObserverSeesEveryLeaderInOrder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		// The candidates' places last a minute: on a loaded machine a place that lapsed for a
		// late renewal would queue its candidate again at the back, out of the chain's order.
		// The leases are long too: every leader resigns, none is waited out, and the server's
		// restart below (KillPubSub on miniredis) must not cost a term its lease, which two
		// suites at once on two cores did to a 5 s one.
		opts := []distsync.Option{distsync.WithLeaseTTL(20 * time.Second), distsync.WithWaiterLease(time.Minute)}
		obs := newElection(t, b.Pod(t, prefix, opts...), "obs")
		cp := b.Pod(t, prefix, append(opts, distsync.WithIdentity("cand:{1} \u00e9"))...)
		cand := newElection(t, cp, "obs")

		first := campaign(t, cand, "first")
		c := observe(t, obs)
		c.waitFor(t, "first") // the current leader comes first

		want := append([]string{"first"}, chain(t, b, prefix, "obs", cp, first, "a", 4)...)
		if !redistest.Eventually(10*time.Second, func() bool { return len(c.values()) >= len(want) }) {
			t.Fatalf("the observer saw %q, want %q", c.values(), want)
		}
		if got := c.values(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("the observer saw %q, want %q", got, want)
		}

		// Changes made while the subscription is down may be skipped; the observer must
		// converge on the leader that came after them.
		gap := campaign(t, cand, "during")
		b.KillPubSub(t)
		if err := gap.Proclaim(context.Background(), "during!"); err != nil {
			t.Fatal(err)
		}
		resign(t, gap)
		last := campaign(t, cand, "after")
		c.waitFor(t, "after")
		// And every change once it is back.
		seen := len(c.values())
		more := chain(t, b, prefix, "obs", cp, last, "b", 3)
		if !redistest.Eventually(10*time.Second, func() bool { return len(c.values()) >= seen+len(more) }) {
			t.Fatalf("after the re-subscription the observer saw %q, want %q at the end", c.values(), more)
		}
		if got := c.values()[seen:]; fmt.Sprint(got) != fmt.Sprint(more) {
			t.Fatalf("after the re-subscription the observer saw %q, want %q", got, more)
		}
		c.checkOrder(t)
		c.mu.Lock()
		for _, info := range c.infos {
			if info.Handle != cp.H.ID() || info.Identity != "cand:{1} \u00e9" {
				t.Errorf("observer sent %+v: want the candidate's Handle %s, identity %q", info, cp.H.ID(), "cand:{1} \u00e9")
			}
		}
		c.mu.Unlock()
	})
}

// Idle candidates renew their places and nothing else; an idle observer sends one read per
// lease at most.
func TestIdleCandidatesAndObserversDoNotPoll(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const wlease, waiters = 900 * time.Millisecond, 2
		// The leader's lease (and the window, as long) is 3 s, doubled at each attempt: a
		// loaded machine that stalled the leader past it spoils an attempt, not the next.
		redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(wlease)}
			prefix := b.Prefix(t)
			leader := campaign(t, newElection(t, b.Pod(t, prefix, opts...), "idle"), "leader")
			cp := b.Pod(t, prefix, opts...)
			op := b.Pod(t, prefix, opts...)
			c := observe(t, newElection(t, op, "idle"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := make(chan error, waiters)
			for i := range waiters {
				cand := newElection(t, cp, "idle") // a candidate each
				go func() {
					tm, err := cand.Campaign(ctx, fmt.Sprint("c", i))
					if err == nil {
						err = tm.Resign(ctx)
					}
					res <- err
				}()
			}
			var ids []string
			if !redistest.Eventually(30*time.Second, func() bool {
				ids = queued(t, b, prefix, "idle")
				return len(ids) == waiters || leader.Err() != nil
			}) {
				t.Fatalf("%d candidates queued, want %d: %v", len(ids), waiters, ids)
			}
			if err := leader.Err(); err != nil {
				// A loaded machine stalled the leader past its lease: a candidate leads.
				return fmt.Errorf("the leader's term ended: %w", err)
			}
			c.waitFor(t, "leader")
			// The candidates listen (then check once more, at once): their channel, not the
			// observers'.
			if !redistest.Eventually(10*time.Second, func() bool {
				return len(slices.DeleteFunc(b.Channels(t, key(prefix, "idle", "ch")+":*"), func(ch string) bool {
					return strings.HasSuffix(ch, ":obs")
				})) > 0
			}) {
				t.Fatal("the candidates never subscribed")
			}
			window := ttl
			cp.Client.Reset()
			op.Client.Reset()
			from := time.Now()
			time.Sleep(window)
			cands, observer := cp.Client.Total(), op.Client.Total()
			elapsed := time.Since(from) // a loaded machine oversleeps: the bounds count from what passed
			t.Logf("candidates %d, observer %d commands in %v", cands, observer, elapsed)
			// Each candidate: one place renewal per renewal period, plus a backstop re-check per
			// holder lease (a late timer only sends fewer). The observer: a read per lease.
			// (Retried: what the candidates sent on subscribing may come late into the window.)
			periods := int(elapsed/(wlease/3)) + 1
			backstops := waiters * (int(elapsed/ttl) + 1)
			if limit := (periods+1)*waiters + backstops; cands > limit {
				return fmt.Errorf("idle candidates sent %d commands in %v, want at most %d", cands, elapsed, limit)
			}
			if limit := int(elapsed/ttl) + 1; observer > limit {
				return fmt.Errorf("an idle observer sent %d commands in %v, want at most %d", observer, elapsed, limit)
			}
			if err := leader.Resign(context.Background()); errors.Is(err, distsync.ErrLost) {
				// A loaded machine stalled the leader past its lease: the candidates' re-checks
				// were right then.
				return fmt.Errorf("the leader's term was lost: %w", err)
			} else if err != nil {
				t.Fatalf("Resign: %v", err)
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

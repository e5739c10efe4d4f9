package election_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/internal/redistest"
)

// A Campaign on an Election value that leads returns its term at once, with the new value
// proclaimed, as etcd's does for a session that leads: a leader that campaigns again (it
// retries after an error it did not understand, say) does not queue behind its own term.
// Campaigns of one value that wait at the same time share the outcome: the value is one
// candidate.
func TestCampaignWhileLeadingReturnsTheTerm(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			e := newElection(t, b.Pod(t, prefix), "again")
			c := observe(t, newElection(t, b.Pod(t, prefix), "again"))
			term := campaign(t, e, "v1")
			c.waitFor(t, "v1")

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			again, err := e.Campaign(ctx, "v2")
			returned := time.Now()
			if err != nil {
				t.Fatalf("Campaign by the leader = %v, want its term at once", err)
			}
			if again != term || term.Value() != "v2" {
				t.Fatalf("Campaign by the leader returned %p (value %q), want the term it holds, %p, with value v2", again, term.Value(), term)
			}
			if err := redistest.Late("Campaign by the leader returned", returned.Sub(start), 2*time.Second, start, returned); err != nil {
				return err
			}
			c.waitFor(t, "v2")
			info, err := e.Leader(ctx)
			if err != nil || info.Value != "v2" || info.Term != term.Token() {
				t.Fatalf("Leader after the re-campaign = %+v, %v; want v2 in term %d", info, err, term.Token())
			}
			// The same value again announces nothing.
			if _, err := e.Campaign(ctx, "v2"); err != nil {
				t.Fatal(err)
			}
			if info2, err := e.Leader(ctx); err != nil || info2.Rev != info.Rev {
				t.Fatalf("re-campaigning with the same value announced something: %+v then %+v (%v)", info, info2, err)
			}
			if tt, ok, err := e.TryCampaign(ctx, "v3"); err != nil || !ok || tt != term || term.Value() != "v3" {
				t.Fatalf("TryCampaign by the leader = %p, %v, %v; want its term with value v3", tt, ok, err)
			}
			c.waitFor(t, "v3")
			resign(t, term)

			// Another candidate leads; two Campaigns of one value wait, and both get the one term
			// the value wins.
			other := campaign(t, newElection(t, b.Pod(t, prefix), "again"), "other")
			var wg sync.WaitGroup
			terms := make([]*election.Term, 2)
			errs := make([]error, 2)
			for i := range terms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					terms[i], errs[i] = e.Campaign(ctx, fmt.Sprint("w", i))
				}()
			}
			waitQueued(t, b, prefix, "again", 1)
			resign(t, other)
			wg.Wait()
			for i := range terms {
				if errs[i] != nil {
					t.Fatalf("Campaign %d: %v", i, errs[i])
				}
			}
			if terms[0] != terms[1] || terms[0].Token() <= other.Token() {
				t.Fatalf("two Campaigns of one value got terms %d and %d after %d, want one term, larger", terms[0].Token(), terms[1].Token(), other.Token())
			}
			resign(t, terms[0])
			if err := terms[1].Resign(context.Background()); !errors.Is(err, distsync.ErrNotHeld) {
				t.Fatalf("a second Resign of the shared term = %v, want ErrNotHeld", err)
			}
			// After a resignation, a Campaign starts a new term.
			next := campaign(t, e, "next")
			if next == terms[0] || next.Token() <= terms[0].Token() {
				t.Fatalf("Campaign after Resign returned term %d, after %d", next.Token(), terms[0].Token())
			}
			resign(t, next)
			return nil
		})
	})
}

// A candidate whose process died while queued is never named leader, by Leader or Observe:
// the leadership handed to it inside Redis is announced only once it is confirmed, which a
// dead candidate never does, and the next candidate leads within the waiter lease (etcd
// #21128 named such a candidate).
func TestDeadCandidateIsNeverNamedLeader(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const wlease = time.Second
		opts := []distsync.Option{distsync.WithLeaseTTL(5 * time.Second), distsync.WithWaiterLease(wlease)}
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			obs := newElection(t, b.Pod(t, prefix, opts...), "dead")
			c := observe(t, obs)
			first := campaign(t, newElection(t, b.Pod(t, prefix, opts...), "dead"), "a")
			c.waitFor(t, "a")
			// The candidates must queue behind the first leader: a loaded machine that held its
			// renewals up past the lease ended its term before (then b, not yet dead, leads),
			// which voids the attempt.
			stillFirst := func(n int) error {
				if err := queuedBehind(t, b, prefix, "dead", n, first); err != nil {
					_ = first.Resign(context.Background()) // the attempt is void
					return err
				}
				return nil
			}

			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			be := newElection(t, b.PodVia(t, prefix, net, opts...), "dead")
			go func() { _, _ = be.Campaign(context.Background(), "b") }()
			if err := stillFirst(1); err != nil {
				return err
			}
			ce := newElection(t, b.Pod(t, prefix, opts...), "dead")
			cres := make(chan *election.Term, 1)
			go func() {
				term, _ := ce.Campaign(context.Background(), "c")
				cres <- term // nil if it failed
			}()
			if err := stillFirst(2); err != nil {
				return err
			}

			net.Cut() // b's process is gone: no renewal, no adoption, no leave
			if err := first.Resign(context.Background()); err != nil {
				return fmt.Errorf("the first leader's term ended before it resigned (a loaded machine): %w", err)
			}
			deadline := time.Now().Add(wlease + 10*time.Second)
			var cterm *election.Term
			got := false
			for !got && time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				info, err := obs.Leader(ctx)
				cancel()
				if err == nil && info.Value == "b" {
					t.Fatalf("Leader named the dead candidate: %+v", info)
				}
				select {
				case cterm = <-cres:
					got = true
				case <-time.After(10 * time.Millisecond):
				}
			}
			if cterm == nil {
				t.Fatal("the candidate behind the dead one did not lead")
			}
			c.waitFor(t, "c")
			for _, v := range c.values() {
				if v == "b" {
					t.Fatalf("Observe named the dead candidate: it saw %q", c.values())
				}
			}
			if cterm.Token() <= first.Token() {
				t.Fatalf("the next term %d is not above %d", cterm.Token(), first.Token())
			}
			resign(t, cterm)
			return nil
		})
	})
}

// queuedBehind waits until n candidates are queued for the election name while term leads. It
// returns an error if term's lease ended first (a loaded machine held its renewals up), and
// fails the test if they never queue.
func queuedBehind(t *testing.T, b *redistest.Backend, prefix, name string, n int, term *election.Term) error {
	t.Helper()
	waitQueuedOr(t, b, prefix, name, n, func() bool { return term.Err() != nil })
	if err := term.Err(); err != nil {
		return fmt.Errorf("the leader's term ended before %d candidates queued: %w", n, err)
	}
	return nil
}

// termEnd returns who holds the term key k and when its TTL runs out, on Redis's clock, as a
// local time no later than the true one (the local time is read before the key, and PTTL may
// round up a millisecond); ok is false if nobody holds it.
func termEnd(t *testing.T, b *redistest.Backend, k string) (owner string, end time.Time, ok bool) {
	t.Helper()
	before := time.Now()
	// One script, so that the owner and the TTL are of the same term.
	vs, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Eval().Script("return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}").Numkeys(1).Key(k).Build()
	}).ToArray()
	if err != nil || len(vs) != 2 {
		t.Fatalf("the term in %s: %v, %v", k, vs, err)
	}
	owner, err = vs[0].ToString()
	left, _ := vs[1].AsInt64()
	if err != nil || left <= 0 {
		return "", time.Time{}, false
	}
	return owner, before.Add(time.Duration(left-1) * time.Millisecond), true
}

// A candidate that heads the queue behind a term that is never renewed (a fixed lease: no
// renewal, so no notice of one) campaigns again right after the lease it read runs out, not up
// to a third of a lease later: the first waiter re-checks at the end it was given, as it
// would after a notice.
func TestHeadCandidateLeadsAtAFixedLeasesEnd(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
			margin := 300 * time.Millisecond * ttl / (3 * time.Second)
			prefix := b.Prefix(t)
			leader := newElection(t, b.Pod(t, prefix, distsync.WithFixedLease(ttl)), "fixed")
			np := b.Pod(t, prefix, distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(30*time.Second))
			next := newElection(t, np, "fixed")
			first := campaign(t, leader, "a")
			defer func() { _ = first.Resign(context.Background()) }() // long over by then
			// The first term's end, by Redis's clock (it is never renewed).
			_, expiry, ok := termEnd(t, b, key(prefix, "fixed", ""))
			if !ok {
				return errors.New("the fixed term was over when it was read after Campaign returned")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second+2*ttl)
			defer cancel()
			term, err := next.Campaign(ctx, "b")
			led := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			defer resign(t, term)
			late := led.Sub(expiry)
			t.Logf("the candidate led %v after the fixed lease ran out", late)
			return redistest.LateVia("the head candidate led after the fixed lease ran out,", late, margin, expiry, led, np)
		})
	})
}

// A leader that dies (its network cut) is replaced as soon as its term's lease runs out: each
// renewal tells the first candidate when the lease now ends, so it campaigns again right
// after that, not up to a third of a lease later, nor at its place's next renewal.
func TestDeadLeaderIsReplacedAtItsExpiry(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A lease of 3 s, doubled at each attempt, and the margin with it: a candidate that
		// waited for its backstop would be late by a sixth of a lease or more, well over the
		// margin.
		redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
			margin := 350 * time.Millisecond * ttl / (3 * time.Second)
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithWaiterLease(30 * time.Second)}
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			leader := newElection(t, b.PodVia(t, prefix, net, opts...), "dead")
			np := b.Pod(t, prefix, opts...)
			next := newElection(t, np, "dead")
			campaign(t, leader, "a")
			termKey := key(prefix, "dead", "")
			dead, first, ok := termEnd(t, b, termKey)
			if !ok {
				return errors.New("the term was over when it was read after Campaign returned")
			}
			var term *election.Term // read once res has yielded
			res := redistest.Async(context.Background(), func(context.Context) error {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				var err error
				term, err = next.Campaign(ctx, "b")
				return err
			})
			// The candidate queues behind the leader, unless the leader's term lapsed first (a
			// loaded machine held its renewal up past the lease): then the candidate leads at
			// once, and this attempt shows nothing.
			var ids []string
			if !redistest.Eventually(30*time.Second, func() bool {
				if ids = queued(t, b, prefix, "dead"); len(ids) == 1 {
					return true
				}
				owner, _, ok := termEnd(t, b, termKey)
				return !ok || owner != dead
			}) {
				t.Fatalf("%d candidates queued, want 1: %v", len(ids), ids)
			}
			if len(ids) != 1 {
				if r := redistest.Await(t, res, 30*time.Second); r.Err == nil {
					resign(t, term)
				}
				return errors.New("the leader's term lapsed before the candidate queued")
			}
			// Past its second renewal, as Redis shows it: the lease now ends half a lease after
			// it did at first.
			if !redistest.Eventually(3*ttl, func() bool {
				owner, end, ok := termEnd(t, b, termKey)
				return !ok || owner != dead || !end.Before(first.Add(ttl/2))
			}) {
				t.Fatalf("the leader did not renew twice in %v", 3*ttl)
			}
			net.Cut()
			cut := time.Now()
			// Read after the cut: a renewal still on its way could only make the lease end later.
			owner, expiry, ok := termEnd(t, b, termKey)
			if !ok || owner != dead {
				// A loaded machine stalled the leader past its lease before the cut, or this
				// read past the lease.
				return fmt.Errorf("the leader's term was over when it was read after the cut (held by %q)", owner)
			}
			r := redistest.Await(t, res, ttl+20*time.Second)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			late := r.At.Sub(expiry)
			t.Logf("the candidate led %v after the dead leader's lease ran out (%v left at the cut)", late, expiry.Sub(cut))
			if late < 0 {
				t.Fatalf("the candidate led %v before the dead leader's lease ran out in Redis", -late)
			}
			resign(t, term)
			net.Restore()
			// The re-check at the expiry is one round trip: a reply that a busy server sent late
			// delays it (a miniredis serving every test of the package at once answered in 1.4 s).
			return redistest.LateVia("the candidate led after the dead leader's lease ran out,", late, margin, cut, r.At, np)
		})
	})
}

// A burst on an empty election: candidates, each its own process, campaign at the same
// instant while an observer watches; each winner but the last resigns 200 ms after it wins.
// Every candidate leads in turn, and none is left waiting while nobody leads (the issue's
// report: one Campaign still waiting 40 s later while Leader returned ErrNoLeader).
func TestBurstOnAnEmptyElection(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const candidates, rounds = 8, 3
		for r := range rounds {
			prefix := b.Prefix(t)
			pods := make([]*redistest.Pod, candidates)
			for i := range pods {
				pods[i] = b.Pod(t, prefix)
			}
			watcher := newElection(t, b.Pod(t, prefix), "burst")
			c := observe(t, watcher)
			start := make(chan struct{})
			var mu sync.Mutex
			led := 0
			var last *election.Term
			errs := make(chan error, candidates)
			for i, p := range pods {
				e := newElection(t, p, "burst")
				go func() {
					<-start
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					term, err := e.Campaign(ctx, fmt.Sprint("c", i))
					if err != nil {
						info, lerr := watcher.Leader(context.Background())
						errs <- fmt.Errorf("round %d: candidate %d: %w (Leader: %+v, %v)\n%s", r, i, err, info, lerr,
							redistest.Describe(pods[0].Raw, key(prefix, "burst", ""), key(prefix, "burst", "fence"),
								key(prefix, "burst", "q"), key(prefix, "burst", "qx"), key(prefix, "burst", "v")))
						return
					}
					mu.Lock()
					led++
					final := led == candidates
					if final {
						last = term
					}
					mu.Unlock()
					if !final {
						time.Sleep(200 * time.Millisecond)
						err = term.Resign(context.Background())
					}
					errs <- err
				}()
			}
			close(start)
			for range candidates {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			info, err := watcher.Leader(context.Background())
			if err != nil || info.Term != last.Token() {
				t.Fatalf("round %d: Leader = %+v, %v after every candidate led; want the last, term %d", r, info, err, last.Token())
			}
			c.waitFor(t, last.Value())
			c.checkOrder(t)
			resign(t, last)
		}
	})
}

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

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newElection(t *testing.T, p *redistest.Pod, name string, opts ...distsync.Option) *election.Election {
	t.Helper()
	e, err := election.New(p.H, name, opts...)
	if err != nil {
		t.Fatalf("election.New(%q): %v", name, err)
	}
	return e
}

func key(prefix, name, part string) string {
	k := prefix + "{" + name + "}:election"
	if part != "" {
		k += ":" + part
	}
	return k
}

func campaign(t *testing.T, e *election.Election, value string) *election.Term {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	term, err := e.Campaign(ctx, value)
	if err != nil {
		t.Fatalf("Campaign(%q): %v", value, err)
	}
	return term
}

func resign(t *testing.T, term *election.Term) {
	t.Helper()
	if err := term.Resign(context.Background()); err != nil {
		t.Fatalf("Resign: %v", err)
	}
}

// queued returns the candidates queued in Redis, in their order.
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

func waitQueued(t *testing.T, b *redistest.Backend, prefix, name string, n int) {
	t.Helper()
	waitQueuedOr(t, b, prefix, name, n, func() bool { return false })
}

// waitQueuedOr waits until n candidates are queued for the election name, or until stop
// returns true; it fails the test if neither happens within 30 s.
func waitQueuedOr(t *testing.T, b *redistest.Backend, prefix, name string, n int, stop func() bool) {
	t.Helper()
	var ids []string
	if !redistest.Eventually(30*time.Second, func() bool { ids = queued(t, b, prefix, name); return len(ids) == n || stop() }) {
		t.Fatalf("%d candidates queued, want %d: %v", len(ids), n, ids)
	}
}

// Candidates in three processes, three goroutines each (an Election value each), lead one at a time: the intervals
// in which each believed it led never overlap, and the terms increase in the order of the
// intervals.
func TestAtMostOneLeader(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		type interval struct {
			from, to time.Time
			term     int64
		}
		var (
			mu   sync.Mutex
			ivs  []interval
			errs = make(chan error, 9)
		)
		const rounds = 4
		for p := range 3 {
			pod := b.Pod(t, prefix)
			for g := range 3 {
				e := newElection(t, pod, "one") // a candidate each: an Election value is one
				go func() {
					for r := range rounds {
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						term, err := e.Campaign(ctx, fmt.Sprintf("p%d-g%d-r%d", p, g, r))
						cancel()
						if err != nil {
							errs <- err
							return
						}
						from := time.Now()
						time.Sleep(2 * time.Millisecond)
						to := time.Now()
						if err := term.Err(); err != nil {
							errs <- fmt.Errorf("term lost while leading: %w", err)
							return
						}
						mu.Lock()
						ivs = append(ivs, interval{from, to, term.Token()})
						mu.Unlock()
						if err := term.Resign(context.Background()); err != nil {
							errs <- err
							return
						}
					}
					errs <- nil
				}()
			}
		}
		for range 9 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		slices.SortFunc(ivs, func(a, b interval) int { return a.from.Compare(b.from) })
		if len(ivs) != 9*rounds {
			t.Fatalf("%d terms, want %d", len(ivs), 9*rounds)
		}
		for i := 1; i < len(ivs); i++ {
			if ivs[i].from.Before(ivs[i-1].to) {
				t.Errorf("terms %d and %d overlap: %v–%v and %v–%v", ivs[i-1].term, ivs[i].term,
					ivs[i-1].from, ivs[i-1].to, ivs[i].from, ivs[i].to)
			}
			if ivs[i].term <= ivs[i-1].term {
				t.Errorf("term %d follows term %d", ivs[i].term, ivs[i-1].term)
			}
		}
	})
}

// Resign hands leadership to the waiting candidate at once (well under the lease), and
// Leader and observers tell of the new leader.
func TestResignHandsOverPromptly(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		opts := []distsync.Option{distsync.WithLeaseTTL(20 * time.Second)}
		ap := b.Pod(t, prefix, opts...)
		a := newElection(t, ap, "resign")
		bp := b.Pod(t, prefix, append(opts, distsync.WithIdentity("candidate b:{1} \u00e9"))...)
		be := newElection(t, bp, "resign")
		ta := campaign(t, a, "a")
		info, err := be.Leader(context.Background())
		if err != nil || info.Value != "a" || info.Term != ta.Token() || info.TTL <= 0 {
			t.Fatalf("Leader = %+v, %v; want a with term %d", info, err, ta.Token())
		}
		got := make(chan *election.Term, 1)
		go func() {
			term, err := be.Campaign(context.Background(), "b")
			if err != nil {
				t.Error(err)
			}
			got <- term
		}()
		waitQueued(t, b, prefix, "resign", 1)
		start := time.Now()
		resign(t, ta)
		var tb *election.Term
		select {
		case tb = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("the candidate did not lead within 30 s of Resign (the lease is 20 s)")
		}
		led := time.Now()
		t.Logf("resign → new leader in %v", led.Sub(start))
		if tb == nil {
			t.FailNow()
		}
		// Well under the lease: within 2 s, plus what this process was stalled and the pods'
		// round trips took meanwhile (a busy machine once held the candidate's confirm 5 s).
		if err := redistest.LateVia("the candidate led after Resign,", led.Sub(start), 2*time.Second, start, led, ap, bp); err != nil {
			t.Fatal(err)
		}
		if tb.Token() <= ta.Token() {
			t.Errorf("the new term %d is not larger than %d", tb.Token(), ta.Token())
		}
		if !errors.Is(ta.Err(), distsync.ErrReleased) {
			t.Errorf("resigned term's Err = %v, want ErrReleased", ta.Err())
		}
		info, err = a.Leader(context.Background())
		if err != nil || info.Value != "b" || info.Term != tb.Token() || info.Handle != bp.H.ID() || info.Identity != bp.H.Identity() {
			t.Fatalf("Leader = %+v, %v; want b with term %d on handle %s (%s)", info, err, tb.Token(), bp.H.ID(), bp.H.Identity())
		}
		if err := ta.Resign(context.Background()); !errors.Is(err, distsync.ErrNotHeld) {
			t.Errorf("second Resign: %v, want ErrNotHeld", err)
		}
		if err := ta.Proclaim(context.Background(), "x"); !errors.Is(err, distsync.ErrNotHeld) {
			t.Errorf("Proclaim after Resign: %v, want ErrNotHeld", err)
		}
		resign(t, tb)
		if _, err := a.Leader(context.Background()); !errors.Is(err, election.ErrNoLeader) {
			t.Errorf("Leader after the last resign: %v, want ErrNoLeader", err)
		}
		if ks := b.KeysWithoutTTL(t, prefix); len(ks) > 0 {
			t.Errorf("keys without a TTL: %v", ks)
		}
	})
}

// A leader cut off from Redis is replaced once its lease has lapsed, not before; it learns of
// the loss, its Resign reports an error (it is not told it resigned), and its term is smaller
// than its successor's.
func TestCutOffLeaderIsReplaced(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A lease of a second, doubled at each attempt: a stall that outlasted the lease
		// before the cut spoils an attempt, not the next.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			a := newElection(t, b.PodVia(t, prefix, net, distsync.WithLeaseTTL(ttl)), "cut")
			// The successor's lease is long: a stall of a loaded machine must not end its term
			// before the test is done with it.
			be := newElection(t, b.Pod(t, prefix, distsync.WithLeaseTTL(20*time.Second)), "cut")
			ta := campaign(t, a, "a")
			got := make(chan *election.Term, 1)
			go func() {
				term, err := be.Campaign(context.Background(), "b")
				if err != nil {
					t.Error(err)
				}
				got <- term
			}()
			var ids []string
			if !redistest.Eventually(30*time.Second, func() bool {
				ids = queued(t, b, prefix, "cut")
				return len(ids) == 1 || ta.Err() != nil
			}) {
				t.Fatalf("%d candidates queued, want 1: %v", len(ids), ids)
			}
			net.Cut()
			cut := time.Now()
			if err := ta.Err(); err != nil {
				return fmt.Errorf("the leader's term ended before the cut: %w", err)
			}
			// No renewal gets through from now on: the old lease is in Redis until at least
			// its local deadline (counted from when its last renewal that succeeded was sent).
			deadline := ta.Lease().Deadline()
			var tb *election.Term
			select {
			case tb = <-got:
			case <-time.After(15 * time.Second):
				t.Fatalf("no new leader within 15 s of cutting off a leader with a %v lease", ttl)
			}
			led := time.Now()
			t.Logf("leader cut off → new leader in %v (lease %v, %v left at the cut)", led.Sub(cut), ttl, deadline.Sub(cut))
			if tb == nil {
				t.FailNow()
			}
			if led.Before(deadline) {
				t.Errorf("the new leader led %v after the cut, %v before the old lease's deadline", led.Sub(cut), deadline.Sub(led))
			}
			select {
			case <-ta.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the cut-off leader was not told of its loss")
			}
			if !errors.Is(ta.Err(), distsync.ErrLost) {
				t.Errorf("cut-off term's Err = %v, want ErrLost", ta.Err())
			}
			if tb.Token() <= ta.Token() {
				t.Errorf("successor's term %d is not larger than %d", tb.Token(), ta.Token())
			}
			if err := ta.Proclaim(context.Background(), "still me"); !errors.Is(err, distsync.ErrLost) {
				t.Errorf("Proclaim by the deposed leader: %v, want ErrLost", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			if err := ta.Resign(ctx); err == nil {
				t.Error("Resign of a deposed leader returned nil")
			}
			info, err := be.Leader(context.Background())
			if err != nil || info.Value != "b" {
				t.Errorf("Leader = %+v, %v; want b", info, err)
			}
			resign(t, tb)
			return nil
		})
	})
}

// A leader whose Redis cannot be reached learns that Resign failed: it is not told it
// resigned, and the term ends as lost at its local deadline (it no longer renews, and the
// background retries do not keep it), so that it stops acting as the leader no later than
// Redis may let another candidate lead.
func TestResignThatFailsIsReported(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 3 * time.Second
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			a := newElection(t, b.PodVia(t, prefix, net, distsync.WithLeaseTTL(ttl)), "fail")
			ta := campaign(t, a, "a")
			net.Cut()
			deadline := ta.Lease().Deadline() // no renewal gets through from now on
			// Resign a second before the deadline: the background retries go on for a whole
			// lease after it, two seconds past the deadline.
			time.Sleep(time.Until(deadline.Add(-time.Second)))
			if left := time.Until(deadline); left < time.Second/2 {
				// The term may already be over: its end would tell nothing of Resign's.
				return fmt.Errorf("slept until %v before the term's deadline, want a second", left)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := ta.Resign(ctx)
			if err == nil {
				t.Fatal("Resign with Redis unreachable returned nil")
			}
			t.Logf("Resign: %v", err)
			select {
			case <-ta.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the term did not end after a failed Resign")
			}
			ended := time.Now()
			if !errors.Is(ta.Err(), distsync.ErrLost) {
				t.Errorf("a term whose Resign never reached Redis ended with %v, want ErrLost", ta.Err())
			}
			net.Restore()
			return redistest.Late("the term ended, after its local deadline,", ended.Sub(deadline), time.Second, deadline, ended)
		})
	})
}

// A Campaign that cannot reach Redis waits for it rather than returning the connection error,
// on both of its paths for a value that leads already: a term still led is proclaimed once
// Redis answers (the same term, the new value), and a term whose Resign failed is not led any
// more: the Campaign waits for, and wins, a new term (a fault checker caught Campaign
// returning "proclaim: connection refused" after a Resign during a restart of Redis).
func TestCampaignWaitsOutAnUnreachableRedis(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		net := redistest.NewNetwork()
		t.Cleanup(net.Restore)
		a := newElection(t, b.PodVia(t, prefix, net, distsync.WithLeaseTTL(time.Minute)), "unreachable")
		ta := campaign(t, a, "a")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		type result struct {
			term *election.Term
			err  error
		}
		// while cut returns what a Campaign of value did while the network was cut, and
		// then once the network was back; before is done while the network is cut.
		while := func(value string, before func()) result {
			net.Cut()
			before()
			done := make(chan result, 1)
			go func() {
				term, err := a.Campaign(ctx, value)
				done <- result{term, err}
			}()
			select {
			case r := <-done:
				net.Restore()
				t.Fatalf("Campaign(%q) with Redis unreachable returned %v, %v; want it to wait", value, r.term, r.err)
			case <-time.After(500 * time.Millisecond):
			}
			net.Restore()
			return <-done
		}
		r := while("b", func() {})
		if r.err != nil || r.term != ta || r.term.Value() != "b" {
			t.Fatalf("Campaign(b) of the leader = %v (value %q), %v; want its own term, proclaimed", r.term, r.term.Value(), r.err)
		}
		r = while("c", func() {
			rctx, rcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer rcancel()
			if err := ta.Resign(rctx); err == nil {
				t.Fatal("Resign with Redis unreachable returned nil")
			}
			if err := ta.Proclaim(context.Background(), "x"); !errors.Is(err, distsync.ErrNotHeld) {
				t.Errorf("Proclaim after a Resign = %v, want ErrNotHeld", err)
			}
		})
		if r.err != nil {
			t.Fatalf("Campaign(c) after a failed Resign: %v", r.err)
		}
		if r.term == ta || r.term.Token() <= ta.Token() || r.term.Value() != "c" {
			t.Errorf("Campaign(c) after a failed Resign = term %d (value %q), want a new term after %d", r.term.Token(), r.term.Value(), ta.Token())
		}
		resign(t, r.term)
	})
}

// A leader's term is read from the record, not from the fence key, which may expire during a
// long term (its retention counts from the last acquisition).
func TestLeaderTermOutlivesTheFenceKey(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := b.Pod(t, prefix, distsync.WithFenceRetention(100*time.Millisecond))
		e := newElection(t, p, "fence")
		term, ok, err := e.TryCampaign(context.Background(), "v")
		if err != nil || !ok {
			t.Fatalf("TryCampaign = %v, %v", ok, err)
		}
		if !redistest.Eventually(5*time.Second, func() bool {
			n, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Exists().Key(key(prefix, "fence", "fence")).Build()
			}).AsInt64()
			return n == 0
		}) {
			t.Fatal("the fence key did not expire")
		}
		info, err := e.Leader(context.Background())
		if err != nil || info.Term != term.Token() {
			t.Fatalf("Leader = %+v, %v; want term %d", info, err, term.Token())
		}
		c := observe(t, e)
		c.waitFor(t, "v")
		c.mu.Lock()
		first := c.infos[0]
		c.mu.Unlock()
		if first.Term != term.Token() {
			t.Errorf("the observer's first Info has term %d, want %d", first.Term, term.Token())
		}
		resign(t, term)
	})
}

// A candidate whose context ends leaves no queue entry, no value and no key behind.
func TestCancelledCandidateLeavesNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		a := newElection(t, b.Pod(t, prefix), "cancel")
		cp := b.Pod(t, prefix)
		c := newElection(t, cp, "cancel")
		ta := campaign(t, a, "leader")
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() {
			_, err := c.Campaign(ctx, "candidate-value")
			res <- err
		}()
		waitQueued(t, b, prefix, "cancel", 1)
		cancelled := time.Now()
		cancel()
		err := <-res
		took := time.Since(cancelled)
		if !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Campaign: %v, want ErrNotAcquired and context.Canceled", err)
		}
		// The leave is done before Campaign returns unless Redis did not answer it within a
		// second (a stalled machine): then the Handle finishes it in the background.
		if q := queued(t, b, prefix, "cancel"); len(q) != 0 {
			if took < 900*time.Millisecond {
				t.Errorf("queue after the cancel, which returned in %v: %v", took, q)
			} else if !redistest.Eventually(15*time.Second, func() bool { return len(queued(t, b, prefix, "cancel")) == 0 }) {
				t.Errorf("queue 15 s after the cancel, which returned in %v: %v", took, queued(t, b, prefix, "cancel"))
			}
		}
		vals, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Hgetall().Key(key(prefix, "cancel", "v")).Build()
		}).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		for f, v := range vals {
			if v == "candidate-value" || strings.HasPrefix(f, cp.H.ID()) {
				t.Errorf("the cancelled candidate left %q = %q", f, v)
			}
		}
		resign(t, ta)
		// A Term the cancelled candidate might have been handed went on; nobody leads.
		if _, err := c.Leader(context.Background()); !errors.Is(err, election.ErrNoLeader) {
			t.Errorf("Leader: %v, want ErrNoLeader", err)
		}
		for _, k := range b.Keys(t, prefix) {
			if strings.HasSuffix(k, ":q") || strings.HasSuffix(k, ":election") {
				t.Errorf("key %s left", k)
			}
		}
	})
}

// TryCampaign leads only when nobody leads or waits, and a failed try leaves nothing.
func TestTryCampaign(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		a := newElection(t, b.Pod(t, prefix), "try")
		c := newElection(t, b.Pod(t, prefix), "try")
		ta, ok, err := a.TryCampaign(context.Background(), "a")
		if err != nil || !ok || ta == nil {
			t.Fatalf("TryCampaign on a free election = %v, %v, %v", ta, ok, err)
		}
		tc, ok, err := c.TryCampaign(context.Background(), "c")
		if err != nil || ok || tc != nil {
			t.Fatalf("TryCampaign while a leads = %v, %v, %v; want nil, false, nil", tc, ok, err)
		}
		info, err := c.Leader(context.Background())
		if err != nil || info.Value != "a" {
			t.Fatalf("Leader = %+v, %v; want a", info, err)
		}
		if err := ta.Proclaim(context.Background(), "a2"); err != nil {
			t.Fatal(err)
		}
		if info2, err := c.Leader(context.Background()); err != nil || info2.Value != "a2" || info2.Term != info.Term || info2.Rev <= info.Rev {
			t.Fatalf("Leader after Proclaim = %+v, %v; want a2 in term %d with a larger Rev than %d", info2, err, info.Term, info.Rev)
		}
		if ta.Value() != "a2" {
			t.Errorf("Term.Value = %q, want a2", ta.Value())
		}
		resign(t, ta)
	})
}

// Bad input is refused at once.
func TestBadInput(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		p := b.Pod(t, b.Prefix(t))
		if _, err := election.New(p.H, ""); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New with an empty name: %v, want ErrInvalid", err)
		}
		if _, err := election.New(p.H, "x", distsync.WithLeaseTTL(0)); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New with a zero lease: %v, want ErrInvalid", err)
		}
		if _, err := election.New(p.H, "x", distsync.WithHandoffWindow(time.Second)); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New with a mutex-only option: %v, want ErrInvalid", err)
		}
		if _, err := election.New(nil, "x"); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New on a nil Handle: %v, want ErrInvalid", err)
		}
		e := newElection(t, p, "bad")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := e.Campaign(ctx, "v"); !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Errorf("Campaign with a done ctx: %v", err)
		}
	})
}

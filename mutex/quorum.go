package mutex

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/internal/scripts"
)

// options are the mutex package's own settings.
type options struct {
	quorum []*distsync.Handle
}

// WithQuorum makes the Mutex a lock on a quorum of independent Redis primaries (Redlock): the
// New call's Handle and others, each wrapping a client of its own primary (not replicas of
// one another, and not nodes of one Cluster). A Lock holds the mutex once it holds it on a
// majority of them (2 of 3, 3 of 5), so that losing a minority of the primaries (a crash, a
// failover that loses writes, a partition) neither blocks the lock nor lets two processes hold
// it. Give the same primaries, in any order, to every process that shares the name.
//
// How it works, and what it costs and promises:
//   - Lock takes the mutex on every primary at once, each as a plain Mutex would (waiting in
//     that primary's queue, woken by its pub/sub). Once it holds a majority it gives up the
//     rest. Holding some but not a majority for [QuorumWait] plus a random part of it means the
//     others are held elsewhere (by a holder of a majority, or by contenders that split the
//     primaries with it): it gives back what it holds, so that the next waiter there may
//     complete its majority, and attempts those primaries again only once it gains one it still
//     waits for. A waiter therefore does not take and give back a free primary again and again
//     while a holder keeps the others; the cost of a split is one such exchange per contender.
//   - The hold is a [distsync.Lease] over the majority: each primary's claim is renewed by its
//     own Handle; the lease ends, with [distsync.ErrLost], as soon as fewer than a majority of
//     the claims are held (each claim's validity is counted on the client's monotonic clock from
//     when its acquire was sent, less the drift allowance, so the lease's validity is the TTL
//     less the time the acquisition took), and then gives back the claims it still has. Its
//     Deadline is the majority's earliest. It ends with [distsync.ErrClosed] when a Handle of the
//     quorum closes and takes the majority with it, or when the Mutex's own Handle closes.
//   - Its fencing token is the largest of the majority's tokens; before Lock returns, each
//     primary of the majority raises its fencing counter to it (a primary that does not answer
//     the raise in time is left out). Two holders in turn share at least one primary; while that
//     primary keeps its fence key, it hands the later holder a larger token. If it lost the key
//     (restarted empty, or failed over before the raise replicated), its next token is its
//     server time in µs, larger than the earlier holder's unless the primaries' clocks disagree
//     by more than the time between the two holds.
//   - Unlock releases every primary that still had the claim at once and waits for them; a
//     primary where the claim was already lost (down, paused) is cleaned up in the background.
//     If fewer than a majority still had the claim when it was released, Unlock returns an error
//     matching [distsync.ErrNotHeld] and [distsync.ErrLost], as a plain Mutex's does.
//   - A Lock that cannot reach a majority (two of three primaries down) waits, and ends when ctx
//     does with an error matching [distsync.ErrNotAcquired] that says how many primaries it held
//     at most; it gives back what it held (a claim whose reply comes after Lock returned is given
//     back by itself). Errors other than waiting (a Redis error on more primaries than a majority
//     allows) end it at once.
//
// The quorum is that of the primaries the Mutex was made with; at least 3 (others: at least 2),
// each Handle once. Holders reports the holders that a majority of the primaries report.
// Options given with WithQuorum apply to every primary's claim.
//
// Applies to: mutex.
func WithQuorum(others ...*distsync.Handle) distsync.Option {
	return api.Option(core.ExtOpt("WithQuorum", []string{kind.Mutex},
		func(o *options) { o.quorum = append([]*distsync.Handle{}, others...) }))
}

// QuorumWait is how long a Lock on a quorum (see [WithQuorum]) that holds some primaries waits
// for the others before it gives them all back and tries again, and the bound of the random
// wait before it does.
const QuorumWait = 50 * time.Millisecond

// quorumLock is the lock of a Mutex made WithQuorum.
type quorumLock struct {
	p     core.Prim
	name  string
	c     *core.Handle // the Handle the Mutex was made with (p.H): the quorum's lease lives on it
	ms    []*single    // one plain lock per primary; ms[0] on c
	need  int
	ttl   time.Duration
	renew bool

	turn chan struct{} // capacity 1: held by the goroutine that holds the lock or is taking it

	mu    sync.Mutex
	lease *core.Lease // the current hold, nil when not held
	held  []int       // the primaries (indexes of ms) of the current hold
}

func newQuorum(p core.Prim, set core.Settings, others []*distsync.Handle) (*quorumLock, error) {
	c, name := p.H, p.Name
	hs := []*core.Handle{c}
	for _, h := range others {
		oc, err := api.Core(h, kind.Mutex)
		if err != nil {
			return nil, fmt.Errorf("mutex %q: WithQuorum: %w", name, err)
		}
		if slices.Contains(hs, oc) {
			return nil, fmt.Errorf("mutex %q: %w: WithQuorum: a Handle is given twice", name, distsync.ErrInvalid)
		}
		hs = append(hs, oc)
	}
	if len(hs) < 3 {
		return nil, fmt.Errorf("mutex %q: %w: WithQuorum needs at least 3 primaries (2 other Handles), got %d", name, distsync.ErrInvalid, len(hs))
	}
	q := &quorumLock{p: p, name: name, c: c, need: len(hs)/2 + 1, ttl: set.LeaseTTL, renew: !set.Fixed, turn: make(chan struct{}, 1)}
	for _, h := range hs {
		ks, err := h.Space(kind.Mutex, name, set.LeaseTTL)
		if err != nil {
			return nil, err
		}
		q.ms = append(q.ms, newSingle(h, c, name, set, ks))
	}
	return q, nil
}

func (q *quorumLock) notAcquired(err error, why string) error {
	if err == nil {
		err = errors.New("no majority of the primaries could be held")
	}
	if why != "" {
		return fmt.Errorf("mutex %q: %w: %w (%s)", q.name, distsync.ErrNotAcquired, err, why)
	}
	return fmt.Errorf("mutex %q: %w: %w", q.name, distsync.ErrNotAcquired, err)
}

// lock is Lock of a quorum Mutex.
func (q *quorumLock) lock(ctx context.Context) (*core.Lease, error) {
	return q.p.Wait(ctx, core.One, "lock", q.wait)
}

// tryLock is TryLock of a quorum Mutex.
func (q *quorumLock) tryLock(ctx context.Context) (*core.Lease, bool, error) {
	return q.p.Try(ctx, core.One, "trylock", q.try1)
}

// wait takes the quorum, waiting for a majority.
func (q *quorumLock) wait(ctx context.Context) (*core.Lease, error) {
	select {
	case q.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, q.notAcquired(ctx.Err(), "")
	case <-q.c.Done():
		return nil, fmt.Errorf("mutex %q: %w", q.name, distsync.ErrClosed)
	}
	for {
		l, why, err := q.gather(ctx, false)
		switch {
		case l != nil:
			return l, nil
		case err != nil:
			<-q.turn
			return nil, err
		case ctx.Err() != nil:
			<-q.turn
			return nil, q.notAcquired(ctx.Err(), why)
		}
		// Gathered without a majority to show for it while ctx goes on: the majority's
		// claims lapsed, or their fencing counters could not be raised, before the hold was
		// made (a primary restarted or stalled meanwhile), or the primaries that answered
		// refused. Lock waits until ctx ends: gather again, after a random pause of up to
		// QuorumWait so that contenders that failed together do not retry in step.
		q.c.Log().Debug("distsync: quorum lock gathered no majority, gathering again", "mutex", q.name, "why", why)
		select {
		case <-time.After(time.Duration(rand.Int64N(int64(QuorumWait)))):
		case <-ctx.Done():
			<-q.turn
			return nil, q.notAcquired(ctx.Err(), why)
		case <-q.c.Done():
			<-q.turn
			return nil, fmt.Errorf("mutex %q: %w", q.name, distsync.ErrClosed)
		}
	}
}

// try1 is one attempt on every primary, none waiting.
func (q *quorumLock) try1(ctx context.Context) (*core.Lease, bool, error) {
	select {
	case q.turn <- struct{}{}:
	default:
		return nil, false, nil // held, or being taken, by a goroutine of this process
	}
	l, _, err := q.gather(ctx, true)
	switch {
	case l != nil:
		return l, true, nil
	case err != nil:
		<-q.turn
		return nil, false, err
	case ctx.Err() != nil:
		<-q.turn
		return nil, false, q.notAcquired(ctx.Err(), "")
	}
	<-q.turn
	return nil, false, nil
}

// gather takes a majority of the primaries and returns the quorum's lease; or nil, having given
// back whatever it took, with why (for an error message) when ctx ends or (try) the one
// attempt on each primary is over, and an error when the majority cannot be had (a closed
// Handle, or errors other than waiting on more primaries than a majority allows).
//
// It attempts every primary at once, each a plain Lock that waits in that primary's queue and is
// woken by its pub/sub. Holding some primaries but not a majority for a while (QuorumWait, plus
// a random part so that contenders do not act in step) means the rest are held elsewhere: by a
// holder of a majority, or by contenders that split the primaries with this one. It then gives
// back what it holds (each is handed to the next waiter in that primary's queue, which may
// complete another contender's majority) and parks those primaries: it attempts them again
// only once it gains a primary it waits for, so a free primary is not taken and given back
// again and again while a holder keeps the others (no polling).
func (q *quorumLock) gather(ctx context.Context, try bool) (*core.Lease, string, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &gathering{q: q, try: try, rctx: rctx, results: make(chan attempted, len(q.ms)),
		state: make([]primaryState, len(q.ms)), began: time.Now()}
	for i := range q.ms {
		g.attempt(i)
	}
	if try {
		g.split = time.After(QuorumWait) // a primary that does not answer must not hold up a TryLock
	}
	for stop := false; !stop && g.count(pending) > 0; {
		select {
		case r := <-g.results:
			stop = g.took(r)
		case <-g.split:
			stop = g.splitUp()
		case <-g.grace:
			stop = true
		case <-ctx.Done():
			stop = true
		}
	}
	cancel()
	got := g.decide()
	why := fmt.Sprintf("held on %d of %d primaries at most, fewer than the quorum of %d", g.most, len(q.ms), q.need)
	if len(got) >= q.need && ctx.Err() == nil {
		if l := q.hold(ctx, got); l != nil {
			return l, "", nil
		}
		return nil, "the quorum's claims lapsed or their fencing counters could not be raised in time", nil
	}
	q.giveBack(got)
	if ctx.Err() == nil && g.count(out) > len(q.ms)-q.need && len(g.errs) > 0 {
		return nil, why, fmt.Errorf("a quorum of %d of %d primaries cannot be had: %w", q.need, len(q.ms), errors.Join(g.errs...))
	}
	return nil, why, nil
}

// raiseTimeout bounds the raise of the fencing counters: a primary that does not answer in time
// is left out of the quorum (and given back), rather than hold up the Lock.
const raiseTimeout = 4 * QuorumWait

// hold makes the quorum lease of the primaries in got, after raising each one's fencing
// counter to the largest of their tokens; nil, with everything given back, if fewer than a
// majority are still held afterwards.
func (q *quorumLock) hold(ctx context.Context, got []int) *core.Lease {
	var token int64
	for _, i := range got {
		if l := q.ms[i].current(); l != nil {
			token = max(token, l.Token())
		}
	}
	arg := strconv.FormatInt(token, 10)
	raised := make([]bool, len(q.ms))
	rctx, cancel := context.WithTimeout(ctx, raiseTimeout)
	var wg sync.WaitGroup
	for _, i := range got {
		m := q.ms[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := scripts.FenceRaiseArgs{Fence: m.fence, Token: arg, FenceTTL: m.fenceArg}.Exec(rctx, m.c.Client).Error()
			raised[i] = err == nil
		}()
	}
	wg.Wait()
	cancel()
	var members []*core.Lease
	var held, drop []int
	for _, i := range got {
		if l := q.ms[i].current(); l != nil && raised[i] && l.Err() == nil {
			members = append(members, l)
			held = append(held, i)
		} else {
			drop = append(drop, i)
		}
	}
	if len(members) < q.need {
		q.giveBack(got)
		return nil
	}
	go q.giveBack(drop) // a primary that did not answer the raise may not answer its release either
	l := q.c.Quorum(members, q.need, token, q.ttl, q.renew)
	if l.Err() != nil {
		q.giveBack(held)
		return nil
	}
	q.mu.Lock()
	q.lease, q.held = l, held
	q.mu.Unlock()
	// A quorum lease that ends other than by Unlock (lost, or its Handle closed) gives back the
	// claims it still has at once: left renewed, they would keep others from a majority.
	context.AfterFunc(l.Context(), func() {
		if errors.Is(l.Err(), distsync.ErrReleased) {
			return
		}
		q.mu.Lock()
		if q.lease != l {
			q.mu.Unlock()
			return
		}
		back := q.held
		q.held = nil
		q.mu.Unlock()
		q.giveBack(back)
	})
	return l
}

// giveBack unlocks the primaries in idx, at once, and returns when each is done (or has been
// handed to the Handle's background clean-up).
func (q *quorumLock) giveBack(idx []int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	unlockEach(ctx, q.ms, idx)
}

// unlock is Unlock of a quorum Mutex.
func (q *quorumLock) unlock(ctx context.Context) error {
	q.mu.Lock()
	l, held := q.lease, q.held
	q.lease, q.held = nil, nil
	q.mu.Unlock()
	if l == nil {
		return fmt.Errorf("mutex %q: unlock of unlocked mutex: %w", q.name, distsync.ErrNotHeld)
	}
	lost := l.Err()
	l.End(distsync.ErrReleased) // first: the members' releases below must not read as a loss
	// Unlock waits for the primaries where the hold was still held. Where it was lost already
	// (the primary is down or paused, most likely), nothing is held to give back: the clean-up
	// is sent in the background, bounded by a lease, rather than hold up Unlock.
	var live []int
	for _, i := range held {
		if m := q.ms[i].current(); m != nil && m.Err() == nil {
			live = append(live, i)
			continue
		}
		go func() {
			bctx, cancel := context.WithTimeout(context.Background(), q.ttl)
			defer cancel()
			_ = q.ms[i].give(bctx)
		}()
	}
	errs := unlockEach(ctx, q.ms, live)
	<-q.turn
	if lost != nil {
		return fmt.Errorf("mutex %q: unlock: %w: %w", q.name, distsync.ErrNotHeld, lost)
	}
	released, gone := 0, 0
	var failed []error
	for _, err := range errs {
		switch {
		case err == nil:
			released++
		case errors.Is(err, distsync.ErrLost):
			gone++ // the release found the claim gone or taken
		default:
			failed = append(failed, err)
		}
	}
	if len(held)-len(live)+gone > len(held)-q.need {
		// Fewer than a majority still had the claim when it was released: another process may
		// have held a majority meanwhile.
		return fmt.Errorf("mutex %q: unlock: %w: %w: released on %d of %d primaries, fewer than the quorum of %d",
			q.name, distsync.ErrNotHeld, distsync.ErrLost, released, len(q.ms), q.need)
	}
	if released < q.need && len(failed) > 0 {
		// The rest is retried in the background, or lapses with its lease.
		return fmt.Errorf("mutex %q: unlock: %w", q.name, errors.Join(failed...))
	}
	return nil
}

// holders is Holders of a quorum Mutex: the holds that a majority of the primaries report,
// matched by the Handle that took them (every primary's claim of one hold carries the id of
// the Handle its Mutex was made with). Token is the largest of the primaries' and Remaining
// the majority's shortest. The primaries are asked at once; a primary that does not answer
// holds it up until ctx ends.
func (q *quorumLock) holders(ctx context.Context) ([]core.HolderInfo, error) {
	type seen struct {
		h    core.HolderInfo
		n    int
		left []time.Duration
	}
	by := map[string]*seen{}
	var order []string
	answered := 0
	var errs []error
	all := make([][]core.HolderInfo, len(q.ms))
	errOf := make([]error, len(q.ms))
	var wg sync.WaitGroup
	for i, m := range q.ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			all[i], errOf[i] = m.holders(ctx)
		}()
	}
	wg.Wait()
	for i := range q.ms {
		hs, err := all[i], errOf[i]
		if err != nil {
			errs = append(errs, err)
			continue
		}
		answered++
		for _, h := range hs {
			s := by[h.Handle]
			if s == nil {
				s = &seen{h: h}
				by[h.Handle] = s
				order = append(order, h.Handle)
			}
			s.n++
			s.h.Token = max(s.h.Token, h.Token)
			s.left = append(s.left, h.Remaining)
		}
	}
	if answered < q.need {
		return nil, fmt.Errorf("mutex %q: holders: %d of %d primaries answered, fewer than the quorum of %d: %w", q.name, answered, len(q.ms), q.need, errors.Join(errs...))
	}
	var out []core.HolderInfo
	for _, k := range order {
		s := by[k]
		if s.n < q.need {
			continue
		}
		slices.SortFunc(s.left, func(a, b time.Duration) int { return int(b - a) })
		s.h.Remaining = s.left[q.need-1]
		out = append(out, s.h)
	}
	return out, nil
}

// Package election is leader election across processes, on Redis, in the shape of etcd's
// concurrency.Election: candidates [Election.Campaign] and the first to arrive leads; the
// others wait, in the order they arrived, and the next one leads the moment the leader
// resigns or its term ends. Anyone can ask who leads ([Election.Leader]) or follow every
// change ([Election.Observe]).
//
// A leader's [Term] is a lease, renewed by the Handle while the leader's process runs. Its
// [Term.Token] is a fencing token: strictly larger for every new term, so that whatever the
// leader writes can refuse a deposed leader's late writes. Its [Term.Done] is closed when the
// term ends: resigned, or lost because its lease lapsed (the process was frozen, or cut off
// from Redis, for longer than the lease) — a leader that was paused learns that it was
// deposed from its first look at the term, and its successor's token is larger than its own.
//
// The queue of candidates is the one of package fair: one entry per waiting candidate,
// strict arrival order, the hand-off done inside Redis (the next leader is woken alone, and
// its Campaign returns after one round trip that records it as the leader), and every
// candidate keeping a short lease on its place ([distsync.DefaultWaiterLease]), so that a
// candidate whose process died is skipped within that lease. [Election.Leader] and
// [Election.Observe] name a new leader only once its Campaign holds the term and has recorded
// it: never a candidate that died before it could, nor one whose take came too late to use.
// A candidate whose context ends leaves the queue before Campaign returns, and leaves nothing
// in Redis; if Redis does not answer that leave within a second, the Handle finishes it in
// the background (and the candidate's place lapses with its waiter lease in any case).
// Nobody polls: candidates and observers are woken by pub/sub.
package election

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/fifo"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/internal/scripts"
)

// ErrNoLeader is returned (wrapped with the election's name) by [Election.Leader] when nobody
// leads.
var ErrNoLeader = errors.New("no leader")

// Election is one candidate in an election, which every process that uses the same name on
// the same Redis shares. Make it with [New] (it costs no round trip); it is safe for
// concurrent use and must not be copied. As an etcd Election is one session's candidacy, an
// Election value is one candidate: a Campaign while it leads returns its [Term], and its
// Campaigns wait for each other (see [Election.Campaign]). Goroutines or components that
// must take turns leading use an Election value each.
type Election struct {
	c *core.Handle
	l *fifo.Lock

	// turn lets one Campaign of this value at a time run in Redis (a one-slot semaphore, so
	// that a Campaign waiting for it can give up with its context).
	turn chan struct{}
	mu   sync.Mutex
	term *Term // the last term this value won (it may have ended since)
}

// New returns the election called name. It sends nothing to Redis. Its options are
// [distsync.WithLeaseTTL] (the term's lease), [distsync.WithFixedLease] and
// [distsync.WithWaiterLease] (a candidate's place). It returns an error matching
// [distsync.ErrInvalid] for an empty name, a bad option value, or an option that does not
// apply to an election.
func New(h *distsync.Handle, name string, opts ...distsync.Option) (*Election, error) {
	p, set, ks, err := api.Setup(h, kind.Election, name, opts, nil)
	if err != nil {
		return nil, err
	}
	return &Election{c: p.H, l: fifo.New(p, set, ks, true), turn: make(chan struct{}, 1)}, nil
}

// Name returns the name the election was made with.
func (e *Election) Name() string { return e.l.Name() }

// Campaign makes the caller a candidate with value (what [Election.Leader] and observers see
// while it leads) and waits, without polling, until it leads or ctx ends: candidates lead in
// the order their Campaign reached Redis. On success it returns the [Term]; the caller leads
// until it resigns or the term is lost. If ctx ends first it returns an error matching both
// [distsync.ErrNotAcquired] and ctx.Err(), having left the queue (passing leadership on if it
// was just handed to it). Connection errors are retried while waiting; other Redis errors end
// the wait and are returned.
//
// An Election value is one candidate, as etcd's is. If it leads already, Campaign returns its
// Term at once, having proclaimed value if it differs ([Term.Proclaim], tried again while
// Redis cannot be reached, until ctx ends): a leader that campaigns again (it retries after
// an error it did not understand, say) never waits behind its own term. A term whose Resign
// has begun is not led any more, even while that Resign goes on in the background: Campaign
// then waits for a new term. Campaigns of one value run one at a time: one that starts while
// another waits, waits for it, and then returns the Term it won (proclaiming its own value)
// or, if it gave up, campaigns itself. The Term is shared: a Resign through any of them ends it.
func (e *Election) Campaign(ctx context.Context, value string) (*Term, error) {
	if err := e.take(ctx); err != nil {
		return nil, err
	}
	defer func() { <-e.turn }()
	if t, ok, err := e.again(ctx, value); ok {
		return t, err
	}
	l, err := e.l.Acquire(ctx, value)
	if err != nil {
		return nil, err
	}
	return e.won(l, value), nil
}

// TryCampaign leads if nobody leads or waits to, without waiting. It returns the [Term] and
// true if the caller now leads, and nil and false, with a nil error, if someone else leads or
// waits (a Campaign of this Election value that waits counts). If this Election value leads
// already, it returns its Term and true, having proclaimed value, as Campaign does. ctx bounds
// the one round trip; if it ends first TryCampaign returns its error (matching
// [distsync.ErrNotAcquired]) and makes sure the attempt takes nothing.
func (e *Election) TryCampaign(ctx context.Context, value string) (*Term, bool, error) {
	select {
	case e.turn <- struct{}{}:
	default:
		return nil, false, nil // a Campaign of this value waits
	}
	defer func() { <-e.turn }()
	if t, ok, err := e.again(ctx, value); ok {
		return t, err == nil, err
	}
	l, ok, err := e.l.TryAcquire(ctx, value)
	if !ok {
		return nil, false, err
	}
	return e.won(l, value), true, nil
}

// take waits for this value's turn to campaign.
func (e *Election) take(ctx context.Context) error {
	select {
	case e.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("election %q: %w: %w", e.Name(), distsync.ErrNotAcquired, ctx.Err())
	case <-e.c.Done():
		return fmt.Errorf("election %q: %w", e.Name(), distsync.ErrClosed)
	}
}

// again is a campaign of a value that leads already: it proclaims value and returns the
// term, and ok. If the value does not lead (its last term ended, or Redis says the term is
// over), ok is false: the caller campaigns.
func (e *Election) again(ctx context.Context, value string) (*Term, bool, error) {
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	if t == nil || t.Err() != nil || t.resigned.Load() {
		return nil, false, nil
	}
	if t.Value() == value {
		return t, true, nil
	}
	// Campaign waits out what Redis did not refuse: a proclaim that could not reach Redis is
	// tried again until it does, the term ends (then the value campaigns anew) or ctx ends.
	for backoff := 10 * time.Millisecond; ; {
		err := t.Proclaim(ctx, value)
		switch {
		case err == nil:
			return t, true, nil
		case errors.Is(err, distsync.ErrNotHeld):
			return nil, false, nil // the term was over: campaign anew
		case !core.RetryAfter(ctx, &backoff, err):
			return nil, true, err
		}
	}
}

// won records a term this value won.
func (e *Election) won(l *core.Lease, value string) *Term {
	t := &Term{e: e, l: l, value: value}
	e.mu.Lock()
	e.term = t
	e.mu.Unlock()
	return t
}

// Info describes a leader.
type Info struct {
	// Value is the leader's value: its Campaign's, or its last Proclaim's.
	Value string
	// Term is the leader's term: its fencing token, larger for every new leader.
	Term int64
	// Rev counts the announcements of the election (new leaders and new values) while its
	// record lives: within one Term, a larger Rev is a later Value. Order Infos by Term, then
	// Rev.
	Rev int64
	// TTL is what was left of the leader's lease when the Info was read or announced. The
	// leader renews it while its process runs.
	TTL time.Duration
	// Handle is the [distsync.Handle.ID] of the leader's Handle.
	Handle string
	// Identity is the [distsync.Handle.Identity] of the leader's Handle: by default its host
	// name and process id ("" for a Handle of a version before identities).
	Identity string
}

// newer reports whether i is a later state of the election than j.
func (i Info) newer(j Info) bool {
	return i.Term > j.Term || i.Term == j.Term && i.Rev > j.Rev
}

// Leader returns who leads, as Redis has it at one moment, in one round trip that changes
// nothing. It returns an error matching [ErrNoLeader] if nobody leads (the last leader
// resigned, or its term lapsed, with no candidate waiting). Like any snapshot, it may be
// stale when it returns; a leader's own [Term] is what tells it that it still leads.
func (e *Election) Leader(ctx context.Context) (Info, error) {
	info, ok, err := e.read(ctx)
	switch {
	case err != nil:
		return Info{}, fmt.Errorf("election %q: leader: %w", e.Name(), err)
	case !ok:
		return Info{}, fmt.Errorf("election %q: %w", e.Name(), ErrNoLeader)
	}
	return info, nil
}

// read runs election_leader.lua.
func (e *Election) read(ctx context.Context) (Info, bool, error) {
	ks := e.l.Keys()
	leader := scripts.ElectionLeaderArgs{Lock: ks.Lock, Fence: ks.Fence, Values: e.l.Record().Values}
	vals, err := leader.Exec(ctx, e.c.Client).ToArray()
	if err != nil {
		return Info{}, false, err
	}
	if n, _ := vals[0].AsInt64(); n == 0 || len(vals) != 6 {
		return Info{}, false, nil
	}
	var info Info
	var pttl int64
	var waiter string
	info.Term, _ = vals[1].AsInt64()
	info.Rev, _ = vals[2].AsInt64()
	pttl, _ = vals[3].AsInt64()
	waiter, _ = vals[4].ToString()
	info.Value, err = vals[5].ToString()
	info.TTL = time.Duration(max(pttl, 0)) * time.Millisecond
	info.Handle, info.Identity = core.Whose(waiter)
	return info, err == nil, err
}

// parse reads an announcement: '<term> <rev> <pttl> <waiter> <value>' (lib/queue.lua).
func parse(p string) (Info, bool) {
	f := strings.SplitN(p, " ", 5)
	if len(f) != 5 {
		return Info{}, false
	}
	term, err1 := strconv.ParseInt(f[0], 10, 64)
	rev, err2 := strconv.ParseInt(f[1], 10, 64)
	pttl, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Info{}, false
	}
	info := Info{Value: f[4], Term: term, Rev: rev, TTL: time.Duration(max(pttl, 0)) * time.Millisecond}
	info.Handle, info.Identity = core.Whose(f[3])
	return info, true
}

// Term is one leader's term: a lease on the leadership, renewed by the Handle. It is safe for
// concurrent use.
type Term struct {
	e *Election
	l *core.Lease

	mu    sync.Mutex
	value string

	// resigned is set when a Resign begins: from then on the term is not this value's to
	// campaign with, even while a Resign that Redis did not confirm goes on in the background.
	resigned atomic.Bool
}

// Token returns the term's fencing token: larger than the token of every earlier term of the
// election. Hand it to the storage the leader writes, so that it can refuse a deposed
// leader's writes.
func (t *Term) Token() int64 { return t.l.Token() }

// Value returns the leader's value, as this term last set it.
func (t *Term) Value() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.value
}

// Done returns a channel that is closed when the term ends: resigned, or lost (its lease
// expired, was deleted, or could not be renewed before its local deadline), or the Handle
// closed. The leader's work should stop when it closes.
func (t *Term) Done() <-chan struct{} { return t.l.Done() }

// Err returns nil while the term lasts, then why it ended: an error matching
// [distsync.ErrReleased] (resigned), [distsync.ErrLost] (with the reason) or
// [distsync.ErrClosed].
func (t *Term) Err() error { return t.l.Err() }

// Context returns a context that is cancelled, with [context.Cause] set to Err, when the term
// ends: run the leader's work under it.
func (t *Term) Context() context.Context { return t.l.Context() }

// Lease returns the term's [distsync.Lease]: its token, deadline and loss signal, and the
// means to refresh or extend it.
func (t *Term) Lease() *distsync.Lease { return api.Lease(t.l) }

// Resign ends the term and hands leadership to the next candidate, inside Redis, at once
// (observers are told of the new leader in the same step). It returns nil once leadership
// has been given up. It returns an error matching [distsync.ErrNotHeld] and
// [distsync.ErrLost] if the term had been lost before, and matching ErrNotHeld if it was
// resigned already. If Redis cannot be reached it returns the error, having stopped renewing
// the term: the leader must not count on still leading, and must not count on having
// resigned. The Handle goes on trying to resign in the background; Done is closed when a try
// reaches Redis (Err matches [distsync.ErrReleased]), or at the term's local deadline, the
// moment Redis may let another candidate lead, if none has by then (Err matches
// [distsync.ErrLost]).
func (t *Term) Resign(ctx context.Context) error {
	t.resigned.Store(true)
	return t.e.l.Release(ctx, "resign", t.l)
}

// Proclaim changes the leader's value to value without giving up leadership; observers are
// told. Connection errors are retried a few times. If the term is over it returns an error
// matching [distsync.ErrNotHeld] and why the term ended ([distsync.ErrReleased], or
// [distsync.ErrLost] if Redis no longer has it as the leader's, which the term's Done then
// reports within a renewal period); it matches ErrNotHeld alone once a Resign has begun,
// even one still going on in the background. Otherwise it returns the error of Redis, if any.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	if err := t.l.Err(); err != nil {
		return fmt.Errorf("election %q: proclaim: %w: %w", t.e.Name(), distsync.ErrNotHeld, err)
	}
	if t.resigned.Load() {
		return fmt.Errorf("election %q: proclaim: %w: the term was resigned", t.e.Name(), distsync.ErrNotHeld)
	}
	owner := t.l.Owner()
	proclaim := scripts.ElectionProclaimArgs{Lock: t.e.l.Keys().Lock, Values: t.e.l.Record().Values,
		Owner: owner, Waiter: fifo.Waiter(owner), Term: strconv.FormatInt(t.l.Token(), 10), Value: value,
		Observers: t.e.l.Observers(), TTL: core.Ms(t.e.l.TTL()), Pub: t.e.c.Pub}
	// A proclaim that went through and is sent again only announces the same value again.
	var n int64
	err := core.RetryNow(ctx, func() (err error) {
		n, err = proclaim.Exec(ctx, t.e.c.Client).AsInt64()
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("election %q: proclaim: %w", t.e.Name(), err)
	case n == 0:
		if err := t.l.Err(); err != nil { // a Resign, or the renewal loop, came first
			return fmt.Errorf("election %q: proclaim: %w: %w", t.e.Name(), distsync.ErrNotHeld, err)
		}
		// The term is over in Redis. The lease is left to the renewal loop, which ends it
		// as lost at its next renewal: ending it here could mislabel a Resign in flight.
		return fmt.Errorf("election %q: proclaim: %w: %w: the term was over in Redis", t.e.Name(), distsync.ErrNotHeld, distsync.ErrLost)
	}
	t.mu.Lock()
	t.value = value
	t.mu.Unlock()
	return nil
}

// Package waitgroup is sync.WaitGroup across processes, on Redis: a counter of pending work
// shared by every process that uses the same name, and a Wait, in any of them, that returns
// when it comes back to zero.
//
// Work is counted in two ways. [WaitGroup.Add] and [WaitGroup.Done] count plain units, as
// sync.WaitGroup does: nobody vouches for them, so a unit whose worker died is pending until
// the group's keys expire ([WithExpiry]). A member ([WaitGroup.Join], [WaitGroup.Claim],
// [WaitGroup.Go]) is a unit under a lease that its process's Handle renews: a member whose
// process dies, or is cut off from Redis, stops renewing, and when its lease ends by Redis's
// clock it is dropped and counted as lost. Lost is never done: Wait reports the round's lost
// members as an error matching [ErrMembersLost], and never waits for a dead member longer than
// about its lease. Claim turns a plain unit into a member, so that a coordinator can Add(n) for
// n jobs and each worker vouch for the job it takes.
//
// A round starts when the counter leaves zero and ends when it comes back to zero; the group
// is reusable, round after round, as sync.WaitGroup is. The script that ends a round publishes
// its outcome once to every waiting process (the "broadcast" waiting shape of the design), so
// every Wait returns on that message, without another round trip. A member that ended with
// [Member.Fail] (or a function of [WaitGroup.Go] that returned an error) makes Wait return an
// error matching [ErrMemberFailed] with the first such error's text. The outcomes of the last
// 16 rounds are kept, so a Wait that learns late still returns its own round's outcome, and a
// Wait on a zero counter returns the last round's outcome at once: a coordinator that Waits
// after its members were all lost still hears of the loss.
//
// Waiting polls nothing: a Wait subscribes to the group's channel and checks once, then wakes
// on the round's end, on a re-subscription (a message may have been lost), or, as a backstop,
// when the earliest member's lease would lapse (a lapse publishes nothing), or without members
// when the group's keys would expire. An idle Wait beside renewing members sends at most one
// command per lease.
//
// Every key carries a TTL: the group's keys expire [WithExpiry] after the last change, and
// live at least as long as a member's lease. A Wait whose group's keys vanished meanwhile
// returns an error matching [ErrExpired], never nil.
package waitgroup

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/internal/pubsub"
	"github.com/distsync/distsync/internal/scripts"
)

// The errors of a WaitGroup, wrapped with its name. Test with [errors.Is]; a Wait may return
// an error that matches more than one.
var (
	// ErrNegative: an Add or Done would take the plain units below zero. Nothing changed.
	ErrNegative = errors.New("negative counter")
	// ErrMembersLost: members of the round were lost: their leases ended before they were
	// done. The error is a [*LostError], which says how many.
	ErrMembersLost = errors.New("members lost")
	// ErrMemberFailed: a member ended with [Member.Fail]; the first error's text follows.
	ErrMemberFailed = errors.New("member failed")
	// ErrNothingToClaim: Claim found no plain unit left to take over.
	ErrNothingToClaim = errors.New("nothing to claim")
	// ErrExpired: the round a Wait waited for is gone from Redis: the group's keys expired
	// or were deleted, or more than 16 rounds ended before the Wait looked.
	ErrExpired = errors.New("round no longer in Redis")
)

// LostError is the error of a round in which members were lost; it matches [ErrMembersLost].
type LostError struct {
	Name    string // the group's name
	Members int64  // members of the round that were lost
}

func (e *LostError) Error() string {
	if e.Members == 1 {
		return fmt.Sprintf("waitgroup %q: 1 member lost", e.Name)
	}
	return fmt.Sprintf("waitgroup %q: %d members lost", e.Name, e.Members)
}

// Is makes errors.Is(err, ErrMembersLost) true.
func (e *LostError) Is(target error) bool { return target == ErrMembersLost }

// DefaultExpiry is how long a group's keys live after its last change, by default: a day. It
// bounds how long plain units of a worker that died without Done keep a Wait waiting, and how
// long the last rounds' outcomes are kept; a batch that runs longer than a day without any
// Add, Done or member coming or going needs a longer [WithExpiry]. Members renew the keys, so
// a group with a live member never expires.
const DefaultExpiry = 24 * time.Hour

const (
	keepRounds = 16          // outcomes of ended rounds kept
	opsTTL     = time.Minute // how long Redis remembers a request id (at most the expiry)
)

// WaitGroup is a counter of pending work shared across processes. Make it with [New]; it is
// safe for concurrent use and must not be copied.
type WaitGroup struct {
	c       *core.Handle
	name    string
	ttl     time.Duration // a member's lease
	renew   bool
	expiry  time.Duration
	keys    scripts.WaitGroupKeys // see internal/scripts/lib/waitgroup.lua
	keep    []string              // what a member keeps alive: s
	channel string

	// mine is the latest round this process took part in (an Add to it, a Join, a Claim) and
	// has not seen end: a Wait that starts after its keys vanished (Redis restarted empty, or
	// they were deleted) reports that round expired rather than wait for a new one.
	mine atomic.Pointer[taken]
}

// taken is a round a process took part in, and when (its local clock: the keys cannot expire
// by their TTL sooner than expiry after it).
type taken struct {
	round int64
	at    time.Time
}

// took records that this process took part in round r (0: unknown).
func (wg *WaitGroup) took(r int64) {
	if r <= 0 {
		return
	}
	t := &taken{round: r, at: time.Now()}
	for {
		old := wg.mine.Load()
		if old != nil && old.round > r || wg.mine.CompareAndSwap(old, t) {
			return
		}
	}
}

// seen forgets the round this process took part in once a Wait has learnt the outcome of
// round r or a later one (or that it vanished).
func (wg *WaitGroup) seen(t *taken, r int64) {
	if t != nil && r >= t.round {
		wg.mine.CompareAndSwap(t, nil)
	}
}

type options struct{ expiry time.Duration }

// WithExpiry makes the group's keys expire d after its last change (default [DefaultExpiry]),
// and no sooner than every member's lease ends. d must be at least 1 ms. A request id is
// remembered for a minute, or d if shorter, so that a retried command counts once.
//
// Applies to: New.
func WithExpiry(d time.Duration) distsync.Option {
	return api.Option(core.ExtOpt("WithExpiry", []string{kind.WaitGroup}, func(o *options) { o.expiry = d }))
}

// New returns the WaitGroup called name. It sends nothing to Redis. Its options are
// [WithExpiry], and [distsync.WithLeaseTTL] or [distsync.WithFixedLease] for its members'
// leases (a fixed one ends a member that long after it joined, done or not). It returns an
// error matching [distsync.ErrInvalid] for an empty name, a bad option value, or an option
// that does not apply to a WaitGroup.
func New(h *distsync.Handle, name string, opts ...distsync.Option) (*WaitGroup, error) {
	o := &options{expiry: DefaultExpiry}
	p, set, ks, err := api.Setup(h, kind.WaitGroup, name, opts, o)
	if err != nil {
		return nil, err
	}
	if o.expiry < time.Millisecond {
		return nil, fmt.Errorf("waitgroup %q: %w: expiry must be at least 1ms, got %v", name, distsync.ErrInvalid, o.expiry)
	}
	keys := scripts.WaitGroupKeys{S: ks.Key(), M: ks.Part("m"), Ops: ks.Part("ops")}
	return &WaitGroup{c: p.H, name: name, ttl: set.LeaseTTL, renew: !set.Fixed, expiry: o.expiry,
		keys: keys, keep: []string{keys.S}, channel: ks.Channel()}, nil
}

// Name returns the name the WaitGroup was made with.
func (wg *WaitGroup) Name() string { return wg.name }

// Add adds delta, which may be negative, to the group's plain units, in Redis. It returns nil
// once Redis applied it, and Add(0) returns nil at once. If the plain units would go below
// zero it returns an error matching [ErrNegative] and changes nothing (sync.WaitGroup panics;
// here another process may be at fault). Members are not plain units: a member ends with
// [Member.Done].
//
// A connection error is retried a few times under the same request id, which Redis applies
// once. If none gets through, or ctx ends, Add returns an error: one that matches ctx.Err()
// and says the units were not added, or, for a negative delta, that the Handle goes on
// applying it in the background (a Done is not taken back).
func (wg *WaitGroup) Add(ctx context.Context, delta int64) error {
	if delta == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return wg.wrap(err)
	}
	if err := wg.c.Enter(); err != nil {
		return wg.wrap(err)
	}
	defer wg.c.Exit()
	id := wg.c.NewID()
	if delta > 0 {
		v, err := wg.apply(ctx, scripts.WaitGroupAdd, id, delta, "")
		if err == nil && len(v) == 3 {
			wg.took(v[2])
		}
		return wg.wrapIf(err)
	}
	var units atomic.Int64
	ok, err := wg.c.GiveBack(ctx, fmt.Sprintf("waitgroup %q: Add(%d)", wg.name, delta), opsTTL, nil,
		func(ctx context.Context) (bool, error) {
			v, err := wg.run(ctx, scripts.WaitGroupAdd, id, delta, "").AsIntSlice()
			if err == nil && len(v) >= 2 {
				units.Store(v[1])
			}
			return err == nil && len(v) >= 2 && v[0] == 1, err
		})
	switch {
	case err != nil:
		return wg.wrap(err)
	case !ok:
		return fmt.Errorf("waitgroup %q: %w: Add(%d) with %d plain units", wg.name, ErrNegative, delta, units.Load())
	}
	return nil
}

// Done takes one plain unit away: Add(ctx, -1).
func (wg *WaitGroup) Done(ctx context.Context) error { return wg.Add(ctx, -1) }

// Wait blocks until the group's pending work (plain units and members) is zero, or ctx is
// done. It returns nil if the round it waited for ended cleanly; otherwise an error matching
// [ErrMembersLost] if members of the round were lost, and (or) [ErrMemberFailed] if a member
// failed. On a zero counter it returns at once, with the outcome of the last round if Redis
// still keeps one, else nil.
//
// It returns an error matching [ErrExpired] if the round's keys vanished while it waited (an
// expiry is seen when it happens; a deletion by hand, at the next backstop: within a member's
// lease, or when the keys would have expired), and also if they vanished before it began,
// taking a round this process took part in (an Add, a Join or a Claim) whose end it had not
// seen: after Redis restarted empty, the first Wait of such a process reports the lost round,
// never nil, even if new work began meanwhile. It returns one matching both
// [distsync.ErrNotAcquired] and ctx.Err() if ctx ended first, having written nothing; and
// one matching [distsync.ErrClosed] if the Handle closed. Connection errors are retried;
// other Redis errors are returned.
func (wg *WaitGroup) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return wg.notAcquired(err)
	}
	if err := wg.c.Enter(); err != nil {
		return wg.wrap(err)
	}
	defer wg.c.Exit()
	// A zero counter needs no subscription: check first, and subscribe (then check again: a
	// round that ended in between published to nobody) only to wait.
	l := &listener{signal: make(chan struct{}, 1)}
	sub := wg.c.Notifier.Attach(wg.channel, l) // free if this process subscribed already
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()
	round := "" // the round waited for, once known
	// The round this process took part in and has not seen end, if its keys cannot have
	// expired by their TTL since: the first check asks whether it vanished.
	mine := wg.mine.Load()
	if mine != nil && time.Since(mine.at) >= wg.expiry {
		mine = nil
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for backoff := 10 * time.Millisecond; ; {
		resub := l.Next() // before the check: a re-subscription after it means look again
		extra := round
		if round == "" && mine != nil {
			extra = "+" + strconv.FormatInt(mine.round, 10)
		}
		r, err := wg.run(ctx, scripts.WaitGroupCheck, "", 0, extra).AsStrSlice()
		if err == nil && len(r) < 2 {
			err = core.Unexpected(scripts.WaitGroupCheck, r)
		}
		if err != nil {
			if core.RetryAfter(ctx, &backoff, err) {
				continue
			}
			return wg.failed(ctx, err)
		}
		backoff = 10 * time.Millisecond
		switch {
		case r[0] == "d" && len(r) == 3:
			wg.seen(mine, parseRound(r[1]))
			return wg.outcome(r[1], r[2])
		case r[0] == "x" && round == "" && mine != nil:
			wg.seen(mine, mine.round) // reported here, once
			return fmt.Errorf("waitgroup %q: %w: the keys of round %d, which this process took part in, vanished before its end was seen (Redis restarted empty, or they were deleted): its outcome is unknown",
				wg.name, ErrExpired, mine.round)
		case r[0] == "x":
			wg.seen(mine, parseRound(round))
			return wg.expired(round, r[1])
		case r[0] != "w" || len(r) != 3:
			return wg.wrap(core.Unexpected(scripts.WaitGroupCheck, r))
		}
		round = r[1]
		if sub == nil {
			if sub, err = wg.c.Notifier.Subscribe(ctx, wg.channel, l); err != nil {
				return wg.failed(ctx, err)
			}
			continue
		}
		ms, _ := strconv.ParseInt(r[2], 10, 64)
		timer.Reset(core.Backstop(time.Duration(ms)*time.Millisecond, wg.ttl))
		if done, err := wg.await(ctx, l, resub, timer, round, mine); done {
			return err
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// failed is Wait's error when it gives up: it could not check the group or subscribe to wait,
// and will not try again.
func (wg *WaitGroup) failed(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, pubsub.ErrClosed):
		return wg.wrap(distsync.ErrClosed)
	case ctx.Err() != nil:
		return wg.notAcquired(ctx.Err())
	}
	return wg.wrap(err)
}

// await waits for the end of round, which Wait waits for, until it must check again (done
// false): a message of a later round's end (round's own was lost), a re-subscription, the
// backstop. It returns true and Wait's result once round ended, ctx ended or the Handle
// closed.
func (wg *WaitGroup) await(ctx context.Context, l *listener, resub <-chan struct{}, timer *time.Timer, round string, mine *taken) (done bool, err error) {
	for {
		select {
		case <-l.signal:
			// "<round>\n<outcome>": the latest round that ended.
			if at, o := l.last(); at == round {
				wg.seen(mine, parseRound(at))
				return true, wg.outcome(at, o)
			} else if newer(at, round) {
				return false, nil // round ended too, its message lost: its outcome is kept
			}
		case <-resub:
			return false, nil
		case <-timer.C:
			return false, nil // the backstop: a lease that lapses publishes nothing
		case <-ctx.Done():
			return true, wg.notAcquired(ctx.Err())
		case <-wg.c.Done():
			return true, wg.wrap(distsync.ErrClosed)
		}
	}
}

// outcome turns a round's outcome, "<lost>\n<first error>", into Wait's error.
func (wg *WaitGroup) outcome(round, o string) error {
	lost, text, _ := strings.Cut(o, "\n")
	var errs []error
	if n, _ := strconv.ParseInt(lost, 10, 64); n > 0 {
		errs = append(errs, &LostError{Name: wg.name, Members: n})
	}
	if text != "" {
		errs = append(errs, fmt.Errorf("waitgroup %q: %w: %s", wg.name, ErrMemberFailed, text))
	}
	return errors.Join(errs...)
}

func (wg *WaitGroup) expired(round, first string) error {
	if first != "" && !newer(first, round) {
		return fmt.Errorf("waitgroup %q: %w: more than %d rounds ended before the Wait looked", wg.name, ErrExpired, keepRounds)
	}
	return fmt.Errorf("waitgroup %q: %w: its keys expired or were deleted while the Wait waited", wg.name, ErrExpired)
}

// newer reports whether round a came after round b (rounds are decimal integers).
func newer(a, b string) bool { return parseRound(a) > parseRound(b) }

// parseRound returns round r as a number (0 for none).
func parseRound(r string) int64 {
	n, _ := strconv.ParseInt(r, 10, 64)
	return n
}

func (wg *WaitGroup) wrap(err error) error { return fmt.Errorf("waitgroup %q: %w", wg.name, err) }

func (wg *WaitGroup) wrapIf(err error) error {
	if err != nil {
		return wg.wrap(err)
	}
	return nil
}

// notAcquired is the error of a wait that ctx ended (its error is err): it matches both
// [distsync.ErrNotAcquired] and err, as every primitive's does.
func (wg *WaitGroup) notAcquired(err error) error {
	return fmt.Errorf("waitgroup %q: %w: %w", wg.name, distsync.ErrNotAcquired, err)
}

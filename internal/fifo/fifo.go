// Package fifo is the first-in, first-out lock of packages fair and election: a queue in
// Redis with one entry per call, the lock handed to its head inside Redis (lib/queue.lua),
// each waiter keeping a short lease on its place. For an election the lock also keeps a
// record of its holder (the leader) and its value, and announces every change of either on
// a channel of its own.
package fifo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/keys"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/internal/waitq"
)

// voidTTL is how long a waiter that gave up stays void (see fair_leave.lua): far longer than
// a command can stay in flight.
const voidTTL = time.Minute

// Lock is one FIFO lock. It keeps no holds itself: Acquire and TryAcquire return each hold's
// lease, and Held, if set, is told of it first.
type Lock struct {
	p      core.Prim
	c      *core.Handle // p.H
	kind   string       // p.Kind: "fair", "election"
	name   string
	ttl    time.Duration
	renew  bool
	wlease time.Duration // the waiter lease

	keys       scripts.MutexKeys
	rel        string         // the record of releases (mutex_release.lua)
	rec        scripts.Record // the record of the holder: zero without one
	keep       []string       // what a hold keeps alive: the record's values hash, if any
	placeKeep  []string       // what a waiter's place keeps alive: q
	chanPrefix string
	observers  string // the record's channel ("" without a record)
	proc       string // this Lock value's part of its waiter ids, and its channel's suffix
	// waiterPrefix starts each call's waiter id: proc + "/" (the id's own part follows)
	waiterPrefix string
	box          *waitq.Mailbox

	// Script arguments that never change.
	ttlArg, fenceArg, wleaseArg, slackArg string
	// renewWith is the LeaseSpec.RenewWith of every hold: mutex_renew.lua, which also tells the
	// head of the queue when the lease now ends, so that it takes the lock of a holder that
	// died a round trip after its expiry.
	renewWith func(owner string, token int64) scripts.Call
	// releaseHeld is m.release, made once: Handle.Release takes it.
	releaseHeld func(ctx context.Context, l *core.Lease) (bool, error)

	// Held, if set, is called with each hold before Acquire or TryAcquire returns it.
	Held func(*core.Lease)
}

// New returns the lock p (of kind kind.Fair or kind.Election), with set's lease
// settings and its keys in ks; with record, it keeps a record of its holder (Acquire's value).
func New(p core.Prim, set core.Settings, ks keys.Space, record bool) *Lock {
	c := p.H
	m := &Lock{p: p, c: c, kind: p.Kind, name: p.Name, ttl: set.LeaseTTL, renew: !set.Fixed, wlease: set.WaiterLease}
	m.keys = scripts.MutexKeys{Lock: ks.Key(), Fence: ks.Part("fence"), Q: ks.Part("q"), QX: ks.Part("qx")}
	m.rel, m.placeKeep = ks.Part("rel"), []string{m.keys.Q}
	m.chanPrefix = ks.Channel()
	m.proc = c.NewID()
	m.waiterPrefix = m.proc + "/"
	m.ttlArg, m.fenceArg = core.Ms(m.ttl), core.Ms(c.Config.FenceTTL)
	m.wleaseArg, m.slackArg = core.Ms(m.wlease), core.Ms(2*m.ttl/core.RenewDivisor)
	if record {
		m.observers = m.chanPrefix + ":obs" // no waiter's channel: those end in a handle id
		m.rec = scripts.Record{Values: ks.Part("v"), Observers: m.observers, TTL: m.ttlArg}
		m.keep = []string{m.rec.Values}
	}
	m.releaseHeld = m.release
	m.box = waitq.NewMailbox(c, m.chanPrefix+":"+m.proc, waitq.ParseQueued)
	m.renewWith = func(owner string, token int64) scripts.Call {
		return scripts.MutexRenewArgs{Lock: m.keys.Lock, Q: m.keys.Q, QX: m.keys.QX, Keep: m.keep, // and the record
			Owner: owner, TTL: m.ttlArg, Prefix: m.chanPrefix, Pub: m.c.Pub}.Call()
	}
	return m
}

// Name returns the lock's name.
func (m *Lock) Name() string { return m.name }

// TTL returns the lease of each hold.
func (m *Lock) TTL() time.Duration { return m.ttl }

// Keys returns the lock's keys but the record's (see [Lock.Record]).
func (m *Lock) Keys() scripts.MutexKeys { return m.keys }

// Record returns the record of the lock's holder: its values hash, channel and lease; the zero
// Record if the lock keeps none.
func (m *Lock) Record() scripts.Record { return m.rec }

// Observers returns the channel the record's changes are announced on ("" without a record).
func (m *Lock) Observers() string { return m.observers }

// Acquire takes the lock after every Acquire that reached Redis before it and has not given
// up, waiting without polling until it is handed over or ctx ends, and returns the hold's
// lease. value is what the record shows while this caller holds the lock. If ctx ends first
// it returns an error matching both [distsync.ErrNotAcquired] and ctx.Err(), having left the
// queue (passing the lock on if it was just handed to it).
func (m *Lock) Acquire(ctx context.Context, value string) (*core.Lease, error) {
	return m.p.Wait(ctx, core.One, m.verb(), func(ctx context.Context) (*core.Lease, error) {
		w := m.c.NewIDAfter(m.waiterPrefix)
		slot := m.box.Register(w) // subscribed only if the first attempt fails
		defer slot.Close()
		if err := m.wait(ctx, w, value, slot); err != nil {
			// Leave the queue (passing on a lock handed over meanwhile) before returning: a
			// release and a TryAcquire right after must find the caller gone.
			m.c.Undo("leaving the queue of "+m.kind+" "+strconv.Quote(m.name), voidTTL,
				func(bctx context.Context) error { return m.leave(bctx, w) })
			return nil, err
		}
		return nil, nil // the lease is in the sink (hold)
	})
}

// wait is Acquire's loop (see waitq.WaitTurn).
func (m *Lock) wait(ctx context.Context, w, value string, slot *waitq.Slot) error {
	place := scripts.FairPlaceArgs{Keys: m.keys, Waiter: w, WLease: m.wleaseArg, FenceTTL: m.fenceArg,
		Prefix: m.chanPrefix, Pub: m.c.Pub, Record: m.rec}.Call()
	return waitq.WaitTurn(ctx, m.c, m.wlease, waitq.Turn{
		ID: w, Slot: slot, Place: m.keys.QX, PlaceKeep: m.placeKeep,
		// The renewal of a place also hands a lock that lapsed free to the head: a stalled
		// hand-off (a dead grantee watched by a dead waiter) lasts at most a renewal period.
		PlaceRenewal: &place,
		Leave:        func(ctx context.Context) error { return m.leave(ctx, w) },
		Attempt: func(ctx context.Context, backup string) (waitq.TurnResult, error) {
			sent := time.Now()
			vals, err := scripts.FairAcquireArgs{Keys: m.keys, Waiter: w, TTL: m.ttlArg, FenceTTL: m.fenceArg,
				WLease: m.wleaseArg, Try: "0", Prefix: m.chanPrefix, Pub: m.c.Pub, Backup: backup, Slack: m.slackArg,
				Record: m.rec, Value: value}.Exec(ctx, m.c.Client).AsIntSlice()
			switch {
			case err != nil:
				return waitq.TurnResult{}, err
			case len(vals) == 2 && vals[0] == 1:
				return waitq.TurnResult{Acquired: true}, m.hold(ctx, w, vals[1], sent, time.Time{}, nil)
			case len(vals) != 4 || vals[0] != 0:
				return waitq.TurnResult{}, core.Unexpected(scripts.FairAcquire, vals)
			}
			// The backstop, as for mutex: an expiring lease publishes nothing.
			pttl := time.Duration(vals[1]) * time.Millisecond
			if vals[2] == 1 || vals[3] == 1 {
				// An unconfirmed grant to another waiter lapses at pttl; a hold that the waiter
				// heads the queue behind tells it of each renewal: either way, re-check just
				// after the end it read, not later (a notice missed, or sent before the waiter
				// subscribed, costs a look per lease, not a backstop's delay).
				return waitq.TurnResult{Wait: pttl + 2*time.Millisecond}, nil
			}
			return waitq.TurnResult{Wait: core.Backstop(pttl, m.ttl)}, nil
		},
		Take: func(g waitq.Grant, deadline time.Time) error {
			owner := "~" + w + ":" + strconv.FormatInt(g.Token, 10) // see lib/queue.lua
			confirm := scripts.MutexConfirmArgs{Keys: m.keys, Owner: owner, TTL: m.ttlArg, Waiter: w, Requeue: "0",
				Slack: m.slackArg, Prefix: m.chanPrefix, Pub: m.c.Pub, Backup: g.Backup, Window: m.wleaseArg,
				FenceTTL: m.fenceArg}.Call()
			return m.hold(ctx, owner, g.Token, time.Now(), deadline, &confirm)
		},
	})
}

// TryAcquire takes the lock if it is free and nobody waits for it, without waiting. It
// returns the hold's lease and true if it took the lock, and false with a nil error
// otherwise. ctx bounds the one round trip; if it ends first TryAcquire returns its error
// (matching [distsync.ErrNotAcquired]) and makes sure the attempt takes nothing.
func (m *Lock) TryAcquire(ctx context.Context, value string) (*core.Lease, bool, error) {
	return m.p.Try(ctx, core.One, m.verb(), func(ctx context.Context) (*core.Lease, bool, error) {
		return m.try(ctx, value)
	})
}

// try is one try of TryAcquire.
func (m *Lock) try(ctx context.Context, value string) (*core.Lease, bool, error) {
	w := m.c.NewIDAfter(m.waiterPrefix)
	sent := time.Now()
	vals, err := scripts.FairAcquireArgs{Keys: m.keys, Waiter: w, TTL: m.ttlArg, FenceTTL: m.fenceArg,
		WLease: m.wleaseArg, Try: "1", Prefix: m.chanPrefix, Pub: m.c.Pub, Backup: "", Slack: m.slackArg,
		Record: m.rec, Value: value}.Exec(ctx, m.c.Client).AsIntSlice()
	if err != nil {
		m.c.Undo("cleanup after a cancelled try of "+m.kind+" "+strconv.Quote(m.name), voidTTL,
			func(bctx context.Context) error { return m.leave(bctx, w) })
		return nil, false, err
	}
	if len(vals) == 2 && vals[0] == 1 {
		if err := m.hold(ctx, w, vals[1], sent, time.Time{}, nil); err != nil {
			return nil, false, err
		}
		return nil, true, nil // the lease is in the sink (hold)
	}
	return nil, false, nil
}

// Release gives back the hold l and hands the lock to the head of the queue, if any (see
// core.Handle.Release for what it returns; its errors are wrapped with the lock's kind and
// name and what).
func (m *Lock) Release(ctx context.Context, what string, l *core.Lease) error {
	if err := m.c.Release(ctx, m.p, what, l, m.releaseHeld); err != nil {
		return fmt.Errorf("%s %q: %s: %w", m.kind, m.name, what, err)
	}
	return nil
}

// release runs the release script (shared with mutex: compare, then hand the lock to the
// head of the queue), after the confirm of a grant if the renewal loop had not sent it yet.
func (m *Lock) release(ctx context.Context, l *core.Lease) (bool, error) {
	call := scripts.MutexReleaseArgs{Keys: m.keys, Rel: m.rel, Owner: l.Owner(), Window: m.wleaseArg,
		FenceTTL: m.fenceArg, Prefix: m.chanPrefix, Pub: m.c.Pub, TTL: m.ttlArg,
		Record: m.rec, Waiter: Waiter(l.Owner())}.Call()
	calls := []scripts.Call{call}
	if first := l.Unsent(); first != nil {
		calls = []scripts.Call{*first, call}
	}
	res := scripts.DoMulti(ctx, m.c.Client, calls)
	n, err := res[len(res)-1].AsInt64()
	return n == 1, err
}

// Waiter returns the waiter id of a hold's owner value: the owner itself, or the waiter of a
// grant, '~<waiter>:<token>'.
func Waiter(owner string) string {
	if g, ok := strings.CutPrefix(owner, "~"); ok {
		if i := strings.LastIndexByte(g, ':'); i >= 0 {
			return g[:i]
		}
	}
	return owner
}

// Holders returns who holds the lock, as Redis has it at one moment (see distsync.Holder).
func (m *Lock) Holders(ctx context.Context) ([]core.HolderInfo, error) {
	return m.c.Holders(ctx, m.kind, m.name, core.LayoutString, []string{m.keys.Lock, m.keys.Fence})
}

// hold records an acquisition under owner, with its lease on the renewal loop, and delivers
// the lease to ctx's sink.
func (m *Lock) hold(ctx context.Context, owner string, token int64, sent, deadline time.Time, first *scripts.Call) error {
	spec := core.LeaseSpec{
		Key: m.keys.Lock, Owner: owner, Kind: "s", TTL: m.ttl, Renew: m.renew, Token: token, Sent: sent,
		Deadline: deadline, First: first, Keep: m.keep, // the record lives as long as its holder
		RenewWith: m.renewWith,
		Release: func(ctx context.Context, l *core.Lease) error {
			_, err := m.release(ctx, l)
			return err
		},
	}
	if m.observers != "" {
		// An election's renewal also records the leader (election_renew.lua).
		renewal := scripts.ElectionRenewArgs{Lock: m.keys.Lock, Q: m.keys.Q, QX: m.keys.QX, Values: m.rec.Values,
			Owner: owner, TTL: m.ttlArg, Prefix: m.chanPrefix, Pub: m.c.Pub, Observers: m.observers,
			Waiter: Waiter(owner), Token: strconv.FormatInt(token, 10)}.Call()
		spec.Renewal = &renewal
	}
	l, err := m.c.Hold(spec)
	if err != nil { // given back: the handle closed, or the reply came too late to use
		return err
	}
	if m.observers != "" {
		// Record the leader now, before the call returns, with one renewal: the record names a
		// holder only once its take, whose reply came in time to use, was followed by this
		// (never a candidate that died, nor a take given back as too late). If Redis does not
		// answer, the hold stands, and the renewal loop records it at its next renewal.
		rctx, cancel := m.c.Detached(m.ttl)
		err := l.Refresh(rctx, 0)
		cancel()
		if errors.Is(err, core.ErrLost) {
			return fmt.Errorf("%w: the lock was gone when its holder was recorded", core.ErrLate)
		}
	}
	if m.Held != nil {
		m.Held(l)
	}
	core.Deliver(ctx, l)
	return nil
}

// leave takes waiter w out of the queue, passing the lock on if it was w's.
func (m *Lock) leave(ctx context.Context, w string) error {
	return scripts.FairLeaveArgs{Keys: m.keys, Waiter: w, Window: m.wleaseArg, FenceTTL: m.fenceArg,
		Prefix: m.chanPrefix, Pub: m.c.Pub, VoidTTL: core.Ms(voidTTL), Record: m.rec}.Exec(ctx, m.c.Client).Error()
}

// verb is what the lock's errors say it did.
func (m *Lock) verb() string {
	if m.kind == kind.Election {
		return "campaign"
	}
	return "lock"
}

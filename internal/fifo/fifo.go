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

	keys       []string // lock, fence, q, qx, and values with a record
	relKeys    []string // lock, fence, q, qx, rel, and values with a record (mutex_release.lua)
	chanPrefix string
	observers  string // the record's channel ("" without a record)
	proc       string // this Lock value's part of its waiter ids, and its channel's suffix
	box        *waitq.Mailbox

	// Script arguments that never change.
	ttlArg, fenceArg, wleaseArg, slackArg string
	// renewWith is the LeaseSpec.RenewWith of every hold: mutex_renew.lua, which also tells the
	// head of the queue when the lease now ends, so that it takes the lock of a holder that
	// died a round trip after its expiry.
	renewWith func(owner string) scripts.Call

	// Held, if set, is called with each hold before Acquire or TryAcquire returns it.
	Held func(*core.Lease)
}

// New returns the lock p (of kind kind.Fair or kind.Election), with set's lease
// settings and its keys in ks; with record, it keeps a record of its holder (Acquire's value).
func New(p core.Prim, set core.Settings, ks keys.Space, record bool) *Lock {
	c := p.H
	m := &Lock{p: p, c: c, kind: p.Kind, name: p.Name, ttl: set.LeaseTTL, renew: !set.Fixed, wlease: set.WaiterLease}
	m.keys = []string{ks.Key(), ks.Part("fence"), ks.Part("q"), ks.Part("qx")}
	m.relKeys = append(m.keys[:4:4], ks.Part("rel"))
	m.chanPrefix = ks.Channel()
	if record {
		m.keys = append(m.keys, ks.Part("v"))
		m.relKeys = append(m.relKeys, ks.Part("v"))
		m.observers = m.chanPrefix + ":obs" // no waiter's channel: those end in a handle id
	}
	m.proc = c.NewID()
	m.ttlArg, m.fenceArg = core.Ms(m.ttl), core.Ms(c.Config.FenceTTL)
	m.wleaseArg, m.slackArg = core.Ms(m.wlease), core.Ms(2*m.ttl/core.RenewDivisor)
	m.box = waitq.NewMailbox(c, m.chanPrefix+":"+m.proc, waitq.ParseQueued)
	renewKeys := append([]string{m.keys[0], m.keys[2], m.keys[3]}, m.keys[4:]...) // lock, q, qx, and the record
	m.renewWith = func(owner string) scripts.Call {
		return scripts.Call{Script: scripts.MutexRenew, Keys: renewKeys, Args: []string{owner, m.ttlArg, m.chanPrefix, m.c.Pub}}
	}
	return m
}

// Name returns the lock's name.
func (m *Lock) Name() string { return m.name }

// TTL returns the lease of each hold.
func (m *Lock) TTL() time.Duration { return m.ttl }

// Keys returns the lock's keys: lock, fence, q, qx, and the record's values hash if it keeps
// one.
func (m *Lock) Keys() []string { return m.keys }

// Observers returns the channel the record's changes are announced on ("" without a record).
func (m *Lock) Observers() string { return m.observers }

// record returns args followed by the record's arguments, if the lock keeps a record.
func (m *Lock) record(args []string, more ...string) []string {
	if m.observers == "" {
		return args
	}
	return append(append(args, m.observers, m.ttlArg), more...)
}

// Acquire takes the lock after every Acquire that reached Redis before it and has not given
// up, waiting without polling until it is handed over or ctx ends, and returns the hold's
// lease. value is what the record shows while this caller holds the lock. If ctx ends first
// it returns an error matching both [distsync.ErrNotAcquired] and ctx.Err(), having left the
// queue (passing the lock on if it was just handed to it).
func (m *Lock) Acquire(ctx context.Context, value string) (*core.Lease, error) {
	return m.p.Wait(ctx, core.One, m.verb(), func(ctx context.Context) (*core.Lease, error) {
		w := m.proc + "/" + m.c.NewID()
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
	return waitq.WaitTurn(ctx, m.c, m.wlease, waitq.Turn{
		ID: w, Slot: slot, Place: m.keys[3], PlaceKeep: m.keys[2:3],
		// The renewal of a place also hands a lock that lapsed free to the head: a stalled
		// hand-off (a dead grantee watched by a dead waiter) lasts at most a renewal period.
		PlaceRenewal: &scripts.Call{Script: scripts.FairPlace, Keys: m.keys,
			Args: m.record([]string{w, m.wleaseArg, m.fenceArg, m.chanPrefix, m.c.Pub})},
		Leave: func(ctx context.Context) error { return m.leave(ctx, w) },
		Attempt: func(ctx context.Context, backup string) (waitq.TurnResult, error) {
			sent := time.Now()
			vals, err := scripts.FairAcquire.Exec(ctx, m.c.Client, m.keys, m.record(
				[]string{w, m.ttlArg, m.fenceArg, m.wleaseArg, "0", m.chanPrefix, m.c.Pub, backup, m.slackArg}, value)).AsIntSlice()
			switch {
			case err != nil:
				return waitq.TurnResult{}, err
			case len(vals) == 2 && vals[0] == 1:
				return waitq.TurnResult{Acquired: true}, m.hold(ctx, w, vals[1], sent, time.Time{}, nil)
			case len(vals) != 3 || vals[0] != 0:
				return waitq.TurnResult{}, core.Unexpected(scripts.FairAcquire, vals)
			}
			// The backstop, as for mutex: an expiring lease publishes nothing.
			pttl := time.Duration(vals[1]) * time.Millisecond
			if vals[2] == 1 {
				return waitq.TurnResult{Wait: pttl + 2*time.Millisecond}, nil // an unconfirmed grant to another waiter
			}
			return waitq.TurnResult{Wait: core.Backstop(pttl, m.ttl)}, nil
		},
		Take: func(g waitq.Grant, deadline time.Time) error {
			owner := "~" + w + ":" + strconv.FormatInt(g.Token, 10) // see lib/queue.lua
			confirm := &scripts.Call{Script: scripts.MutexConfirm, Keys: m.keys[:4],
				Args: []string{owner, m.ttlArg, w, "0", m.slackArg, m.chanPrefix, m.c.Pub, g.Backup, m.wleaseArg, m.fenceArg}}
			return m.hold(ctx, owner, g.Token, time.Now(), deadline, confirm)
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
	w := m.proc + "/" + m.c.NewID()
	sent := time.Now()
	vals, err := scripts.FairAcquire.Exec(ctx, m.c.Client, m.keys, m.record(
		[]string{w, m.ttlArg, m.fenceArg, m.wleaseArg, "1", m.chanPrefix, m.c.Pub, "", m.slackArg}, value)).AsIntSlice()
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
	if err := m.c.Release(ctx, what+" of "+m.kind+" "+strconv.Quote(m.name), l,
		func(ctx context.Context) (bool, error) { return m.release(ctx, l) }); err != nil {
		return fmt.Errorf("%s %q: %s: %w", m.kind, m.name, what, err)
	}
	return nil
}

// release runs the release script (shared with mutex: compare, then hand the lock to the
// head of the queue), after the confirm of a grant if the renewal loop had not sent it yet.
func (m *Lock) release(ctx context.Context, l *core.Lease) (bool, error) {
	call := scripts.Call{Script: scripts.MutexRelease, Keys: m.relKeys,
		Args: m.record([]string{l.Owner(), m.wleaseArg, m.fenceArg, m.chanPrefix, m.c.Pub, m.ttlArg}, Waiter(l.Owner()))}
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
	return m.c.Holders(ctx, m.kind, m.name, core.LayoutString, m.keys[:2])
}

// hold records an acquisition under owner, with its lease on the renewal loop, and delivers
// the lease to ctx's sink.
func (m *Lock) hold(ctx context.Context, owner string, token int64, sent, deadline time.Time, first *scripts.Call) error {
	spec := core.LeaseSpec{
		Key: m.keys[0], Owner: owner, Kind: "s", TTL: m.ttl, Renew: m.renew, Token: token, Sent: sent,
		Deadline: deadline, First: first, Keep: m.keys[4:], // the record lives as long as its holder
		RenewWith: m.renewWith,
		Release: func(ctx context.Context, l *core.Lease) error {
			_, err := m.release(ctx, l)
			return err
		},
	}
	if m.observers != "" {
		// An election's renewal also records the leader (election_renew.lua).
		spec.Renewal = &scripts.Call{Script: scripts.ElectionRenew, Keys: []string{m.keys[0], m.keys[2], m.keys[3], m.keys[4]},
			Args: []string{owner, m.ttlArg, m.chanPrefix, m.c.Pub, m.observers, Waiter(owner), strconv.FormatInt(token, 10)}}
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
	return scripts.FairLeave.Exec(ctx, m.c.Client, m.keys,
		m.record([]string{w, m.wleaseArg, m.fenceArg, m.chanPrefix, m.c.Pub, core.Ms(voidTTL)})).Error()
}

// verb is what the lock's errors say it did.
func (m *Lock) verb() string {
	if m.kind == kind.Election {
		return "campaign"
	}
	return "lock"
}

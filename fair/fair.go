// Package fair is a strictly first-in, first-out lock across processes, on Redis: the order
// of ZooKeeper's lock recipe, with the hand-off done inside Redis.
//
// Every Lock call that finds the lock held joins a queue in Redis, in the order its request
// arrived there, and gets the lock in that order: no caller, in any process, overtakes
// another. Unlock hands the lock to the head of the queue inside Redis and wakes that caller
// only; its Lock returns without another round trip. A caller whose context ends leaves the
// queue at once, and if the lock was being handed to it just then, it goes on to the next.
//
// A waiter keeps a short lease on its place ([distsync.DefaultWaiterLease], 3 s), renewed while
// it waits, batched with the Handle's other renewals. A waiter whose process died is dropped
// once its lease lapses, and a lock handed to a waiter that died comes back after at most that
// long: the next waiter watches the hand-off and takes over. Holds are leases with fencing
// tokens and loss signals, as for [mutex.Mutex].
package fair

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/internal/waitq"
)

// voidTTL is how long a waiter that gave up stays void (see fair_leave.lua): far longer than
// a command can stay in flight.
const voidTTL = time.Minute

// Mutex is a FIFO mutual exclusion lock shared by every process that uses the same name on
// the same Redis. Make it with [New]; it is safe for concurrent use and must not be copied.
type Mutex struct {
	c      *core.Handle
	name   string
	ttl    time.Duration
	renew  bool
	wlease time.Duration // the waiter lease

	keys       []string // lock, fence, q, qx
	relKeys    []string // keys and rel, for the release (mutex_release.lua)
	chanPrefix string
	proc       string // this Mutex value's part of its waiter ids, and its channel's suffix
	box        *waitq.Mailbox

	// Script arguments that never change.
	ttlArg, fenceArg, wleaseArg, slackArg string

	mu    sync.Mutex
	holds []*core.Lease // this value's holds, oldest first (more than one only after a loss)
}

// New returns the fair Mutex called name. It sends nothing to Redis. Its options are
// [distsync.WithLeaseTTL], [distsync.WithFixedLease] and [distsync.WithWaiterLease]. It
// returns an error matching [distsync.ErrInvalid] for an empty name, a bad option value, or an
// option that does not apply to a fair mutex.
func New(h *distsync.Handle, name string, opts ...distsync.Option) (*Mutex, error) {
	c, err := core.Open(h, core.KindFair)
	if err != nil {
		return nil, err
	}
	set, err := c.Settings(core.KindFair, name, core.Unwrap(opts), nil)
	if err != nil {
		return nil, err
	}
	m := &Mutex{c: c, name: name, ttl: set.LeaseTTL, renew: !set.Fixed, wlease: set.WaiterLease}
	ks, err := c.Space(core.KindFair, name, m.ttl)
	if err != nil {
		return nil, err
	}
	m.keys = []string{ks.Key(), ks.Part("fence"), ks.Part("q"), ks.Part("qx")}
	m.relKeys = append(m.keys[:4:4], ks.Part("rel"))
	m.chanPrefix = ks.Channel()
	m.proc = c.NewID()
	m.ttlArg, m.fenceArg = core.Ms(m.ttl), core.Ms(c.Config.FenceTTL)
	m.wleaseArg, m.slackArg = core.Ms(m.wlease), core.Ms(2*m.ttl/core.RenewDivisor)
	m.box = waitq.NewMailbox(c, m.chanPrefix+":"+m.proc, waitq.ParseQueued)
	return m, nil
}

// Name returns the name the Mutex was made with.
func (m *Mutex) Name() string { return m.name }

// Lock locks m, after every Lock call that reached Redis before this one and has not given
// up. It waits, without polling, until the lock is handed to it or ctx ends: there is no limit
// on tries or time. On success it returns nil ([Mutex.LockLease] returns the hold's lease
// too). If ctx
// ends first it returns an error matching both [distsync.ErrNotAcquired] and ctx.Err(), and
// leaves the queue (passing the lock on if it was just handed to it). Connection errors are
// retried while waiting; other Redis errors end the wait and are returned.
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.LockLease(ctx)
	return err
}

// LockLease is [Mutex.Lock] that also returns the hold's [distsync.Lease]: its fencing token,
// its loss signal, and the means to refresh or extend it. The lease ends when the hold is
// unlocked.
func (m *Mutex) LockLease(ctx context.Context) (*distsync.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, m.notAcquired(err)
	}
	if err := m.c.Enter(); err != nil {
		return nil, fmt.Errorf("fair %q: %w", m.name, err)
	}
	defer m.c.Exit()
	w := m.proc + "/" + m.c.NewID()
	slot := m.box.Register(w) // subscribed only if the first attempt fails
	defer slot.Close()
	sctx, sink := core.WithSink(ctx)
	err := m.wait(sctx, w, slot)
	if err != nil {
		// Leave the queue (passing on a lock handed over meanwhile) before returning: an
		// Unlock and a TryLock right after must find the caller gone.
		m.c.Undo("leaving the queue of fair lock "+strconv.Quote(m.name), voidTTL,
			func(bctx context.Context) error { return m.leave(bctx, w) })
		return nil, m.fail(ctx, err)
	}
	return sink.Lease.Public.(*distsync.Lease), nil
}

// wait is Lock's loop (see waitq.WaitTurn).
func (m *Mutex) wait(ctx context.Context, w string, slot *waitq.Slot) error {
	return waitq.WaitTurn(ctx, m.c, m.wlease, waitq.Turn{
		ID: w, Slot: slot, Place: m.keys[3], PlaceKeep: m.keys[2:3],
		// The renewal of a place also hands a lock that lapsed free to the head: a stalled
		// hand-off (a dead grantee watched by a dead waiter) lasts at most a renewal period.
		PlaceRenewal: &scripts.Call{Script: scripts.FairPlace, Keys: m.keys,
			Args: []string{w, m.wleaseArg, m.fenceArg, m.chanPrefix, m.c.Pub}},
		Leave: func(ctx context.Context) error { return m.leave(ctx, w) },
		Attempt: func(ctx context.Context, backup string) (waitq.TurnResult, error) {
			sent := time.Now()
			vals, err := scripts.FairAcquire.Exec(ctx, m.c.Client, m.keys,
				[]string{w, m.ttlArg, m.fenceArg, m.wleaseArg, "0", m.chanPrefix, m.c.Pub, backup, m.slackArg}).AsIntSlice()
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
			confirm := &scripts.Call{Script: scripts.MutexConfirm, Keys: m.keys,
				Args: []string{owner, m.ttlArg, w, "0", m.slackArg, m.chanPrefix, m.c.Pub, g.Backup, m.wleaseArg, m.fenceArg}}
			return m.hold(ctx, owner, g.Token, time.Now(), deadline, confirm)
		},
	})
}

// TryLock takes m if it is free and nobody waits for it, without waiting. It returns true if
// it took the lock and false, with a nil error, otherwise. ctx bounds the one round trip; if
// it ends first TryLock returns its error (matching [distsync.ErrNotAcquired]) and makes sure
// the attempt takes nothing.
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	_, ok, err := m.TryLockLease(ctx)
	return ok, err
}

// TryLockLease is [Mutex.TryLock] that also returns the hold's [distsync.Lease] when it took
// the lock (nil otherwise).
func (m *Mutex) TryLockLease(ctx context.Context) (*distsync.Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, m.notAcquired(err)
	}
	if err := m.c.Enter(); err != nil {
		return nil, false, fmt.Errorf("fair %q: %w", m.name, err)
	}
	defer m.c.Exit()
	w := m.proc + "/" + m.c.NewID()
	sent := time.Now()
	vals, err := scripts.FairAcquire.Exec(ctx, m.c.Client, m.keys,
		[]string{w, m.ttlArg, m.fenceArg, m.wleaseArg, "1", m.chanPrefix, m.c.Pub, "", m.slackArg}).AsIntSlice()
	if err != nil {
		m.c.Undo("cleanup after a cancelled TryLock", voidTTL,
			func(bctx context.Context) error { return m.leave(bctx, w) })
		return nil, false, m.fail(ctx, err)
	}
	if len(vals) == 2 && vals[0] == 1 {
		sctx, sink := core.WithSink(ctx)
		if err := m.hold(sctx, w, vals[1], sent, time.Time{}, nil); err != nil {
			return nil, false, m.fail(ctx, err)
		}
		return sink.Lease.Public.(*distsync.Lease), true, nil
	}
	return nil, false, nil
}

// Unlock unlocks m and hands it to the head of the queue, if any. It returns nil if the lock
// was held and is now released. It returns an error matching [distsync.ErrNotHeld] if m is not
// locked, and one matching both ErrNotHeld and [distsync.ErrLost] if the hold was lost before
// Unlock. Connection errors are retried as for [mutex.Mutex.Unlock]. If this Mutex value has
// more than one hold (a hold was lost and the lock taken again), Unlock gives back the oldest.
func (m *Mutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	if len(m.holds) == 0 {
		m.mu.Unlock()
		return fmt.Errorf("fair %q: unlock of unlocked mutex: %w", m.name, distsync.ErrNotHeld)
	}
	l := m.holds[0]
	m.holds = m.holds[1:]
	m.mu.Unlock()
	if err := m.c.Release(ctx, "unlock of fair lock "+strconv.Quote(m.name), l,
		func(ctx context.Context) (bool, error) { return m.release(ctx, l) }); err != nil {
		return fmt.Errorf("fair %q: unlock: %w", m.name, err)
	}
	return nil
}

// release runs the release script (shared with mutex: compare, then hand the lock to the
// head of the queue), after the confirm of a grant if the renewal loop had not sent it yet.
func (m *Mutex) release(ctx context.Context, l *core.Lease) (bool, error) {
	call := scripts.Call{Script: scripts.MutexRelease, Keys: m.relKeys,
		Args: []string{l.Owner(), m.wleaseArg, m.fenceArg, m.chanPrefix, m.c.Pub, m.ttlArg}}
	calls := []scripts.Call{call}
	if first := l.Unsent(); first != nil {
		calls = []scripts.Call{*first, call}
	}
	res := scripts.DoMulti(ctx, m.c.Client, calls)
	n, err := res[len(res)-1].AsInt64()
	return n == 1, err
}

// Holders returns who holds m, as Redis has it at one moment: the holder (or the waiter the lock was just handed to), or none if m is free. It reads in one round
// trip and changes nothing; like any snapshot, it may be stale when it returns (see
// [distsync.Holder]). Find the process that holds a name by comparing [distsync.Holder.Handle]
// with [distsync.Handle.ID].
func (m *Mutex) Holders(ctx context.Context) ([]distsync.Holder, error) {
	hs, err := m.c.Holders(ctx, "fair", m.name, core.LayoutString, m.keys[:2])
	held, _ := hs.([]distsync.Holder)
	return held, err
}

// Locker returns a [sync.Locker] whose Lock and Unlock call m's with context.Background().
// They panic on any error (sync.Locker has no error to return).
func (m *Mutex) Locker() sync.Locker { return core.Locker("fair: Locker", m.Lock, m.Unlock) }

// hold records an acquisition under owner, with its lease on the renewal loop, and delivers
// the lease to ctx's sink.
func (m *Mutex) hold(ctx context.Context, owner string, token int64, sent, deadline time.Time, first *scripts.Call) error {
	l, err := m.c.Hold(core.LeaseSpec{
		Key: m.keys[0], Owner: owner, Kind: "s", TTL: m.ttl, Renew: m.renew, Token: token, Sent: sent,
		Deadline: deadline, First: first,
		Release: func(ctx context.Context, l *core.Lease) error {
			_, err := m.release(ctx, l)
			return err
		},
	})
	if err != nil { // given back: the handle closed, or the reply came too late to use
		return err
	}
	m.mu.Lock()
	m.holds = append(m.holds, l)
	m.mu.Unlock()
	core.Deliver(ctx, l)
	return nil
}

// leave takes waiter w out of the queue, passing the lock on if it was w's.
func (m *Mutex) leave(ctx context.Context, w string) error {
	return scripts.FairLeave.Exec(ctx, m.c.Client, m.keys,
		[]string{w, m.wleaseArg, m.fenceArg, m.chanPrefix, m.c.Pub, core.Ms(voidTTL)}).Error()
}

func (m *Mutex) fail(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return m.notAcquired(ctx.Err())
	case errors.Is(err, core.ErrLate):
		return m.notAcquired(err)
	case errors.Is(err, core.ErrClosed):
		return fmt.Errorf("fair %q: %w", m.name, core.ErrClosed)
	}
	return fmt.Errorf("fair %q: lock: %w", m.name, err)
}

func (m *Mutex) notAcquired(err error) error {
	return fmt.Errorf("fair %q: %w: %w", m.name, distsync.ErrNotAcquired, err)
}

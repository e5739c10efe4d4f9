package reentrant

// This file: taking the mutex (re-entry, one try, or a wait in the process Room behind the
// Redis queue).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/internal/waitq"
)

// lock1 takes or re-enters m for o: with wait, it waits until it does.
func (m *Mutex) lock1(ctx context.Context, o Owner, wait bool) (bool, error) {
	for {
		got, err := m.lock2(ctx, o, wait)
		if !errors.Is(err, errUnlocking) && !errors.Is(err, errOwnerHolds) {
			return got, err
		}
		// An Unlock of the owner got in between: wait for it, then look again. Or a hold of
		// the owner started here while this Lock waited in the room: re-enter it.
	}
}

var (
	// errUnlocking: the owner has an Unlock still being finished; wait for it and try again.
	errUnlocking = errors.New("an unlock of the owner is being finished")
	// errOwnerHolds ends the wait in the room of a Lock whose owner started a hold here
	// meanwhile (another of its goroutines took the mutex): it re-enters that hold instead.
	errOwnerHolds = errors.New("the owner holds the mutex now")
)

// lock2 is one try of lock1: it waits for the owner's Unlocks still being finished, then
// re-enters, tries once, or waits in the Room. It returns errUnlocking if an Unlock of the
// owner came in between.
func (m *Mutex) lock2(ctx context.Context, o Owner, wait bool) (bool, error) {
	m.mu.Lock()
	var unlocking <-chan struct{}
	if p := m.unlocking[o]; p != nil {
		unlocking = p.wait()
	}
	m.mu.Unlock()
	if unlocking != nil {
		select {
		case <-unlocking:
		case <-ctx.Done():
			return false, ctx.Err()
		case <-m.c.Done():
			return false, core.ErrClosed
		}
	}
	m.mu.Lock()
	h := m.holds[o]
	m.mu.Unlock()
	if h != nil {
		if err := h.lease.Err(); err != nil {
			return false, fmt.Errorf("re-entering a hold that ended: %w", err)
		}
	}
	// Re-entry, a TryLock, and a Lock while other goroutines of this process wait (the owner
	// may hold m through another process, and must not queue behind those who wait for it)
	// try once, outside the local queue.
	if h != nil || !wait || m.room.Waiting() > 0 {
		got, err := m.once(ctx, o, wait)
		if err != nil || got || !wait {
			return got, err
		}
		if h != nil {
			return false, fmt.Errorf("re-entering: %w: the hold was taken", core.ErrLost)
		}
	}
	// In the room. If a hold of the owner starts here meanwhile (another goroutine of the owner
	// takes the mutex, or joins the owner's hold in another process), this Lock must not go on
	// waiting behind the queue, nor behind goroutines of other owners: its wait is ended, and
	// it re-enters (lock1 calls lock2 again).
	rctx, cancel := context.WithCancelCause(ctx)
	rw := &roomWait{o: o, cancel: cancel}
	m.mu.Lock()
	m.waiting = append(m.waiting, rw)
	m.mu.Unlock()
	err := m.room.Acquire(rctx)
	m.mu.Lock()
	if i := slices.Index(m.waiting, rw); i >= 0 {
		m.waiting = slices.Delete(m.waiting, i, i+1)
	}
	m.mu.Unlock()
	cause := context.Cause(rctx)
	cancel(nil)
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() == nil && errors.Is(cause, errOwnerHolds):
		return false, errOwnerHolds
	default:
		return false, err // Prim.Fail words it
	}
}

// once makes one attempt outside the Room, without queueing; if retry, connection errors are
// retried until ctx ends. An attempt whose reply was lost is undone first.
func (m *Mutex) once(ctx context.Context, o Owner, retry bool) (bool, error) {
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		res, id, err := m.attempt(WithOwner(ctx, o), "", waitq.Try{})
		if err == nil {
			return res.Acquired, nil
		}
		if id != "" { // the attempt may have counted: undo it
			m.undo(id)
		}
		if ctx.Err() != nil || errors.Is(err, core.ErrLost) || errors.Is(err, core.ErrLate) || !retry || !core.Transient(err) {
			return false, err // Prim.Fail words it
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return false, ctx.Err()
		case <-m.c.Done():
			return false, core.ErrClosed
		}
	}
}

// roomAttempt is the waitq.Attempt of Lock: an attempt that queues this Mutex value's waiter
// id if it fails, and adopts a grant made to it.
func (m *Mutex) roomAttempt(ctx context.Context, t waitq.Try) (waitq.Result, string, error) {
	return m.attempt(ctx, m.waiter, t)
}

// attempt is one run of reentrant_lock.lua for the owner in ctx. If this Mutex value holds m
// for the owner, the attempt re-enters that hold and only it; else it takes m, adopts a grant
// to waiter, or joins the owner's hold in another process; if it cannot, it queues waiter
// (none if waiter is ""). The value it returns for Abandon is "<request id> <owner>".
func (m *Mutex) attempt(ctx context.Context, waiter string, t waitq.Try) (waitq.Result, string, error) {
	o, _ := OwnerFrom(ctx)
	select {
	case m.turn <- struct{}{}:
	case <-ctx.Done():
		return waitq.Result{}, "", ctx.Err()
	}
	defer func() { <-m.turn }()
	m.mu.Lock()
	h := m.holds[o]
	unlocking := m.unlocking[o] != nil
	m.mu.Unlock()
	if unlocking {
		// An Unlock of the owner is still being finished: a fresh Lock must not join the hold
		// being released, nor a re-entry count in it. The caller waits for it and tries again.
		return waitq.Result{}, "", core.Permanent(errUnlocking)
	}
	expect := "0"
	if h != nil {
		if err := h.lease.Err(); err != nil {
			return waitq.Result{}, "", core.Permanent(fmt.Errorf("re-entering a hold that ended: %w", err))
		}
		expect = strconv.FormatInt(h.lease.Token(), 10)
	}
	id := m.c.NewID()
	backup := ""
	if t.Grant != nil {
		backup = t.Grant.Backup
	}
	sent := time.Now()
	var buf [4]int64 // the longest reply (reentrant_lock.lua's header)
	vals, err := core.Ints(scripts.ReentrantLockArgs{Keys: m.scriptKeys, Owner: string(o), ID: id, TTL: m.ttlArg, FenceTTL: m.fenceArg,
		OpsTTL: m.opsArg, Expect: expect, Waiter: waiter, Flags: scripts.Flags(t.More, t.Queued), Slack: m.slackArg,
		Prefix: m.chanPrefix, Pub: m.c.Pub, Backup: backup, Last: strconv.FormatInt(t.LastToken, 10)}.Exec(ctx, m.c.Client), buf[:0])
	if err != nil {
		return waitq.Result{}, undoOf(id, o), err
	}
	// After a success, the process stays queued if other goroutines of it wait (at the tail,
	// or in its place if the owner joined a hold already there): reentrant_lock.lua.
	queued := waiter != "" && t.More
	held := waitq.Result{Acquired: true, Queued: queued, Wait: m.ttl + m.ttl/core.RenewDivisor}
	if len(vals) == 3 {
		held.Token, held.Floor = vals[2], vals[2]
	}
	switch {
	case len(vals) == 3 && vals[0] == 1:
		if h != nil {
			err = m.reentered(h, id, o)
		} else {
			err = m.held(o, id, vals[2], sent)
		}
		if err != nil {
			return waitq.Result{}, "", err
		}
		return held, "", nil
	case len(vals) == 4 && vals[0] == 0:
		pttl := time.Duration(vals[1]) * time.Millisecond
		// The backstop, as for mutex: re-check when the holder's lease would run out, plus
		// slack; at most one command per lease against a holder that renews.
		wait := core.Backstop(pttl, m.ttl)
		if vals[2] == 1 || vals[3] == 1 {
			// A grant to another process publishes nothing if it lapses; the head of the queue
			// is told of each renewal of the lease (reentrant_renew.lua): either way, re-check
			// just after the end it was told of, not later. A holder that died is then
			// replaced within a round trip of its expiry.
			wait = pttl + 2*time.Millisecond
		}
		// reentrant_lock.lua keeps the entry for the lease waited behind plus the slack.
		return waitq.Result{Queued: waiter != "", Wait: wait, Keep: pttl + 2*m.ttl/core.RenewDivisor}, "", nil
	case len(vals) == 1 && vals[0] == -2:
		// The hold being re-entered is gone from Redis: it was lost.
		h.lease.Stop()
		h.lease.End(fmt.Errorf("%w: the hold was gone from Redis when it was re-entered", distsync.ErrLost))
		return waitq.Result{}, "", core.Permanent(fmt.Errorf("re-entering a hold that ended: %w", h.lease.Err()))
	}
	return waitq.Result{}, "", core.Unexpected(scripts.ReentrantLock, slices.Clone(vals)) // a copy: vals is on the stack
}

// reentered counts a re-entry of h that Redis made for attempt id of o. If h's lease ended
// while the attempt was in flight, the count it added is not this process's to keep: it undoes
// it and reports the loss.
func (m *Mutex) reentered(h *hold, id string, o Owner) error {
	m.mu.Lock()
	err := h.lease.Err()
	if err == nil {
		h.n++
	}
	m.mu.Unlock()
	if err != nil {
		m.undo(undoOf(id, o))
		return core.Permanent(fmt.Errorf("re-entering a hold that ended: %w", err))
	}
	return nil
}

// held starts the lease of a hold that attempt id of o, sent at sent, took with token, and
// records it. A renewal also tells the head waiter when the lease now ends
// (reentrant_renew.lua): made by RenewWith at each renewal, not here, so that a hold released
// before its first renewal, the common case, pays nothing for it.
func (m *Mutex) held(o Owner, id string, token int64, sent time.Time) error {
	l, err := m.c.Hold(core.LeaseSpec{
		Key: m.lock, Owner: m.field(o), Kind: "h", TTL: m.ttl, Renew: m.renew,
		Token: token, Sent: sent, RenewWith: m.renewWith, Release: m.releaseLease,
	})
	if err != nil { // closed, or too late to use: nothing of it is registered here
		m.undo(undoOf(id, o))
		return err
	}
	m.mu.Lock()
	m.holds[o] = &hold{n: 1, lease: l}
	// The owner's Locks waiting in the room re-enter this hold instead (see lock2).
	for _, rw := range m.waiting {
		if rw.o == o {
			rw.cancel(errOwnerHolds)
		}
	}
	m.mu.Unlock()
	return nil
}

// undoOf is what Abandon takes to undo attempt id of o: made only when an attempt must be
// undone.
func undoOf(id string, o Owner) string { return id + " " + string(o) }

// undo undoes an attempt (see abandon) before the caller goes on, retrying in the background
// if Redis cannot be reached.
func (m *Mutex) undo(undo string) {
	m.c.Undo("undoing a reentrant lock attempt", opsTTL, func(ctx context.Context) error {
		_, err := m.abandon(ctx, waitq.Leave{Owner: undo})
		return err
	})
}

// abandon is the waitq.Abandon of Lock (and the undo of an attempt): it undoes the attempt
// named by lv.Owner, if it counted; takes this Mutex value's waiter id out of the queue if
// lv.Dequeue; and passes on a grant made to it that nobody will take. It returns the token of
// the grant it passed on (0 if none).
func (m *Mutex) abandon(ctx context.Context, lv waitq.Leave) (int64, error) {
	id, o, _ := strings.Cut(lv.Owner, " ")
	abandon := scripts.ReentrantAbandonArgs{Keys: m.scriptKeys, Owner: o, ID: id, OpsTTL: core.Ms(opsTTL), Waiter: m.waiter,
		Window: m.windowArg, FenceTTL: m.fenceArg, Prefix: m.chanPrefix, Pub: m.c.Pub,
		Last: strconv.FormatInt(lv.LastToken, 10), Dequeue: scripts.Flags(lv.Dequeue), Grant: strconv.FormatInt(lv.Grant, 10)}
	vals, err := abandon.Exec(ctx, m.c.Client).AsIntSlice()
	if err != nil {
		return 0, err
	}
	if len(vals) != 2 {
		return 0, core.Unexpected(scripts.ReentrantAbandon, vals)
	}
	return vals[1], nil
}

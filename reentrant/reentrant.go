// Package reentrant is a mutex that its owner may lock again while holding it, across
// processes, on Redis: Java's ReentrantLock and Redisson's RLock, with an explicit owner.
//
// Go has no thread identity, so the owner is a token, an [Owner], carried in the
// context.Context of each call: make one with [NewOwner], attach it with [WithOwner], and pass
// that context down. Every call made under the same owner re-enters; a call under another
// owner, in this process or another, waits like any other. Two processes may share an owner
// (send its string to the other, which attaches it with WithOwner): the second then re-enters
// the first's hold, and the mutex is free once both have unlocked.
//
// The hold count lives in Redis, in a hash: owner -> count. Lock adds one and Unlock takes one
// away; the Unlock that brings it to zero hands the mutex to the next waiting process inside
// Redis, or frees it if nobody waits. A request is counted once however often it is sent: an
// Unlock retried after a lost reply is recognised by its request id, and a Lock whose reply
// was lost is undone before it is tried again. Each hold is a lease renewed by the Handle,
// with a loss signal; the fencing token is that of the outermost Lock, the same for every
// nested one.
//
// Fairness: as for package mutex, waiting processes are served in the order they first
// waited, one hold each (a process whose goroutines wait for several owners goes back to the
// end of the line after each), and the goroutines of one process in the order they called
// Lock: a waiting process is overtaken at most once by each other process. A re-entry, and a
// Lock of an owner that holds the mutex through another process, never wait in that line. A
// Lock that finds the mutex free takes it at once, even while others are queued (a hand-off to
// a waiter that died lapsed, or the lease of a holder that died ran out).
package reentrant

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/internal/waitq"
)

// Owner identifies who holds a reentrant Mutex. Any non-empty string is an owner; NewOwner
// makes a unique one.
type Owner string

// NewOwner returns a new owner, unique across processes (128 random bits).
func NewOwner() Owner {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return Owner(hex.EncodeToString(b[:]))
}

type ownerKey struct{}

// WithOwner returns a copy of ctx that carries o: Lock, TryLock and Unlock act for o.
func WithOwner(ctx context.Context, o Owner) context.Context {
	return context.WithValue(ctx, ownerKey{}, o)
}

// OwnerFrom returns the owner ctx carries, if any.
func OwnerFrom(ctx context.Context) (Owner, bool) {
	o, ok := ctx.Value(ownerKey{}).(Owner)
	return o, ok && o != ""
}

// opsTTL is how long Redis remembers a request id (see internal/scripts/lib/ops.lua): far
// longer than a command stays in flight or an Unlock is retried.
const opsTTL = time.Minute

// Mutex is a reentrant mutual exclusion lock shared by every process that uses the same name
// on the same Redis. Make it with [New]; it is safe for concurrent use and must not be copied.
type Mutex struct {
	p     core.Prim
	c     *core.Handle // p.H
	name  string
	ttl   time.Duration
	renew bool

	lock       string
	keys       []string              // lock, fence, ops, q, qx: every key of m
	scriptKeys scripts.ReentrantKeys // the same, named, as its scripts take them
	chanPrefix string                // waiter w listens on chanPrefix + ":" + w
	waiter     string                // this Mutex value's id in the Redis queue
	room       *waitq.Room

	// Script arguments that never change, built once.
	ttlArg, fenceArg, slackArg, windowArg, opsArg string
	// renewWith (nil for a fixed lease) and releaseLease are the LeaseSpec.RenewWith and
	// Release of every hold, made once.
	renewWith    func(field string, token int64) scripts.Call
	releaseLease func(ctx context.Context, l *core.Lease) error

	// turn serialises attempts with each other and with the local side of Unlock (a
	// one-slot semaphore, so that an attempt can give up waiting for it with its context): an
	// attempt's outcome is matched with the local hold it was made for, and an Unlock that
	// gives up the last local hold cannot interleave with a re-entry of it. An attempt holds it
	// for one round trip; waiting happens outside it.
	turn  chan struct{}
	mu    sync.Mutex
	holds map[Owner]*hold // this process's holds, by owner
	// lastOwner and lastField: the hash field of the owner this value took m for last
	// (field), kept so that a worker that locks with one owner makes the string once.
	lastOwner Owner
	lastField string
	// unlocking holds, by owner, the Unlocks still being finished in the background (their
	// ctx ended, or Redis was unreachable): the owner's next Lock waits for them, so that a
	// new outermost Lock never joins a hold whose release is still on its way.
	unlocking map[Owner]*pending
	// waiting holds the Locks waiting in the room, with their owners: when a hold of their owner
	// starts here, they stop waiting and re-enter it (see lock2).
	// (A slice, not a map by owner: a Lock that waits alone, the common case, then costs no
	// allocation for it.)
	waiting []*roomWait
}

// roomWait is one Lock of owner o waiting in the room; cancel ends its wait with
// errOwnerHolds.
type roomWait struct {
	o      Owner
	cancel context.CancelCauseFunc
}

// pending counts an owner's Unlocks still being finished; done, made when a Lock of the owner
// waits for them (wait), closes when none is left. Guarded by the Mutex's mu.
type pending struct {
	n    int
	done chan struct{}
}

// wait returns a channel that closes when p's Unlocks are finished. Called with m.mu.
func (p *pending) wait() <-chan struct{} {
	if p.done == nil {
		p.done = make(chan struct{})
	}
	return p.done
}

// hold is what one owner holds of the mutex through this Mutex value.
type hold struct {
	n     int         // Locks not yet Unlocked
	lease *core.Lease // renewed while n > 0
	// gone says that the hold was lost and what Redis still had of it was given back: the
	// Unlocks still to come only report the loss.
	gone bool
}

// New returns the reentrant Mutex called name. It sends nothing to Redis. Its options are
// [distsync.WithLeaseTTL], [distsync.WithFixedLease] (a fixed lease runs from the last Lock:
// re-entering extends it to its TTL again, and Redis frees the mutex that long after the last
// Lock, whatever the count) and [distsync.WithHandoffWindow] (how long a hand-off to a waiting
// process lasts unless that process takes it up). It returns an error matching
// [distsync.ErrInvalid] for an empty name, a bad option value, or an option that does not
// apply to a reentrant mutex.
func New(h *distsync.Handle, name string, opts ...distsync.Option) (*Mutex, error) {
	p, set, ks, err := api.Setup(h, kind.Reentrant, name, opts, nil)
	if err != nil {
		return nil, err
	}
	c := p.H
	m := &Mutex{p: p, c: c, name: name, ttl: set.LeaseTTL, renew: !set.Fixed, turn: make(chan struct{}, 1), holds: make(map[Owner]*hold),
		unlocking: make(map[Owner]*pending)}
	m.lock, m.chanPrefix = ks.Key(), ks.Channel()
	k := scripts.ReentrantKeys{Lock: m.lock, Fence: ks.Part("fence"), Ops: ks.Part("ops"), Q: ks.Part("q"), QX: ks.Part("qx")}
	m.scriptKeys, m.keys = k, []string{k.Lock, k.Fence, k.Ops, k.Q, k.QX}
	// A queue entry outlives the lease it waits behind by two renewal periods, as a mutex's.
	m.ttlArg, m.fenceArg, m.slackArg = core.Ms(m.ttl), core.Ms(c.Config.FenceTTL), core.Ms(2*m.ttl/core.RenewDivisor)
	m.windowArg, m.opsArg = core.Ms(set.HandoffWindow), core.Ms(opsTTL)
	if m.renew {
		// A renewal also tells the head waiter when the lease now ends (reentrant_renew.lua).
		m.renewWith = func(field string, token int64) scripts.Call {
			return scripts.ReentrantRenewArgs{Lock: m.lock, Q: k.Q, QX: k.QX, Field: field,
				TTL: m.ttlArg, Token: strconv.FormatInt(token, 10), Prefix: m.chanPrefix, Pub: m.c.Pub}.Call()
		}
	}
	m.releaseLease = func(ctx context.Context, l *core.Lease) error {
		return m.releaseAll(ctx, Owner(strings.TrimPrefix(l.Owner(), fieldPrefix)), l)
	}
	m.waiter = c.NewID()
	m.room = waitq.NewRoom(c, m.chanPrefix+":"+m.waiter, waitq.Hooks{Parse: m.parse, Attempt: m.roomAttempt, Abandon: m.abandon})
	return m, nil
}

// Name returns the name the Mutex was made with.
func (m *Mutex) Name() string { return m.name }

// Lock locks m for the owner that ctx carries. If that owner holds m already, here or in
// another process, Lock adds one to its count and returns at once. Otherwise it waits, without
// polling, in line with the other waiting processes (see the package doc), until m is handed
// to it or found free, or ctx ends: there is no limit on tries or time. On success it returns
// nil ([Mutex.LockLease] returns the hold's lease too). If ctx ends first it returns an error
// matching both [distsync.ErrNotAcquired] and ctx.Err(), the count is as it was, and, unless
// other goroutines of the process still wait, the process's place in line is given up (a
// hand-off that reached it meanwhile goes on to the next waiting process) before Lock
// returns. It returns an error matching [distsync.ErrInvalid] if ctx carries no owner, and one
// matching [distsync.ErrLost] if the owner's hold here was lost (re-entering a lost hold would
// hide the loss). Connection errors are retried while waiting; other Redis errors are returned.
func (m *Mutex) Lock(ctx context.Context) error {
	_, _, err := m.acquire(ctx, true)
	return err
}

// TryLock is Lock without the wait: it returns true if the owner that ctx carries took or
// re-entered m, and false with a nil error if another owner holds it. ctx bounds the one round
// trip; if it ends first TryLock returns its error (matching [distsync.ErrNotAcquired]) and
// the count is as it was.
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	_, ok, err := m.acquire(ctx, false)
	return ok, err
}

// LockLease is [Mutex.Lock] that also returns the owner's [distsync.Lease]: one lease for the
// whole hold, from the outermost Lock to the last Unlock, so a nested LockLease returns the
// lease the outermost one did. It carries the fencing token of the outermost Lock and the loss
// signal of the hold.
func (m *Mutex) LockLease(ctx context.Context) (*distsync.Lease, error) {
	l, _, err := m.acquire(ctx, true)
	return api.Lease(l), err
}

// TryLockLease is [Mutex.TryLock] that also returns the owner's [distsync.Lease] when it took
// or re-entered m (nil otherwise), as [Mutex.LockLease] does.
func (m *Mutex) TryLockLease(ctx context.Context) (*distsync.Lease, bool, error) {
	l, ok, err := m.acquire(ctx, false)
	return api.Lease(l), ok, err
}

// acquire is every form of Lock (wait) and TryLock: it returns the owner's lease and true if
// the owner that ctx carries took or re-entered m. A ctx without an owner is refused before
// anything is done.
func (m *Mutex) acquire(ctx context.Context, wait bool) (*core.Lease, bool, error) {
	o, ok := OwnerFrom(ctx)
	if !ok {
		return nil, false, fmt.Errorf("reentrant %q: %w: no owner in the context (use reentrant.WithOwner)", m.name, distsync.ErrInvalid)
	}
	f := func(ctx context.Context) (*core.Lease, bool, error) {
		got, err := m.lock1(ctx, o, wait)
		if err != nil || !got {
			return nil, false, err
		}
		return m.leaseOf(o), true, nil
	}
	if !wait {
		return m.p.Try(ctx, core.One, "lock", f)
	}
	l, err := m.p.Wait(ctx, core.One, "lock", func(ctx context.Context) (*core.Lease, error) {
		l, _, err := f(ctx)
		return l, err
	})
	return l, err == nil, err
}

// Unlock takes one hold of the owner that ctx carries away; the last one hands m to the next
// waiting process, or frees it if nobody waits. It returns nil if the hold was given back. It
// returns an error matching [distsync.ErrNotHeld] if the owner holds no Lock of m through this
// Mutex value (the count in Redis is then unchanged), and one matching both ErrNotHeld and
// [distsync.ErrLost] if the owner's hold was lost. A connection error is retried with the same
// request id, which Redis counts once; if ctx ends first, or Redis stays unreachable, Unlock
// returns the error and the Handle keeps trying in the background until the lease would have
// run out anyway. Either way the hold is given up locally when Unlock returns.
func (m *Mutex) Unlock(ctx context.Context) error {
	o, ok := OwnerFrom(ctx)
	if !ok {
		return fmt.Errorf("reentrant %q: %w: no owner in the context (use reentrant.WithOwner)", m.name, distsync.ErrInvalid)
	}
	m.turn <- struct{}{} // at most an attempt's round trip
	m.mu.Lock()
	h := m.holds[o]
	if h == nil {
		m.mu.Unlock()
		<-m.turn
		return fmt.Errorf("reentrant %q: unlock by an owner that does not hold it: %w", m.name, distsync.ErrNotHeld)
	}
	h.n--
	left := h.n
	last := left == 0
	if last {
		delete(m.holds, o)
	}
	// Registered with the change above, under the turn: until this Unlock is finished in
	// Redis, the owner's attempts wait (see attempt).
	p := m.unlocking[o]
	if p == nil {
		p = &pending{}
		m.unlocking[o] = p
	}
	p.n++
	m.mu.Unlock()
	// The hold's state as of this Unlock, read before another goroutine's Unlock can end it.
	l := h.lease
	var err error
	if last {
		err = l.Stop()
	} else {
		err = l.Err()
	}
	<-m.turn
	if err != nil {
		if errors.Is(err, distsync.ErrLost) {
			m.mu.Lock()
			first := !h.gone
			h.gone = true
			m.mu.Unlock()
			if first {
				// Give back what Redis may still have of the hold (every count this process
				// holds in it; by token, so never a later hold's): it would otherwise keep the
				// others out until its TTL.
				_, _ = m.unlock(ctx, o, m.c.NewID(), left+1, l.Token())
			}
		}
		m.settled(o, p)
		return fmt.Errorf("reentrant %q: %w: %w", m.name, distsync.ErrNotHeld, err)
	}

	id := m.c.NewID() // retries send the same id: Redis counts the Unlock once
	n, err := m.unlock(ctx, o, id, 1, l.Token())
	held := n >= 0
	if err != nil {
		// Retried at once a few times, then in the background (GiveBack), which settles the
		// Unlock when it is over. Made only here: the closures cost the common case nothing.
		finally := func() { // the background attempts are over
			if last {
				l.End(distsync.ErrReleased)
			}
			m.settled(o, p)
		}
		held, err = m.c.GiveBackAfter(ctx, "unlock of reentrant mutex "+strconv.Quote(m.name), m.ttl, finally, err,
			func(ctx context.Context) (bool, error) {
				n, err := m.unlock(ctx, o, id, 1, l.Token())
				return n >= 0, err
			})
	}
	if err == nil {
		m.settled(o, p)
	}
	switch {
	case err != nil:
		return fmt.Errorf("reentrant %q: unlock: %w", m.name, err)
	case !held:
		lost := fmt.Errorf("%w: the hold had expired or been taken when it was released", distsync.ErrLost)
		l.End(lost)
		return fmt.Errorf("reentrant %q: %w: %w", m.name, distsync.ErrNotHeld, lost)
	}
	if last {
		l.End(distsync.ErrReleased)
	}
	return nil
}

// fieldPrefix makes an owner's field in the lock's hash: fieldPrefix + owner.
const fieldPrefix = "o:"

// field returns o's field in the lock's hash (the owner value of its leases).
func (m *Mutex) field(o Owner) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o != m.lastOwner {
		m.lastOwner, m.lastField = o, fieldPrefix+string(o)
	}
	return m.lastField
}

// settled ends one of o's Unlocks counted in p: the last one lets o's Locks go on.
func (m *Mutex) settled(o Owner, p *pending) {
	m.mu.Lock()
	if p.n--; p.n == 0 {
		if p.done != nil {
			close(p.done)
		}
		delete(m.unlocking, o)
	}
	m.mu.Unlock()
}

// unlock runs reentrant_unlock.lua: the owner's count left in the hold with token, or -1 if it
// held nothing there.
func (m *Mutex) unlock(ctx context.Context, o Owner, id string, by int, token int64) (int64, error) {
	unlock := scripts.ReentrantUnlockArgs{Keys: m.scriptKeys, Owner: string(o), ID: id, By: strconv.Itoa(by),
		OpsTTL: m.opsArg, Prefix: m.chanPrefix, Pub: m.c.Pub, Token: strconv.FormatInt(token, 10),
		Window: m.windowArg, FenceTTL: m.fenceArg}
	var buf [2]int64
	vals, err := core.Ints(unlock.Exec(ctx, m.c.Client), buf[:0])
	if err != nil {
		return 0, err
	}
	if len(vals) == 2 && vals[0] == 1 {
		return vals[1], nil
	}
	return -1, nil
}

// releaseAll gives back every hold o has through m in the hold of lease l: l's Release, for
// Handle.Close.
func (m *Mutex) releaseAll(ctx context.Context, o Owner, l *core.Lease) error {
	m.mu.Lock()
	h := m.holds[o]
	if h == nil || h.lease != l {
		m.mu.Unlock()
		return nil
	}
	delete(m.holds, o)
	n := h.n
	m.mu.Unlock()
	if n <= 0 {
		return nil
	}
	_, err := m.unlock(ctx, o, m.c.NewID(), n, l.Token())
	return err
}

// HoldCount returns how many Locks the owner that ctx carries holds through this Mutex value
// and has not yet Unlocked (0 for a context without an owner). It sends nothing to Redis: the
// count there also includes the holds of other processes that share the owner.
func (m *Mutex) HoldCount(ctx context.Context) int {
	o, _ := OwnerFrom(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.holds[o]; h != nil {
		return h.n
	}
	return 0
}

// leaseOf returns the lease of o's hold (nil if it holds no Lock of m through this Mutex
// value: another of its goroutines unlocked it meanwhile).
func (m *Mutex) leaseOf(o Owner) *core.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.holds[o]; h != nil {
		return h.lease
	}
	return nil
}

// Locker returns a [sync.Locker] whose Lock and Unlock call m's for owner o with
// context.Background(). Because sync.Locker has no error to return, they panic on any error:
// a Redis error, or an Unlock of a mutex o does not hold or lost.
func (m *Mutex) Locker(o Owner) sync.Locker {
	return core.Locker("reentrant: Locker",
		func(ctx context.Context) error { return m.Lock(WithOwner(ctx, o)) },
		func(ctx context.Context) error { return m.Unlock(WithOwner(ctx, o)) })
}

// parse is the waitq.Parse of this Mutex value's channel (see internal/scripts/lib/queue.lua;
// each message ends with the waiter id it is for): "g <token> <watchers> <ms>" (m is handed to
// this process for ms: its head adopts it), "w <ms>" (watch another process's grant), "c" (the
// watched grant was taken up), "x <ms>" (the lease waited behind now ends in ms). A message
// for another waiter, or not of these forms, asks for a re-check.
func (m *Mutex) parse(p string) waitq.Signal {
	to, sig := waitq.ParseQueued(p)
	if to != m.waiter {
		return waitq.Signal{Kind: waitq.Recheck}
	}
	return sig
}

// Holders returns who holds m, as Redis has it at one moment: the owner and its hold count, or none if m is free; Handle is empty, since a reentrant hold belongs to an [Owner], and Owner is that owner. It reads in one round
// trip and changes nothing; like any snapshot, it may be stale when it returns (see
// [distsync.Holder]). Find the process that holds a name by comparing [distsync.Holder.Handle]
// with [distsync.Handle.ID].
func (m *Mutex) Holders(ctx context.Context) ([]distsync.Holder, error) {
	hs, err := m.c.Holders(ctx, kind.Reentrant, m.name, core.LayoutHash, []string{m.lock})
	return api.Holders(hs), err
}

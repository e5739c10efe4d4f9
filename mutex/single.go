package mutex

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/keys"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/internal/rediserr"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/internal/waitq"
)

// single is the lock of a Mutex on one Redis (a plain Mutex, or one primary of a quorum).
type single struct {
	p     core.Prim
	c     *core.Handle // p.H
	ids   *core.Handle // makes the owner values and the waiter id: c, or a quorum's first Handle
	name  string
	ttl   time.Duration
	renew bool

	lockKey, fence, q, qx string
	chanPrefix            string // waiter w listens on chanPrefix + ":" + w
	waiter                string // this Mutex's id in the Redis queue
	room                  *waitq.Room

	// Script arguments that never change, built once.
	keys                                  scripts.MutexKeys
	rel                                   string // the record of releases (mutex_release.lua)
	with                                  string // the record of the All a hold is part of (mutex_acquire_all.lua)
	withKeep                              []string
	ttlArg, fenceArg, slackArg, windowArg string

	mu           sync.Mutex
	releaseHeld  func(ctx context.Context, l *core.Lease) (bool, error) // m.release, for Handle.Release
	releaseLease func(ctx context.Context, l *core.Lease) error         // the LeaseSpec.Release of every hold
	renewWith    func(owner string, token int64) scripts.Call           // the LeaseSpec.RenewWith of every hold

	lease *core.Lease // the current hold, nil when this Mutex is not held
	free  waitq.Gate  // the Room's gate: open while lease is nil

	// inAll is set while the current hold is part of an All's: its renewals keep the record
	// of the set (with) alive too.
	inAll atomic.Bool
}

// newSingle returns the lock called name on c's Redis, with settings set and keys in ks; its
// owner values and waiter id come from ids (c, except for the members of a quorum).
func newSingle(c, ids *core.Handle, name string, set core.Settings, ks keys.Space) *single {
	m := &single{p: core.Prim{H: c, Kind: kind.Mutex, Name: name}, c: c, ids: ids, name: name, ttl: set.LeaseTTL, renew: !set.Fixed}
	m.lockKey, m.fence, m.q, m.qx, m.chanPrefix = ks.Key(), ks.Part("fence"), ks.Part("q"), ks.Part("qx"), ks.Channel()
	m.keys = scripts.MutexKeys{Lock: m.lockKey, Fence: m.fence, Q: m.q, QX: m.qx}
	m.rel = ks.Part("rel")
	m.with = ks.Part("with")
	m.withKeep = []string{m.with}
	// A queue entry outlives the lease it waits behind by two renewal periods: one for the
	// backstop slack, one for a late timer.
	m.ttlArg, m.fenceArg, m.slackArg = core.Ms(m.ttl), core.Ms(c.Config.FenceTTL), core.Ms(2*m.ttl/core.RenewDivisor)
	m.windowArg = core.Ms(set.HandoffWindow)
	m.waiter = ids.NewID()
	// Made once, not per hold: the uncontended Lock+Unlock is a hot path.
	m.releaseHeld = m.release
	m.releaseLease = func(ctx context.Context, l *core.Lease) error {
		_, err := m.release(ctx, l)
		return err
	}
	// A renewal also tells the head waiter when the lease now ends (mutex_renew.lua).
	m.renewWith = func(owner string, token int64) scripts.Call {
		a := scripts.MutexRenewArgs{Lock: m.lockKey, Q: m.q, QX: m.qx,
			Owner: owner, TTL: m.ttlArg, Prefix: m.chanPrefix, Pub: m.c.Pub}
		if m.inAll.Load() {
			a.Keep = m.withKeep
		}
		return a.Call()
	}
	m.room = waitq.NewRoom(c, m.chanPrefix+":"+m.waiter, waitq.Hooks{Parse: m.parse, Attempt: m.attempt, Abandon: m.abandon, Gate: m.gate})
	return m
}

// gate is the waitq.Hooks.Gate of m: closed while m is not held locally.
func (m *single) gate() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.free.Wait(m.lease != nil)
}

// lock is the Lock of m (see Mutex.LockLease).
func (m *single) lock(ctx context.Context) (*core.Lease, error) {
	return m.p.Wait(ctx, core.One, "lock", m.wait)
}

// tryLock is the TryLock of m.
func (m *single) tryLock(ctx context.Context) (*core.Lease, bool, error) {
	return m.p.Try(ctx, core.One, "trylock", m.try1)
}

// wait waits in m's Room until it holds m.
func (m *single) wait(ctx context.Context) (*core.Lease, error) {
	if err := m.room.Acquire(ctx); err != nil {
		return nil, err
	}
	return m.current(), nil // unless the path delivered its lease (Prim.Wait prefers that)
}

// try1 is one try of TryLock.
func (m *single) try1(ctx context.Context) (*core.Lease, bool, error) {
	select {
	case <-m.gate():
	default:
		return nil, false, nil // held by a goroutine of this process
	}
	res, owner, err := m.try(ctx, "", waitq.Try{})
	if err != nil {
		if owner != "" && !isRedisErr(err) {
			// Void the attempt, or pass the lock on if it took it, before returning.
			m.c.Undo("cleanup after a cancelled TryLock", voidTTL,
				func(actx context.Context) error {
					_, err := m.abandon(actx, waitq.Leave{Owner: owner})
					return err
				})
		}
		return nil, false, err
	}
	if !res.Acquired {
		return nil, false, nil
	}
	return m.current(), true, nil // unless the path delivered its lease (Prim.Try prefers that)
}

// current returns m's current hold (nil if m is not held here).
func (m *single) current() *core.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease
}

// unlock is the Unlock of m (see Mutex.Unlock). A hold that is part of an All's is the All's
// to end: unlocking it here would free one name of a set its holder believes it holds whole.
func (m *single) unlock(ctx context.Context) error {
	if m.inAll.Load() {
		return fmt.Errorf("mutex %q: unlock: %w: it is held by a set of mutexes (mutex.All); unlock the set", m.name, distsync.ErrNotHeld)
	}
	return m.give(ctx)
}

// give ends m's current hold and releases it in Redis: Unlock's work, and that of an All or a
// quorum giving back one of its mutexes.
func (m *single) give(ctx context.Context) error {
	m.mu.Lock()
	l := m.lease
	if l != nil {
		m.lease = nil
		m.free.Open()
		if m.inAll.Load() {
			m.inAll.Store(false) // a write only for a hold that was in a set
		}
	}
	m.mu.Unlock()
	if l == nil {
		return fmt.Errorf("mutex %q: unlock of unlocked mutex: %w", m.name, distsync.ErrNotHeld)
	}
	err := m.c.Release(ctx, m.p, "unlock", l, m.releaseHeld)
	if err != nil {
		return fmt.Errorf("mutex %q: unlock: %w", m.name, err)
	}
	return nil
}

// release runs the release script for l: true if it released the lock, false if the lock was
// not held by l's owner. A grant that the renewal loop has not confirmed yet is confirmed in
// the same round trip, first: the confirm also queues this Mutex's other waiters again, which
// must not be skipped by a holder quicker than the loop.
func (m *single) release(ctx context.Context, l *core.Lease) (bool, error) {
	rel := scripts.MutexReleaseArgs{Keys: m.keys, Rel: m.rel, Owner: l.Owner(), Window: m.windowArg,
		FenceTTL: m.fenceArg, Prefix: m.chanPrefix, Pub: m.c.Pub, TTL: m.ttlArg}
	if first := l.Unsent(); first != nil {
		res := scripts.DoMulti(ctx, m.c.Client, []scripts.Call{*first, rel.Call()})
		n, err := res[1].AsInt64()
		return n == 1, err
	}
	n, err := rel.Exec(ctx, m.c.Client).AsInt64()
	return n == 1, err
}

// holders reads who holds m.
func (m *single) holders(ctx context.Context) ([]core.HolderInfo, error) {
	return m.c.Holders(ctx, kind.Mutex, m.name, core.LayoutString, []string{m.lockKey, m.fence})
}

// attempt is the waitq.Attempt of Lock: it queues this Mutex's waiter id on failure.
func (m *single) attempt(ctx context.Context, t waitq.Try) (waitq.Result, string, error) {
	if g := t.Grant; g != nil && !t.QueuedAt.IsZero() && g.Token > t.Floor && !m.c.WaitsForReplicas() {
		// The release granted the lock to this process (see lib/queue.lua). Redis expires the
		// grant one hand-off window after the release ran, and the release ran after this
		// process's last queueing command was sent (its token is above the last token handed
		// out before that command: Floor): a deadline counted from that send time is safe
		// without asking Redis. An older grant's message may come late, after that grant
		// lapsed or was passed on: it goes to Redis below. The grant is confirmed (extended
		// to the lease) by the renewal loop right away, off this goroutine's path.
		// The window is the releaser's (it may be configured differently from this Handle's).
		window := g.Window
		deadline := t.QueuedAt.Add(window - core.Drift(window))
		if time.Until(deadline) > window/4 {
			confirm := scripts.MutexConfirmArgs{Keys: m.keys, Owner: g.Owner, TTL: m.ttlArg, Waiter: m.waiter,
				Requeue: scripts.Flags(t.More), Slack: m.slackArg, Prefix: m.chanPrefix, Pub: m.c.Pub, Backup: g.Backup,
				Window: m.windowArg, FenceTTL: m.fenceArg}.Call()
			if _, err := m.hold(ctx, g.Owner, g.Token, time.Now(), deadline, &confirm); err != nil {
				return waitq.Result{}, "", err
			}
			return waitq.Result{Acquired: true, Token: g.Token, Queued: t.More, Floor: g.Token, Wait: m.ttl + m.ttl/core.RenewDivisor}, "", nil
		}
		// Too little of the grant is sure to be left: look for it in Redis (adopting it).
	}
	return m.try(ctx, m.waiter, t)
}

// try runs the acquire script once. waiter "" is TryLock: no queueing, no grants.
func (m *single) try(ctx context.Context, waiter string, t waitq.Try) (waitq.Result, string, error) {
	owner := m.ids.NewID()
	slack := m.ttl / core.RenewDivisor
	backup := ""
	if t.Grant != nil {
		backup = t.Grant.Backup
	}
	sent := time.Now()
	acquire := scripts.MutexAcquireArgs{Keys: m.keys, Owner: owner, TTL: m.ttlArg, FenceTTL: m.fenceArg,
		Waiter: waiter, Flags: scripts.Flags(t.More, t.Queued, t.Grant != nil), Slack: m.slackArg,
		Prefix: m.chanPrefix, Pub: m.c.Pub, Backup: backup, Last: strconv.FormatInt(t.LastToken, 10)}
	var buf [5]int64 // the longest reply (mutex_acquire.lua's header)
	vals, err := core.Ints(acquire.Exec(ctx, m.c.Client), buf[:0])
	if err != nil {
		return waitq.Result{}, owner, err
	}
	if len(vals) < 2 {
		return waitq.Result{}, "", core.Unexpected(scripts.MutexAcquire, slices.Clone(vals)) // a copy: vals is on the stack
	}
	if vals[0] == 1 {
		if _, err := m.hold(ctx, owner, vals[1], sent, time.Time{}, nil); err != nil {
			return waitq.Result{}, "", err
		}
		return waitq.Result{Acquired: true, Token: vals[1], Queued: waiter != "" && t.More, Floor: vals[1], Wait: m.ttl + slack}, owner, nil
	}
	// The backstop: an expiring lease publishes nothing (see core.Backstop).
	pttl := time.Duration(vals[1]) * time.Millisecond
	wait := core.Backstop(pttl, m.ttl)
	switch {
	case len(vals) > 2 && vals[2] == 1:
		wait = pttl + 2*time.Millisecond // an unconfirmed grant to another waiter: it publishes nothing if it lapses
	case len(vals) > 4 && vals[4] == 1:
		// The head of the queue: each renewal of the lease tells it when the lease now ends
		// (mutex_renew.lua), so it re-checks just after the lease it saw, not later: a holder
		// that died is replaced within a round trip of its expiry.
		wait = pttl + 2*time.Millisecond
	}
	var floor int64
	if len(vals) > 3 {
		floor = vals[3]
	}
	// mutex_acquire.lua keeps the entry for the lease waited behind plus the slack.
	return waitq.Result{Queued: waiter != "", Wait: wait, Floor: floor, Keep: pttl + 2*m.ttl/core.RenewDivisor}, owner, nil
}

// hold makes the acquisition under owner m's current hold, with its lease on the renewal loop,
// and delivers the lease to ctx's sink. An acquisition the Handle refuses (closed, or its
// reply came too late to use) is given back.
func (m *single) hold(ctx context.Context, owner string, token int64, sent, deadline time.Time, first *scripts.Call) (*core.Lease, error) {
	l, err := m.c.Hold(core.LeaseSpec{
		Key: m.lockKey, Owner: owner, Kind: "s", TTL: m.ttl, Renew: m.renew, Token: token, Sent: sent,
		Deadline: deadline, First: first, Release: m.releaseLease, RenewWith: m.renewWith,
	})
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.lease = l
	m.mu.Unlock()
	core.Deliver(ctx, l)
	return l, nil
}

// abandon is the waitq.Abandon of Lock (and the cleanup of a TryLock whose reply was lost).
func (m *single) abandon(ctx context.Context, lv waitq.Leave) (int64, error) {
	leave := scripts.MutexLeaveArgs{Keys: m.keys, Waiter: m.waiter, Owner: lv.Owner, Window: m.windowArg,
		FenceTTL: m.fenceArg, Prefix: m.chanPrefix, Pub: m.c.Pub, VoidTTL: core.Ms(voidTTL),
		Last: strconv.FormatInt(lv.LastToken, 10), Dequeue: scripts.Flags(lv.Dequeue), Grant: strconv.FormatInt(lv.Grant, 10)}
	vals, err := leave.Exec(ctx, m.c.Client).AsIntSlice()
	if err != nil {
		return 0, err
	}
	if len(vals) != 2 {
		return 0, core.Unexpected(scripts.MutexLeave, vals)
	}
	return vals[1], nil
}

// parse is the waitq.Parse of m's channel (see internal/scripts/lib/queue.lua; each message
// ends with the waiter id it is for, this Mutex's): "g <token> <backup> <ms>" (the lock is
// granted to m for ms unless confirmed, as '~<waiter>:<token>'), "w <ms>" (watch another
// waiter's grant), "c" (the watched grant was confirmed). A message for another waiter, or
// not of these forms, asks for a re-check.
func (m *single) parse(p string) waitq.Signal {
	to, sig := waitq.ParseQueued(p)
	if to != m.waiter {
		return waitq.Signal{Kind: waitq.Recheck}
	}
	if sig.Kind == waitq.Granted {
		sig.Grant.Owner = "~" + m.waiter + ":" + strconv.FormatInt(sig.Grant.Token, 10)
	}
	return sig
}

func isRedisErr(err error) bool {
	_, ok := rediserr.As(err)
	return ok
}

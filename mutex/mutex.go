// Package mutex is sync.Mutex across processes: one owner at a time for a name, on Redis.
//
// A Mutex is held by at most one goroutine in all processes that share its name and Redis.
// Lock waits, without polling, until it gets the lock or its context ends; Unlock hands the
// lock to the next waiting process inside Redis. Each hold is a [distsync.Lease] with a
// fencing token and a loss signal: the Handle renews it, and if it is lost (expired, deleted,
// taken, or Redis was unreachable until its deadline) its Done channel closes and Unlock
// reports the loss.
//
// Fairness: waiting processes are served in the order they first waited, one hold each, and
// the goroutines of one process in the order they called Lock. A Lock that finds the mutex
// free takes it at once, even while others are queued (a grant to a waiter that died lapsed).
//
// A Mutex is not reentrant: a goroutine that locks a Mutex it holds waits for itself until
// its context ends. Like a sync.Mutex, a locked Mutex is not tied to a goroutine: one may
// Lock and another Unlock; and a Lock on a Mutex value that is held waits for its Unlock, even
// if the hold was lost in Redis meanwhile (so that Unlock cannot release a later hold).
package mutex

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/internal/waitq"
)

// voidTTL is how long an abandoned acquire attempt stays void (see mutex_leave.lua): far
// longer than a command can stay in flight.
const voidTTL = time.Minute

// Mutex is a mutual exclusion lock shared by every process that uses the same name on the
// same Redis. Make it with [New]; it is safe for concurrent use and must not be copied.
type Mutex struct {
	c     *core.Handle
	ids   *core.Handle // makes the owner values and the waiter id: c, or a quorum's first Handle
	ql    *quorumLock  // set for a Mutex made WithQuorum: it locks its members, below
	name  string
	ttl   time.Duration
	renew bool

	lock, fence, q, qx string
	chanPrefix         string // waiter w listens on chanPrefix + ":" + w
	waiter             string // this Mutex's id in the Redis queue
	room               *waitq.Room

	// Script arguments that never change, built once.
	keys                                  scripts.MutexKeys
	rel                                   string // the record of releases (mutex_release.lua)
	ttlArg, fenceArg, slackArg, windowArg string

	mu           sync.Mutex
	unlockWhat   string                                         // what Unlock's clean-up is, for the log
	releaseLease func(ctx context.Context, l *core.Lease) error // the LeaseSpec.Release of every hold
	renewWith    func(owner string) scripts.Call                // the LeaseSpec.RenewWith of every hold

	lease *core.Lease   // the current hold, nil when this Mutex is not held
	free  chan struct{} // closed while lease is nil: the Room's gate
}

// New returns the Mutex called name. It sends nothing to Redis. Its options are
// [distsync.WithLeaseTTL], [distsync.WithFixedLease] and [distsync.WithHandoffWindow]; the
// Handle's settings apply otherwise. It returns an error matching [distsync.ErrInvalid] for
// an empty name, a bad option value, or an option that does not apply to a mutex. Any name
// is allowed otherwise; names that differ are different mutexes.
func New(h *distsync.Handle, name string, opts ...distsync.Option) (*Mutex, error) {
	c, err := core.Open(h, core.KindMutex)
	if err != nil {
		return nil, err
	}
	o := &options{}
	set, err := c.Settings(core.KindMutex, name, core.Unwrap(opts), o)
	if err != nil {
		return nil, err
	}
	if o.quorum != nil {
		return newQuorum(c, name, set, o.quorum)
	}
	return newMutex(c, c, name, set)
}

// newMutex returns the Mutex called name on c's Redis, with settings set; its owner values
// and waiter id come from ids (c, except for the members of a quorum).
func newMutex(c, ids *core.Handle, name string, set core.Settings) (*Mutex, error) {
	m := &Mutex{c: c, ids: ids, name: name, ttl: set.LeaseTTL, renew: !set.Fixed}
	ks, err := c.Space(core.KindMutex, name, m.ttl)
	if err != nil {
		return nil, err
	}
	m.lock, m.fence, m.q, m.qx, m.chanPrefix = ks.Key(), ks.Part("fence"), ks.Part("q"), ks.Part("qx"), ks.Channel()
	m.keys = scripts.MutexKeys{Lock: m.lock, Fence: m.fence, Q: m.q, QX: m.qx}
	m.rel = ks.Part("rel")
	// A queue entry outlives the lease it waits behind by two renewal periods: one for the
	// backstop slack, one for a late timer.
	m.ttlArg, m.fenceArg, m.slackArg = core.Ms(m.ttl), core.Ms(c.Config.FenceTTL), core.Ms(2*m.ttl/core.RenewDivisor)
	m.windowArg = core.Ms(set.HandoffWindow)
	m.waiter = ids.NewID()
	// Made once, not per hold: the uncontended Lock+Unlock is a hot path.
	m.unlockWhat = "unlock of mutex " + strconv.Quote(m.name)
	m.releaseLease = func(ctx context.Context, l *core.Lease) error {
		_, err := m.release(ctx, l)
		return err
	}
	// A renewal also tells the head waiter when the lease now ends (mutex_renew.lua).
	m.renewWith = func(owner string) scripts.Call {
		return scripts.MutexRenewArgs{Lock: m.lock, Q: m.q, QX: m.qx,
			Owner: owner, TTL: m.ttlArg, Prefix: m.chanPrefix, Pub: m.c.Pub}.Call()
	}
	m.free = make(chan struct{})
	close(m.free)
	m.room = waitq.NewRoom(c, m.chanPrefix+":"+m.waiter, waitq.Hooks{Parse: m.parse, Attempt: m.attempt, Abandon: m.abandon, Gate: m.gate})
	return m, nil
}

// gate is the waitq.Hooks.Gate of m: closed while m is not held locally.
func (m *Mutex) gate() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.free
}

// Name returns the name the Mutex was made with.
func (m *Mutex) Name() string { return m.name }

// Lock locks m. If the lock is held, anywhere, Lock waits until it can take it: it is woken
// by the release, never polls, and re-checks by itself only when the holder's lease would run
// out. ctx bounds the wait and nothing else: there is no limit on tries or time. On success
// it returns nil ([Mutex.LockLease] returns the hold's lease too). If ctx ends first it returns an error
// matching both [distsync.ErrNotAcquired] and ctx.Err(), and leaves nothing behind in Redis.
// Connection errors and the errors of a failover in progress (READONLY, LOADING, CLUSTERDOWN)
// are retried with backoff while waiting; any other Redis error ends the wait and is returned.
// If the Handle is closed, Lock returns an error matching [distsync.ErrClosed].
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.LockLease(ctx)
	return err
}

// LockLease is [Mutex.Lock] that also returns the hold's [distsync.Lease]: its fencing token,
// its loss signal, and the means to refresh or extend it. The lease ends when m is unlocked.
func (m *Mutex) LockLease(ctx context.Context) (*distsync.Lease, error) {
	obs := m.c.Begin(ctx, core.KindMutex, m.name, 1, false)
	l, err := m.lockLease(obs.Bind(ctx))
	obs.Done(l, err)
	return l, err
}

func (m *Mutex) lockLease(ctx context.Context) (*distsync.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, m.notAcquired(err)
	}
	if m.ql != nil {
		return m.ql.lock(ctx)
	}
	if err := m.c.Enter(); err != nil {
		return nil, fmt.Errorf("mutex %q: %w", m.name, err)
	}
	defer m.c.Exit()
	sctx, sink := core.WithSink(ctx)
	err := m.room.Acquire(sctx)
	switch {
	case err == nil:
		return m.taken(sink), nil
	case ctx.Err() != nil:
		return nil, m.notAcquired(ctx.Err())
	case errors.Is(err, core.ErrClosed):
		return nil, fmt.Errorf("mutex %q: %w", m.name, err)
	default:
		return nil, fmt.Errorf("mutex %q: lock: %w", m.name, err)
	}
}

// TryLock tries to lock m once, without waiting. It returns true if it took the lock and
// false, with a nil error, if the lock was held or just granted to a waiting process. ctx bounds
// the one round trip; if it ends before the reply, TryLock returns ctx's error (matching
// [distsync.ErrNotAcquired]) and makes sure the attempt takes nothing.
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	_, ok, err := m.TryLockLease(ctx)
	return ok, err
}

// TryLockLease is [Mutex.TryLock] that also returns the hold's [distsync.Lease] when it took
// the lock (nil otherwise).
func (m *Mutex) TryLockLease(ctx context.Context) (*distsync.Lease, bool, error) {
	obs := m.c.Begin(ctx, core.KindMutex, m.name, 1, false)
	l, ok, err := m.tryLockLease(ctx)
	obs.Done(l, err)
	return l, ok, err
}

func (m *Mutex) tryLockLease(ctx context.Context) (*distsync.Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, m.notAcquired(err)
	}
	if m.ql != nil {
		return m.ql.tryLock(ctx)
	}
	if err := m.c.Enter(); err != nil {
		return nil, false, fmt.Errorf("mutex %q: %w", m.name, err)
	}
	defer m.c.Exit()
	select {
	case <-m.gate():
	default:
		return nil, false, nil // held by a goroutine of this process
	}
	sctx, sink := core.WithSink(ctx)
	res, owner, err := m.try(sctx, "", waitq.Try{})
	if err != nil {
		if owner != "" && !isRedisErr(err) {
			// Void the attempt, or pass the lock on if it took it, before returning.
			m.c.Undo("cleanup after a cancelled TryLock", voidTTL,
				func(actx context.Context) error {
					_, err := m.abandon(actx, waitq.Leave{Owner: owner})
					return err
				})
		}
		if ctx.Err() != nil {
			return nil, false, m.notAcquired(ctx.Err())
		}
		if errors.Is(err, core.ErrLate) {
			return nil, false, m.notAcquired(err)
		}
		return nil, false, fmt.Errorf("mutex %q: trylock: %w", m.name, err)
	}
	if !res.Acquired {
		return nil, false, nil
	}
	return m.taken(sink), true, nil
}

// taken returns the lease of the hold an acquisition just took: the one its path delivered to
// sink (m's current hold otherwise, which it is unless another goroutine has unlocked m).
func (m *Mutex) taken(sink *core.Sink) *distsync.Lease {
	l := sink.Lease
	if l == nil {
		m.mu.Lock()
		l = m.lease
		m.mu.Unlock()
	}
	if l == nil {
		return nil
	}
	return l.Public.(*distsync.Lease)
}

// Unlock unlocks m and hands it to the next waiting process, if any. It returns nil if the
// lock was held and is now released. It returns an error matching [distsync.ErrNotHeld] if m
// is not locked, and one matching both ErrNotHeld and [distsync.ErrLost] if the hold was lost
// before Unlock (someone else may have the lock now). A connection error is retried a few
// times at once; a retry that finds the lock gone tells an earlier attempt that went through
// (its reply lost) from a lock lost meanwhile (Redis restarted empty, say) by the release that
// Redis records, and reports the loss in doubt. ctx bounds the wait for Redis; if it
// ends first, or Redis stays unreachable, Unlock returns the error and the Handle keeps trying
// in the background until the lease would have run out anyway. Either way m is unlocked
// locally when Unlock returns.
func (m *Mutex) Unlock(ctx context.Context) error {
	if m.ql != nil {
		return m.ql.unlock(ctx)
	}
	m.mu.Lock()
	l := m.lease
	if l != nil {
		m.lease = nil
		close(m.free)
	}
	m.mu.Unlock()
	if l == nil {
		return fmt.Errorf("mutex %q: unlock of unlocked mutex: %w", m.name, distsync.ErrNotHeld)
	}
	err := m.c.Release(ctx, m.unlockWhat, l,
		func(ctx context.Context) (bool, error) { return m.release(ctx, l) })
	if err != nil {
		return fmt.Errorf("mutex %q: unlock: %w", m.name, err)
	}
	return nil
}

// release runs the release script for l: true if it released the lock, false if the lock was
// not held by l's owner. A grant that the renewal loop has not confirmed yet is confirmed in
// the same round trip, first: the confirm also queues this Mutex's other waiters again, which
// must not be skipped by a holder quicker than the loop.
func (m *Mutex) release(ctx context.Context, l *core.Lease) (bool, error) {
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

// Holders returns who holds m, as Redis has it at one moment: the holder, or none if m is free. It reads in one round
// trip and changes nothing; like any snapshot, it may be stale when it returns (see
// [distsync.Holder]). Find the process that holds a name by comparing [distsync.Holder.Handle]
// with [distsync.Handle.ID].
func (m *Mutex) Holders(ctx context.Context) ([]distsync.Holder, error) {
	if m.ql != nil {
		return m.ql.holders(ctx)
	}
	hs, err := m.c.Holders(ctx, "mutex", m.name, core.LayoutString, []string{m.lock, m.fence})
	held, _ := hs.([]distsync.Holder)
	return held, err
}

// Locker returns a [sync.Locker] whose Lock and Unlock call m's with context.Background().
// Because sync.Locker has no error to return, they panic on any error: a Redis error, or an
// Unlock of a mutex that is not held or was lost. Use it only where a sync.Locker is required.
func (m *Mutex) Locker() sync.Locker { return core.Locker("mutex: Locker", m.Lock, m.Unlock) }

// attempt is the waitq.Attempt of Lock: it queues this Mutex's waiter id on failure.
func (m *Mutex) attempt(ctx context.Context, t waitq.Try) (waitq.Result, string, error) {
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
				Requeue: flag(t.More), Slack: m.slackArg, Prefix: m.chanPrefix, Pub: m.c.Pub, Backup: g.Backup,
				Window: m.windowArg, FenceTTL: m.fenceArg}.Call()
			if err := m.hold(ctx, g.Owner, g.Token, time.Now(), deadline, &confirm); err != nil {
				return waitq.Result{}, "", err
			}
			return waitq.Result{Acquired: true, Token: g.Token, Queued: t.More, Floor: g.Token, Wait: m.ttl + m.ttl/core.RenewDivisor}, "", nil
		}
		// Too little of the grant is sure to be left: look for it in Redis (adopting it).
	}
	return m.try(ctx, m.waiter, t)
}

// try runs the acquire script once. waiter "" is TryLock: no queueing, no grants.
func (m *Mutex) try(ctx context.Context, waiter string, t waitq.Try) (waitq.Result, string, error) {
	owner := m.ids.NewID()
	slack := m.ttl / core.RenewDivisor
	backup := ""
	if t.Grant != nil {
		backup = t.Grant.Backup
	}
	sent := time.Now()
	acquire := scripts.MutexAcquireArgs{Keys: m.keys, Owner: owner, TTL: m.ttlArg, FenceTTL: m.fenceArg,
		Waiter: waiter, Flags: flag(t.More) + flag(t.Queued) + flag(t.Grant != nil), Slack: m.slackArg,
		Prefix: m.chanPrefix, Pub: m.c.Pub, Backup: backup, Last: strconv.FormatInt(t.LastToken, 10)}
	vals, err := acquire.Exec(ctx, m.c.Client).AsIntSlice()
	if err != nil {
		return waitq.Result{}, owner, err
	}
	if len(vals) < 2 {
		return waitq.Result{}, "", core.Unexpected(scripts.MutexAcquire, vals)
	}
	if vals[0] == 1 {
		if err := m.hold(ctx, owner, vals[1], sent, time.Time{}, nil); err != nil {
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
func (m *Mutex) hold(ctx context.Context, owner string, token int64, sent, deadline time.Time, first *scripts.Call) error {
	l, err := m.c.Hold(core.LeaseSpec{
		Key: m.lock, Owner: owner, Kind: "s", TTL: m.ttl, Renew: m.renew, Token: token, Sent: sent,
		Deadline: deadline, First: first, Release: m.releaseLease, RenewWith: m.renewWith,
	})
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.lease = l
	m.free = make(chan struct{})
	m.mu.Unlock()
	core.Deliver(ctx, l)
	return nil
}

// abandon is the waitq.Abandon of Lock (and the cleanup of a TryLock whose reply was lost).
func (m *Mutex) abandon(ctx context.Context, lv waitq.Leave) (int64, error) {
	leave := scripts.MutexLeaveArgs{Keys: m.keys, Waiter: m.waiter, Owner: lv.Owner, Window: m.windowArg,
		FenceTTL: m.fenceArg, Prefix: m.chanPrefix, Pub: m.c.Pub, VoidTTL: core.Ms(voidTTL),
		Last: strconv.FormatInt(lv.LastToken, 10), Dequeue: flag(lv.Dequeue), Grant: strconv.FormatInt(lv.Grant, 10)}
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
func (m *Mutex) parse(p string) waitq.Signal {
	to, sig := waitq.ParseQueued(p)
	if to != m.waiter {
		return waitq.Signal{Kind: waitq.Recheck}
	}
	if sig.Kind == waitq.Granted {
		sig.Grant.Owner = "~" + m.waiter + ":" + strconv.FormatInt(sig.Grant.Token, 10)
	}
	return sig
}

func (m *Mutex) notAcquired(err error) error {
	return fmt.Errorf("mutex %q: %w: %w", m.name, distsync.ErrNotAcquired, err)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func isRedisErr(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}

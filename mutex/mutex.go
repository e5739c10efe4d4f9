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
	"sync"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/kind"
)

// voidTTL is how long an abandoned acquire attempt stays void (see mutex_leave.lua): far
// longer than a command can stay in flight.
const voidTTL = time.Minute

// Mutex is a mutual exclusion lock shared by every process that uses the same name on the
// same Redis. Make it with [New]; it is safe for concurrent use and must not be copied.
type Mutex struct {
	name string
	impl locker // a *single, or a *quorumLock for a Mutex made WithQuorum
}

// locker is what a Mutex locks with: one Redis, or a quorum of them. Each method is the
// whole call of the Mutex method of the same name, observed and with its errors mapped.
type locker interface {
	lock(ctx context.Context) (*core.Lease, error)
	tryLock(ctx context.Context) (*core.Lease, bool, error)
	unlock(ctx context.Context) error
	holders(ctx context.Context) ([]core.HolderInfo, error)
}

// New returns the Mutex called name. It sends nothing to Redis. Its options are
// [distsync.WithLeaseTTL], [distsync.WithFixedLease] and [distsync.WithHandoffWindow]; the
// Handle's settings apply otherwise. It returns an error matching [distsync.ErrInvalid] for
// an empty name, a bad option value, or an option that does not apply to a mutex. Any name
// is allowed otherwise; names that differ are different mutexes.
func New(h *distsync.Handle, name string, opts ...distsync.Option) (*Mutex, error) {
	o := &options{}
	p, set, ks, err := api.Setup(h, kind.Mutex, name, opts, o)
	if err != nil {
		return nil, err
	}
	if o.quorum != nil {
		q, err := newQuorum(p, set, o.quorum)
		if err != nil {
			return nil, err
		}
		return &Mutex{name: name, impl: q}, nil
	}
	return &Mutex{name: name, impl: newSingle(p.H, p.H, name, set, ks)}, nil
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
	_, err := m.impl.lock(ctx) // not LockLease: its public Lease is made only when asked for
	return err
}

// LockLease is [Mutex.Lock] that also returns the hold's [distsync.Lease]: its fencing token,
// its loss signal, and the means to refresh or extend it. The lease ends when m is unlocked.
func (m *Mutex) LockLease(ctx context.Context) (*distsync.Lease, error) {
	l, err := m.impl.lock(ctx)
	return api.Lease(l), err
}

// TryLock tries to lock m once, without waiting. It returns true if it took the lock and
// false, with a nil error, if the lock was held or just granted to a waiting process. ctx bounds
// the one round trip; if it ends before the reply, TryLock returns ctx's error (matching
// [distsync.ErrNotAcquired]) and makes sure the attempt takes nothing.
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	_, ok, err := m.impl.tryLock(ctx)
	return ok, err
}

// TryLockLease is [Mutex.TryLock] that also returns the hold's [distsync.Lease] when it took
// the lock (nil otherwise).
func (m *Mutex) TryLockLease(ctx context.Context) (*distsync.Lease, bool, error) {
	l, ok, err := m.impl.tryLock(ctx)
	return api.Lease(l), ok, err
}

// Unlock unlocks m and hands it to the next waiting process, if any. It returns nil if the
// lock was held and is now released. It returns an error matching [distsync.ErrNotHeld] if m
// is not locked, and one matching both ErrNotHeld and [distsync.ErrLost] if the hold was lost
// before Unlock (someone else may have the lock now). While m is held as a member of an [All],
// Unlock returns an error matching ErrNotHeld and changes nothing: the hold ends with the
// All's Unlock. A connection error is retried a few
// times at once; a retry that finds the lock gone tells an earlier attempt that went through
// (its reply lost) from a lock lost meanwhile (Redis restarted empty, say) by the release that
// Redis records, and reports the loss in doubt. ctx bounds the wait for Redis; if it
// ends first, or Redis stays unreachable, Unlock returns the error and the Handle keeps trying
// in the background until the lease would have run out anyway. Either way m is unlocked
// locally when Unlock returns.
func (m *Mutex) Unlock(ctx context.Context) error {
	return m.impl.unlock(ctx)
}

// Holders returns who holds m, as Redis has it at one moment: the holder, or none if m is free. It reads in one round
// trip and changes nothing; like any snapshot, it may be stale when it returns (see
// [distsync.Holder]). Find the process that holds a name by comparing [distsync.Holder.Handle]
// with [distsync.Handle.ID].
func (m *Mutex) Holders(ctx context.Context) ([]distsync.Holder, error) {
	hs, err := m.impl.holders(ctx)
	return api.Holders(hs), err
}

// Locker returns a [sync.Locker] whose Lock and Unlock call m's with context.Background().
// Because sync.Locker has no error to return, they panic on any error: a Redis error, or an
// Unlock of a mutex that is not held or was lost. Use it only where a sync.Locker is required.
func (m *Mutex) Locker() sync.Locker { return core.Locker("mutex: Locker", m.Lock, m.Unlock) }

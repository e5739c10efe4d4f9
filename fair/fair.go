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
	"fmt"
	"sync"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/fifo"
	"github.com/distsync/distsync/internal/kind"
)

// Mutex is a FIFO mutual exclusion lock shared by every process that uses the same name on
// the same Redis. Make it with [New]; it is safe for concurrent use and must not be copied.
type Mutex struct {
	l *fifo.Lock

	mu    sync.Mutex
	holds []*core.Lease // this value's holds, oldest first (more than one only after a loss)
}

// New returns the fair Mutex called name. It sends nothing to Redis. Its options are
// [distsync.WithLeaseTTL], [distsync.WithFixedLease] and [distsync.WithWaiterLease]. It
// returns an error matching [distsync.ErrInvalid] for an empty name, a bad option value, or an
// option that does not apply to a fair mutex.
func New(h *distsync.Handle, name string, opts ...distsync.Option) (*Mutex, error) {
	p, set, ks, err := api.Setup(h, kind.Fair, name, opts, nil)
	if err != nil {
		return nil, err
	}
	l := fifo.New(p, set, ks, false)
	m := &Mutex{l: l}
	l.Held = func(h *core.Lease) {
		m.mu.Lock()
		m.holds = append(m.holds, h)
		m.mu.Unlock()
	}
	return m, nil
}

// Name returns the name the Mutex was made with.
func (m *Mutex) Name() string { return m.l.Name() }

// Lock locks m, after every Lock call that reached Redis before this one and has not given
// up. It waits, without polling, until the lock is handed to it or ctx ends: there is no limit
// on tries or time. On success it returns nil ([Mutex.LockLease] returns the hold's lease
// too). If ctx
// ends first it returns an error matching both [distsync.ErrNotAcquired] and ctx.Err(), and
// leaves the queue (passing the lock on if it was just handed to it). Connection errors are
// retried while waiting; other Redis errors end the wait and are returned.
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.l.Acquire(ctx, "")
	return err
}

// LockLease is [Mutex.Lock] that also returns the hold's [distsync.Lease]: its fencing token,
// its loss signal, and the means to refresh or extend it. The lease ends when the hold is
// unlocked.
func (m *Mutex) LockLease(ctx context.Context) (*distsync.Lease, error) {
	l, err := m.l.Acquire(ctx, "")
	return api.Lease(l), err
}

// TryLock takes m if it is free and nobody waits for it, without waiting. It returns true if
// it took the lock and false, with a nil error, otherwise. ctx bounds the one round trip; if
// it ends first TryLock returns its error (matching [distsync.ErrNotAcquired]) and makes sure
// the attempt takes nothing.
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	_, ok, err := m.l.TryAcquire(ctx, "")
	return ok, err
}

// TryLockLease is [Mutex.TryLock] that also returns the hold's [distsync.Lease] when it took
// the lock (nil otherwise).
func (m *Mutex) TryLockLease(ctx context.Context) (*distsync.Lease, bool, error) {
	l, ok, err := m.l.TryAcquire(ctx, "")
	return api.Lease(l), ok, err
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
		return fmt.Errorf("fair %q: unlock of unlocked mutex: %w", m.l.Name(), distsync.ErrNotHeld)
	}
	l := m.holds[0]
	m.holds = m.holds[1:]
	m.mu.Unlock()
	return m.l.Release(ctx, "unlock", l)
}

// Holders returns who holds m, as Redis has it at one moment: the holder (or the waiter the lock was just handed to), or none if m is free. It reads in one round
// trip and changes nothing; like any snapshot, it may be stale when it returns (see
// [distsync.Holder]). Find the process that holds a name by comparing [distsync.Holder.Handle]
// with [distsync.Handle.ID].
func (m *Mutex) Holders(ctx context.Context) ([]distsync.Holder, error) {
	hs, err := m.l.Holders(ctx)
	return api.Holders(hs), err
}

// Locker returns a [sync.Locker] whose Lock and Unlock call m's with context.Background().
// They panic on any error (sync.Locker has no error to return).
func (m *Mutex) Locker() sync.Locker { return core.Locker("fair: Locker", m.Lock, m.Unlock) }

// Package rwmutex is sync.RWMutex across processes: many readers or one writer for a name,
// on Redis.
//
// The lock can be held by any number of readers, in any processes, or by one writer. Like
// sync.RWMutex it prefers writers: once a writer waits in Lock, new RLock calls wait behind it,
// so a steady stream of readers cannot keep a writer out; and when a writer unlocks, the readers
// that were waiting then get in before the next writer, so a stream of writers cannot keep
// readers out either. Waiting is woken by pub/sub, never by polling: a writer's Unlock wakes
// every waiting reader with one publish, and the last reader's RUnlock wakes the writers.
//
// Every hold is a [distsync.Lease] renewed by the Handle, with a loss signal: each RLock is its
// own share, so a reader that crashes gives its share back by itself after its lease, and a
// waiting writer then proceeds. Each renewal tells the waiters a hold keeps out when it now
// ends, so those of a holder that crashed get in a round trip after its lease ran out. A
// writer waiting to lock marks itself for as long as it waits and no longer, so a writer that
// crashed while waiting holds readers, and the writers behind it, back for at most about a
// lease. Write holds carry a fencing token; a read hold carries
// the name's last token (the last write's; see [distsync.Lease.Token]), shared by the readers.
//
// As with sync.RWMutex, a reader must not rely on taking a second read hold while it holds one
// (a writer may be waiting between the two), and a Lock on a RWMutex value whose write hold
// has not been Unlocked waits for that Unlock.
package rwmutex

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/internal/waitq"
)

// opsTTL is how long an abandoned attempt stays void (see internal/scripts/lib/ops.lua): far
// longer than a command can stay in flight.
const opsTTL = time.Minute

// RWMutex is a reader/writer mutual exclusion lock shared by every process that uses the same
// name on the same Redis. Make it with [New]; it is safe for concurrent use and must not be
// copied.
type RWMutex struct {
	p     core.Prim
	c     *core.Handle // p.H
	name  string
	ttl   time.Duration
	renew bool

	base        scripts.RWMutexArgs // the keys and the arguments that never change (lib/rw.lua)
	slack       time.Duration
	window      time.Duration
	waiterR     string // this value's waiter id for RLock, in Redis
	waiterW     string // this value's waiter id for Lock
	readers     *waitq.Room
	writers     *waitq.Room
	readersChan string
	// renewR and renewW are the LeaseSpec.RenewWith of read and write holds:
	// rwmutex_renew.lua, which also tells the waiters a hold keeps out when it now ends.
	renewR, renewW func(owner string, token int64) scripts.Call
	// unlockR and unlockW give back a read or a write hold (Handle.Release).
	unlockR, unlockW func(ctx context.Context, l *core.Lease) (bool, error)

	mu     sync.Mutex
	wlease *core.Lease   // the write hold, nil when not held by this value
	free   waitq.Gate    // the writers' Room's gate: open while wlease is nil
	rholds []*core.Lease // the read holds of this value, oldest first
}

// New returns the RWMutex called name. It sends nothing to Redis. Its options are
// [distsync.WithLeaseTTL] and [distsync.WithFixedLease] (for read and write holds alike) and
// [distsync.WithHandoffWindow]. It returns an error matching [distsync.ErrInvalid] for an
// empty name, a bad option value, or an option that does not apply to a rwmutex.
func New(h *distsync.Handle, name string, opts ...distsync.Option) (*RWMutex, error) {
	p, set, ks, err := api.Setup(h, kind.RWMutex, name, opts, nil)
	if err != nil {
		return nil, err
	}
	c := p.H
	m := &RWMutex{p: p, c: c, name: name, ttl: set.LeaseTTL, renew: !set.Fixed}
	keys := scripts.RWMutexKeys{W: ks.Key(), R: ks.Part("r"), WW: ks.Part("ww"), RQ: ks.Part("rq"), RA: ks.Part("ra"),
		Fence: ks.Part("fence"), Ops: ks.Part("ops"), WO: ks.Part("wo"), Rel: ks.Part("rel")}
	// A waiting mark outlives the wait it reported by two renewal periods: one for the
	// waiter's backstop slack, one for a late timer.
	m.slack, m.window = 2*m.ttl/core.RenewDivisor, set.HandoffWindow
	m.base = scripts.RWMutexArgs{Keys: keys, TTL: core.Ms(m.ttl), Slack: core.Ms(m.slack), Window: core.Ms(m.window),
		FenceTTL: core.Ms(c.Config.FenceTTL), OpsTTL: core.Ms(opsTTL), Prefix: ks.Channel(), Pub: c.Pub}
	m.waiterR, m.waiterW = c.NewID(), c.NewID()
	m.readersChan = ks.Channel() + ":r"
	m.renewR = func(owner string, token int64) scripts.Call {
		return m.args("r", owner, "", false).Call(scripts.RWMutexRenew)
	}
	m.renewW = func(owner string, token int64) scripts.Call {
		return m.args("w", owner, "", false).Call(scripts.RWMutexRenew)
	}
	m.unlockR = func(ctx context.Context, l *core.Lease) (bool, error) { return m.unlock(ctx, "r", l) }
	m.unlockW = func(ctx context.Context, l *core.Lease) (bool, error) { return m.unlock(ctx, "w", l) }
	m.readers = waitq.NewRoom(c, m.readersChan, waitq.Hooks{Parse: parse("*"),
		Attempt: func(ctx context.Context, t waitq.Try) (waitq.Result, string, error) {
			return m.attempt(ctx, "r", m.waiterR, t.More)
		},
		Abandon: func(ctx context.Context, lv waitq.Leave) (int64, error) {
			return 0, m.leave(ctx, "r", m.waiterR, lv.Owner, lv.Dequeue)
		}})
	m.writers = waitq.NewRoom(c, ks.Channel()+":w", waitq.Hooks{Parse: parse(m.waiterW), Gate: m.gate,
		Attempt: func(ctx context.Context, t waitq.Try) (waitq.Result, string, error) {
			return m.attempt(ctx, "w", m.waiterW, t.More)
		},
		Abandon: func(ctx context.Context, lv waitq.Leave) (int64, error) {
			return 0, m.leave(ctx, "w", m.waiterW, lv.Owner, lv.Dequeue)
		}})
	return m, nil
}

// Name returns the name the RWMutex was made with.
func (m *RWMutex) Name() string { return m.name }

// RLock locks m for reading. It waits, without polling, while a writer holds m or waits for
// it, until it gets a read hold or ctx ends: there is no limit on tries or time. On success it
// returns nil. If ctx ends first it returns an error matching both [distsync.ErrNotAcquired]
// and ctx.Err(), and leaves nothing behind in Redis. Connection errors are retried while
// waiting; other Redis errors are returned.
func (m *RWMutex) RLock(ctx context.Context) error {
	_, err := m.wait(ctx, m.readers)
	return err
}

// RLockLease is [RWMutex.RLock] that also returns the read hold's [distsync.Lease]. Its
// Token is the name's last token: that of the last write hold before it, or, if Redis keeps
// none (never written, restarted empty), one taken from the server clock; no write hold before
// it has a larger one, every write hold after it a larger one, and readers share it.
func (m *RWMutex) RLockLease(ctx context.Context) (*distsync.Lease, error) {
	l, err := m.wait(ctx, m.readers)
	return api.Lease(l), err
}

// TryRLock tries to lock m for reading once, without waiting: true if it did, false with a
// nil error if a writer holds m or waits for it. ctx bounds the one round trip.
func (m *RWMutex) TryRLock(ctx context.Context) (bool, error) {
	_, ok, err := m.try(ctx, "r")
	return ok, err
}

// TryRLockLease is [RWMutex.TryRLock] that also returns the read hold's [distsync.Lease]
// when it took one (nil otherwise).
func (m *RWMutex) TryRLockLease(ctx context.Context) (*distsync.Lease, bool, error) {
	l, ok, err := m.try(ctx, "r")
	return api.Lease(l), ok, err
}

// RUnlock gives back one read hold of m (the most recent this RWMutex value took). It returns
// nil if it was held; an error matching [distsync.ErrNotHeld] if this value holds no read hold
// (Redis is then unchanged), and one matching both ErrNotHeld and [distsync.ErrLost] if the
// hold had been lost. Connection errors are retried as for [RWMutex.Unlock].
func (m *RWMutex) RUnlock(ctx context.Context) error {
	m.mu.Lock()
	n := len(m.rholds)
	if n == 0 {
		m.mu.Unlock()
		return fmt.Errorf("rwmutex %q: RUnlock without RLock: %w", m.name, distsync.ErrNotHeld)
	}
	l := m.rholds[n-1]
	m.rholds = m.rholds[:n-1]
	m.mu.Unlock()
	return m.release(ctx, "r", l)
}

// Lock locks m for writing. It waits, without polling, until no writer holds m and every
// reader has gone, then takes it, or until ctx ends: there is no limit on tries or time. While
// it waits, new readers wait behind it. On success it returns nil ([RWMutex.LockLease]
// returns the hold's lease too). If ctx ends first it returns an error matching both
// [distsync.ErrNotAcquired] and ctx.Err(), and leaves nothing behind in Redis (the readers it
// held back go on).
func (m *RWMutex) Lock(ctx context.Context) error {
	_, err := m.wait(ctx, m.writers)
	return err
}

// LockLease is [RWMutex.Lock] that also returns the write hold's [distsync.Lease]. Its
// fencing token is larger than that of every write hold before it.
func (m *RWMutex) LockLease(ctx context.Context) (*distsync.Lease, error) {
	l, err := m.wait(ctx, m.writers)
	return api.Lease(l), err
}

// TryLock tries to lock m for writing once, without waiting: true if it did, false with a nil
// error if m is held or a reader it owes a turn to has not come yet. ctx bounds the one
// round trip.
func (m *RWMutex) TryLock(ctx context.Context) (bool, error) {
	_, ok, err := m.TryLockLease(ctx)
	return ok, err
}

// TryLockLease is [RWMutex.TryLock] that also returns the write hold's [distsync.Lease] when
// it took it (nil otherwise).
func (m *RWMutex) TryLockLease(ctx context.Context) (*distsync.Lease, bool, error) {
	select {
	case <-m.gate():
	default:
		return nil, false, nil // this value's write hold has not been Unlocked
	}
	l, ok, err := m.try(ctx, "w")
	return api.Lease(l), ok, err
}

// Unlock gives back the write hold of m and wakes the waiting readers (all of them, with one
// publish) or, if none waits, the writers. It returns nil if the hold was given back; an
// error matching [distsync.ErrNotHeld] if m is not write-locked by this value (a reader's
// Unlock included; Redis is then unchanged), and one matching both ErrNotHeld and
// [distsync.ErrLost] if the hold had been lost. A connection error is retried a few times;
// if ctx ends first, or Redis stays unreachable, Unlock returns the error and the Handle keeps
// trying in the background until the lease would have run out anyway.
func (m *RWMutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	l := m.wlease
	if l != nil {
		m.wlease = nil
		m.free.Open()
	}
	m.mu.Unlock()
	if l == nil {
		return fmt.Errorf("rwmutex %q: Unlock of a RWMutex not write-locked: %w", m.name, distsync.ErrNotHeld)
	}
	return m.release(ctx, "w", l)
}

// Locker returns a [sync.Locker] whose Lock and Unlock call m's Lock and Unlock with
// context.Background(). They panic on any error (sync.Locker has no error to return).
func (m *RWMutex) Locker() sync.Locker { return core.Locker("rwmutex: Locker", m.Lock, m.Unlock) }

// RLocker returns a [sync.Locker] whose Lock and Unlock call m's RLock and RUnlock with
// context.Background(). They panic on any error (sync.Locker has no error to return).
func (m *RWMutex) RLocker() sync.Locker { return core.Locker("rwmutex: RLocker", m.RLock, m.RUnlock) }

// wait waits in room for a hold and returns its lease.
func (m *RWMutex) wait(ctx context.Context, room *waitq.Room) (*core.Lease, error) {
	l, err := m.p.Wait(ctx, core.Weight{N: 1, Shared: room == m.readers}, "lock", func(ctx context.Context) (*core.Lease, error) {
		return nil, room.Acquire(ctx) // the lease is in the sink (hold)
	})
	return l, err
}

// try tries once for a hold of mode ("r" or "w").
func (m *RWMutex) try(ctx context.Context, mode string) (*core.Lease, bool, error) {
	l, ok, err := m.p.Try(ctx, core.Weight{N: 1, Shared: mode == "r"}, "try", func(ctx context.Context) (*core.Lease, bool, error) {
		res, owner, err := m.attempt(ctx, mode, "", false)
		if err != nil {
			if owner != "" {
				m.c.Undo("cleanup after a cancelled try", opsTTL,
					func(actx context.Context) error { return m.leave(actx, mode, "", owner, false) })
			}
			return nil, false, err
		}
		return nil, res.Acquired, nil // the lease is in the sink (hold)
	})
	return l, ok, err
}

// args returns the KEYS and ARGV of every rwmutex script (see internal/scripts/lib/rw.lua).
func (m *RWMutex) args(mode, owner, waiter string, more bool) scripts.RWMutexArgs {
	a := m.base
	a.Mode, a.Owner, a.Waiter, a.More = mode, owner, waiter, "0"
	if more {
		a.More = "1"
	}
	return a
}

// attempt runs rwmutex_lock.lua once; waiter "" is a Try (no waiting mark).
func (m *RWMutex) attempt(ctx context.Context, mode, waiter string, more bool) (waitq.Result, string, error) {
	owner := m.c.NewID()
	sent := time.Now()
	vals, err := m.args(mode, owner, waiter, more).Exec(ctx, m.c.Client, scripts.RWMutexLock).AsIntSlice()
	if err != nil {
		return waitq.Result{}, owner, err
	}
	switch {
	case len(vals) == 2 && vals[0] == 1:
		if err := m.hold(ctx, mode, owner, vals[1], sent); err != nil {
			return waitq.Result{}, "", err
		}
		if mode == "r" && more {
			// The process's admission (if any) is kept for the readers behind this one: count
			// the Room as queued, so that the last of them to leave removes it, and let the
			// next one attempt at once (Wait 0), within the admission (Keep).
			return waitq.Result{Acquired: true, Token: vals[1], Queued: true, Keep: m.window}, "", nil
		}
		// A writer with more local writers behind it keeps its waiting mark, for the hold plus
		// slack, so that readers stay behind them; its Room then waits for the release's
		// message.
		if mode == "w" && waiter != "" && more {
			return waitq.Result{Acquired: true, Token: vals[1], Queued: true, Wait: m.ttl + m.ttl/core.RenewDivisor, Keep: m.ttl + m.slack}, "", nil
		}
		return waitq.Result{Acquired: true, Token: vals[1]}, "", nil
	case len(vals) == 3 && vals[0] == 0:
		wait := time.Duration(vals[1]) * time.Millisecond
		// The waiting mark lives wait + slack: the Room re-checks before then, whatever it is
		// told, so that the mark lives exactly as long as the waiter does.
		res := waitq.Result{Queued: waiter != "", Wait: core.Backstop(wait, m.ttl), Keep: wait + m.slack}
		if vals[2] == 1 {
			// What it waits behind ends in wait unless renewed, and each renewal tells it anew
			// (rwmutex_renew.lua): so it re-checks just after that, not later. A holder that
			// died is replaced a round trip after its lease ran out.
			res.Wait = wait + 2*time.Millisecond
		}
		return res, "", nil
	}
	return waitq.Result{}, "", core.Unexpected(scripts.RWMutexLock, vals)
}

// hold records an acquisition, puts its lease on the renewal loop and delivers it to ctx's
// sink.
func (m *RWMutex) hold(ctx context.Context, mode, owner string, token int64, sent time.Time) error {
	spec := core.LeaseSpec{Key: m.base.Keys.W, Owner: owner, Kind: "s", TTL: m.ttl, Renew: m.renew, Token: token, Sent: sent,
		RenewWith: m.renewW}
	if mode == "r" {
		spec.Key, spec.Kind, spec.RenewWith = m.base.Keys.R, "z", m.renewR
	}
	spec.Release = func(ctx context.Context, l *core.Lease) error {
		_, err := m.unlock(ctx, mode, l)
		return err
	}
	l, err := m.c.Hold(spec)
	if err != nil { // given back: the handle closed, or the reply came too late to use
		return err
	}
	core.Deliver(ctx, l)
	m.mu.Lock()
	defer m.mu.Unlock()
	if mode == "r" {
		m.rholds = append(m.rholds, l)
		return nil
	}
	m.wlease = l
	return nil
}

func (m *RWMutex) release(ctx context.Context, mode string, l *core.Lease) error {
	what, unlock := "Unlock", m.unlockW
	if mode == "r" {
		what, unlock = "RUnlock", m.unlockR
	}
	err := m.c.Release(ctx, m.p, what, l, unlock)
	if err != nil {
		return fmt.Errorf("rwmutex %q: %s: %w", m.name, what, err)
	}
	return nil
}

// unlock runs rwmutex_unlock.lua for l: true if it was still held.
func (m *RWMutex) unlock(ctx context.Context, mode string, l *core.Lease) (bool, error) {
	n, err := m.args(mode, l.Owner(), "", false).Exec(ctx, m.c.Client, scripts.RWMutexUnlock).AsInt64()
	return n == 1, err
}

// leave is the waitq.Abandon of RLock and Lock (and the cleanup of a cancelled try).
func (m *RWMutex) leave(ctx context.Context, mode, waiter, owner string, dequeue bool) error {
	if !dequeue {
		waiter = ""
	}
	return m.args(mode, owner, waiter, false).Exec(ctx, m.c.Client, scripts.RWMutexLeave).Error()
}

// gate is the writers' waitq.Hooks.Gate: closed while this value's write hold is not held.
func (m *RWMutex) gate() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.free.Wait(m.wlease != nil)
}

// parse returns the waitq.Parse of a channel whose renewal notices for this RWMutex value are
// addressed to "to" (see internal/scripts/lib/rw.lua): 'x <ms> <to>' says that what the Room
// waits behind now ends in ms; a notice to another waiter is not this Room's; every other
// message means "look again".
func parse(to string) func(string) waitq.Signal {
	return func(p string) waitq.Signal {
		id, sig := waitq.ParseQueued(p)
		switch {
		case sig.Kind != waitq.Extended:
			return waitq.Signal{Kind: waitq.Recheck}
		case id != to:
			return waitq.Signal{Kind: waitq.Ignore}
		}
		return sig
	}
}

// Holders returns who holds m, as Redis has it at one moment: the writer, or every reader's hold (Shared), or none if m is free. It reads in one round
// trip and changes nothing; like any snapshot, it may be stale when it returns (see
// [distsync.Holder]). Find the process that holds a name by comparing [distsync.Holder.Handle]
// with [distsync.Handle.ID].
func (m *RWMutex) Holders(ctx context.Context) ([]distsync.Holder, error) {
	hs, err := m.c.Holders(ctx, kind.RWMutex, m.name, core.LayoutRW, []string{m.base.Keys.W, m.base.Keys.R, m.base.Keys.Fence})
	return api.Holders(hs), err
}

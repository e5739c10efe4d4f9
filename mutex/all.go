package mutex

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/keys"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/internal/waitq"
	"github.com/redis/rueidis"
)

// All is a set of mutexes locked and unlocked together: Lock holds every one of them or none.
// Make it with [NewAll]; it is safe for concurrent use and must not be copied.
//
// All never deadlocks against another All or a Mutex, whatever sets they lock and in whatever
// order their mutexes were given: every All takes its mutexes in one order, the same in every
// process (by Redis Cluster hash slot, then by key), and waits only for a mutex that comes
// after every one it holds. Mutexes whose keys share a slot (all of them, on a Redis that is
// not a Cluster) are taken in one script, atomically, when they are free. While one is busy,
// Lock holds the ones before it and waits in that mutex's own queue, behind the processes that
// waited for it first, as its Lock would; it never gives up what it holds to try again, so it
// cannot livelock either. docs/design.md ("Several names at once") has the argument.
//
// A held All is one [distsync.Lease] over its mutexes' holds: it is lost, and its Done closes
// with [distsync.ErrLost], as soon as one of them is lost. Each mutex is held as its own Lock
// would hold it, so a Mutex of the same name in another process waits for the All, and the
// All for it. While the All holds them, the member Mutex values are the All's: Lock of one
// waits for the All's Unlock (as a second Lock of a held sync.Mutex waits), TryLock returns
// false, and Unlock returns an error matching [distsync.ErrNotHeld] and changes nothing.
type All struct {
	h      *core.Handle
	what   string    // for errors: `mutexes "a", "b"`
	ms     []*single // in NewAll's order
	order  []int     // indexes of ms in the order they are taken
	groups [][]int   // order cut into runs of one slot (one run on a Redis that is not a Cluster)
	with   string    // the set, as the record of each member says it (mutex_acquire_all.lua)
	ttl    time.Duration
	renew  bool

	mu     sync.Mutex
	lease  *core.Lease // the current hold over every member, nil when not held
	tokens []int64     // its tokens, in NewAll's order
}

// NewAll returns the set of mutexes ms, to be locked together. It sends nothing to Redis. The
// mutexes must be made from one Handle and all have renewed leases or all fixed ones (each
// keeps its own TTL); a Mutex made [WithQuorum] cannot be part of a set. It returns an error
// matching [distsync.ErrInvalid] for no mutexes, a nil one, one name given twice, mutexes of
// different Handles, a mix of renewed and fixed leases, or a quorum Mutex.
func NewAll(ms ...*Mutex) (*All, error) {
	bad := func(format string, args ...any) (*All, error) {
		return nil, fmt.Errorf("mutex: NewAll: %w: %s", distsync.ErrInvalid, fmt.Sprintf(format, args...))
	}
	if len(ms) == 0 {
		return bad("no mutexes")
	}
	a := &All{ms: make([]*single, len(ms))}
	names := make([]string, len(ms))
	quoted := make([]string, len(ms))
	for i, m := range ms {
		if m == nil {
			return bad("mutex %d is nil", i)
		}
		s, ok := m.impl.(*single)
		if !ok {
			return bad("mutex %q is a quorum mutex (WithQuorum)", m.name)
		}
		for j, o := range a.ms[:i] {
			switch {
			case o.c != s.c:
				return bad("mutexes %q and %q are of different Handles", ms[j].name, m.name)
			case o.lockKey == s.lockKey:
				return bad("mutex %q is given twice", m.name)
			case o.renew != s.renew:
				return bad("mutex %q has a renewed lease and %q a fixed one", pick(o.renew, ms[j].name, m.name), pick(o.renew, m.name, ms[j].name))
			}
		}
		a.ms[i], names[i], quoted[i] = s, m.name, strconv.Quote(m.name)
	}
	a.h, a.renew = a.ms[0].c, a.ms[0].renew
	a.what = "mutexes " + strings.Join(quoted, ", ")
	if len(ms) == 1 {
		a.what = "mutex " + quoted[0]
	}
	with, _ := json.Marshal(names)
	a.with = string(with)
	a.ttl = a.ms[0].ttl
	for _, s := range a.ms {
		a.ttl = min(a.ttl, s.ttl)
	}
	// The order every process takes the members in: by hash slot on a Cluster (where one
	// script can take only keys of one slot), then by key.
	cluster := a.h.Raw.Mode() == rueidis.ClientModeCluster
	slot := func(i int) int {
		if cluster {
			return keys.Slot(a.ms[i].lockKey)
		}
		return 0
	}
	a.order = make([]int, len(ms))
	for i := range a.order {
		a.order[i] = i
	}
	slices.SortFunc(a.order, func(i, j int) int {
		return cmp.Or(cmp.Compare(slot(i), slot(j)), strings.Compare(a.ms[i].lockKey, a.ms[j].lockKey))
	})
	for k, i := range a.order {
		if k == 0 || slot(i) != slot(a.order[k-1]) {
			a.groups = append(a.groups, nil)
		}
		a.groups[len(a.groups)-1] = append(a.groups[len(a.groups)-1], i)
	}
	return a, nil
}

func pick(first bool, a, b string) string {
	if first {
		return a
	}
	return b
}

// Lock locks every mutex of a, waiting until it holds them all. A mutex is waited for as its
// [Mutex.Lock] waits: woken by its release, never by polling, and served in its queue's order
// with the single-name waiters of that name. ctx bounds the wait and nothing else. On success
// it returns nil ([All.LockLease] returns the hold's lease too). If ctx ends first, Lock
// returns an error matching both [distsync.ErrNotAcquired] and ctx.Err(), after it has given
// back every mutex it held and left every queue it waited in: it holds none of them. Errors
// are otherwise as for [Mutex.Lock]; an error holds nothing.
func (a *All) Lock(ctx context.Context) error {
	_, _, err := a.acquire(ctx, false) // not LockLease: its public Lease is made only when asked for
	return err
}

// LockLease is [All.Lock] that also returns the hold's [distsync.Lease]: one lease over every
// mutex, lost as soon as one of them is lost, whose Refresh refreshes all of them. Its Token is
// the token of the first mutex given to NewAll; [All.Tokens] has every mutex's.
func (a *All) LockLease(ctx context.Context) (*distsync.Lease, error) {
	l, _, err := a.acquire(ctx, false)
	return api.Lease(l), err
}

// TryLock tries once to lock every mutex of a, without waiting. It returns true if it took
// them all, and false, with a nil error and holding none of them, if one was held or just
// granted to a waiting process (the ones it took meanwhile are given back before it returns).
// ctx bounds the round trips; if it ends first, TryLock returns ctx's error (matching
// [distsync.ErrNotAcquired]) and makes sure the attempt takes nothing.
func (a *All) TryLock(ctx context.Context) (bool, error) {
	_, ok, err := a.acquire(ctx, true)
	return ok, err
}

// TryLockLease is [All.TryLock] that also returns the hold's lease when it took the mutexes
// (nil otherwise).
func (a *All) TryLockLease(ctx context.Context) (*distsync.Lease, bool, error) {
	l, ok, err := a.acquire(ctx, true)
	return api.Lease(l), ok, err
}

// Tokens returns the fencing token of each mutex of the current hold, in the order given to
// NewAll, or nil if a is not held. Give each name's store its own token.
func (a *All) Tokens() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.tokens)
}

// Unlock unlocks every mutex of a, at once, and hands each to its next waiting process. It
// returns nil if all of them were held and are now released. It returns an error matching
// [distsync.ErrNotHeld] if a is not locked, and one matching both ErrNotHeld and
// [distsync.ErrLost] if the hold was lost before Unlock (one of the mutexes may be someone
// else's now); the mutexes still held are released either way. Each is released as
// [Mutex.Unlock] releases it, and a is unlocked locally when Unlock returns.
func (a *All) Unlock(ctx context.Context) error {
	a.mu.Lock()
	l := a.lease
	a.lease, a.tokens = nil, nil
	a.mu.Unlock()
	if l == nil {
		return fmt.Errorf("%s: unlock of unlocked mutexes: %w", a.what, distsync.ErrNotHeld)
	}
	lost := l.Err()
	l.End(distsync.ErrReleased) // first: the members' releases below must not read as a loss
	errs := unlockEach(ctx, a.ms, a.order)
	if lost != nil {
		return fmt.Errorf("%s: unlock: %w: %w", a.what, distsync.ErrNotHeld, lost)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: unlock: %w", a.what, err)
	}
	return nil
}

// unlockEach unlocks the mutexes ms[i] for i in idx at once (the last on the caller's
// goroutine) and returns each one's error: an All's members, a quorum's primaries.
func unlockEach(ctx context.Context, ms []*single, idx []int) []error {
	errs := make([]error, len(idx))
	var wg sync.WaitGroup
	for k, i := range idx {
		if k == len(idx)-1 {
			errs[k] = ms[i].give(ctx)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = ms[i].give(ctx)
		}()
	}
	wg.Wait()
	return errs
}

// acquire is the Lock (try false) and TryLock of a.
func (a *All) acquire(ctx context.Context, try bool) (*core.Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, a.notAcquired(err)
	}
	if err := a.h.Enter(); err != nil {
		return nil, false, fmt.Errorf("%s: %w", a.what, err)
	}
	defer a.h.Exit()
	// Each member is observed as a Lock of its own mutex: acquired when the set is.
	var obs []*core.Acquire
	if a.h.Config.Observer != nil {
		obs = make([]*core.Acquire, len(a.ms))
		for i, m := range a.ms {
			obs[i] = a.h.Begin(ctx, kind.Mutex, m.name, 1, false)
		}
	}
	held := make([]*core.Lease, len(a.ms))
	ok, err := a.take(ctx, obs, held, try)
	for errors.Is(err, errStale) || err == nil && ok && anyLost(held) {
		// A member taken early was lost while a later one was waited for (its Redis
		// restarted empty, say, and someone else may have held it since): the set was never
		// held whole, and that member's token may be below another holder's. Give everything
		// back and take the set again (TryLock: report it not taken). A member whose take
		// came too late to use is waited for in place (grab).
		a.giveBack(held)
		if try {
			ok, err = false, nil
			break
		}
		ok, err = a.take(ctx, obs, held, try)
	}
	if err != nil || !ok {
		// Give back what was taken before returning (its release retried in the
		// background if Redis cannot be reached now).
		a.giveBack(held)
		for _, o := range obs {
			o.Done(nil, err)
		}
		if err != nil {
			return nil, false, a.fail(ctx, err)
		}
		return nil, false, nil
	}
	tokens := make([]int64, len(held))
	for i, l := range held {
		tokens[i] = l.Token()
	}
	l := a.h.Together(held, tokens[0], a.ttl, a.renew)
	a.mu.Lock()
	a.lease, a.tokens = l, tokens
	a.mu.Unlock()
	for i, o := range obs {
		o.Done(held[i], nil)
	}
	return l, true, nil
}

// take takes every member into held (by index in NewAll's order), or returns with some of them
// held and false (try: one was busy) or an error.
func (a *All) take(ctx context.Context, obs []*core.Acquire, held []*core.Lease, try bool) (bool, error) {
	// First, every run of one slot whose members are free here is tried in one script, all
	// the runs in one round trip.
	first, err := a.grab(ctx, held, try)
	if err != nil {
		return false, err
	}
	if first == len(a.order) {
		return true, nil
	}
	if try {
		return false, nil
	}
	// The member at first is busy. Give back every member after it (taken out of order), so
	// that nothing is held while waiting but what comes before the awaited member; then wait
	// for each of the rest in turn, in its own Room, holding those before it.
	var later []int
	for _, i := range a.order[first+1:] {
		if held[i] != nil {
			later = append(later, i)
		}
	}
	a.giveBackEach(held, later)
	for _, i := range a.order[first:] {
		m := a.ms[i]
		wctx := ctx
		if obs != nil {
			wctx = obs[i].Bind(ctx)
		}
		sctx, sink := core.WithSink(wctx)
		if err := m.room.Acquire(sctx); err != nil {
			return false, fmt.Errorf("waiting for %q: %w", m.name, err)
		}
		held[i] = sink.Lease
		if held[i] == nil {
			held[i] = m.current()
		}
		m.inAll.Store(true)
	}
	// The members taken before the last wait may have been lost meanwhile without a renewal
	// having told yet (Redis restarted empty, and someone else held one since, with a larger
	// token): the set is held only if each of them is still its holder's in Redis now.
	if err := a.stillHeld(ctx, held, a.order[:len(a.order)-1]); err != nil {
		return false, err
	}
	// The record of the set, for inspect, on the members taken one by one: written with
	// their leases and renewed with them (mutex_renew.lua's keep keys). It decides nothing,
	// so Lock does not wait for it: a record that lands after the hold ended names an owner
	// value that is no longer the lock's, and is read as stale.
	cmds := make(rueidis.Commands, 0, len(a.order)-first)
	for _, i := range a.order[first:] {
		m := a.ms[i]
		cmds = append(cmds, a.h.Client.B().Set().Key(m.with).Value(held[i].Owner()+"\n"+a.with).Px(m.ttl).Build())
	}
	a.h.Background("writing the record of a set of mutexes", a.ttl, func(ctx context.Context) error {
		for _, r := range a.h.Client.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return err
			}
		}
		return nil
	})
	return true, nil
}

// grab tries, in one round trip, every run of members whose members this process does not
// hold already, and puts what it took in held. It returns the position in a.order of the first
// member not taken (len(a.order) if it took them all).
func (a *All) grab(ctx context.Context, held []*core.Lease, try bool) (int, error) {
	type run struct {
		group []int
		owner string
	}
	tries := make([]run, 0, len(a.groups))
	calls := make([]scripts.Call, 0, len(a.groups))
	fenceTTL := a.ms[0].fenceArg
	for _, g := range a.groups {
		free := true
		for _, i := range g {
			select {
			case <-a.ms[i].gate():
			default:
				free = false // held by this process (another goroutine, or another All)
			}
		}
		if !free {
			continue
		}
		owner := a.h.NewID()
		args := scripts.MutexAcquireAllArgs{Owner: owner, FenceTTL: fenceTTL, With: a.with,
			Keys: make([]string, 0, 4*len(g)), TTLs: make([]string, 0, len(g))}
		for _, i := range g {
			m := a.ms[i]
			args.Keys = append(args.Keys, m.lockKey, m.fence, m.qx, m.with)
			args.TTLs = append(args.TTLs, m.ttlArg)
		}
		tries = append(tries, run{g, owner})
		calls = append(calls, args.Call())
	}
	sent := time.Now()
	res := scripts.DoMulti(ctx, a.h.Client, calls)
	var failed error
	for k, t := range tries {
		vals, err := res[k].AsIntSlice()
		if err != nil {
			if !isRedisErr(err) {
				// Void the attempt, or give back what it took, before returning.
				for _, i := range t.group {
					m, owner := a.ms[i], t.owner
					m.c.Undo("cleanup after a cancelled lock of several mutexes", voidTTL,
						func(actx context.Context) error {
							_, err := m.abandon(actx, waitq.Leave{Owner: owner})
							return err
						})
				}
			}
			if try || ctx.Err() != nil || !core.Transient(err) {
				failed = cmp.Or(failed, err)
			} // else Lock waits for the run's first member in its Room, which retries
			continue
		}
		if len(vals) != len(t.group)+1 || vals[0] != 1 {
			if len(vals) < 2 {
				failed = cmp.Or(failed, core.Unexpected(scripts.MutexAcquireAll, vals))
			}
			continue
		}
		for j, i := range t.group {
			l, err := a.ms[i].hold(ctx, t.owner, vals[j+1], sent, time.Time{}, nil)
			switch {
			case err == nil:
				held[i] = l
				a.ms[i].inAll.Store(true)
			case !try && errors.Is(err, core.ErrLate):
				// Hold gave the claim back: its reply came after its lease's local deadline
				// (Redis or this process stalled). Lock goes on: the member counts as not
				// taken, and is waited for in its Room, which takes it again.
			default:
				failed = cmp.Or(failed, err) // Hold gave the claim back
			}
		}
	}
	if failed != nil {
		return 0, failed
	}
	for k, i := range a.order {
		if held[i] == nil {
			return k, nil
		}
	}
	return len(a.order), nil
}

// errStale is take's error for a set whose early members were lost while it waited.
var errStale = errors.New("a member taken earlier was lost meanwhile")

// stillHeld reads, in one round trip, the lock of each member idx, and returns errStale
// unless every one still holds its owner value (the lease's: owner values are never made
// twice, so the member was held throughout; with a '+' after it once someone queued behind
// it), or the error of a read (ctx's included).
func (a *All) stillHeld(ctx context.Context, held []*core.Lease, idx []int) error {
	if len(idx) == 0 {
		return nil
	}
	cmds := make(rueidis.Commands, len(idx))
	for k, i := range idx {
		cmds[k] = a.h.Client.B().Get().Key(a.ms[i].lockKey).Build()
	}
	for k, r := range a.h.Client.DoMulti(ctx, cmds...) {
		v, err := r.ToString()
		switch {
		case rueidis.IsRedisNil(err):
			return errStale
		case err != nil && (ctx.Err() != nil || isRedisErr(err)):
			return err
		case err != nil:
			return errStale // take it again: its waits retry what is transient
		case v != held[idx[k]].Owner() && v != held[idx[k]].Owner()+"+": // '+': waited for (lib/queue.lua)
			return errStale
		}
	}
	return nil
}

// anyLost reports whether a lease of held has ended.
func anyLost(held []*core.Lease) bool {
	for _, l := range held {
		if l != nil && l.Err() != nil {
			return true
		}
	}
	return false
}

// giveBack releases every member held (in the background if Redis cannot be reached in a
// second), for a Lock that does not return them.
func (a *All) giveBack(held []*core.Lease) {
	var idx []int
	for _, i := range a.order {
		if held[i] != nil {
			idx = append(idx, i)
		}
	}
	a.giveBackEach(held, idx)
}

func (a *All) giveBackEach(held []*core.Lease, idx []int) {
	if len(idx) == 0 {
		return
	}
	ctx, cancel := a.h.Detached(time.Second)
	defer cancel()
	for k, err := range unlockEach(ctx, a.ms, idx) {
		if err != nil && !errors.Is(err, distsync.ErrLost) {
			a.h.Log().Debug("distsync: giving back a mutex of a set failed", "mutex", a.ms[idx[k]].name, "err", err)
		}
		held[idx[k]] = nil
	}
}

func (a *All) notAcquired(err error) error {
	return fmt.Errorf("%s: %w: %w", a.what, distsync.ErrNotAcquired, err)
}

// fail maps the error of a Lock or TryLock that did not take the set, as core.Prim.Fail does.
func (a *All) fail(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, distsync.ErrNotAcquired):
		return fmt.Errorf("%s: %w", a.what, err)
	case ctx.Err() != nil:
		if errors.Is(err, ctx.Err()) {
			return a.notAcquired(err) // it says which member it waited for
		}
		return a.notAcquired(ctx.Err())
	case errors.Is(err, core.ErrLate):
		return a.notAcquired(err)
	case errors.Is(err, core.ErrClosed):
		return fmt.Errorf("%s: %w", a.what, distsync.ErrClosed)
	}
	return fmt.Errorf("%s: lock: %w", a.what, err)
}

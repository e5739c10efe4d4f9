// Package semaphore is x/sync/semaphore.Weighted across processes, on Redis: at most size
// units of work at once, among every process that uses the same name.
//
// Acquire waits, in first-in, first-out order across processes, until the permits it asks
// for are free; a request that does not fit holds back the smaller ones behind it, so a large
// request is never starved. Release gives permits back and hands them, inside Redis, to the
// waiters at the head of the queue whose requests now fit, waking those only: their Acquire
// returns without another round trip.
//
// Permits are leases, renewed by the Handle while held: permits of a process that crashed
// come back by themselves after their lease (each renewal tells the first waiter when its
// request would fit, so it takes them a round trip after that), and a holder whose permits were
// lost learns it through [Semaphore.AcquireLease]'s lease. Waiters keep short leases on their places, as in
// package fair, so a waiter that died is dropped within [distsync.DefaultWaiterLease].
//
// The size is part of the semaphore's identity: a Semaphore made with another size than the
// one Redis has for the name gets an error matching [ErrSizeMismatch]. [Semaphore.Resize]
// changes it on purpose; and once nobody holds or waits for a name, its size is forgotten
// with its other keys.
package semaphore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/internal/waitq"
)

// ErrSizeMismatch is returned (wrapped, with both sizes) when a Semaphore's size differs from
// the size Redis has for its name: two programs disagree on what the semaphore is.
var ErrSizeMismatch = errors.New("size differs from the size in Redis")

// opsTTL is how long Redis remembers a release's request id, and a voided waiter.
const opsTTL = time.Minute

// Semaphore is a weighted semaphore shared by every process that uses the same name on the
// same Redis. Make it with [New]; it is safe for concurrent use and must not be copied.
type Semaphore struct {
	p      core.Prim
	c      *core.Handle // p.H
	name   string
	size   int64
	ttl    time.Duration
	renew  bool
	wlease time.Duration // the waiter lease

	keys       []string              // every key, in internal/scripts/lib/sem.lua's order
	scriptKeys scripts.SemaphoreKeys // the same, named, as its scripts take them
	chanPrefix string
	proc       string
	// waiterPrefix starts the id of each call's waiter: proc + "/" (the id's own part follows)
	waiterPrefix string
	box          *waitq.Mailbox
	// renewWith is the LeaseSpec.RenewWith of every hold: semaphore_renew.lua, which also
	// tells the head of the queue when its request would fit if no holder renewed again, so
	// that the permits of holders that died go on a round trip after their leases run out.
	renewWith func(owner string, token int64) scripts.Call
	// Script arguments and key lists that never change, made once.
	ttlArg, wleaseArg, slackArg, opsArg string
	holdKeep, placeKeep                 []string

	// mu guards size and holds. Nothing else is locked while it is held (the renewal loop
	// reads the size, for renewWith, under its own lock).
	mu    sync.Mutex
	holds []*hold // this value's acquisitions, oldest first
}

type hold struct {
	n     int64
	lease *core.Lease
}

// New returns the Semaphore called name, of size permits. It sends nothing to Redis. Its
// options are [distsync.WithLeaseTTL] and [distsync.WithFixedLease] (the lease of each
// acquisition: a fixed one gives its permits back that long after they were acquired, whether
// or not they were released) and [distsync.WithWaiterLease]. It returns an error matching
// [distsync.ErrInvalid] for an empty name, a size below 1, a bad option value, or an option
// that does not apply to a semaphore.
func New(h *distsync.Handle, name string, size int64, opts ...distsync.Option) (*Semaphore, error) {
	p, set, ks, err := api.Setup(h, kind.Semaphore, name, opts, nil)
	if err != nil {
		return nil, err
	}
	if size < 1 {
		return nil, fmt.Errorf("semaphore %q: %w: size must be at least 1, got %d", name, distsync.ErrInvalid, size)
	}
	c := p.H
	s := &Semaphore{p: p, c: c, name: name, size: size, ttl: set.LeaseTTL, renew: !set.Fixed, wlease: set.WaiterLease}
	k := scripts.SemaphoreKeys{H: ks.Key(), N: ks.Part("n"), Q: ks.Part("q"), QX: ks.Part("qx"), QN: ks.Part("qn"),
		Size: ks.Part("size"), Ops: ks.Part("ops")}
	s.scriptKeys, s.keys = k, []string{k.H, k.N, k.Q, k.QX, k.QN, k.Size, k.Ops}
	s.chanPrefix = ks.Channel()
	s.ttlArg, s.wleaseArg, s.slackArg, s.opsArg = core.Ms(s.ttl), core.Ms(s.wlease), core.Ms(2*s.ttl/core.RenewDivisor), core.Ms(opsTTL)
	s.holdKeep, s.placeKeep = []string{k.N, k.Size}, []string{k.Q, k.QN, k.Size}
	s.proc = c.NewID()
	s.waiterPrefix = s.proc + "/"
	s.box = waitq.NewMailbox(c, s.chanPrefix+":"+s.proc, waitq.ParseQueued)
	s.renewWith = func(owner string, token int64) scripts.Call {
		return s.args(owner, 0, s.Size(), "").Call(scripts.SemaphoreRenew)
	}
	return s, nil
}

// Name returns the name the Semaphore was made with.
func (s *Semaphore) Name() string { return s.name }

// Size returns the Semaphore's size.
func (s *Semaphore) Size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

// Acquire acquires n permits, blocking until they are free, in the order requests reached
// Redis, or ctx is done. There is no limit on tries or time. On success it returns nil. On
// failure it returns an error matching both [distsync.ErrNotAcquired] and ctx.Err(), and
// leaves the semaphore unchanged (permits handed to it meanwhile go on to the next waiters).
// Acquire of 0 permits returns nil at once (ctx's error if it has ended), without asking
// Redis. It returns an error matching [distsync.ErrInvalid] at once if n < 0 or n > Size
// (x/sync would block until ctx ends; here that is a mistake worth naming), and one matching
// [ErrSizeMismatch] if Redis has another size for the name. Connection errors are retried
// while waiting; other Redis errors are returned.
func (s *Semaphore) Acquire(ctx context.Context, n int64) error {
	if n == 0 {
		if err := ctx.Err(); err != nil {
			return s.notAcquired(err)
		}
		return nil
	}
	_, err := s.acquire(ctx, n) // not AcquireLease: its public Lease is made only when asked for
	return err
}

// AcquireLease is [Semaphore.Acquire] that also returns the lease of the permits it
// acquired: its Done channel closes if they are lost (their lease lapsed, say after Redis was
// unreachable until its deadline), and when they are released. n must be at least 1.
func (s *Semaphore) AcquireLease(ctx context.Context, n int64) (*distsync.Lease, error) {
	l, err := s.acquire(ctx, n)
	return api.Lease(l), err
}

// acquire is AcquireLease, with the core's lease.
func (s *Semaphore) acquire(ctx context.Context, n int64) (*core.Lease, error) {
	if err := s.check(n); err != nil {
		return nil, err
	}
	return s.p.Wait(ctx, core.Weight{N: n}, "acquire", func(ctx context.Context) (*core.Lease, error) {
		return s.wait(ctx, n)
	})
}

// wait waits in the queue until it holds n permits.
func (s *Semaphore) wait(ctx context.Context, n int64) (*core.Lease, error) {
	w := s.c.NewIDAfter(s.waiterPrefix)
	slot := s.box.Register(w) // subscribed only if the first attempt fails
	defer slot.Close()
	var got *core.Lease
	k, place := s.scriptKeys, s.args(w, n, s.Size(), "").Call(scripts.SemaphorePlace)
	err := waitq.WaitTurn(ctx, s.c, s.wlease, waitq.Turn{
		ID: w, Slot: slot, Place: k.QX, PlaceKeep: []string{k.Q, k.QN, k.Size},
		// The head's place renewal also serves the queue if its permits came back by
		// themselves: a stall (a dead grantee watched by a dead waiter) lasts at most a
		// renewal period after that.
		PlaceRenewal: &place,
		Leave:        func(ctx context.Context) error { return s.leave(ctx, w) },
		Attempt: func(ctx context.Context, _ string) (waitq.TurnResult, error) {
			sent := time.Now()
			vals, err := s.run(ctx, scripts.SemaphoreAcquire, w, n, "0")
			if err != nil {
				return waitq.TurnResult{}, err
			}
			switch {
			case len(vals) == 1 && (vals[0] == 1 || vals[0] == 2):
				owner := w
				if vals[0] == 2 {
					owner = "~" + w
				}
				got, err = s.hold(owner, n, sent, time.Time{}, false)
				return waitq.TurnResult{Acquired: true}, err
			case len(vals) == 3 && vals[0] == 0:
				wait := time.Duration(vals[1]) * time.Millisecond
				if vals[2] == 1 {
					// The head of the queue: its request fits in wait if no holder renews
					// again, and each renewal tells it anew (semaphore_renew.lua). So it
					// re-checks just after that, not later: permits of holders that died go
					// on a round trip after their leases run out.
					return waitq.TurnResult{Wait: wait + 2*time.Millisecond}, nil
				}
				// The backstop: permits come back by themselves when the earliest lease
				// lapses, and nothing is published then.
				return waitq.TurnResult{Wait: core.Backstop(wait, s.ttl)}, nil
			}
			return waitq.TurnResult{}, s.badReply(vals)
		},
		Take: func(g waitq.Grant, deadline time.Time) (err error) {
			// The permits were granted as "~"+w for a waiter lease; the first renewal, sent at
			// once, extends them to the full lease.
			got, err = s.hold("~"+w, n, time.Now(), deadline, true)
			return err
		},
	})
	if err != nil {
		if !errors.Is(err, ErrSizeMismatch) {
			// Leave the queue, giving back permits granted meanwhile, before returning: a
			// failed Acquire leaves the semaphore as it was (x/sync promises the same).
			s.c.Undo("leaving the queue of semaphore "+strconv.Quote(s.name), opsTTL,
				func(bctx context.Context) error { return s.leave(bctx, w) })
		}
		return nil, err
	}
	return got, nil
}

// TryAcquire acquires n permits if they are free and nobody waits for permits, without
// waiting. It returns true on success and false, with a nil error, otherwise. ctx bounds the
// one round trip. TryAcquire of 0 permits returns true at once. Bad n and a size mismatch
// are errors, as for Acquire.
func (s *Semaphore) TryAcquire(ctx context.Context, n int64) (bool, error) {
	if n == 0 {
		if err := ctx.Err(); err != nil {
			return false, s.notAcquired(err)
		}
		return true, nil
	}
	_, ok, err := s.TryAcquireLease(ctx, n)
	return ok, err
}

// TryAcquireLease is [Semaphore.TryAcquire] that also returns the lease of the permits when
// it acquired them (nil otherwise). n must be at least 1.
func (s *Semaphore) TryAcquireLease(ctx context.Context, n int64) (*distsync.Lease, bool, error) {
	if err := s.check(n); err != nil {
		return nil, false, err
	}
	l, ok, err := s.p.Try(ctx, core.Weight{N: n}, "acquire", func(ctx context.Context) (*core.Lease, bool, error) {
		return s.try(ctx, n)
	})
	return api.Lease(l), ok, err
}

// try is one try of TryAcquire.
func (s *Semaphore) try(ctx context.Context, n int64) (*core.Lease, bool, error) {
	w := s.c.NewIDAfter(s.waiterPrefix)
	sent := time.Now()
	vals, err := s.run(ctx, scripts.SemaphoreAcquire, w, n, "1")
	if err != nil {
		if !errors.Is(err, ErrSizeMismatch) {
			s.c.Undo("cleanup after a cancelled TryAcquire", opsTTL,
				func(bctx context.Context) error { return s.leave(bctx, w) })
		}
		return nil, false, err
	}
	if len(vals) == 1 && vals[0] == 1 {
		l, err := s.hold(w, n, sent, time.Time{}, false)
		if err != nil {
			return nil, false, err
		}
		return l, true, nil
	}
	return nil, false, nil
}

// Release gives back n permits that this Semaphore value acquired, newest acquisitions first,
// and hands them to the waiters they now let in. It returns nil once they are given back
// (Release of 0 permits does nothing and returns nil). It returns an error matching
// [distsync.ErrInvalid] for n < 0, and one matching
// [distsync.ErrNotHeld] if this value holds fewer than n permits: then nothing changes, in
// Redis or here. Permits whose lease was lost are not in Redis to give back: Release then
// returns an error matching both ErrNotHeld and [distsync.ErrLost] (the other permits are
// given back). A connection error is retried under the same request id, which Redis counts
// once; if ctx ends or Redis stays unreachable, the Handle finishes in the background.
func (s *Semaphore) Release(ctx context.Context, n int64) error {
	if n == 0 {
		return nil
	}
	if n < 0 {
		return fmt.Errorf("semaphore %q: %w: release of %d permits", s.name, distsync.ErrInvalid, n)
	}
	s.mu.Lock()
	var held int64
	for _, h := range s.holds {
		held += h.n
	}
	if n > held {
		s.mu.Unlock()
		return fmt.Errorf("semaphore %q: %w: release of %d permits, %d held", s.name, distsync.ErrNotHeld, n, held)
	}
	type part struct {
		h    *hold
		k    int64
		last bool
	}
	var buf [2]part // mostly one: a whole acquisition given back
	parts := buf[:0]
	for left := n; left > 0; {
		h := s.holds[len(s.holds)-1]
		k := min(h.n, left)
		h.n -= k
		left -= k
		parts = append(parts, part{h, k, h.n == 0})
		if h.n == 0 {
			s.holds = s.holds[:len(s.holds)-1]
		}
	}
	s.mu.Unlock()

	var ebuf [2]error
	errs := ebuf[:0]
	for _, p := range parts {
		id := s.c.NewID()
		release := func(ctx context.Context, _ *core.Lease) (bool, error) {
			return s.release(ctx, p.h.lease.Owner(), p.k, id)
		}
		if p.last {
			errs = append(errs, s.c.Release(ctx, s.p, "release", p.h.lease, release))
			continue
		}
		if err := p.h.lease.Err(); errors.Is(err, distsync.ErrLost) {
			// Lost: give back what Redis may still have of it, and report the loss. (Released
			// is no loss: another goroutine gave back the rest of the same acquisition first.)
			_, _ = release(ctx, nil)
			errs = append(errs, fmt.Errorf("%w: %w", distsync.ErrNotHeld, err))
			continue
		}
		// Part of an acquisition: its lease goes on. The request id makes retries, here or in
		// the background, count once.
		ok, err := s.c.GiveBack(ctx, "release of semaphore "+strconv.Quote(s.name), p.h.lease.TTL(), nil,
			func(ctx context.Context) (bool, error) { return release(ctx, nil) })
		if err == nil && !ok {
			err = fmt.Errorf("%w: %w: the permits had been lost", distsync.ErrNotHeld, distsync.ErrLost)
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("semaphore %q: release: %w", s.name, err)
	}
	return nil
}

// Resize changes the semaphore's size, in Redis, to size, and makes it this value's size.
// Holders keep their permits; waiters that now fit are let in at once; if the semaphore
// shrank below the permits in use, new permits are handed out once enough have come back.
// Other Semaphore values of the name, in this process or others, get [ErrSizeMismatch] until
// they are made again with the new size. It returns an error matching [distsync.ErrInvalid]
// for a size below 1.
func (s *Semaphore) Resize(ctx context.Context, size int64) error {
	if size < 1 {
		return fmt.Errorf("semaphore %q: %w: size must be at least 1, got %d", s.name, distsync.ErrInvalid, size)
	}
	if _, err := s.runWith(ctx, scripts.SemaphoreResize, "", 0, size, "").AsInt64(); err != nil {
		return fmt.Errorf("semaphore %q: resize: %w", s.name, err)
	}
	s.mu.Lock()
	s.size = size
	s.mu.Unlock()
	return nil
}

// Holders returns who holds s, as Redis has it at one moment: every holder with the permits it holds (Count), or none; [Semaphore.Status] gives the totals and the queue. It reads in one round
// trip and changes nothing; like any snapshot, it may be stale when it returns (see
// [distsync.Holder]). Find the process that holds a name by comparing [distsync.Holder.Handle]
// with [distsync.Handle.ID].
func (s *Semaphore) Holders(ctx context.Context) ([]distsync.Holder, error) {
	hs, err := s.c.Holders(ctx, kind.Semaphore, s.name, core.LayoutSem, []string{s.scriptKeys.H, s.scriptKeys.N})
	return api.Holders(hs), err
}

// Status is a snapshot of a semaphore, as Redis has it at one moment.
type Status struct {
	// Size is the size Redis has for the name; 0 if it has none (nobody holds or waits, and
	// the next Acquire sets it).
	Size int64
	// InUse is the number of permits held, by every process; Available is what is left of
	// the size (0 if Resize shrank it below InUse; this Semaphore's size if Redis has none).
	InUse, Available int64
	// Waiters is the number of Acquire calls waiting, in every process, and Wanted the permits
	// they ask for.
	Waiters, Wanted int64
}

// Status reads the semaphore's state in Redis, in one round trip that changes nothing. Like
// every snapshot it may be stale when it returns; use it to observe (dashboards, tests), not to
// decide whether to Acquire (TryAcquire does that atomically).
func (s *Semaphore) Status(ctx context.Context) (Status, error) {
	vals, err := s.runWith(ctx, scripts.SemaphoreStatus, "", 0, s.Size(), "").AsIntSlice()
	if err != nil {
		return Status{}, fmt.Errorf("semaphore %q: status: %w", s.name, err)
	}
	if len(vals) != 4 {
		return Status{}, fmt.Errorf("semaphore %q: status: %w", s.name, core.Unexpected(scripts.SemaphoreStatus, vals))
	}
	st := Status{Size: vals[0], InUse: vals[1], Waiters: vals[2], Wanted: vals[3]}
	st.Available = max(st.Size-st.InUse, 0)
	if st.Size == 0 {
		st.Available = s.Size()
	}
	return st, nil
}

func (s *Semaphore) check(n int64) error {
	if size := s.Size(); n < 1 || n > size {
		return fmt.Errorf("semaphore %q: %w: %d permits asked of a semaphore of size %d", s.name, distsync.ErrInvalid, n, size)
	}
	return nil
}

// run runs an acquire script and turns a size mismatch into its error.
func (s *Semaphore) run(ctx context.Context, script *scripts.Script, id string, n int64, extra string) ([]int64, error) {
	vals, err := s.runWith(ctx, script, id, n, s.Size(), extra).AsIntSlice()
	if err != nil {
		return nil, err
	}
	if len(vals) == 2 && vals[0] == -2 {
		return nil, core.Permanent(fmt.Errorf("%w: %d here, %d in Redis", ErrSizeMismatch, s.Size(), vals[1]))
	}
	if len(vals) == 1 && vals[0] == -1 {
		return nil, core.Permanent(errors.New("the waiter was voided"))
	}
	return vals, nil
}

func (s *Semaphore) runWith(ctx context.Context, script *scripts.Script, id string, n, size int64, extra string) rueidis.RedisResult {
	return s.args(id, n, size, extra).Exec(ctx, s.c.Client, script)
}

// args returns the KEYS and ARGV of every semaphore script (see internal/scripts/lib/sem.lua).
func (s *Semaphore) args(id string, n, size int64, extra string) scripts.SemaphoreArgs {
	return scripts.SemaphoreArgs{Keys: s.scriptKeys, ID: id, N: strconv.FormatInt(n, 10), Size: strconv.FormatInt(size, 10),
		TTL: s.ttlArg, WLease: s.wleaseArg, Slack: s.slackArg, Prefix: s.chanPrefix,
		Pub: s.c.Pub, OpsTTL: s.opsArg, Extra: extra}
}

// hold records an acquisition of n permits under owner, with its lease on the renewal loop.
// A grant (granted) is confirmed by an extension sent at once.
func (s *Semaphore) hold(owner string, n int64, sent, deadline time.Time, granted bool) (*core.Lease, error) {
	spec := core.LeaseSpec{Key: s.scriptKeys.H, Keep: s.holdKeep, Owner: owner, Kind: "z",
		TTL: s.ttl, Renew: s.renew, Sent: sent, Deadline: deadline, RenewWith: s.renewWith}
	spec.Release = func(ctx context.Context, l *core.Lease) error {
		_, err := s.release(ctx, owner, n, s.c.NewID())
		return err
	}
	if granted {
		// The confirm is a renewal: it tells the head the permits' new expiry too.
		first := s.renewWith(owner, 0)
		spec.First = &first
	}
	l, err := s.c.Hold(spec)
	if err != nil { // given back: the handle closed, or the reply came too late to use
		return nil, err
	}
	s.mu.Lock()
	s.holds = append(s.holds, &hold{n: n, lease: l})
	s.mu.Unlock()
	return l, nil
}

// release runs semaphore_release.lua: true if owner held permits.
func (s *Semaphore) release(ctx context.Context, owner string, n int64, id string) (bool, error) {
	r, err := s.runWith(ctx, scripts.SemaphoreRelease, owner, n, s.Size(), id).AsInt64()
	return r == 1, err
}

// leave takes waiter w out of the queue, giving back what its call may have got.
func (s *Semaphore) leave(ctx context.Context, w string) error {
	_, err := s.runWith(ctx, scripts.SemaphoreLeave, w, 0, s.Size(), "").AsInt64()
	return err
}

func (s *Semaphore) badReply(vals []int64) error {
	return core.Unexpected(scripts.SemaphoreAcquire, vals)
}

func (s *Semaphore) notAcquired(err error) error { return s.p.NotAcquired(err) }

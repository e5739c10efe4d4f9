package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/scripts"
)

// RenewDivisor sets the renewal period of a renewed lease: TTL / RenewDivisor. At a third of
// the TTL a holder survives two consecutive failed renewals before its lease runs out.
const RenewDivisor = 3

// LeaseSpec describes a claim that was just acquired.
type LeaseSpec struct {
	Key   string // key that carries the claim
	Owner string // owner value the claim is checked against
	Kind  string // how extend.lua checks it: "s" string == owner, "h" hash field, "z" zset member
	// Keep lists keys of the same slot that must live as long as the claim (a semaphore's
	// permit counts, a queue's order): each renewal extends them too.
	Keep  []string
	TTL   time.Duration // lease length
	Renew bool          // renew at TTL/RenewDivisor until stopped; false: a fixed lease
	Token int64         // fencing token of the acquisition
	// Sent is when the acquire command was sent. The local deadline counts from it, so the
	// holder stops believing in its claim no later than Redis expires it.
	Sent time.Time
	// Release gives the claim back; Handle.Close calls it for leases still held.
	Release func(ctx context.Context, l *Lease) error
	// Deadline, if set, is the lease's first local deadline instead of Sent + TTL (less
	// drift): for a claim granted by another client, whose expiry this client can only bound.
	Deadline time.Time
	// First, if set, is sent at once in place of the first renewal (it confirms a grant).
	// It must reply 1 if the claim is still held and extended to TTL, 0 if not.
	First *scripts.Call
	// Place says the lease is a waiter's place in a queue, not a claim: when it ends, its
	// waiter re-checks (and queues again); Hold neither refuses it late nor gives it back.
	Place bool
	// Renewal, if set, is sent for every renewal instead of extend.lua (after First). It must
	// reply as extend.lua does: 1 if the claim is still held and extended to TTL, 0 if not.
	Renewal *scripts.Call
	// RenewWith, if set (and Renewal is not), makes the renewal call for owner, at each
	// renewal: a primitive makes the func once, so that a hold costs no allocation for it.
	RenewWith func(owner string) scripts.Call
}

// renewal returns the call that renews the claim of spec: Renewal, RenewWith, or extend.lua.
func (spec LeaseSpec) renewal() scripts.Call {
	switch {
	case spec.Renewal != nil:
		return *spec.Renewal
	case spec.RenewWith != nil:
		return spec.RenewWith(spec.Owner)
	}
	return spec.Extend()
}

// Extend returns the extend.lua call that renews the claim of spec.
func (spec LeaseSpec) Extend() scripts.Call {
	a := scripts.ExtendArgs{Key: spec.Key, Keep: spec.Keep, Kind: spec.Kind, Owner: spec.Owner,
		TTL: strconv.FormatInt(spec.TTL.Milliseconds(), 10)}
	if spec.Kind == "h" {
		a.Token = strconv.FormatInt(spec.Token, 10)
	}
	return a.Call()
}

// Lease is one held claim: renewed by the handle's loop, and ended (Done closed, Err set) when
// it is released, lost, or the handle closes.
type Lease struct {
	h    *Handle
	spec LeaseSpec
	ctx  context.Context // done when the lease ends; its cause is Err
	end  context.CancelCauseFunc

	// Public is the distsync.Lease that wraps this lease.
	Public any

	// quorum, if set, makes this a lease over other leases (see Handle.Quorum): held while
	// enough of them are, never on the renewal loop itself.
	quorum *quorum

	// Guarded by the renewer's mutex.
	deadline time.Time     // local validity: past it, the claim may be gone from Redis
	next     time.Time     // next renewal
	first    *scripts.Call // sent instead of extend.lua for the next renewal, then cleared
	inflight bool

	ended    atomic.Bool             // End's first call won (finish)
	obs      atomic.Pointer[Acquire] // the observed call that took the hold (Acquire.Done)
	logged   atomic.Bool             // its loss was logged
	emit     sync.Mutex              // orders the observer's events of the hold (report, renewed)
	reported bool                    // its end was reported to the observer; guarded by emit
}

// Hold starts tracking a claim acquired per spec and returns its lease.
//
// It refuses a claim that is of no use to its holder, with the lease ended and an error: the
// handle is closed (ErrClosed), or the claim's local deadline had passed by the time its reply
// came (ErrLate: Redis or the network stalled for about a lease, and the claim may be gone
// from Redis already or about to be). It then gives the claim back at once (spec.Release,
// retried in the background if Redis cannot be reached), unless spec.Place says the lease is
// a waiter's place in a queue, which its waiting loop handles.
func (h *Handle) Hold(spec LeaseSpec) (*Lease, error) {
	l := &Lease{h: h, spec: spec}
	l.ctx, l.end = context.WithCancelCause(context.Background())
	if wrapLease != nil {
		l.Public = wrapLease(l)
	}
	l.deadline = spec.Sent.Add(spec.TTL - Drift(spec.TTL))
	if !spec.Deadline.IsZero() {
		l.deadline = spec.Deadline
	}
	l.next = spec.Sent.Add(spec.TTL / RenewDivisor)
	if spec.First != nil {
		l.first, l.next = spec.First, spec.Sent
	}
	var err error
	switch {
	case !spec.Place && !time.Now().Before(l.deadline):
		err = ErrLate
	case !h.ren.add(l):
		err = ErrClosed
	default:
		return l, nil
	}
	l.End(err)
	if spec.Release != nil && !spec.Place {
		given := h.Undo("giving back a claim that came too late to use", spec.TTL, func(ctx context.Context) error {
			return spec.Release(ctx, l)
		})
		if err == ErrLate {
			err = &LateError{GivenBack: given}
		}
	}
	return l, err
}

// LateError is the error of Hold for a claim whose reply came too late to use. It matches
// ErrLate. GivenBack is closed once the claim was given back (or giving it back was given
// up): a caller that tries again under the same owner value (a queued waiter's id) must wait
// for it, or the give-back, still retried in the background, would release the new hold.
type LateError struct {
	GivenBack <-chan struct{}
}

func (e *LateError) Error() string { return ErrLate.Error() }

// Is makes errors.Is(err, ErrLate) true.
func (e *LateError) Is(target error) bool { return target == ErrLate }

// Drift is the margin taken off a lease's local validity for clock rate differences between
// client and server and for scheduling: 1% of the TTL plus 2 ms (as Redlock does).
func Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// Token returns the fencing token of the acquisition.
func (l *Lease) Token() int64 { return l.spec.Token }

// Deadline returns the lease's local deadline: until then the claim is surely in Redis (it is
// counted from when the last renewal that succeeded was sent).
func (l *Lease) Deadline() time.Time {
	if l.quorum != nil {
		return l.quorum.deadline()
	}
	r := l.h.ren
	r.mu.Lock()
	defer r.mu.Unlock()
	return l.deadline
}

// Owner returns the owner value the claim is checked against.
func (l *Lease) Owner() string { return l.spec.Owner }

// TTL returns the lease length.
func (l *Lease) TTL() time.Duration { return l.spec.TTL }

// Done is closed when the lease ends. A lease whose local deadline has passed is ended by
// this call if the renewal loop has not ended it yet (see Err).
func (l *Lease) Done() <-chan struct{} {
	l.expire()
	return l.ctx.Done()
}

// Context returns a context that ends, with cause Err, when the lease ends (checked against
// the deadline as Done is).
func (l *Lease) Context() context.Context {
	l.expire()
	return l.ctx
}

// Err returns nil while the lease is held, then why it ended. It reads the local deadline on
// the monotonic clock at the moment of the call: a holder whose process was frozen past its
// deadline (SIGSTOP, a long GC pause, a suspended VM) learns of the loss from its first look
// after it resumes, not when the renewal goroutine next gets to run.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		l.expire()
		if l.ctx.Err() == nil {
			return nil
		}
	}
	return context.Cause(l.ctx)
}

// Bind returns a copy of parent that is also cancelled, with the lease's error as its cause,
// when the lease ends. Its Err and Done read the lease's deadline as Err does, so work that
// checks them after its process was frozen past the deadline sees the loss at once; a goroutine
// already blocked on Done wakes when the renewal loop, or any look at the lease, ends it.
func (l *Lease) Bind(parent context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(l.ctx, func() { cancel(context.Cause(l.ctx)) })
	return &leaseContext{Context: c, l: l, cancel: cancel}, func() {
		stop()
		cancel(context.Canceled)
	}
}

// leaseContext is the context of Bind.
type leaseContext struct {
	context.Context
	l      *Lease
	cancel context.CancelCauseFunc
}

// leaseKey is the context key under which a lease's contexts carry it (LeaseFrom).
type leaseKey struct{}

// Value returns the lease for leaseKey, so that code running under a lease's context can find
// the lease.
func (c *leaseContext) Value(key any) any {
	if key == (leaseKey{}) {
		return c.l
	}
	return c.Context.Value(key)
}

// LeaseFrom returns the lease whose context (Bind) ctx is or derives from.
func LeaseFrom(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	return l, ok
}

func (c *leaseContext) sync() {
	if err := c.l.Err(); err != nil {
		c.cancel(err)
	}
}

func (c *leaseContext) Done() <-chan struct{} {
	c.sync()
	return c.Context.Done()
}

func (c *leaseContext) Err() error {
	c.sync()
	return c.Context.Err()
}

// expire ends l as lost if its local deadline has passed while the renewal loop tracks it.
func (l *Lease) expire() {
	if l.ctx.Err() != nil {
		return
	}
	if l.quorum != nil {
		l.quorum.check(l)
		return
	}
	r := l.h.ren
	r.mu.Lock()
	ended := false
	if _, tracked := r.leases[l]; tracked && !time.Now().Before(l.deadline) {
		delete(r.leases, l)
		ended = l.finish(errDeadline()) // under the lock, as the loop does
	}
	r.mu.Unlock()
	if ended {
		l.report(context.Cause(l.ctx))
	}
}

func errDeadline() error { return lost("its deadline passed before a renewal succeeded") }

// End ends the lease with err (the first call wins), closes Done, and reports the end to the
// log (a loss) and the handle's observer.
func (l *Lease) End(err error) {
	if l.finish(err) {
		l.report(err)
		return
	}
	// Another call is ending it: return once it has, so that the caller reads the lease's
	// error, not nil.
	<-l.ctx.Done()
}

// finish ends the lease with err, reporting nothing, and says whether this call ended it: a
// caller that holds the renewer's lock reports the end (report) after unlocking it.
func (l *Lease) finish(err error) bool {
	if !l.ended.CompareAndSwap(false, true) {
		return false
	}
	l.end(err)
	return true
}

// Stop takes the lease off the renewal loop before the caller releases the claim, so that no
// renewal reply that arrives later can report a deliberate release as a loss. It returns the
// lease's error if the lease had already ended (lost, its deadline passed, or the handle
// closed), else nil.
func (l *Lease) Stop() error {
	if l.quorum != nil {
		return l.Err() // its members are stopped by their own releases
	}
	l.expire()
	l.h.ren.remove(l)
	return l.Err()
}

// Unsent returns the lease's First call if the renewal loop has not sent it (and will not: call
// it after Stop), else nil. A release must send it first: it may do more than extend the claim
// (a confirm also queues the holder's other waiters again).
func (l *Lease) Unsent() *scripts.Call {
	if l.quorum != nil {
		return nil
	}
	r := l.h.ren
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.inflight {
		return nil // the loop took it: it goes out with the batch being built
	}
	return l.first // sending it twice (a retried release) is harmless
}

// Refresh renews l now, outside the renewal loop, for ttl from now (the lease's own TTL if
// ttl is 0). It returns nil if the claim was still held, and then l's deadline counts from
// this renewal; an error matching ErrLost, with l ended, if the claim was gone or taken; l's
// error if l had already ended; and a connection error as it is, with l unchanged (the
// deadline still decides). A renewed lease's next renewals go on at its own TTL.
func (l *Lease) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := l.Err(); err != nil {
		return err
	}
	if ttl == 0 {
		ttl = l.spec.TTL
	}
	if l.quorum != nil {
		return l.quorum.refresh(ctx, l, ttl)
	}
	r := l.h.ren
	r.mu.Lock()
	call := l.spec.renewal()
	first := l.first
	r.mu.Unlock()
	if ttl != l.spec.TTL {
		call = l.spec.extendFor(ttl)
	}
	calls := []scripts.Call{call}
	if first != nil {
		calls = []scripts.Call{*first, call} // a grant is confirmed first (sending it twice is harmless)
	}
	sent := time.Now()
	res := scripts.DoMulti(ctx, l.h.Client, calls)
	ok, err := res[len(res)-1].AsInt64()
	r.mu.Lock()
	if _, tracked := r.leases[l]; !tracked {
		r.mu.Unlock()
		if lerr := context.Cause(l.ctx); l.ctx.Err() != nil {
			return lerr
		}
		return ErrNotHeld
	}
	switch {
	case err == nil && ok == 1:
		if first != nil && l.first == first {
			l.first = nil
		}
		if d := sent.Add(ttl - Drift(ttl)); d.After(l.deadline) || ttl != l.spec.TTL {
			l.deadline = d
		}
		if l.spec.Renew {
			l.next = sent.Add(min(ttl, l.spec.TTL) / RenewDivisor)
		}
		r.mu.Unlock()
		return nil
	case err == nil || isWrongType(err):
		delete(r.leases, l)
		err := lost("the claim was gone or held by another owner when it was refreshed")
		ended := l.finish(err)
		r.mu.Unlock()
		if ended {
			l.report(err) // outside the lock: the observer and the log may be slow
		}
		return err
	default:
		r.mu.Unlock()
		return err
	}
}

// extendFor returns the extend.lua call that sets the claim of spec to end ttl from now.
func (spec LeaseSpec) extendFor(ttl time.Duration) scripts.Call {
	spec.TTL = ttl
	return spec.Extend()
}

// Fixed reports whether l is a fixed lease (not renewed by the loop).
func (l *Lease) Fixed() bool { return !l.spec.Renew }

func lost(reason string) error { return fmt.Errorf("%w: %s", ErrLost, reason) }

// renewer is the handle's renewal loop: one goroutine and one timer for every lease, renewals
// batched per tick into one pipeline per node, and local deadlines enforced even when Redis
// cannot be reached.
type renewer struct {
	h      *Handle
	mu     sync.Mutex
	leases map[*Lease]struct{}
	closed bool
	kick   chan struct{}
	wakeAt time.Time // when the loop will look at the leases next (zero: it is running)
}

func newRenewer(h *Handle) *renewer {
	return &renewer{h: h, leases: make(map[*Lease]struct{}), kick: make(chan struct{}, 1)}
}

func (r *renewer) add(l *Lease) bool {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	r.leases[l] = struct{}{}
	// Wake the loop only if it would look too late: a new lease renewed at the usual
	// period mostly falls after the wake-up already planned, and then costs no context switch.
	due := l.deadline
	if (l.spec.Renew || l.first != nil) && l.next.Before(due) {
		due = l.next
	}
	early := !r.wakeAt.IsZero() && due.Before(r.wakeAt)
	r.mu.Unlock()
	if early {
		r.wake()
	}
	return true
}

func (r *renewer) remove(l *Lease) {
	r.mu.Lock()
	delete(r.leases, l)
	r.mu.Unlock()
}

func (r *renewer) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Count returns the number of leases the loop tracks.
func (h *Handle) Leases() int {
	h.ren.mu.Lock()
	defer h.ren.mu.Unlock()
	return len(h.ren.leases)
}

func (r *renewer) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		wake := now.Add(time.Hour)
		var batch []*Lease

		var ended []*Lease
		r.mu.Lock()
		r.wakeAt = time.Time{}
		for l := range r.leases {
			if !now.Before(l.deadline) {
				// Ended under the lock: a lease off the loop and not yet ended would read as
				// held to Err (expire skips leases the loop no longer tracks).
				delete(r.leases, l)
				if l.finish(errDeadline()) {
					ended = append(ended, l)
				}
				continue
			}
			at := l.deadline
			if (l.spec.Renew || l.first != nil) && !l.inflight {
				period := l.spec.TTL / RenewDivisor
				// Renew everything due within the next eighth of its period now, so that
				// leases taken at nearly the same time share one pipeline.
				if !now.Before(l.next.Add(-period / 8)) {
					l.inflight = true
					batch = append(batch, l)
				} else if l.next.Before(at) {
					at = l.next
				}
			}
			if at.Before(wake) {
				wake = at
			}
		}
		r.wakeAt = wake
		r.mu.Unlock()

		if len(batch) > 0 {
			r.h.bg.Add(1)
			go func() {
				defer r.h.bg.Done()
				r.renew(ctx, batch)
			}()
		}
		// After the batch is on its way: an observer or a log that is slow delays the loop's
		// next look, never the renewals due now.
		for _, l := range ended {
			l.report(context.Cause(l.ctx))
		}

		timer.Reset(time.Until(wake))
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-timer.C:
		}
	}
}

// renew extends every lease of batch in one DoMulti (rueidis sends one pipeline per node).
func (r *renewer) renew(ctx context.Context, batch []*Lease) {
	calls := make([]scripts.Call, len(batch))
	r.mu.Lock()
	limit := batch[0].deadline
	for i, l := range batch {
		switch {
		case l.first != nil:
			calls[i] = *l.first
		default:
			calls[i] = l.spec.renewal()
		}
		if l.deadline.Before(limit) {
			limit = l.deadline
		}
	}
	r.mu.Unlock()
	sent := time.Now()
	// No renewal reply is worth waiting for past the first deadline of the batch: the loop
	// ends that lease then anyway, and the others are retried.
	cctx, cancel := context.WithDeadline(ctx, limit)
	res := scripts.DoMulti(cctx, r.h.Client, calls)
	cancel()

	now := time.Now()
	var ended []*Lease
	var renewed []*Lease
	var failed []error
	r.mu.Lock()
	for i, l := range batch {
		l.inflight = false
		if _, ok := r.leases[l]; !ok {
			continue // released or ended while the renewal was in flight: not ours to judge
		}
		ok, err := res[i].AsInt64()
		period := l.spec.TTL / RenewDivisor
		switch {
		case err == nil && ok == 1:
			l.next = sent.Add(period)
			l.deadline = sent.Add(l.spec.TTL - Drift(l.spec.TTL))
			l.first = nil
			if r.h.Observed() {
				renewed, failed = append(renewed, l), append(failed, nil)
			}
		case err == nil || isWrongType(err):
			delete(r.leases, l) // and ended under the lock, as in run
			if l.finish(lost("the claim was gone or held by another owner when it was renewed")) {
				ended = append(ended, l)
			}
		default:
			// Unreachable, or a transient Redis error (LOADING, READONLY during a failover):
			// try again soon; the deadline ends the lease if nothing gets through.
			l.next = now.Add(min(max(period/6, 10*time.Millisecond), time.Second))
			r.h.Log().Debug("distsync: renewal failed, will retry", "key", l.spec.Key, "err", err)
			if r.h.Observed() {
				renewed, failed = append(renewed, l), append(failed, err)
			}
		}
	}
	r.mu.Unlock()
	r.wake() // the loop reschedules these leases at once, whatever the reports below cost
	// Reported outside the lock: the observer and the log may be slow.
	for i, l := range renewed {
		l.renewed(failed[i])
	}
	for _, l := range ended {
		l.report(context.Cause(l.ctx))
	}
}

func isWrongType(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

// closeAll ends every lease with ErrClosed, then releases each claim in Redis.
func (r *renewer) closeAll(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	held := make([]*Lease, 0, len(r.leases))
	var ended []*Lease
	for l := range r.leases {
		held = append(held, l)
		if l.finish(ErrClosed) { // first, and under the lock: the release below must not record the end as a release
			ended = append(ended, l)
		}
	}
	r.leases = map[*Lease]struct{}{}
	r.mu.Unlock()
	for _, l := range ended {
		l.report(ErrClosed)
	}

	var errs []error
	for _, l := range held {
		r.mu.Lock()
		l.inflight = false // the loop is stopping: whatever it did not send, the release sends
		r.mu.Unlock()
		// A waiter's place is left by its waiting call, which Close ends next (it returns
		// ErrClosed after leaving the queue); leaving it here would void the waiter under it.
		if l.spec.Release != nil && !l.spec.Place {
			if err := l.spec.Release(ctx, l); err != nil && !errors.Is(err, ErrLost) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Release stops l and gives back its claim with release, which reports whether the claim was
// still l's (see GiveBack). It returns nil once released; an error matching ErrNotHeld and
// ErrLost if the claim was not l's any more, or l had already ended (lost, or the handle
// closed); and otherwise the error, while the handle goes on trying in the background for up
// to the lease's TTL. l ends either way: at once; or, after an error, as released when a
// background try reaches Redis before l's local deadline and finds the claim released by l,
// as lost when a try finds it gone or taken, and as lost at that deadline if no try reached
// Redis by then.
//
// A lease that was lost is still given back if Redis has it under l's owner (release is a
// compare-and-delete): a holder whose deadline passed while a renewal's reply was late, or
// whose process was paused, may still own the key, which would otherwise hold everyone else
// up until its TTL. That changes nothing for the caller, who is told of the loss.
func (h *Handle) Release(ctx context.Context, what string, l *Lease, release func(ctx context.Context) (bool, error)) error {
	if err := l.Stop(); err != nil {
		if errors.Is(err, ErrLost) {
			_, _ = release(ctx)
		}
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	// If no attempt is confirmed now, the background goes on trying. The lease ends as
	// released once one reaches Redis before the lease's local deadline and finds the claim
	// released by this hold (now, or by an earlier attempt whose reply was lost: release tells
	// them apart by a record of the hold's release, or reports the loss when it cannot); as
	// lost when an attempt finds the claim gone or taken, or at the deadline if none reached
	// Redis by then: the holder must not believe in it past the moment Redis may have expired
	// it, whatever the background does later. A loss is never reported as a release.
	deadline := l.Deadline()
	var confirmed atomic.Bool
	ended := func() {
		if confirmed.Load() {
			l.End(ErrReleased)
		} else {
			l.End(lost("its release could not be confirmed before its lease ran out, or found the claim gone"))
		}
	}
	held, err := h.GiveBack(ctx, what, l.TTL(), ended, func(ctx context.Context) (bool, error) {
		held, err := release(ctx)
		if err == nil && held && time.Now().Before(deadline) {
			confirmed.Store(true)
		}
		return held, err
	})
	if err != nil && l.Err() == nil {
		time.AfterFunc(time.Until(deadline), func() {
			if !confirmed.Load() {
				ended()
			}
		})
	}
	switch {
	case err != nil:
		return err
	case !held:
		lost := lost("the claim had expired or been taken when it was released")
		l.End(lost)
		return fmt.Errorf("%w: %w", ErrNotHeld, lost)
	}
	l.End(ErrReleased)
	return nil
}

// GiveBack runs release, which gives back a claim and reports whether it was still held; it
// must be safe to repeat, and tell an earlier attempt of the same release that went through
// (its reply lost) from a claim that was lost meanwhile: a request id Redis applies once
// (reentrant, semaphore), or the owner of the last release kept beside the claim (mutex, fair,
// rwmutex). A connection error is retried a few times at once, and a retry's answer is the
// answer; where the two cannot be told apart, the release reports the loss. If no
// attempt is confirmed (ctx ended, Redis unreachable or failing), GiveBack returns the error
// and goes on trying in the background for up to within (the claim expires by then anyway),
// then runs finally (if not nil).
func (h *Handle) GiveBack(ctx context.Context, what string, within time.Duration, finally func(), release func(ctx context.Context) (bool, error)) (bool, error) {
	var held bool
	err := RetryNow(ctx, func() (err error) {
		held, err = release(ctx)
		return err
	})
	if err == nil {
		return held, nil
	}
	started := h.Background(what+" (the claim expires with its lease)", within, func(bctx context.Context) error {
		if finally != nil {
			defer finally()
		}
		for backoff := 20 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
			if _, err := release(bctx); err == nil {
				return nil
			}
			select {
			case <-time.After(backoff):
			case <-bctx.Done():
				return bctx.Err()
			}
		}
	})
	if !started && finally != nil {
		finally()
	}
	return false, fmt.Errorf("release not confirmed (finishing in the background): %w", err)
}

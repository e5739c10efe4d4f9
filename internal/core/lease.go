package core

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distsync/distsync/internal/scripts"
)

// RenewDivisor sets the renewal period of a renewed lease: TTL / RenewDivisor. At a third of
// the TTL a holder survives two consecutive failed renewals before its lease runs out.
const RenewDivisor = 3

// MinLease is the shortest lease: a lease must outlast the margin taken off its local deadline
// (Drift: 1% and 2 ms) by enough for its holder to use it, or every acquisition would come too
// late to use (ErrLate) and a Lock would try for ever.
const MinLease = 10 * time.Millisecond

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
	// RenewWith, if set (and Renewal is not), makes the renewal call for owner and token, at each
	// renewal: a primitive makes the func once, so that a hold costs no allocation for it.
	RenewWith func(owner string, token int64) scripts.Call
}

// renewal returns the call that renews the claim of spec: Renewal, RenewWith, or extend.lua.
func (spec LeaseSpec) renewal() scripts.Call {
	switch {
	case spec.Renewal != nil:
		return *spec.Renewal
	case spec.RenewWith != nil:
		return spec.RenewWith(spec.Owner, spec.Token)
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

	// How the lease ended, and what shows it. Most holds are released without anyone asking
	// for their context or their public wrapper, so both are made on first need (three
	// allocations an uncontended Lock+Unlock does not pay).
	endMu sync.Mutex
	cause error           // why the lease ended (Err); nil while held; set once, by finish
	ctx   context.Context // nil until asked for (context); once made, cancelled iff cause is set
	end   context.CancelCauseFunc
	pub   any // the distsync.Lease that wraps this lease (Public), made on first need
	// parent is the lease over this one (Quorum, Together), if any: told when this one ends.
	parent *Lease

	// quorum, if set, makes this a lease over other leases (see Handle.Quorum): held while
	// enough of them are, never on the renewal loop itself. unclose stops its watch of its
	// Handle's Close.
	quorum  *quorum
	unclose func() bool

	// Guarded by the renewer's mutex.
	deadline time.Time     // local validity: past it, the claim may be gone from Redis
	next     time.Time     // next renewal
	first    *scripts.Call // sent instead of extend.lua for the next renewal, then cleared
	inflight bool
	refused  error // Redis's refusal of the last renewal, if it refused it (not Transient)
	failed   error // the last renewal's error if it was Transient (Redis unreachable, say)

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
		release := spec.Release // not spec: a closure over spec would put it on the heap in every Hold
		given := h.Undo("giving back a claim that came too late to use", spec.TTL, func(ctx context.Context) error {
			return release(ctx, l)
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
	return l.context().Done()
}

// Context returns a context that ends, with cause Err, when the lease ends (checked against
// the deadline as Done is).
func (l *Lease) Context() context.Context {
	l.expire()
	return l.context()
}

// context returns the lease's context, made on first need: it ends, with cause Err, when the
// lease ends.
func (l *Lease) context() context.Context {
	l.endMu.Lock()
	defer l.endMu.Unlock()
	if l.ctx == nil {
		l.ctx, l.end = context.WithCancelCause(context.Background())
		if l.cause != nil {
			l.end(l.cause)
		}
	}
	return l.ctx
}

// ended returns why l ended, or nil while it has not (without looking at its deadline: Err).
func (l *Lease) ended() error {
	l.endMu.Lock()
	defer l.endMu.Unlock()
	return l.cause
}

// Err returns nil while the lease is held, then why it ended. It reads the local deadline on
// the monotonic clock at the moment of the call: a holder whose process was frozen past its
// deadline (SIGSTOP, a long GC pause, a suspended VM) learns of the loss from its first look
// after it resumes, not when the renewal goroutine next gets to run.
func (l *Lease) Err() error {
	if err := l.ended(); err != nil {
		return err
	}
	l.expire()
	return l.ended()
}

// Bind returns a copy of parent that is also cancelled, with the lease's error as its cause,
// when the lease ends. Its Err and Done read the lease's deadline as Err does, so work that
// checks them after its process was frozen past the deadline sees the loss at once; a goroutine
// already blocked on Done wakes when the renewal loop, or any look at the lease, ends it.
func (l *Lease) Bind(parent context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(parent)
	lctx := l.context()
	stop := context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
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
	if l.ended() != nil {
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
		ended = l.finish(l.errDeadline()) // under the lock, as the loop does
	}
	r.mu.Unlock()
	if ended {
		l.report(l.ended())
	}
}

// errDeadline is the loss of a lease whose deadline passed before a renewal succeeded, with
// Redis's refusal of the last one if it refused it (an ACL without a command the renewal
// script calls), or the last one's failure (a refused connection): the holder is told why.
// The failure is told in words only, so that the loss matches no error of the network or of
// a context. Called with the renewer's mutex.
func (l *Lease) errDeadline() error {
	switch {
	case l.refused != nil:
		return fmt.Errorf("%w: its deadline passed before a renewal succeeded; Redis refused the last one: %w", ErrLost, l.refused)
	case l.failed != nil:
		return fmt.Errorf("%w: its deadline passed before a renewal succeeded; the last one failed: %v", ErrLost, l.failed)
	}
	return lost("its deadline passed before a renewal succeeded")
}

// End ends the lease with err (the first call wins), closes Done, and reports the end to the
// log (a loss) and the handle's observer. When it returns, the lease has ended (by this call
// or another), and Err says why.
func (l *Lease) End(err error) {
	if l.finish(err) {
		l.report(err)
	}
}

// finish ends the lease with err, reporting nothing, and says whether this call ended it: a
// caller that holds the renewer's lock reports the end (report) after unlocking it. The cause
// and the context's cancellation are set together, under endMu, so that a caller that lost
// the race reads the lease's error, not nil, as soon as finish returns.
func (l *Lease) finish(err error) bool {
	if err == nil {
		err = ErrReleased // every end has a cause; callers always give one
	}
	l.endMu.Lock()
	defer l.endMu.Unlock()
	if l.cause != nil {
		return false
	}
	l.cause = err
	if l.end != nil {
		l.end(err)
	}
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
		if lerr := l.ended(); lerr != nil {
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

package core

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// What an Event reports (package distsync documents each as an EventKind).
const (
	EventAcquireStarted = iota + 1
	EventAcquired
	EventNotAcquired
	EventReleased
	EventLost
	EventRenewed
	EventRenewalFailed
	EventQueued
	EventWoken
	EventGranted
	EventOnceLeader
	EventOnceFollower
	EventOnceTakeover
	EventAllowed
	EventDelayed
	EventRefused
	EventCanceled
)

// Event is one thing that happened to a primitive made from a handle, for the handle's
// observer (see distsync.Event, which it becomes field by field).
type Event struct {
	Kind      uint8
	Primitive string
	Identity  string
	Name      string
	ID        uint64
	Context   context.Context
	Wait      time.Duration
	Held      time.Duration
	Token     int64
	Weight    int64
	Shared    bool
	Nested    bool
	Err       error
}

// Observed reports whether the handle has an observer: a primitive that would build
// something only for it checks this first, so that a handle without one pays nothing.
func (h *Handle) Observed() bool { return h.Config.Observer != nil }

// Emit sends e to the handle's observer, if it has one.
func (h *Handle) Emit(e Event) {
	if o := h.Config.Observer; o != nil {
		o(e)
	}
}

// Decision reports e, an event of a call that is one decision (a rate limiter's
// EventAllowed, EventDelayed, EventRefused, EventCanceled), with the handle's identity, and
// returns its call number: e.ID, or a new one if e.ID is 0 (a Cancel passes its decision's).
// Without an observer it does nothing and returns 0: callers check Observed first, so that
// they build no Event for nobody.
func (h *Handle) Decision(e Event) uint64 {
	if h.Config.Observer == nil {
		return 0
	}
	if e.ID == 0 {
		e.ID = callSeq.Add(1)
	}
	e.Identity = h.Config.Identity
	h.Emit(e)
	return e.ID
}

// Acquire follows one call that acquires (a Lock, an Acquire, a Campaign, a once Do) for the
// handle's observer: Begin reports that it started, Done how it ended, and the hold it took
// reports its end through it. A nil *Acquire, what Begin returns on a handle without an
// observer, does nothing at all.
type Acquire struct {
	h          *Handle
	id         uint64
	kind, name string
	ctx        context.Context
	weight     int64
	shared     bool
	start      time.Time
	acquired   time.Time // when Done saw the hold taken: Held counts from it
	queued     atomic.Bool
}

// callSeq numbers the observed calls of every handle of the process (Begin): one observer
// given to several handles can still tell their calls apart.
var callSeq atomic.Uint64

// acquireKey is the context key of the call's Acquire (Bind).
type acquireKey struct{}

// Begin reports that a call of the primitive kind named name started to acquire weight units
// (1 but for a semaphore; shared for a read lock) and returns what follows it: nil if the
// handle has no observer.
func (h *Handle) Begin(ctx context.Context, kind, name string, weight int64, shared bool) *Acquire {
	if h.Config.Observer == nil {
		return nil
	}
	a := &Acquire{h: h, id: callSeq.Add(1), kind: kind, name: name, ctx: ctx, weight: weight, shared: shared, start: time.Now()}
	a.emit(Event{Kind: EventAcquireStarted, Context: ctx})
	return a
}

// Bind returns ctx carrying a, so that the waiting machinery under the call (a Room, a queue)
// can report what it does with Note. For a nil a it returns ctx as it is.
func (a *Acquire) Bind(ctx context.Context) context.Context {
	if a == nil {
		return ctx
	}
	return context.WithValue(ctx, acquireKey{}, a)
}

func (a *Acquire) emit(e Event) {
	e.Primitive, e.Identity, e.Name, e.ID, e.Weight, e.Shared = a.kind, a.h.Config.Identity, a.name, a.id, a.weight, a.shared
	a.h.Emit(e)
}

// Note reports, for the call whose context is ctx (see Acquire.Bind), an event of the waiting
// machinery: EventQueued (once per call), EventWoken or EventGranted. It does nothing on a
// handle without an observer, or for a context of no observed call.
func (h *Handle) Note(ctx context.Context, kind uint8) {
	if h.Config.Observer == nil {
		return
	}
	a, _ := ctx.Value(acquireKey{}).(*Acquire)
	if a == nil || (kind == EventQueued && a.queued.Swap(true)) {
		return
	}
	a.emit(Event{Kind: kind, Context: a.ctx})
}

// Once reports one of once's events (EventOnceLeader, EventOnceFollower, EventOnceTakeover).
func (a *Acquire) Once(kind uint8) {
	if a != nil {
		a.emit(Event{Kind: kind, Context: a.ctx})
	}
}

// Done reports how the call ended: with the hold l (EventAcquired), whose end the lease then
// reports (EventReleased, EventLost) with its renewals; or, l nil, not acquired
// (EventNotAcquired) because of err, nil for a try that found the claim taken.
func (a *Acquire) Done(l *Lease, err error) {
	if a == nil {
		return
	}
	now := time.Now()
	if l == nil || err != nil {
		a.emit(Event{Kind: EventNotAcquired, Context: a.ctx, Wait: now.Sub(a.start), Err: err})
		return
	}
	a.acquired = now
	// The first call that reports the hold follows it: a reentrant re-entry reports its own
	// acquisition, marked Nested, but the hold and its end are the first call's. Under the
	// hold's emit lock, so that its end cannot be reported before its acquisition.
	l.emit.Lock()
	first := l.obs.CompareAndSwap(nil, a)
	a.emit(Event{Kind: EventAcquired, Context: a.ctx, Wait: now.Sub(a.start), Token: l.Token(), Nested: !first})
	l.emit.Unlock()
	if !first {
		return
	}
	if err := l.Err(); err != nil {
		l.tellEnd(err) // it ended before it was followed: report the end now (once, see tellEnd)
	}
}

// report is what follows the end of l, once, outside the renewer's lock (the observer may be
// slow, or look at the lease): it tells the observer and the log (tellEnd), and the lease over
// l, if any (endedUp).
func (l *Lease) report(err error) {
	l.tellEnd(err)
	l.endedUp()
}

// tellEnd tells the observer and the log how l ended, once.
func (l *Lease) tellEnd(err error) {
	if lg := l.h.Log(); lg != nil && !l.spec.Place && errors.Is(err, ErrLost) && l.logged.CompareAndSwap(false, true) {
		lg.Warn("distsync: lease lost", "key", l.spec.Key, "token", l.spec.Token, "err", err)
	}
	l.tell(func(a *Acquire) {
		l.reported = true
		kind := uint8(EventReleased)
		if errors.Is(err, ErrLost) {
			kind = EventLost
		} else if errors.Is(err, ErrReleased) {
			err = nil
		}
		a.emit(Event{Kind: kind, Held: time.Since(a.acquired), Token: l.spec.Token, Err: err})
	})
}

// tell calls f with the observed call that follows l, under l's emit lock, unless nobody
// follows l or its end was reported already (a renewal's reply that came after the hold
// ended has nothing to tell).
func (l *Lease) tell(f func(a *Acquire)) {
	a := l.obs.Load()
	if a == nil {
		return
	}
	l.emit.Lock()
	defer l.emit.Unlock()
	if !l.reported {
		f(a)
	}
}

// renewed tells the observer of a renewal of l: nil if it succeeded, else its error (the
// renewal is retried).
func (l *Lease) renewed(err error) {
	l.tell(func(a *Acquire) {
		kind := uint8(EventRenewed)
		if err != nil {
			kind = EventRenewalFailed
		}
		a.emit(Event{Kind: kind, Token: l.spec.Token, Err: err})
	})
}

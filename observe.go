package distsync

import (
	"context"
	"strconv"
	"time"

	"github.com/distsync/distsync/internal/core"
)

// An Observer receives the [Event]s of the primitives made from a [Handle]: what their calls
// wait for, what they hold and for how long, renewals, losses and hand-offs, and the
// decisions of rate limiters (package rate). Give one to
// [New] with [WithObserver]; module github.com/distsync/distsync/otel makes OpenTelemetry
// metrics and spans of them.
//
// It is called synchronously, on the goroutine where the event happens (a Lock's, or the
// Handle's renewal loop), and may be called from several goroutines at once. It must be quick,
// and safe for concurrent use, and must not block or call the Handle's primitives: count,
// record, hand off to a channel.
type Observer func(Event)

// An Event is one thing that happened to a primitive of a [Handle] with an [Observer]. Which
// fields are set depends on Kind; see each [EventKind].
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// Primitive is the kind of primitive, as its options name it: "mutex", "reentrant",
	// "rwmutex", "fair", "semaphore", "election", "once.Group", "once.Once" (also OnceFunc),
	// "once.OnceValue" (also OnceValues) or "rate" (a rate.Limiter).
	Primitive string
	// Identity is the [Handle.Identity] of the Handle whose primitive it is (set on every
	// event): an observer given to several Handles can tell them apart by it.
	Identity string
	// Name is the primitive's name: for once, the Group's (or Once's) name, not the key, so
	// that a Group with many keys makes one series of metrics, not one per key.
	Name string
	// Call numbers the call that acquired, unique in the process: every event of one call and
	// of the hold it took carries the same Call, so that an observer can pair
	// EventAcquireStarted with how it ended, and EventAcquired with EventReleased. For once,
	// the call is the process's call of a key, which callers in the process join: they make
	// no events of their own. A reentrant re-entry reports EventAcquired with Nested set; the
	// hold, and its end, are reported once, with the Call of the first call that reported it.
	// A rate limiter's decision is a call of its own; the EventCanceled of the reservation it
	// made carries its Call.
	Call uint64
	// Context is the context the call was made with, for the events of the call itself
	// (started, queued, woken, granted, acquired or not, once's roles, a rate decision and
	// its cancellation): an observer that traces starts its span from it. Nil for the events
	// of a hold (released, lost, renewals), which happen after the call returned.
	Context context.Context
	// Wait is how long the call waited: set for EventAcquired and EventNotAcquired. For
	// EventDelayed it is the delay the decision set: how long after it the caller may act
	// (what rate.Reservation.Delay said when the reply came; a Wait sleeps for it).
	Wait time.Duration
	// Held is how long the hold lasted: set for EventReleased and EventLost.
	Held time.Duration
	// Token is the hold's fencing token (see [Lease.Token]): set for EventAcquired and the
	// events of the hold.
	Token int64
	// Weight is what the call asks for: a semaphore's permits, a rate limiter's tokens (the
	// n of AllowN, ReserveN, WaitN; for EventCanceled, those of the reservation), 1 for every
	// other primitive.
	Weight int64
	// Shared is true for a read lock of a read-write mutex.
	Shared bool
	// Nested is true for the EventAcquired of a reentrant re-entry: the owner held the lock
	// already, and the hold, with its end, was reported by the call that took it first.
	Nested bool
	// Err is why: for EventNotAcquired, the error the call returned (nil for a try that
	// found the claim taken); for EventLost, the loss (it matches [ErrLost]); for
	// EventRenewalFailed, the error of the renewal (it is retried); for EventReleased, nil, or
	// [ErrClosed] if the Handle's Close released the hold; for EventRefused, the error the
	// call returned (nil for an Allow that returned false or a Reservation that is not OK);
	// for EventCanceled, nil for rate.Reservation.Cancel, or why a Wait ended early (its
	// ctx's error, or [ErrClosed]).
	Err error
}

// EventKind says what an [Event] reports.
type EventKind uint8

// The kinds of [Event] (their values are the core's, which a test checks, and never change).
// A call that acquires reports EventAcquireStarted, then, if it waits, EventQueued once and
// EventWoken or EventGranted each time a release lets it try again, then EventAcquired or
// EventNotAcquired. A hold it took reports EventRenewed or EventRenewalFailed at each
// renewal, and ends with EventReleased or EventLost.
//
// A rate limiter's call (Allow, AllowN, Reserve, ReserveN, Wait, WaitN of package rate) is
// one decision, and reports exactly one event, with Weight the tokens asked for:
// EventAllowed, EventDelayed or EventRefused (a call with an invalid argument, which sends
// nothing, reports none). A reservation given back later reports EventCanceled with the
// decision's Call. Its Tokens, SetLimit and SetBurst decide nothing and report nothing.
const (
	// EventAcquireStarted: a call began to acquire (Lock, TryLock, Acquire, Campaign, Do...).
	EventAcquireStarted EventKind = core.EventAcquireStarted
	// EventAcquired: the call acquired; Wait and Token are set.
	EventAcquired EventKind = core.EventAcquired
	// EventNotAcquired: the call returned without acquiring; Wait is set, and Err says why.
	EventNotAcquired EventKind = core.EventNotAcquired
	// EventReleased: the hold was released (or the Handle was closed); Held is set.
	EventReleased EventKind = core.EventReleased
	// EventLost: the hold ended without being released; Held is set, and Err says why. The
	// Handle also logs it, at level Warn, with [WithLogger].
	EventLost EventKind = core.EventLost
	// EventRenewed: the Handle's renewal loop extended the hold's lease.
	EventRenewed EventKind = core.EventRenewed
	// EventRenewalFailed: a renewal of the hold could not reach Redis or failed there; it is
	// retried until the lease's deadline, at which the hold is lost. Err is the error.
	EventRenewalFailed EventKind = core.EventRenewalFailed
	// EventQueued: the call found the claim taken and began to wait (once per call).
	EventQueued EventKind = core.EventQueued
	// EventWoken: a waiting call was told to try again (a release's message, or its turn among
	// the waiting calls of its process).
	EventWoken EventKind = core.EventWoken
	// EventGranted: a release handed the claim to the waiting call inside Redis (a hand-off).
	EventGranted EventKind = core.EventGranted
	// EventOnceLeader: a once call runs the function itself.
	EventOnceLeader EventKind = core.EventOnceLeader
	// EventOnceFollower: a once call waits for the result of a leader elsewhere.
	EventOnceFollower EventKind = core.EventOnceFollower
	// EventOnceTakeover: a waiting once call took over from a leader whose lease was lost,
	// and runs the function itself.
	EventOnceTakeover EventKind = core.EventOnceTakeover
	// EventAllowed: a rate limiter's decision took its tokens, to be used now: an Allow that
	// returned true, a Reservation that is OK with no delay, a Wait that returned at once.
	EventAllowed EventKind = core.EventAllowed
	// EventDelayed: a rate limiter's decision took its tokens, to be used after a delay,
	// which Wait gives: a Reservation that is OK with a delay, a Wait that sleeps for it
	// before it returns (or before it gives the tokens back: EventCanceled).
	EventDelayed EventKind = core.EventDelayed
	// EventRefused: a rate limiter's call returned without tokens: an Allow that returned
	// false, a Reservation that is not OK, or a Wait (or Allow, or Reserve) that returned an
	// error, which Err is (n over the burst, a deadline too near, its ctx, Redis's error).
	EventRefused EventKind = core.EventRefused
	// EventCanceled: a rate limiter's reservation was given back (its tokens, as many as the
	// later reservations did not count on): by rate.Reservation.Cancel, or by a Wait that
	// ended before its time to act, whose reason Err is. Call is the decision's.
	EventCanceled EventKind = core.EventCanceled
)

var eventNames = [...]string{
	EventAcquireStarted: "acquire_started", EventAcquired: "acquired", EventNotAcquired: "not_acquired",
	EventReleased: "released", EventLost: "lost", EventRenewed: "renewed", EventRenewalFailed: "renewal_failed",
	EventQueued: "queued", EventWoken: "woken", EventGranted: "granted",
	EventOnceLeader: "once_leader", EventOnceFollower: "once_follower", EventOnceTakeover: "once_takeover",
	EventAllowed: "allowed", EventDelayed: "delayed", EventRefused: "refused", EventCanceled: "canceled",
}

// String returns the kind's name in snake case, "acquired" for EventAcquired.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// WithObserver makes the Handle report every [Event] of its primitives to o. It can be given
// more than once: each observer receives every event, in the order they were given. Without
// one, the primitives build no event at all: an observer costs nothing unless it is set.
//
// Applies to: New.
func WithObserver(o Observer) Option {
	return Option{core.Opt{Name: "WithObserver", Handle: true, Kinds: []string{},
		Set: func(s *core.Settings) {
			if o == nil {
				return
			}
			prev := s.Observer
			s.Observer = func(e core.Event) {
				if prev != nil {
					prev(e)
				}
				o(Event{Kind: EventKind(e.Kind), Primitive: e.Primitive, Identity: e.Identity, Name: e.Name, Call: e.ID, Context: e.Context,
					Wait: e.Wait, Held: e.Held, Token: e.Token, Weight: e.Weight, Shared: e.Shared, Nested: e.Nested, Err: e.Err})
			}
		}}}
}

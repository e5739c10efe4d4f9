// Package distsyncotel makes OpenTelemetry metrics and spans of what the primitives of a
// [distsync.Handle] do: how long calls wait for a lock, how long holds last, how they end,
// lost leases and failed renewals, and what rate limiters decide. It is a module of its own, so that package distsync never
// imports OpenTelemetry. Give its [Observer] to the Handle:
//
//	h, err := distsync.New(client, distsync.WithObserver(distsyncotel.Observer()))
//
// By default it uses the global providers ([otel.GetMeterProvider],
// [otel.GetTracerProvider]); [WithMeterProvider] and [WithTracerProvider] override them. Its
// instrumentation scope is [ScopeName], with the module's version.
//
// # Metrics
//
// Every metric has the attributes distsync.primitive, the kind of primitive ("mutex",
// "reentrant", "rwmutex", "fair", "semaphore", "election", "once.Group", "once.Once",
// "once.OnceValue", "rate"), distsync.name, the primitive's name ([WithoutNames] leaves it out), and
// distsync.identity, the [distsync.Handle.Identity] of the Handle whose primitive it is, by
// default "<host name>:<pid>" ([WithoutIdentity] leaves it out). Counts are of this
// process's calls and holds.
//
//	name                            kind           unit           more attributes
//	distsync.acquire.wait.duration  histogram      s              distsync.result
//	distsync.acquisitions           counter        {acquisition}  distsync.result
//	distsync.waiters                updowncounter  {call}
//	distsync.holders                updowncounter  {hold}
//	distsync.hold.duration          histogram      s              distsync.end
//	distsync.lease.losses           counter        {loss}         distsync.reason
//	distsync.lease.renewal.failures counter        {failure}
//	distsync.once.calls             counter        {call}         distsync.once.role
//	distsync.rate.decisions         counter        {decision}     distsync.rate.decision
//	distsync.rate.delay.duration    histogram      s              distsync.rate.decision
//
// distsync.acquire.wait.duration is how long each call that acquires (Lock, TryLock,
// Acquire, Campaign, Do...) took, acquired or not, and distsync.acquisitions counts those
// calls. Their distsync.result is how the call ended:
//
//	acquired  it acquired
//	busy      a try found the claim taken
//	shared    a once call got the result of another process's leader
//	canceled  its context was canceled
//	timeout   its context's deadline passed
//	closed    the Handle was closed
//	error     any other error (Redis's, an invalid argument...)
//
// distsync.waiters is the number of those calls in progress; distsync.holders the number of
// holds taken and not yet ended (a reentrant owner's nested locks are one hold; a semaphore's
// hold of n permits is one hold).
//
// distsync.hold.duration is how long each hold lasted, from the acquire's return to its end;
// distsync.end is how it ended: "released", "lost" (see [distsync.ErrLost]) or "closed" (the
// Handle's Close released it).
//
// distsync.lease.losses counts the holds lost; distsync.reason says why, as far as the loss's
// error tells:
//
//	expired_or_taken     the claim had expired or been taken by another owner when a
//	                     renewal, a refresh or the release looked
//	deadline             no renewal got through before the lease's local deadline
//	release_unconfirmed  the release could not be confirmed before the lease ran out
//	quorum               a quorum mutex held the claim on fewer primaries than its quorum
//	other                none of the above
//
// distsync.lease.renewal.failures counts the renewals that failed and will be retried (a hold
// whose renewals keep failing is lost at its deadline).
//
// distsync.once.calls counts the once calls by the role they took: distsync.once.role is
// "leader" (it runs the function), "follower" (it waits for a leader elsewhere) or
// "takeover" (it waited, the leader's lease was lost, and it runs the function itself).
//
// distsync.rate.decisions counts the decisions of rate limiters (package rate's Allow,
// AllowN, Reserve, ReserveN, Wait and WaitN: one each) and the reservations given back;
// distsync.rate.decision is what they decided:
//
//	allowed   the tokens were taken, to be used at once
//	delayed   the tokens were taken, to be used after a delay (a Reservation's Delay, what
//	          a Wait sleeps for)
//	refused   no tokens were taken: an Allow that returned false, a Reservation not OK, a
//	          Wait for more than the burst or whose tokens would come after its deadline
//	canceled  a reservation was given back (Reservation.Cancel, or a Wait ended early)
//	error     the call returned another error (its context's, a closed Handle's, Redis's)
//
// distsync.rate.delay.duration is the delay of each decision that took tokens (allowed ones
// as 0): how long after it the caller may act.
//
// The histograms advise bucket boundaries: for distsync.acquire.wait.duration, those that
// OpenTelemetry's semantic conventions advise for the durations of requests (5 ms to 10 s);
// for distsync.hold.duration, the same carried on to an hour (30 s, 1 min, 5 min, 15 min,
// 1 h); for distsync.rate.delay.duration, a bucket for no delay (0) before those for waits,
// carried on to a minute. Without advice the SDK's default boundaries, made for milliseconds, would put
// almost every duration in seconds in their first bucket. A View overrides the advice: to
// an exponential histogram, say, for finer waits than 5 ms.
//
// # Spans
//
// Each call that acquires is a span named "<primitive> acquire" ("mutex acquire"), of kind
// internal, a child of the span in the call's context. It starts when the call does and ends
// when it returns, with the attributes distsync.primitive, distsync.name, distsync.identity,
// distsync.weight (a semaphore's permits, when not 1), distsync.shared (a read lock),
// distsync.result, and, acquired, distsync.token (the fencing token). A call that ended with an error (result
// canceled, timeout, closed or error) has the status Error, its error as description, and
// error.type set to its result; busy and shared calls are not errors. What happened while it
// waited is span events: queued, woken, granted, once_leader, once_follower, once_takeover.
// A hold has no span: it outlives the call, so its end is only in the metrics (and the
// Handle's log).
//
// A rate limiter's decision is one script call, not a span of its own: it is an event of the
// span in the call's context, if that span records, named "rate <decision>" ("rate delayed"),
// with the attributes distsync.name, distsync.weight (the tokens asked for), and
// distsync.rate.delay (seconds) for a delayed decision or error.type (canceled, timeout,
// closed or error) for an error.
package distsyncotel

// Package inspect reads what distsync's primitives keep in Redis, for operators, dashboards
// and tests: who holds a name and for how long, who waits for it and in which order, a
// semaphore's size and permits in use, a once group's calls in flight and kept results, an
// election's leader and candidates, a wait group's counter and rounds, a rate limiter's
// tokens and settings.
//
// What it returns is a snapshot, as Redis had it at one moment, and may be stale by the time
// it is read: never decide from it whether to lock (TryLock does that atomically). It writes
// nothing to Redis, not even a TTL: each primitive is read by one script that only reads
// (Redis accepts it as EVAL_RO, which refuses any write), all of the primitive's keys in the
// same step, in one round trip.
//
// Durations are what Redis has left on its own clock when it answers; a holder renews its
// lease long before it runs out, so Remaining goes up and down while the holder lives. Redis
// does not keep when a hold was acquired, so neither does a Report; it keeps when a waiter
// took its place in a queue, which [Waiter.Waited] gives.
//
// [Deadlocks] puts the holders and waiters of every name together and finds the cycles among
// processes that nested Locks taken in different orders leave: A waits for what B holds, while
// B waits for what A holds.
package inspect

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
)

// The kinds of primitive, as [Report.Kind] and [Entry.Kind] name them.
const (
	Mutex     = "mutex"     // package mutex
	Reentrant = "reentrant" // package reentrant
	RWMutex   = "rwmutex"   // package rwmutex
	Fair      = "fair"      // package fair
	Semaphore = "semaphore" // package semaphore
	Once      = "once"      // package once: a Group, and Once, OnceFunc, OnceValue, OnceValues
	Election  = "election"  // package election
	WaitGroup = "waitgroup" // package waitgroup
	Rate      = "rate"      // package rate: a Limiter
)

// Kinds returns every kind Inspect reads, in the order [Name] and [List] report them.
func Kinds() []string {
	return []string{Mutex, Reentrant, RWMutex, Fair, Semaphore, Once, Election, WaitGroup, Rate}
}

// Report is one primitive's state, as Redis had it at one moment. Fields that do not apply to
// its kind are zero. Holds and waiters whose lease had lapsed (Redis drops them at the
// primitive's next command) are left out.
type Report struct {
	// Kind is one of [Kinds]; Name is the name the primitive was made with. For once it is
	// the Group's name (a Once, OnceFunc, OnceValue or OnceValues is a Group of its own name).
	Kind, Name string

	// Holders are the live holds: a mutex's, fair mutex's or election's holder (an
	// election's leader); a reentrant mutex's owner with its hold count; a rwmutex's writer,
	// or its readers (Shared); a semaphore's holders, with the permits each holds (Count); a
	// wait group's live members, one unit of pending work each. Several holds come in the
	// order their leases end, soonest first. A claim handed over inside Redis and not yet
	// confirmed by its new holder shows the owner value "~<waiter>:<token>" ("~<waiter>" for
	// semaphore permits; for a reentrant mutex, with Count 0). Nil if nobody holds.
	Holders []distsync.Holder

	// Queue are the live waiters, in the order they will be served: the waiting processes
	// of a mutex or a reentrant mutex (one entry per process, however many of its goroutines
	// wait); the waiting calls of a fair mutex, a semaphore or an election; a rwmutex's
	// readers admitted by the last writer's Unlock, then its waiting writers in turn, with
	// its waiting readers (in no order among themselves) where the next writer's Unlock lets
	// them in: before the first waiting writer if a writer holds, after it otherwise. A once
	// group keeps no queue in Redis (its waiters listen on pub/sub), so it is nil for it.
	Queue []Waiter

	// Fence is the last fencing token handed out for the name (the current holder's, while
	// one holds), 0 if none is kept. A semaphore and a wait group have none; a once group
	// keeps one per key (OnceKey.Leader.Token).
	Fence int64

	// Size and InUse are a semaphore's: the size Redis has for it (0 if it has none: nobody
	// holds or waits), and the permits its live holders hold.
	Size, InUse int64

	// With is a mutex's: while its holder holds it as one of a set of mutexes locked
	// together (a mutex.All of package mutex), the set's other names, in the order given to
	// mutex.NewAll; nil otherwise (nobody holds, an ordinary hold, a set of one). It is read
	// in the same step as Holders, from the record each member of a set keeps with its hold.
	With []string

	// Leader is an election's leader, nil if nobody leads.
	Leader *Leader

	// Keys are a once group's keys that have a call in flight or a result kept, by key.
	Keys []OnceKey

	// Counter is a wait group's counter and rounds, nil if Redis has none.
	Counter *Counter

	// Bucket is a rate limiter's token bucket, nil if Redis has none (a limiter whose
	// bucket would be full, and that has no settings stored, keeps nothing in Redis). A
	// rate limiter has no holders and no queue: its callers wait on their own timers.
	Bucket *Bucket

	// maker is a reentrant mutex's: the Handle through which its owner took the hold, which
	// Deadlocks takes for the holding process ("" if nobody holds). Holders leaves it out:
	// an owner may re-enter from other processes.
	maker string
}

// Idle reports whether nobody holds or waits for the primitive: no holder, no waiter, no
// once call in flight or result kept, no pending wait group work, no rate limiter
// reservation whose time to act is still ahead. A Report of a name that Redis has nothing
// of is idle; so is one that keeps only a fencing token or past rounds, or a rate limiter's
// bucket that no reservation waits on.
func (r Report) Idle() bool {
	return len(r.Holders) == 0 && len(r.Queue) == 0 && len(r.Keys) == 0 && r.InUse == 0 &&
		(r.Counter == nil || r.Counter.Pending == 0) && (r.Bucket == nil || r.Bucket.Next == 0)
}

// Waiter is one waiter in a queue that Redis keeps.
type Waiter struct {
	// ID is the waiter's id in Redis: a waiting process (mutex, rwmutex) or one waiting call
	// (fair, semaphore, election).
	ID string
	// Handle is the [distsync.Handle.ID] of the Handle it waits through, and Identity that
	// Handle's [distsync.Handle.Identity] ("" for a Handle of a version before identities).
	Handle, Identity string
	// Remaining is how long Redis keeps the waiter's place unless it renews it: a waiter
	// whose process died drops out of the queue then.
	Remaining time.Duration
	// Waited is how long the waiter has had its place, by the server's clock; 0 where Redis
	// keeps no arrival (a rwmutex's readers). A mutex process that took the lock and went
	// back to the tail for its other goroutines counts from then.
	Waited time.Duration
	// Weight is the permits it asks for (semaphore); 1 otherwise.
	Weight int64
	// Shared is true for a rwmutex reader. Admitted is true for one that the last writer's
	// Unlock let in ahead of the next writer; it takes its read hold at its next look.
	Shared, Admitted bool
	// Value is an election candidate's value, what it leads with.
	Value string
}

// Leader is an election's leader, as its record has it. Its Handle, identity and the lease
// it has left are those of [Report.Holders][0].
type Leader struct {
	Value string // its Campaign's value, or its last Proclaim's
	Term  int64  // its term: the fencing token of its hold
	Rev   int64  // announcements of the election so far; within a Term, larger is later
}

// OnceKey is one key of a once group that has a call in flight or a result kept.
type OnceKey struct {
	// Key is the key given to Group.Do; "" for a Once, OnceFunc, OnceValue or OnceValues.
	Key string
	// Leader is the call in flight: the leader's owner value, its Handle and identity, its
	// fencing token and the lease Redis has left; nil if no call is in flight.
	Leader *distsync.Holder
	// Kept is what is kept for later callers: "value", or "error" (once.WithKeepErrors);
	// "" if nothing is.
	Kept string
	// KeptFor is how long Redis keeps it; negative if until Forget or Reset (a Once's record
	// of its success).
	KeptFor time.Duration
}

// Counter is a wait group's pending work and rounds.
type Counter struct {
	// Pending is the work that Wait waits for: Units plus the live members
	// ([Report.Holders]).
	Pending int64
	// Units are the plain units: added by Add, not yet Done or claimed by a member.
	Units int64
	// Round is the open round, or the last that ended (0 if none); Open reports whether it
	// is open.
	Round int64
	Open  bool
	// Lost counts the members of the open round lost so far; Err is its first member error.
	Lost int64
	Err  string
	// Ended are the outcomes Redis keeps of the last rounds that ended, newest first.
	Ended []Outcome
}

// Outcome is how a wait group's round ended.
type Outcome struct {
	Round int64
	Lost  int64  // members lost in the round
	Err   string // the round's first member error, "" if none
}

// Bucket is a rate limiter's token bucket (package rate), as Redis keeps it in one hash: its
// tokens, the limit and burst stored in it, and the latest time to act reserved.
type Bucket struct {
	// Tokens are the tokens the bucket has now, by Redis's clock, as the limiter's next
	// decision would find them, if Exact: below zero while reservations wait for theirs.
	// Redis knows the rate at which tokens come back only if SetLimit and SetBurst stored
	// both the limit and the burst (otherwise each process sends its own with each
	// decision): without them, Exact is false and Tokens are what the bucket had at its last
	// write, Updated ago; it has at least that now, since tokens only come back (up to the
	// burst in force).
	Tokens float64
	Exact  bool
	// Updated is how long ago, by Redis's clock, the bucket was last written: a decision
	// that took tokens, a Cancel, a SetLimit or a SetBurst.
	Updated time.Duration
	// Limit is the limit that SetLimit stored, in events per second (+Inf for rate.Inf), and
	// Burst the burst that SetBurst stored; LimitSet and BurstSet report whether they were.
	// A setting not stored is each process's own: the one its NewLimiter was given.
	Limit              float64
	Burst              int64
	LimitSet, BurstSet bool
	// Next is how long, by Redis's clock, until the latest time to act reserved so far (a
	// Reserve's, or that of a Wait that sleeps until it); 0 if it has passed.
	Next time.Duration
}

// Entry names one primitive that has keys in Redis.
type Entry struct {
	Kind string // one of Kinds
	Name string // for once, the Group's name
}

// Inspect reads the primitive of kind named name, as Redis has it now, in one round trip
// that writes nothing. A once group's keys are spread over the slots, so for once it first
// SCANs every node for the group's keys, then reads them all in one pipeline per node. If
// Redis has nothing of the primitive, Inspect returns a Report with only Kind and Name set.
// It returns an error matching [distsync.ErrInvalid] for a nil Handle, a kind not in [Kinds]
// or an empty name, and Redis's error, wrapped, if a read fails. ctx bounds the whole read.
func Inspect(ctx context.Context, h *distsync.Handle, kind, name string) (Report, error) {
	c, err := open(h)
	if err != nil {
		return Report{}, err
	}
	if _, ok := layout[kind]; !ok {
		return Report{}, fmt.Errorf("inspect: %w: unknown kind %q (want one of %v)", distsync.ErrInvalid, kind, Kinds())
	}
	if name == "" {
		return Report{}, fmt.Errorf("inspect %s: %w: empty name", kind, distsync.ErrInvalid)
	}
	if kind == Once {
		r, _, err := readOnce(ctx, c, name)
		return r, err
	}
	rs, err := readName(ctx, c, name, []string{kind}, false)
	if err != nil {
		return Report{}, err
	}
	return rs[0], nil
}

// Name reads every kind of primitive called name that Redis has keys of, in the order of
// [Kinds], including those that keep no more than a fencing token (see [Report.Idle]). The
// keys of one name share a slot, so it reads them all in one round trip, and a once group of
// that name as [Inspect] does. It returns none if Redis has nothing of name, and errors as
// Inspect does.
func Name(ctx context.Context, h *distsync.Handle, name string) ([]Report, error) {
	c, err := open(h)
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, fmt.Errorf("inspect: %w: empty name", distsync.ErrInvalid)
	}
	var kinds []string
	for _, k := range Kinds() {
		if k != Once {
			kinds = append(kinds, k)
		}
	}
	rs, err := readName(ctx, c, name, kinds, true)
	if err != nil {
		return nil, err
	}
	o, found, err := readOnce(ctx, c, name)
	if err != nil {
		return nil, err
	}
	if found {
		// Kinds order: once comes after semaphore.
		i := slices.IndexFunc(rs, func(r Report) bool { return r.Kind == Election || r.Kind == WaitGroup || r.Kind == Rate })
		if i < 0 {
			i = len(rs)
		}
		rs = slices.Insert(rs, i, o)
	}
	return rs, nil
}

// open returns the core of h, for its key prefix and client.
func open(h *distsync.Handle) (*core.Handle, error) { return api.Core(h, "inspect") }

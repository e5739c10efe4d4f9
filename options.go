package distsync

import (
	"log/slog"
	"time"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/kind"
)

// An Option configures a [Handle] (given to [New]) or one primitive (given to its package's
// New). Each option's doc says where it applies; given anywhere else, it makes New return an
// error matching [ErrInvalid] that names the option. Options given to a primitive override the
// Handle's for that primitive only; of two options that set the same thing, the last wins.
//
// The options that every primitive shares are defined here; a package's own (once's
// WithKeep, for instance) are functions of that package that return an Option too.
type Option struct {
	o core.Opt
}

// WithLeaseTTL sets the lease of each hold, renewed by the Handle at a third of ttl while the
// claim is held: a holder keeps its claim through pauses of up to about two thirds of ttl,
// and a crashed holder's claim is freed ttl after its last renewal. Given to [New], it sets
// the default of every primitive made from the Handle. It must be at least [MinLeaseTTL].
// The default is [DefaultLeaseTTL].
//
// Applies to: New and every primitive.
func WithLeaseTTL(ttl time.Duration) Option {
	return Option{core.Opt{Name: "WithLeaseTTL", Handle: true, Kinds: nil, // every primitive

		Set: func(s *core.Settings) { s.LeaseTTL, s.Fixed = ttl, false }}}
}

// WithFixedLease makes each hold a lease of ttl that is never renewed: Redis frees the claim
// ttl after it was acquired (or last extended with [Lease.Extend] or [Lease.Refresh]), and
// the hold's [Lease] ends with [ErrLost] then. Use it for work with a known bound, where a
// holder that hangs must not keep the claim. It must be at least [MinLeaseTTL].
//
// Applies to: New (the default of every primitive made from the Handle) and every primitive.
func WithFixedLease(ttl time.Duration) Option {
	return Option{core.Opt{Name: "WithFixedLease", Handle: true, Kinds: nil, // every primitive

		Set: func(s *core.Settings) { s.LeaseTTL, s.Fixed = ttl, true }}}
}

// WithWaiterLease sets the lease of a waiter's place in a queue kept in Redis: renewed every
// third of d while the waiter waits, it bounds how long a waiter whose process died holds up
// the others (a claim handed to it comes back after at most d). It must be at least
// [MinLeaseTTL]. The default is [DefaultWaiterLease].
//
// Applies to: New, fair, semaphore, election.
func WithWaiterLease(d time.Duration) Option {
	return Option{core.Opt{Name: "WithWaiterLease", Handle: true, Kinds: []string{kind.Fair, kind.Semaphore, kind.Election},
		Set: func(s *core.Settings) { s.WaiterLease = d }}}
}

// WithHandoffWindow sets how long a lock granted to the next waiting process at release lasts
// until that process confirms it: what a waiter that died while queued can cost the others,
// once. It must be at least a millisecond. The default is [DefaultHandoffWindow].
//
// Applies to: New, mutex, reentrant, rwmutex.
func WithHandoffWindow(d time.Duration) Option {
	return Option{core.Opt{Name: "WithHandoffWindow", Handle: true, Kinds: []string{kind.Mutex, kind.Reentrant, kind.RWMutex},
		Set: func(s *core.Settings) { s.HandoffWindow = d }}}
}

// WithFenceRetention sets how long a name's last fencing token is kept after its last
// acquisition (see [DefaultFenceRetention]). It must be at least a millisecond.
//
// Applies to: New.
func WithFenceRetention(d time.Duration) Option {
	return Option{core.Opt{Name: "WithFenceRetention", Handle: true,
		Set: func(s *core.Settings) { s.FenceTTL = d }, Kinds: []string{}}}
}

// WithKeyPrefix sets the prefix of every key and channel. It must not contain '{' or '}'.
// The default is [DefaultKeyPrefix].
//
// Applies to: New.
func WithKeyPrefix(prefix string) Option {
	return Option{core.Opt{Name: "WithKeyPrefix", Handle: true, Kinds: []string{},
		Set: func(s *core.Settings) { s.Prefix = prefix }}}
}

// WithReplicaAck makes every command that takes or extends a claim wait until n replicas of
// the Redis primary have it, for at most timeout: the Handle sends each such script together
// with WAIT n timeout, on one connection of its own. Use it on Sentinel, or on a Cluster with
// replicas, so that a failover to a replica that acknowledged is less likely to lose a held
// claim (docs/guarantees.md has the figures, and what WAIT cannot promise: a replica that
// acknowledged may still not be the one promoted, and nothing is written to disk).
//
// What a claim too few replicas acknowledged in time does:
//   - an acquire (Lock, Acquire, a once lead) gives it back at once and returns an error
//     matching [ErrNotReplicated] (and, from a blocking acquire, not ErrNotAcquired: it did
//     not run out of time, the safety it was asked for could not be had). The caller may
//     retry; nothing is held.
//   - a renewal is retried, as after a connection error: the holder's lease is not extended
//     locally until a renewal is acknowledged, and ends with [ErrLost] at its deadline if
//     none is.
//
// An attempt that only queued, a renewal that found its claim gone, releases, waiters' places
// in queues and once results are not waited for: they give no claim a failover could take. Every acquire
// and renewal costs the replication round trip and a dedicated connection from the client's
// pool (bench/ measures it). n must be at least 1 and timeout at least a millisecond.
//
// Applies to: New.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return Option{core.Opt{Name: "WithReplicaAck", Handle: true, Kinds: []string{},
		Set: func(s *core.Settings) { s.ReplicaAck = core.ReplicaAck{N: n, Timeout: timeout} }}}
}

// WithLogger sets where the Handle reports what it cannot return as an error (a renewal
// that failed and will be retried, a subscription that is being re-established). The default
// discards everything.
//
// Applies to: New.
func WithLogger(l *slog.Logger) Option {
	return Option{core.Opt{Name: "WithLogger", Handle: true, Kinds: []string{},
		Set: func(s *core.Settings) { s.Logger = l }}}
}

// WithIdentity sets the Handle's identity: who it is, for an operator, such as a pod's name.
// [Holder.Identity], package inspect (and the distsync command's inspect), the [Observer]'s
// [Event.Identity] and the otel module's attributes report it. The default is
// "<host name>:<process id>" (os.Hostname, with "unknown" if the system gives none, and
// os.Getpid): unlike the random [Handle.ID], it says where the holder runs, as lslocks
// shows a PID.
//
// It is informational only: two Handles may have the same identity, and distsync decides
// nothing by it (the Handle's id stays unique by its random part). It is carried in every
// owner value and waiter id the Handle writes (see [Handle.ID]), so it costs no key and no
// round trip, and what Redis shows is always the holder's own. It may hold any bytes, which
// the id escapes; it must not be empty, nor longer than [MaxIdentityLen] bytes.
//
// Applies to: New.
func WithIdentity(identity string) Option {
	return Option{core.Opt{Name: "WithIdentity", Handle: true, Kinds: []string{},
		Set: func(s *core.Settings) { s.Identity = identity }}}
}

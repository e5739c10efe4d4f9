// Package distsync holds what every distsync primitive shares: the [Handle] that wraps a
// rueidis client, the [Lease] of a held claim, the sentinel errors and the defaults.
//
// distsync brings Go's sync and golang.org/x/sync primitives to processes on many machines,
// on Redis, one package each:
//
//   - [github.com/distsync/distsync/mutex]: sync.Mutex, several mutexes locked together
//     (NewAll), and a Redlock quorum of primaries;
//   - [github.com/distsync/distsync/reentrant]: a mutex its owner may lock again;
//   - [github.com/distsync/distsync/rwmutex]: sync.RWMutex;
//   - [github.com/distsync/distsync/fair]: a mutex served strictly in arrival order;
//   - [github.com/distsync/distsync/semaphore]: x/sync's weighted semaphore;
//   - [github.com/distsync/distsync/once]: x/sync's singleflight and sync.Once, OnceFunc,
//     OnceValue and OnceValues;
//   - [github.com/distsync/distsync/election]: leader election in the shape of etcd's;
//   - [github.com/distsync/distsync/waitgroup]: sync.WaitGroup;
//   - [github.com/distsync/distsync/rate]: x/time/rate's Limiter;
//   - [github.com/distsync/distsync/fenced]: a value that refuses writes with a stale
//     fencing token;
//   - [github.com/distsync/distsync/inspect]: who holds and who waits, read-only;
//   - [github.com/distsync/distsync/embedded]: an in-process miniredis for examples and tests.
//
// OpenTelemetry metrics and spans are in a module of their own,
// github.com/distsync/distsync/otel. Build one Handle per rueidis client and make primitives
// from it. [New] asks the servers their version, once (Redis 6.2 or later, Valkey 7.2 or
// later; an older one is refused with [ErrUnsupported]); making a primitive costs no round
// trip to Redis:
//
//	h, err := distsync.New(client)
//	...
//	defer h.Close(context.Background())
//	m, err := mutex.New(h, "orders:42")
//	if err := m.Lock(ctx); err != nil { ... }
//	defer m.Unlock(ctx)
//
// Every blocking call takes a [context.Context] that bounds the wait and nothing else.
// Waiters are woken by Redis pub/sub or a hand-off inside Redis, never by polling; a
// re-check at the end of the holder's lease is the backstop for a lost message.
//
// A held claim is a lease that Redis expires unless it is renewed. The Handle renews every
// claim it holds at a third of its TTL, and a holder learns that it lost its claim (the key
// expired, was deleted or taken, or Redis was unreachable until the lease's local deadline)
// through [Lease.Done], [Lease.Err] and [Lease.Context]. A lock is only as safe as what it
// protects checks: give the [Lease.Token] fencing token to the storage you write to, and read
// docs/guarantees.md for what Redis can and cannot promise.
//
// The Handle is safe for concurrent use. Values of the primitive types must not be copied.
package distsync

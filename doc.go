// Package distsync holds what every distsync primitive shares: the [Handle] that wraps a
// rueidis client, the [Lease] of a held claim, the sentinel errors and the defaults.
//
// distsync brings Go's sync and golang.org/x/sync primitives to processes on many machines,
// on Redis: [github.com/distsync/distsync/mutex], [github.com/distsync/distsync/reentrant],
// [github.com/distsync/distsync/rwmutex], [github.com/distsync/distsync/fair],
// [github.com/distsync/distsync/semaphore] and [github.com/distsync/distsync/once]. Build one
// Handle per rueidis client and make primitives from it; making a primitive costs no round
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

package distsync

import "github.com/distsync/distsync/internal/core"

// The sentinel errors of every primitive. Errors returned by a primitive wrap one or more of
// them together with the primitive's kind and name, so test them with [errors.Is]. Their own
// text names no package, as os.ErrNotExist's does not. (Each is the very value the library's
// internals return, as os.ErrNotExist is io/fs's.)
var (
	// ErrNotAcquired: a blocking acquire ended, because its context did, before it acquired.
	// The error also matches the context's error (context.Canceled or DeadlineExceeded).
	ErrNotAcquired = core.ErrNotAcquired
	// ErrNotHeld: a release of something the caller does not hold (never acquired, already
	// released, or lost; a loss also matches ErrLost).
	ErrNotHeld = core.ErrNotHeld
	// ErrLost: the claim ended without being released: its key expired, was deleted or taken
	// by another owner, or Redis was unreachable until the lease's local deadline.
	ErrLost = core.ErrLost
	// ErrReleased is the cause a [Lease] ends with when its holder released it.
	ErrReleased = core.ErrReleased
	// ErrInvalid: a bad argument (an empty name, a non-positive duration). Nothing was sent
	// to Redis.
	ErrInvalid = core.ErrInvalid
	// ErrClosed: the Handle was closed.
	ErrClosed = core.ErrClosed
	// ErrNotReplicated: a claim was taken on the primary but fewer replicas than
	// [WithReplicaAck] asks for acknowledged it in time. The acquire gave it back.
	ErrNotReplicated = core.ErrNotReplicated
	// ErrUnsupported: [New] found a server older than distsync supports (Redis 6.2, Valkey
	// 7.2). The error names the version found and the version needed.
	ErrUnsupported = core.ErrUnsupported
)

package distsync

import (
	"errors"

	"github.com/distsync/distsync/internal/core"
)

// The sentinel errors of every primitive. Errors returned by a primitive wrap one or more of
// them together with the primitive's kind and name, so test them with [errors.Is]. Their own
// text names no package, as os.ErrNotExist's does not.
var (
	// ErrNotAcquired: a blocking acquire ended, because its context did, before it acquired.
	// The error also matches the context's error (context.Canceled or DeadlineExceeded).
	ErrNotAcquired = errors.New("not acquired")
	// ErrNotHeld: a release of something the caller does not hold (never acquired, already
	// released, or lost; a loss also matches ErrLost).
	ErrNotHeld = errors.New("not held")
	// ErrLost: the claim ended without being released: its key expired, was deleted or taken
	// by another owner, or Redis was unreachable until the lease's local deadline.
	ErrLost = errors.New("lease lost")
	// ErrReleased is the cause a [Lease] ends with when its holder released it.
	ErrReleased = errors.New("released")
	// ErrInvalid: a bad argument (an empty name, a non-positive duration). Nothing was sent
	// to Redis.
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed: the Handle was closed.
	ErrClosed = errors.New("handle closed")
	// ErrNotReplicated: a claim was taken on the primary but fewer replicas than
	// [WithReplicaAck] asks for acknowledged it in time. The acquire gave it back.
	ErrNotReplicated = errors.New("not acknowledged by enough replicas")
	// ErrUnsupported: [New] found a server older than distsync supports (Redis 6.2, Valkey
	// 7.2). The error names the version found and the version needed.
	ErrUnsupported = errors.New("unsupported server")
)

// The core returns these very values: it takes them from here when the package is
// initialised, before any primitive can run.
func init() {
	core.Adopt(core.Errors{NotAcquired: ErrNotAcquired, NotHeld: ErrNotHeld, Lost: ErrLost, Released: ErrReleased,
		Invalid: ErrInvalid, Closed: ErrClosed, NotReplicated: ErrNotReplicated, Unsupported: ErrUnsupported})
}

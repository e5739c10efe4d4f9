package distsync

import "time"

// Holder is one hold of a name, as Redis had it at one moment: what the Holders method of
// every lock and semaphore returns. It is a snapshot for observing (dashboards, the distsync
// command's inspect, tests); it may be stale when it is read, so never decide from it whether
// to lock: TryLock does that atomically.
type Holder struct {
	// Owner is the hold's owner value in Redis. For a reentrant mutex it is the
	// reentrant.Owner; for the other primitives an opaque id of the call or process. A claim
	// handed to a waiting process inside Redis and not taken up yet is "~<waiter>:<token>"
	// (for a reentrant mutex, with Count 0: no Lock holds it yet).
	Owner string
	// Handle is the [Handle.ID] of the Handle the hold was taken through; empty for a
	// reentrant mutex, whose holds belong to an owner, not to a Handle.
	Handle string
	// Identity is the identity of the Handle the hold was taken through (see [WithIdentity]):
	// by default its host name and process id. Empty where Handle is (a reentrant mutex), and
	// for a hold taken through a Handle of a version before identities.
	Identity string
	// Token is the hold's fencing token (see [Lease.Token]): a read hold's is the name's last
	// token (see [Lease.Token]); semaphore permits carry 0.
	Token int64
	// Remaining is how long Redis keeps the hold unless its holder renews it; negative if
	// Redis keeps it without expiry (distsync never writes such a hold).
	Remaining time.Duration
	// Count is the hold count of a reentrant owner (0 for a hand-off not taken up yet), or the
	// permits a semaphore holder has; 1 otherwise.
	Count int64
	// Shared is true for a read hold of a read-write mutex.
	Shared bool
}

package core

import "errors"

// The sentinel errors. Package distsync re-exports them; primitives wrap them with their name.
var (
	ErrNotAcquired = errors.New("distsync: not acquired")
	ErrNotHeld     = errors.New("distsync: not held")
	ErrLost        = errors.New("distsync: lease lost")
	ErrReleased    = errors.New("distsync: released")
	ErrInvalid     = errors.New("distsync: invalid argument")
	ErrClosed      = errors.New("distsync: handle closed")
	// ErrLate: an acquisition's reply came after its lease's local deadline, so it was given
	// back unused (Redis or the network stalled for about a lease).
	ErrLate = errors.New("distsync: acquired too late to use (the reply came after the lease's local deadline); given back")
)

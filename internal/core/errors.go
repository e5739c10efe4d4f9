package core

import "errors"

// The sentinel errors, made here once. Package distsync exports each of them (ErrLate aside)
// as the same value, with its documentation, as os does io/fs's. Primitives wrap them after
// their kind and name ("mutex \"orders\": not acquired: context canceled"), so their own text
// names no package (as os.ErrNotExist's does not).
var (
	ErrNotAcquired   = errors.New("not acquired")
	ErrNotHeld       = errors.New("not held")
	ErrLost          = errors.New("lease lost")
	ErrReleased      = errors.New("released")
	ErrInvalid       = errors.New("invalid argument")
	ErrClosed        = errors.New("handle closed")
	ErrNotReplicated = errors.New("not acknowledged by enough replicas")
	ErrUnsupported   = errors.New("unsupported server")
	// ErrLate: an acquisition's reply came after its lease's local deadline, so it was given
	// back unused (Redis or the network stalled for about a lease).
	ErrLate = errors.New("acquired too late to use (the reply came after the lease's local deadline); given back")
)

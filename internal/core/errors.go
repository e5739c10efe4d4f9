package core

import "errors"

// The sentinel errors. Package distsync defines and documents them and hands them to the core
// when it is initialised (Adopt), so that the core returns the very values its users test
// with errors.Is; these defaults serve the core's own tests, which run without it. Primitives
// wrap them after their kind and name ("mutex \"orders\": not acquired: context canceled"),
// so their own text names no package (as os.ErrNotExist's does not).
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

// Errors are package distsync's sentinel errors, for Adopt.
type Errors struct {
	NotAcquired, NotHeld, Lost, Released, Invalid, Closed, NotReplicated, Unsupported error
}

// Adopt makes the core return e's errors; only package distsync's init calls it.
func Adopt(e Errors) {
	ErrNotAcquired, ErrNotHeld, ErrLost, ErrReleased = e.NotAcquired, e.NotHeld, e.Lost, e.Released
	ErrInvalid, ErrClosed, ErrNotReplicated = e.Invalid, e.Closed, e.NotReplicated
	ErrUnsupported = e.Unsupported
}

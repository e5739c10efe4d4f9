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
)

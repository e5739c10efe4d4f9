package reentrant

import (
	"context"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
)

// Lease returns the hold of the owner ctx carries, or nil (for tests).
func (m *Mutex) Lease(ctx context.Context) *distsync.Lease {
	o, _ := OwnerFrom(ctx)
	return api.Lease(m.leaseOf(o))
}

// Waiting returns how many Lock calls of m wait in its process's room (the first of them in
// the Redis queue, for them all), for tests that must know they all wait.
func (m *Mutex) Waiting() int { return m.room.Waiting() }

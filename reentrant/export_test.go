package reentrant

import (
	"context"

	"github.com/distsync/distsync"
)

// Lease returns the hold of the owner ctx carries, or nil (for tests).
func (m *Mutex) Lease(ctx context.Context) *distsync.Lease { return m.lease(ctx) }

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

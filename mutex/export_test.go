package mutex

import (
	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
)

// Lease returns the current hold of m, or nil (for tests that Lock and then look at the hold).
func (m *Mutex) Lease() *distsync.Lease {
	if s, ok := m.impl.(*single); ok {
		return api.Lease(s.current())
	}
	return nil // a quorum's hold is not one primary's
}

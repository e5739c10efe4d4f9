package fair

import (
	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
)

// Lease returns the newest hold of m, or nil (for tests that Lock and then look at the hold).
func (m *Mutex) Lease() *distsync.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.holds) == 0 {
		return nil
	}
	return api.Lease(m.holds[len(m.holds)-1])
}

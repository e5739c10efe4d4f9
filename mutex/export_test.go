package mutex

import "github.com/distsync/distsync"

// Lease returns the current hold of m, or nil (for tests that Lock and then look at the hold).
func (m *Mutex) Lease() *distsync.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease == nil {
		return nil
	}
	return m.lease.Public.(*distsync.Lease)
}

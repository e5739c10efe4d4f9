package rwmutex

import (
	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
)

// Lease returns the write hold of m, or nil (for tests that Lock and then look at the hold).
func (m *RWMutex) Lease() *distsync.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.wlease == nil {
		return nil
	}
	return api.Lease(m.wlease)
}

// RLease returns the newest read hold of m, or nil.
func (m *RWMutex) RLease() *distsync.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.rholds) == 0 {
		return nil
	}
	return api.Lease(m.rholds[len(m.rholds)-1])
}

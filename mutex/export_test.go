package mutex

import (
	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
)

// VoidTTL is how long the mark of a voided acquire attempt stays in a queue's key.
const VoidTTL = voidTTL

// Lease returns the current hold of m, or nil (for tests that Lock and then look at the hold).
func (m *Mutex) Lease() *distsync.Lease {
	if s, ok := m.impl.(*single); ok {
		return api.Lease(s.current())
	}
	return nil // a quorum's hold is not one primary's
}

// Waiting returns how many goroutines of this process wait in m's Lock, in their order (0
// for a quorum's).
func (m *Mutex) Waiting() int {
	if s, ok := m.impl.(*single); ok {
		return s.room.Waiting()
	}
	return 0
}

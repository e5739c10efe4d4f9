package distsync

import (
	"testing"

	"github.com/distsync/distsync/internal/core"
)

// The core's event kinds and errors are this package's: its constants are written here, with
// their docs, and must keep the core's values.
func TestEventKindsAreTheCores(t *testing.T) {
	t.Parallel()
	for k, c := range map[EventKind]int{
		EventAcquireStarted: core.EventAcquireStarted, EventAcquired: core.EventAcquired,
		EventNotAcquired: core.EventNotAcquired, EventReleased: core.EventReleased, EventLost: core.EventLost,
		EventRenewed: core.EventRenewed, EventRenewalFailed: core.EventRenewalFailed, EventQueued: core.EventQueued,
		EventWoken: core.EventWoken, EventGranted: core.EventGranted, EventOnceLeader: core.EventOnceLeader,
		EventOnceFollower: core.EventOnceFollower, EventOnceTakeover: core.EventOnceTakeover,
		EventAllowed: core.EventAllowed, EventDelayed: core.EventDelayed, EventRefused: core.EventRefused,
		EventCanceled: core.EventCanceled,
	} {
		if int(k) != c {
			t.Errorf("%v = %d, the core's is %d", k, k, c)
		}
	}
	if n := len(eventNames) - 1; n != core.EventCanceled {
		t.Errorf("%d event kinds named, the core has %d", n, core.EventCanceled)
	}
}

func TestErrorsAreTheCores(t *testing.T) {
	t.Parallel()
	for e, c := range map[error]error{
		ErrNotAcquired: core.ErrNotAcquired, ErrNotHeld: core.ErrNotHeld, ErrLost: core.ErrLost,
		ErrReleased: core.ErrReleased, ErrInvalid: core.ErrInvalid, ErrClosed: core.ErrClosed,
		ErrNotReplicated: core.ErrNotReplicated,
	} {
		if e != c {
			t.Errorf("%v is not the core's error (%v)", e, c)
		}
	}
}

func TestMinLeaseTTLIsTheCores(t *testing.T) {
	t.Parallel()
	if MinLeaseTTL != core.MinLease {
		t.Errorf("MinLeaseTTL %v, the core's %v", MinLeaseTTL, core.MinLease)
	}
}

func TestMaxIdentityLenIsTheCores(t *testing.T) {
	t.Parallel()
	if MaxIdentityLen != core.MaxIdentity {
		t.Errorf("MaxIdentityLen %d, the core's %d", MaxIdentityLen, core.MaxIdentity)
	}
}

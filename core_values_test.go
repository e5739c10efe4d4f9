package distsync_test

import (
	"fmt"
	"testing"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/core"
)

// The core's event kinds and errors are this package's: each is exported here, with its doc,
// as the core's very value, and every kind has a name.
func TestEventKindsAreTheCores(t *testing.T) {
	t.Parallel()
	for k, c := range map[distsync.EventKind]int{
		distsync.EventAcquireStarted: core.EventAcquireStarted, distsync.EventAcquired: core.EventAcquired,
		distsync.EventNotAcquired: core.EventNotAcquired, distsync.EventReleased: core.EventReleased, distsync.EventLost: core.EventLost,
		distsync.EventRenewed: core.EventRenewed, distsync.EventRenewalFailed: core.EventRenewalFailed, distsync.EventQueued: core.EventQueued,
		distsync.EventWoken: core.EventWoken, distsync.EventGranted: core.EventGranted, distsync.EventOnceLeader: core.EventOnceLeader,
		distsync.EventOnceFollower: core.EventOnceFollower, distsync.EventOnceTakeover: core.EventOnceTakeover,
		distsync.EventAllowed: core.EventAllowed, distsync.EventDelayed: core.EventDelayed, distsync.EventRefused: core.EventRefused,
		distsync.EventCanceled: core.EventCanceled,
	} {
		if int(k) != c {
			t.Errorf("%v = %d, the core's is %d", k, k, c)
		}
	}
	for k := distsync.EventKind(1); k <= core.EventCanceled+1; k++ {
		unnamed := k.String() == fmt.Sprintf("EventKind(%d)", int(k))
		if unnamed != (k > core.EventCanceled) {
			t.Errorf("%d is named %q; the core has %d event kinds", k, k, core.EventCanceled)
		}
	}
}

func TestErrorsAreTheCores(t *testing.T) {
	t.Parallel()
	for e, c := range map[error]error{
		distsync.ErrNotAcquired: core.ErrNotAcquired, distsync.ErrNotHeld: core.ErrNotHeld, distsync.ErrLost: core.ErrLost,
		distsync.ErrReleased: core.ErrReleased, distsync.ErrInvalid: core.ErrInvalid, distsync.ErrClosed: core.ErrClosed,
		distsync.ErrNotReplicated: core.ErrNotReplicated,
	} {
		if e != c {
			t.Errorf("%v is not the core's error (%v)", e, c)
		}
	}
}

func TestMinLeaseTTLIsTheCores(t *testing.T) {
	t.Parallel()
	if distsync.MinLeaseTTL != core.MinLease {
		t.Errorf("distsync.MinLeaseTTL %v, the core's %v", distsync.MinLeaseTTL, core.MinLease)
	}
}

func TestMaxIdentityLenIsTheCores(t *testing.T) {
	t.Parallel()
	if distsync.MaxIdentityLen != core.MaxIdentity {
		t.Errorf("distsync.MaxIdentityLen %d, the core's %d", distsync.MaxIdentityLen, core.MaxIdentity)
	}
}

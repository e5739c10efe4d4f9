package distsyncotel

import (
	"strconv"
	"testing"

	"github.com/distsync/distsync"
)

// The rate limiter's kinds, written here by value, are the root's: a root that has them
// names them so; one that predates them (the release this module requires) names none.
func TestRateKindsAreTheRoots(t *testing.T) {
	for k, name := range map[distsync.EventKind]string{
		eventAllowed: "allowed", eventDelayed: "delayed", eventRefused: "refused", eventCanceled: "canceled",
	} {
		if got := k.String(); got != name && got != "EventKind("+strconv.Itoa(int(k))+")" {
			t.Errorf("EventKind(%d) is %q in the root, this module takes it for %q", int(k), got, name)
		}
	}
}

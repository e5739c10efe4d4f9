package inspect

import (
	"slices"
	"testing"

	"github.com/distsync/distsync/internal/kind"
)

// inspect's kinds are the registry's key spaces: every primitive with holders or waiters is
// read, under the name its keys carry, and so is a rate limiter's bucket.
func TestKindsAreTheRegistrys(t *testing.T) {
	t.Parallel()
	var want []string
	for _, k := range kind.All {
		if s := kind.Space(k); k != kind.Fenced && !slices.Contains(want, s) {
			want = append(want, s)
		}
	}
	if got := Kinds(); !slices.Equal(got, want) {
		t.Errorf("Kinds() = %v, the registry's key spaces are %v", got, want)
	}
}

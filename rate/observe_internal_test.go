package rate

import (
	"context"
	"testing"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/redistest"
)

// A Handle without an observer builds no event for a decision: reporting one costs a test
// of a nil, and allocates nothing.
func TestUnobservedDecisionsCostNothing(t *testing.T) {
	b := redistest.Open(t, redistest.Mini)
	p := b.Pod(t, b.Prefix(t))
	l, err := NewLimiter(p.H, "quiet", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := &Reservation{lim: l, ok: true, n: 1}
	if n := testing.AllocsPerRun(100, func() {
		l.report(ctx, core.EventRefused, 1, 0, nil)
		r.decided(ctx)
	}); n != 0 {
		t.Errorf("%v allocations per unobserved decision, want 0", n)
	}
	if r.call != 0 {
		t.Errorf("an unobserved decision was numbered %d", r.call)
	}
}

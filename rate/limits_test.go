package rate_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/rate"
)

// Every limit the constructor and SetLimit accept works on every backend: the scripts read it
// back exactly, whether it is past int64 (1e19), huge, tiny, or plain. The embedded
// miniredis's Lua reads neither a 20-digit integer nor "1e+19"; Redis's reads both.
func TestEveryLimitWorksOnEveryBackend(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := b.Pod(t, prefix)
		ctx := ctxFor(t, 30*time.Second)
		for i, lim := range []rate.Limit{1e19, 1.5e300, math.MaxFloat64, 2.5, 123456789.125, 1e-30, 5e-324} {
			name := fmt.Sprintf("limit%d", i)
			l := newLimiter(t, p, name, lim, 2)
			if ok, err := l.Allow(ctx); !ok || err != nil {
				t.Fatalf("limit %v: Allow on a full bucket = %v, %v", lim, ok, err)
			}
			if got := l.Limit(); got != lim {
				t.Fatalf("limit %v: Limit() after a decision = %v", lim, got)
			}
			if err := l.SetLimit(ctx, lim); err != nil {
				t.Fatalf("SetLimit(%v): %v", lim, err)
			}
			// Another process reads the stored limit back, exactly.
			other := newLimiter(t, b.Pod(t, prefix), name, 1, 2)
			if _, err := other.Tokens(ctx); err != nil {
				t.Fatalf("limit %v: Tokens: %v", lim, err)
			}
			if got := other.Limit(); got != lim {
				t.Fatalf("limit %v stored by SetLimit read back as %v", lim, got)
			}
		}
	})
}

package stats

import (
	"math"
	"testing"
)

func TestJain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		shares []float64
		want   float64
	}{
		{nil, 0}, {[]float64{0, 0}, 0}, {[]float64{3, 3, 3}, 1}, {[]float64{4, 0, 0, 0}, 0.25}, {[]float64{1, 2}, 0.9},
	} {
		if got := Jain(c.shares); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Jain(%v) = %v, want %v", c.shares, got, c.want)
		}
	}
}

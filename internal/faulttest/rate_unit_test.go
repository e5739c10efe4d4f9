package faulttest

import (
	"math"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestMaxExcess(t *testing.T) {
	sec := int64(time.Second)
	for _, c := range []struct {
		name  string
		ts    []int64
		limit float64
		burst float64
		from  int64
		want  float64
	}{
		{"one", []int64{5}, 10, 2, math.MinInt64, -1},
		{"a burst at once", []int64{0, 0, 0}, 10, 2, math.MinInt64, 1},
		{"at the rate", []int64{0, sec / 10, 2 * sec / 10, 3 * sec / 10}, 10, 1, math.MinInt64, 0},
		{"burst then the rate", []int64{0, 0, sec / 10, 2 * sec / 10}, 10, 2, math.MinInt64, 0},
		// 3 in 100ms after a gap: 3 - 1 - 2 = 0 over (100ms, 200ms]
		{"late bunch", []int64{0, sec, sec + sec/20, sec + sec/10}, 10, 2, math.MinInt64, 0},
		{"from skips the bunch", []int64{0, 0, 0, 0, sec}, 10, 1, 1, 0},
	} {
		got, _, _ := maxExcess(c.ts, time.Nanosecond, c.limit, c.burst, c.from)
		if math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: maxExcess = %v, want %v", c.name, got, c.want)
		}
	}
}

// synthRate makes the history of a perfect limiter (limit old, then new from tc, burst b,
// the bucket full at 0 and the demand exceeding it), every Wait returning lateness after its
// time to act, and lets mutate change it.
func synthRate(s rateSetup, run, tc time.Duration, lateness time.Duration, mutate func(at []float64) []float64) []Event {
	// Times to act, in seconds, under x/time/rate's arithmetic with one reservation
	// outstanding per goroutine: burst at 0, then 1/limit apart; at tc the debt of the
	// outstanding ones is repaid at the new rate.
	var at []float64
	for i := 0; i < s.burst; i++ {
		at = append(at, 0)
	}
	for t := 1 / s.old; t < tc.Seconds(); t += 1 / s.old {
		at = append(at, t)
	}
	// Reservations made before tc reached goroutines/old ahead of it.
	last := at[len(at)-1]
	for i := 1; i <= s.goroutines; i++ {
		at = append(at, last+float64(i)/s.old)
	}
	for t := tc.Seconds() + float64(s.goroutines)/s.new; t < run.Seconds(); t += 1 / s.new {
		at = append(at, t)
	}
	if mutate != nil {
		at = mutate(at)
	}
	base := int64(time.Hour)
	var evs []Event
	for i, a := range at {
		mine := time.Duration(a * 1e9)
		val := formatRate(s.old)
		if a >= tc.Seconds()+float64(s.goroutines)/s.new-1e-9 {
			val = formatRate(s.new)
		}
		us := int64(mine/time.Microsecond) + 1e15
		evs = append(evs, Event{T: base + int64(mine+lateness), W: "w1", Ev: evAdmit, Hold: "h" + formatRate(float64(i)),
			At: us, Made: us - 500_000, Wall: us + int64(lateness/time.Microsecond), Val: val})
	}
	evs = append(evs, Event{T: base + int64(tc), N: base + int64(tc) + 1000, W: driver, Ev: drvSetLimit},
		Event{T: base + int64(run), W: driver, Ev: drvTerm})
	return merge(evs)
}

func TestCheckRate(t *testing.T) {
	s := rateSetup{old: 200, new: 100, burst: 20, goroutines: 128, jitter: 10 * time.Millisecond, ratio: 0.99, settle: 2 * time.Second, lateMedian: 25 * time.Millisecond}
	run, tc := 20*time.Second, 10*time.Second
	base := int64(time.Hour)
	if res := checkRate(s, synthRate(s, run, tc, time.Millisecond, nil), base); len(res.violations) > 0 {
		t.Errorf("a perfect limiter: %v", res.violations)
	}
	// A stall of every caller (none calls Wait in [3 s, 3.8 s)): the reservations made
	// before it act until 3.5 s, the bucket is full at 3.6 s; at 3.8 s it gives its burst,
	// then the rate again.
	stalled := func(at []float64) []float64 {
		var out []float64
		for _, a := range at {
			switch {
			case a > 3.5 && a < 3.8+float64(s.burst)/s.old:
			case a >= 3.8+float64(s.burst)/s.old && len(out) > 0 && out[len(out)-1] < 3.8:
				for range s.burst {
					out = append(out, 3.8)
				}
				fallthrough
			default:
				out = append(out, a)
			}
		}
		return out
	}
	evs := synthRate(s, run, tc, time.Millisecond, stalled)
	for i, e := range evs {
		if e.Ev == evAdmit && e.At > 1e15+3_500_000 {
			evs[i].Made = max(e.Made, 1e15+3_800_000) // nobody asked before 3.8 s
		}
	}
	if res := checkRate(s, evs, base); len(res.violations) > 0 {
		t.Errorf("a perfect limiter, every caller stalled: %v", res.violations)
	}
	for _, c := range []struct {
		name   string
		mutate func(at []float64) []float64
		want   string
	}{
		{"one extra token a second", func(at []float64) []float64 {
			for s := 1.0; s < 20; s++ {
				at = append(at, s)
			}
			return at
		}, "over the rate (Redis's clock"},
		{"a burst too many", func(at []float64) []float64 { return append(at, 0) }, "over the rate (Redis's clock, every"},
		{"burst ignored", func(at []float64) []float64 {
			for range 40 {
				at = append(at, 0)
			}
			return at
		}, "over the rate (monotonic clock"},
		{"too few", func(at []float64) []float64 {
			for i := range at {
				at[i] *= 1.03
			}
			return at
		}, "under the rate"},
	} {
		res := checkRate(s, synthRate(s, run, tc, time.Millisecond, c.mutate), base)
		if !strings.Contains(strings.Join(res.violations, "\n"), c.want) {
			t.Errorf("%s: violations %q, want one with %q", c.name, res.violations, c.want)
		}
	}
}

// TestMaxExcessLate: records bunched by their lateness pass when the lateness is measured,
// and fail when it is not.
func TestMaxExcessLate(t *testing.T) {
	ms := int64(time.Millisecond)
	// A limit of 100/s, burst 1: one admission every 10ms from 0; those acting at 10..90ms
	// are recorded at 100ms (a stalled process), the rest 1ms late.
	var ts, lat []int64
	for k := int64(0); k < 50; k++ {
		a := 10 * k * ms
		r := a + ms
		if k >= 1 && k <= 9 {
			r = 100 * ms
		}
		ts, lat = append(ts, r), append(lat, r-a)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] }) // already sorted by construction
	raw, _, _ := maxExcess(ts, time.Nanosecond, 100, 1, math.MinInt64)
	if raw < 8 {
		t.Fatalf("the bunch: raw excess %v, want 9 records in ~0s over a burst of 1", raw)
	}
	if beyond, i, j, m := maxExcessLate(ts, lat, 100, 1, time.Millisecond, 2*time.Second, math.MinInt64); beyond > 0 {
		t.Errorf("a correct limiter with a stalled process: %v beyond the margin %v in [%d, %d]", beyond, m, i, j)
	}
	zero := make([]int64, len(lat))
	if beyond, _, _, _ := maxExcessLate(ts, zero, 100, 1, time.Millisecond, 2*time.Second, math.MinInt64); beyond <= 0 {
		t.Errorf("the same bunch with no lateness measured: %v beyond the margin, want > 0", beyond)
	}
}

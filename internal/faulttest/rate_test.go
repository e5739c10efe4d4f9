package faulttest

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/rate"
)

// Issue 26's "never over the rate", across processes: rateProcs processes × rateGoroutines
// goroutines call rate.Limiter.Wait over and over, at a limit of rateOld/s and a burst of
// rateBurst, on miniredis (served on TCP by the test process), a redis-server and a 3-master
// Cluster. Halfway through, the test process (another process again) calls SetLimit(rateNew).
//
// Every admission (a Wait that returned nil) is recorded by its worker with CLOCK_MONOTONIC
// (one clock for every process of the machine) when Wait returned, and with what Redis
// decided for it: its time to act and when it was made (server clock, µs), tapped from the
// script's reply, and the limit in force then. Asserted, on the recorded history:
//
//   - On the monotonic clock (the check): in every window [t1, t2] between two
//     admissions, count ≤ limit × (t2 − t1) + burst + margin. The error of the recorded
//     times is one-sided: a Wait returns at or after its time to act, late by the reply's
//     one-way latency, the timer's and the scheduler's lateness, never early (the package's
//     contract, and checked below). A correct limiter can look over the rate only where an
//     admission was recorded later than one after it, bunching them: the admissions recorded
//     in [t1, t2] acted in [t1 − late, t2], late the largest lateness among them, so the
//     margin is limit × late + 1 (rounding), late at least rateJitter (10 ms: 2 tokens at
//     200/s). The lateness is measured, not assumed (CLOCK_REALTIME when Wait returned minus
//     Redis's time to act), and reported; windows up to rateSpan get the lateness of their
//     own admissions, longer ones the run's largest (see maxExcessLate).
//     The limit is rateOld for every window (the limit only goes down); rateNew for the
//     windows that start after the old reservations have all acted (a reservation made under
//     the old limit keeps its time, x/time/rate's SetLimit: at most one per goroutine is
//     outstanding, the last acting within goroutines/rateOld of the change); and rateNew with
//     those outstanding reservations (goroutines) allowed on top for the windows that start
//     after the change was sent.
//   - On Redis's clock, exactly (to float rounding): the reservations' times to act obey
//     rateOld + burst in every window, and those made under the new limit obey rateNew +
//     burst; every decision made after the first one under the new limit is under the new
//     limit (every process sees the change from its next call).
//   - Never early: every Wait returned at or after its time to act (CLOCK_REALTIME when Wait
//     returned against Redis's time to act: redis-server's and miniredis's TIME are the same
//     machine's realtime clock).
//   - At least rateRatio of the limit: the demand (every goroutine always has a Wait in
//     progress) far exceeds the limit, so over the steady part (from 1 s after every goroutine
//     made its first call, all at once, to the change; from rateSettle after the change to
//     1 s before the end) the times to act (Redis's clock) are at least rateRatio × limit ×
//     the time the demand reached Redis (some reservation outstanding: a bucket left full by
//     a stall of the machine loses that time), and the median lateness is at most
//     rateLateMedian (so that Waits oversleeping cannot pass for such stalls). The shares on
//     the monotonic clock and over the whole steady part are reported.
//   - No Wait fails but by the workers' stop; the bucket's key has a TTL at the end.
//
// The run lasts $FAULTTEST_RATE_RUN (a Go duration) if set, else rateDefaultRun (10 s with
// -short); the three backends run at once.
const (
	rateProcs      = 8
	rateGoroutines = 16
	rateOld        = 200.0
	rateNew        = 100.0
	rateBurst      = 20
	rateJitter     = 10 * time.Millisecond
	rateRatio      = 0.99
	// rateLateMedian: the median lateness of a Wait after its time to act, at most. Measured:
	// about 1 ms; 3 ms with two other copies of the fault suite running; 72 ms on the
	// Cluster at a load average of 45 on 2 cores. It bounds how much of the idle time the
	// share of the limit does not count can be the callers' own doing: a Wait that slept k
	// times its delay (about goroutines/limit, 0.64 s) would be late by (k − 1) × 0.64 s,
	// above this bound from k = 1.16.
	rateLateMedian = 100 * time.Millisecond
	// rateSettle: after SetLimit(rateNew) the outstanding reservations (at most one per
	// goroutine) act at the old rate within goroutines/rateOld (0.64 s), and the debt they
	// leave is repaid at the new rate, within goroutines/rateNew (1.28 s) of the change, with
	// no admission meanwhile: the new rate is reached from then on.
	rateSettle     = 2 * time.Second
	rateSpan       = 2 * time.Second // windows up to this long get a lateness margin of their own
	rateDefaultRun = 60 * time.Second
)

// drvSetLimit: the test calls SetLimit (T: just before; N: when it returned, ns; Val: the limit).
const drvSetLimit = "set-limit"

func rateRun(t *testing.T) time.Duration {
	long(t)
	if v := os.Getenv("FAULTTEST_RATE_RUN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 8*time.Second {
			t.Fatalf("FAULTTEST_RATE_RUN=%q: not a duration of at least 8s", v)
		}
		return d
	}
	if testing.Short() {
		return 10 * time.Second
	}
	return rateDefaultRun
}

func TestRateNeverOver(t *testing.T) {
	t.Parallel()
	d := rateRun(t)
	for _, be := range allBackends {
		t.Run(backendName(be), func(t *testing.T) {
			t.Parallel()
			runRate(t, be, d)
		})
	}
}

func runRate(t *testing.T, be string, d time.Duration) {
	cfg := config{prim: pRate, fault: "never-over-" + backendName(be), backend: be, ttl: 5 * time.Second,
		rateLimit: rateOld, rateBurst: rateBurst, goroutines: rateGoroutines, maxRun: d + time.Minute,
		workers: make([]workerRole, rateProcs)}
	for i := range cfg.workers {
		cfg.workers[i].trigger = true
	}
	r := start(t, cfg)
	// Every goroutine of every worker makes its first call at go, all at once, so that the
	// burst is taken as one: the window where the history is tightest.
	goAt := mono() + int64(300*time.Millisecond)
	tmp := r.trig + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(goAt, 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, r.trig); err != nil {
		t.Fatal(err)
	}
	r.drv.rec(Event{T: goAt, Ev: drvTrigger})
	r.sleep(time.Duration(goAt-mono()) + d/2)

	h, c, closeH := r.handle()
	defer closeH()
	lim, err := rate.NewLimiter(h, r.name, rateOld, rateBurst)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tc0 := mono()
	err = lim.SetLimit(ctx, rateNew)
	tc1 := mono()
	r.drv.rec(Event{T: tc0, Ev: drvSetLimit, N: tc1, Val: formatRate(rateNew), Err: errText(err)})
	if err != nil {
		t.Fatalf("SetLimit(%v): %v", rateNew, err)
	}
	r.sleep(d - d/2)
	evs := r.terminate()
	r.checkRateKeys(c)

	rs := rateSetup{old: rateOld, new: rateNew, burst: rateBurst, goroutines: rateProcs * rateGoroutines,
		jitter: rateJitter, ratio: rateRatio, settle: rateSettle, lateMedian: rateLateMedian}
	res := checkRate(rs, evs, goAt)
	for _, v := range res.violations {
		t.Error(v)
	}
	for _, f := range res.figures {
		r.figure(f.name, f.v)
	}
	r.keep()
}

// checkRateKeys: the bucket's key (which holds the stored limit) has a TTL of at most
// rate.SettingsRetention; then it is deleted, the Cluster being shared.
func (r *run) checkRateKeys(c rueidis.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	if r.backend != nil {
		keys = r.backend.Keys(r.t, r.prefix)
	} else {
		var err error
		if keys, err = c.Do(ctx, c.B().Keys().Pattern(r.prefix+"*").Build()).AsStrSlice(); err != nil {
			r.t.Fatalf("KEYS: %v", err)
		}
	}
	if len(keys) == 0 {
		r.t.Errorf("no key under %q after the run: the stored limit was lost", r.prefix)
	}
	for _, k := range keys {
		pttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
		switch {
		case err != nil:
			r.t.Fatalf("PTTL %s: %v", k, err)
		case pttl < 0 || time.Duration(pttl)*time.Millisecond > rate.SettingsRetention:
			r.t.Errorf("key %s: PTTL %d ms, want a TTL of at most %v", k, pttl, rate.SettingsRetention)
		}
		if err := c.Do(ctx, c.B().Del().Key(k).Build()).Error(); err != nil {
			r.t.Errorf("DEL %s: %v", k, err)
		}
	}
}

func formatRate(l float64) string { return strconv.FormatFloat(l, 'f', -1, 64) }

// rateSetup is what checkRate checks against.
type rateSetup struct {
	old, new   float64 // limits, per second, before and after the SetLimit
	burst      int
	goroutines int           // callers in all: the most reservations outstanding at once
	jitter     time.Duration // the least lateness the margin allows for
	ratio      float64       // the least share of the limit admitted under excess demand
	lateMedian time.Duration // the most the median Wait may return after its time to act
	settle     time.Duration // after the change, before the new rate is reached
}

type rateResult struct {
	violations []string
	figures    []rateFigure
}

// checkRate checks a rate run's history (see TestRateNeverOver). t0 is when every worker
// made its first call.
func checkRate(s rateSetup, evs []Event, t0 int64) rateResult {
	var res rateResult
	bad := func(format string, a ...any) {
		if len(res.violations) < 20 {
			res.violations = append(res.violations, fmt.Sprintf(format, a...))
		}
	}
	fig := func(name string, v any) { res.figures = append(res.figures, rateFigure{name, v}) }
	rel := func(t int64) string { return time.Duration(t - t0).Round(time.Microsecond).String() }

	var adm []Event
	var tc0, tc1, term int64
	perW := map[string]int{}
	for _, e := range evs {
		switch {
		case e.Ev == evAdmit:
			if e.Err != "" {
				bad("%s: admitted, but %s", e.Hold, e.Err)
				continue
			}
			adm = append(adm, e)
			perW[e.W]++
		case e.Ev == evFailed && (!e.Ctx || e.Alive):
			bad("%s: Wait failed at %s while the worker ran: %s", e.Hold, rel(e.T), e.Err)
		case e.Ev == drvSetLimit:
			tc0, tc1 = e.T, e.N
		case e.Ev == drvTerm:
			term = e.T
		}
	}
	if len(adm) == 0 || tc0 == 0 || term == 0 {
		bad("no admissions (%d), no SetLimit (%d) or no end (%d) in the history", len(adm), tc0, term)
		return res
	}
	newVal := formatRate(s.new)

	// Never early, and how late.
	var late []int64 // µs
	for _, e := range adm {
		l := e.Wall - e.At
		if l < 0 {
			bad("%s: Wait returned %dµs before its time to act (at %s)", e.Hold, -l, rel(e.T))
		}
		late = append(late, l)
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	q := func(p float64) time.Duration {
		return time.Duration(late[min(len(late)-1, int(p*float64(len(late))))]) * time.Microsecond
	}
	maxLate := time.Duration(late[len(late)-1]) * time.Microsecond
	fig("Wait lateness after the time to act (Redis's), p50/p99/max", fmt.Sprintf("%v / %v / %v",
		q(0.5).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), maxLate.Round(10*time.Microsecond)))

	// The monotonic clock: every window, under the old limit; those after the change under
	// the new one, with the outstanding reservations on top until they have acted.
	sort.Slice(adm, func(i, j int) bool { return adm[i].T < adm[j].T })
	ts, lat := make([]int64, len(adm)), make([]int64, len(adm))
	for i, e := range adm {
		ts[i], lat[i] = e.T, max(0, e.Wall-e.At)*1000
	}
	// Once every reservation made under the old limit has acted (the last one within
	// goroutines/old of the change) and been recorded (within the largest lateness), every
	// admission recorded is one made under the new limit.
	drained := tc1 + int64(float64(s.goroutines)/s.old*1e9) + int64(max(s.jitter, maxLate))
	// From the change on, the reservations made before it (one per goroutine in progress,
	// more only if SetLimit took longer than a reservation waits) come on top.
	outstanding := float64(s.goroutines) + s.old*time.Duration(tc1-tc0).Seconds()
	for _, w := range []struct {
		what  string
		limit float64
		extra float64
		from  int64
	}{
		{"every window, old limit", s.old, 0, math.MinInt64},
		{"windows from the change, new limit + outstanding reservations", s.new, outstanding, tc0},
		{"windows after the old reservations acted, new limit", s.new, 0, drained},
	} {
		x, _, _ := maxExcess(ts, time.Nanosecond, w.limit, float64(s.burst)+w.extra, w.from)
		beyond, i, j, allow := maxExcessLate(ts, lat, w.limit, float64(s.burst)+w.extra, s.jitter, rateSpan, w.from)
		fig("max window excess over limit × elapsed + burst (monotonic clock): "+w.what,
			fmt.Sprintf("%.2f tokens (%.2f beyond the lateness margin)", x, beyond))
		if beyond > 0 {
			bad("over the rate (monotonic clock, %s): %d admissions in [%s, %s] (%v), allowed %.2f/s × %v + %d burst + %.0f + a lateness margin of %.2f",
				w.what, j-i+1, rel(ts[i]), rel(ts[j]), time.Duration(ts[j]-ts[i]), w.limit, time.Duration(ts[j]-ts[i]).Seconds(), s.burst, w.extra, allow)
		}
	}

	// Redis's clock, exactly: all reservations under the old limit, those made under the new
	// one under it; and once a decision was made under the new limit, every later one was.
	var at, atNew []int64
	firstNew := int64(math.MaxInt64)
	for _, e := range adm {
		at = append(at, e.At)
		if e.Val == newVal {
			atNew = append(atNew, e.At)
			firstNew = min(firstNew, e.Made)
		}
	}
	for _, e := range adm {
		if e.Val != newVal && e.Made > firstNew {
			bad("%s: decided under limit %s at %dµs, after a decision under the new limit %s at %dµs", e.Hold, e.Val, e.Made, newVal, firstNew)
		}
	}
	if len(atNew) == 0 {
		bad("no admission was decided under the new limit %s", newVal)
	}
	for _, w := range []struct {
		what  string
		ts    []int64
		limit float64
	}{{"every reservation, old limit", at, s.old}, {"reservations made under the new limit", atNew, s.new}} {
		sort.Slice(w.ts, func(i, j int) bool { return w.ts[i] < w.ts[j] })
		if len(w.ts) == 0 {
			continue
		}
		x, i, j := maxExcess(w.ts, time.Microsecond, w.limit, float64(s.burst), math.MinInt64)
		fig("max window excess (Redis's clock): "+w.what, fmt.Sprintf("%.4f tokens", x))
		if x > 1e-3 {
			bad("over the rate (Redis's clock, %s): %d times to act in [%d, %d]µs (%dµs), allowed %.2f/s + %d burst; %s",
				w.what, j-i+1, w.ts[i], w.ts[j], w.ts[j]-w.ts[i], w.limit, s.burst, shortGaps(adm, w.ts[i], w.ts[j], w.limit))
		}
	}

	// At least ratio of the limit, in the steady parts, while the demand reached Redis. A
	// token bucket loses the time it spends full: when no reservation is outstanding in
	// Redis (no interval [made, at] of an admission covers the time), the demand did not reach
	// it, which only a stall of the callers or of the server causes (every goroutine calls
	// Wait again as soon as its last one returned, with ~goroutines/limit of reservations
	// queued ahead). So, on Redis's clock (exact): admitted ≥ ratio × limit × (elapsed − that
	// idle time). That the callers do not cause idle time by waking late is checked apart: the
	// median lateness is at most rateLateMedian. The same share on the monotonic clock, and
	// idle time not excluded, are reported.
	var offs []int64 // Redis's clock (µs, as ns) minus the monotonic clock, each admission
	for _, e := range adm {
		offs = append(offs, e.Wall*1000-e.T)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	off := offs[len(offs)/2]
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	if med := time.Duration(late[len(late)/2]) * time.Microsecond; med > s.lateMedian {
		bad("Waits return late: the median lateness after the time to act is %v, want at most %v", med, s.lateMedian)
	}
	for _, p := range []struct {
		what     string
		limit    float64
		from, to int64
	}{
		{"before the change", s.old, t0 + int64(time.Second), tc0},
		{"after the change", s.new, tc1 + int64(s.settle), term - int64(time.Second)},
	} {
		if p.to-p.from < int64(time.Second) {
			bad("%s: the steady part is too short (%v)", p.what, time.Duration(p.to-p.from))
			continue
		}
		secs := float64(p.to-p.from) / 1e9
		n := countIn(ts, p.from, p.to)
		from, to := (p.from+off)/1000, (p.to+off)/1000 // µs, Redis's clock
		nr := countIn(at, from, to)
		idle := idleIn(adm, from, to)
		busy := secs - float64(idle)/1e6
		got := float64(nr) / (p.limit * busy)
		fig("admitted/s and share of the limit, "+p.what, fmt.Sprintf(
			"%.1f/s, %.4f of %v/s over %.1fs (monotonic clock); %.4f over it (Redis's clock); %.4f over the %.2fs the demand reached Redis (idle %v)",
			float64(n)/secs, float64(n)/(p.limit*secs), p.limit, secs, float64(nr)/(p.limit*secs), got, busy, time.Duration(idle)*time.Microsecond))
		if got < s.ratio {
			bad("under the rate %s: %d admissions by Redis's clock in %.2fs when reservations were outstanding (of %.2fs), %.4f of %v/s, want at least %v",
				p.what, nr, busy, secs, got, p.limit, s.ratio)
		}
	}
	fig("admissions per process", counts(perW))
	fig("admissions", len(adm))
	return res
}

// maxExcess returns the largest count − (limit × (ts[j] − ts[i]) + burst) over every window
// [ts[i], ts[j]] (i ≤ j, ts[i] ≥ from) of the sorted times ts, counted in units of unit, and
// the window's ends. Any window's count is that of the window between its first and last
// admission, which is allowed no more, so these windows are the worst. count − limit × len is
// f(j) − f(i) + 1 with f(k) = k − limit × ts[k]: one pass, keeping the least f(i) so far.
func maxExcess(ts []int64, unit time.Duration, limit, burst float64, from int64) (excess float64, i0, j0 int) {
	per := limit * unit.Seconds()
	excess = math.Inf(-1)
	best, bi := math.Inf(1), -1
	base := int64(0)
	if len(ts) > 0 {
		base = ts[0] // keeps the products small: float64 holds them exactly enough
	}
	for k, t := range ts {
		f := float64(k) - per*float64(t-base)
		if t >= from && f < best {
			best, bi = f, k
		}
		if bi >= 0 {
			if x := f - best + 1 - burst; x > excess {
				excess, i0, j0 = x, bi, k
			}
		}
	}
	return excess, i0, j0
}

// shortGaps describes, for a failure on Redis's clock, where the admissions in [from, to]
// (times to act) came sooner than the limit spaces them while they waited (a reservation
// that waited was made when the bucket was empty, so the next one's time to act is 1/limit
// later): the first few such pairs, with when each was decided, and how many acted at the
// moment they were decided (the bucket had tokens: bursts).
func shortGaps(adm []Event, from, to int64, limit float64) string {
	var in []Event
	for _, e := range adm {
		if e.At >= from && e.At <= to {
			in = append(in, e)
		}
	}
	sort.Slice(in, func(i, j int) bool { return in[i].At < in[j].At || in[i].At == in[j].At && in[i].Made < in[j].Made })
	step := int64(1e6/limit) - 1
	var out []string
	now := 0
	for k, e := range in {
		if e.At == e.Made {
			now++
		}
		if k > 0 && in[k-1].At > in[k-1].Made && e.At > e.Made && e.At-in[k-1].At < step && len(out) < 8 {
			out = append(out, fmt.Sprintf("%s→%s %dµs apart (decided at %d, %d)",
				in[k-1].Hold, e.Hold, e.At-in[k-1].At, in[k-1].Made, e.Made))
		}
	}
	return fmt.Sprintf("%d acted when decided; waiting ones closer than 1/limit: %v", now, out)
}

// maxExcessLate is maxExcess on recorded times ts whose lateness (after the true time, never
// before it) is lat, over the budget limit × elapsed + budget + margin: it returns the
// largest count − (limit × (ts[j] − ts[i]) + budget + margin) and the window, with its margin.
// The admissions recorded in [ts[i], ts[j]] happened in [ts[i] − late, ts[j]], late the
// largest lateness among them (at least jitter), so a correct limiter admits there at most
// limit × (ts[j] − ts[i] + late) + budget: the margin is limit × late + 1 (rounding: Redis's
// µs, the clocks' reading). Windows up to span long get the lateness of their own
// admissions; every window also gets the largest lateness of all (a looser bound, the only
// one computed for longer windows, where a rate that is too high shows anyway).
func maxExcessLate(ts, lat []int64, limit, budget float64, jitter, span time.Duration, from int64) (beyond float64, i0, j0 int, margin float64) {
	per := limit / 1e9
	beyond = math.Inf(-1)
	all := int64(jitter)
	for _, l := range lat {
		all = max(all, l)
	}
	x, i, j := maxExcess(ts, time.Nanosecond, limit, budget, from)
	if m := per*float64(all) + 1; x-m > beyond {
		beyond, i0, j0, margin = x-m, i, j, m
	}
	for i := range ts {
		if ts[i] < from {
			continue
		}
		late := int64(jitter)
		for j := i; j < len(ts) && ts[j]-ts[i] <= int64(span); j++ {
			late = max(late, lat[j])
			m := per*float64(late) + 1
			if x := float64(j-i+1) - per*float64(ts[j]-ts[i]) - budget - m; x > beyond {
				beyond, i0, j0, margin = x, i, j, m
			}
		}
	}
	return beyond, i0, j0, margin
}

// idleIn returns how long (µs) in [from, to) of Redis's clock no reservation of adm was
// outstanding: no interval [made, at] covers it.
func idleIn(adm []Event, from, to int64) int64 {
	iv := make([][2]int64, 0, len(adm))
	for _, e := range adm {
		if e.At > from && e.Made < to {
			iv = append(iv, [2]int64{max(e.Made, from), min(e.At, to)})
		}
	}
	sort.Slice(iv, func(i, j int) bool { return iv[i][0] < iv[j][0] })
	idle, reach := int64(0), from
	for _, x := range iv {
		if x[0] > reach {
			idle += x[0] - reach
		}
		reach = max(reach, x[1])
	}
	return idle + max(0, to-reach)
}

// countIn returns how many of the sorted times ts are in [from, to).
func countIn(ts []int64, from, to int64) int {
	i := sort.Search(len(ts), func(k int) bool { return ts[k] >= from })
	j := sort.Search(len(ts), func(k int) bool { return ts[k] >= to })
	return j - i
}

type rateFigure struct {
	name string
	v    any
}

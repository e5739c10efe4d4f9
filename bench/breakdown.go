package main

// The client-side breakdown of one uncontended pair (-primitives breakdown): where the time of
// an acquire+release goes, between the caller's code and the client's calls, with the
// commands, allocations and goroutine wake-ups of a pair, for the floor and distsync's
// primitives.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
)

// bdOp is one pair the breakdown measures, with the client its commands go through.
type bdOp struct {
	pairOp
	c *countingClient
}

// pairSample is one pair's time cut at its client calls: before the first call, in the
// first call (from the call to its return), between the first and the second, …, in the
// last, after it: 2k+1 parts for k calls.
type pairSample struct {
	total time.Duration
	parts []time.Duration
	cmds  int64 // the commands of its client calls
}

// bdRow is one row of the breakdown's table.
type bdRow struct {
	name, run string
	pairs     []pairSample
	floor     time.Duration // the p50 of the floor's pairs run the same way
	allocs    float64       // per pair, or -1: not measured this way
	wake      *wakeStats    // nil: not measured this way
}

// breakdown measures the floor and distsync's mutex, reentrant (an owner in ctx), semaphore
// (size 8, Acquire(1) + Release(1)), fair and rwmutex (write) and prints the table: each
// pair back to back (a block of pairs in a row) and interleaved with the floor pair by pair,
// cut at its client calls; then, back to back and one pair at a time, its allocations and,
// from a runtime/trace, its goroutine wake-ups.
func breakdown(ctx context.Context, addr string, quick bool) error {
	n, traced := 2000, 3000
	if quick {
		n, traced = 500, 1000
	}
	// A Handle's renewal loop wakes when a lease's renewal is due, once per renewal period at
	// most, whatever the number of pairs in between (before f51dea9, a Lock could wake it: the
	// loop, having found no lease, planned its next look an hour away). So the trace covers a
	// renewal period and a tenth: a wake-up of the loop, if any, is counted at its true rate.
	traceFor := leaseTTL / core.RenewDivisor * 11 / 10
	// A deadline, as the main table's uncontended pairs have: rueidis sends a command whose
	// context can be cancelled but has no deadline through the connection's writer and reader
	// goroutines (three wake-ups per command), and one with a deadline from the caller's
	// goroutine, which reads the reply itself.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	ops, closeAll, err := breakdownOps(ctx, addr)
	if err != nil {
		return err
	}
	defer closeAll()
	for _, o := range ops {
		o.c.stamps.Store(&stampLog{})
	}
	fmt.Fprintf(os.Stderr, "breakdown: back to back, then interleaved with the floor…\n")
	rows, err := timeParts(ctx, ops, n)
	if err != nil {
		return err
	}
	for _, o := range ops {
		o.c.stamps.Store(nil) // the allocations and the trace are the client's without stamps
	}
	for i, o := range ops {
		fmt.Fprintf(os.Stderr, "breakdown: %s: allocations, wake-ups…\n", o.name)
		if rows[i].allocs, _, err = allocsPerPair(ctx, o.pairOp, n); err != nil {
			return fmt.Errorf("%s: %w", o.name, err)
		}
		w, err := traceWakeups(ctx, o.pairOp, traced, traceFor)
		if err != nil {
			return err
		}
		rows[i].wake = &w
	}
	printBreakdown(rows, n, traced, traceFor)
	return nil
}

// breakdownOps opens the floor's client and, for every distsync primitive, a Handle of its own
// built as openDistsync builds the main table's (rueidis defaults, WithLeaseTTL(leaseTTL)),
// and returns the pairs the breakdown measures, the floor's first, and a func that closes
// them. A Handle of its own, as the main table's mutex has: a Handle's renewal loop is woken,
// or not, by what its other leases do.
func breakdownOps(ctx context.Context, addr string) (ops []bdOp, closeAll func(), err error) {
	var opened []session
	closeAll = func() {
		for _, s := range opened {
			s.Close()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	fl, err := openFloor(addr)
	if err != nil {
		return nil, nil, err
	}
	opened = append(opened, fl)
	floorLk := fl.New("breakdown")
	ops = append(ops, bdOp{pairOp{"floor: SET NX PX + EVALSHA compare-and-delete", pairOf(floorLk.Lock, floorLk.Unlock)}, fl.(*floorSession).c})
	for _, p := range distsyncPairs(ctx) {
		s, err := openDistsync(addr)
		if err != nil {
			return nil, nil, err
		}
		opened = append(opened, s)
		d := s.(*distsyncSession)
		run, err := p.make(d)
		if err != nil {
			return nil, nil, err
		}
		ops = append(ops, bdOp{pairOp{p.name, run}, d.c})
	}
	return ops, closeAll, nil
}

// distsyncPair is one distsync pair of the breakdown, made on a session of its own.
type distsyncPair struct {
	name string
	make func(d *distsyncSession) (func(context.Context) error, error)
}

// distsyncPairs returns the distsync pairs of the breakdown. The reentrant pair runs with an
// owner in ctx, as everyPair's does.
func distsyncPairs(ctx context.Context) []distsyncPair {
	type pairFunc = func(context.Context) error
	return []distsyncPair{
		{"mutex: Lock + Unlock", func(d *distsyncSession) (pairFunc, error) {
			m := d.New("breakdown-mutex")
			return pairOf(m.Lock, m.Unlock), nil
		}},
		{"reentrant: Lock + Unlock", func(d *distsyncSession) (pairFunc, error) {
			r, err := reentrant.New(d.h, "breakdown-reentrant")
			rctx := reentrant.WithOwner(ctx, reentrant.NewOwner())
			return func(context.Context) error { return pairOf(r.Lock, r.Unlock)(rctx) }, err
		}},
		{"semaphore (size 8): Acquire(1) + Release(1)", func(d *distsyncSession) (pairFunc, error) {
			s, err := semaphore.New(d.h, "breakdown-semaphore", 8)
			return pairOf(
				func(ctx context.Context) error { return s.Acquire(ctx, 1) },
				func(ctx context.Context) error { return s.Release(ctx, 1) }), err
		}},
		{"fair: Lock + Unlock", func(d *distsyncSession) (pairFunc, error) {
			f, err := fair.New(d.h, "breakdown-fair")
			return pairOf(f.Lock, f.Unlock), err
		}},
		{"rwmutex: Lock + Unlock (write)", func(d *distsyncSession) (pairFunc, error) {
			rw, err := rwmutex.New(d.h, "breakdown-rwmutex")
			return pairOf(rw.Lock, rw.Unlock), err
		}},
	}
}

// timeParts samples n pairs of every op back to back, then n of every op but the floor
// interleaved with n of the floor's, and returns the rows: every op back to back, in ops'
// order, then the floor interleaved (its pairs from every interleaving), then the others
// interleaved. Every op's client must have stamps set.
func timeParts(ctx context.Context, ops []bdOp, n int) ([]bdRow, error) {
	var b2b, inter []bdRow
	blocks, err := sampleBackToBack(ctx, ops, n)
	if err != nil {
		return nil, err
	}
	for k, o := range ops {
		b2b = append(b2b, bdRow{name: o.name, run: "back-to-back", pairs: blocks[k]})
	}
	floor := ops[0]
	fr := bdRow{name: floor.name, run: "interleaved", allocs: -1}
	for _, o := range ops[1:] {
		op, fl, err := sampleInterleaved(ctx, o, floor, n)
		if err != nil {
			return nil, err
		}
		fr.pairs = append(fr.pairs, fl...)
		inter = append(inter, bdRow{name: o.name, run: "interleaved", pairs: op, allocs: -1})
	}
	for i := range b2b {
		b2b[i].floor = totalP50(b2b[0].pairs)
	}
	fr.floor = totalP50(fr.pairs)
	for i := range inter {
		inter[i].floor = fr.floor
	}
	return append(append(b2b, fr), inter...), nil
}

// sampleBackToBack samples n pairs of each op back to back, as backToBack times them: blocks
// of pairBlock pairs in a row, the ops taking turns block by block in a new random order each
// round (so that all meet the same moments of the machine: on this VM a round trip is two to
// three times faster for seconds at a time, and a block of one op at a time would compare
// those moments, not the ops), after one block each to warm up.
func sampleBackToBack(ctx context.Context, ops []bdOp, n int) ([][]pairSample, error) {
	out := make([][]pairSample, len(ops))
	rounds := (n + pairBlock - 1) / pairBlock
	for i := range 1 + rounds {
		for _, k := range rand.Perm(len(ops)) {
			for range pairBlock {
				s, err := sample(ctx, ops[k])
				if err != nil {
					return nil, err
				}
				if i > 0 {
					out[k] = append(out[k], s)
				}
			}
		}
	}
	return out, nil
}

// sampleInterleaved samples n pairs of o and n of floor, taking turns pair by pair, the one
// that goes first chosen at random each round, after a tenth as many rounds to warm up.
func sampleInterleaved(ctx context.Context, o, floor bdOp, n int) (op, fl []pairSample, err error) {
	for i := range n + n/10 {
		opFirst := rand.IntN(2) == 0
		first, second := floor, o
		if opFirst {
			first, second = o, floor
		}
		a, err := sample(ctx, first)
		if err != nil {
			return nil, nil, err
		}
		b, err := sample(ctx, second)
		if err != nil {
			return nil, nil, err
		}
		if i < n/10 {
			continue
		}
		if opFirst {
			op, fl = append(op, a), append(fl, b)
		} else {
			op, fl = append(op, b), append(fl, a)
		}
	}
	return op, fl, nil
}

// sample runs one pair of o, whose client has stamps set, and returns it cut at its calls.
func sample(ctx context.Context, o bdOp) (pairSample, error) {
	log := o.c.stamps.Load()
	log.take(nil) // forget what came before this pair
	c0 := o.c.Total()
	t0 := time.Now()
	if err := o.run(ctx); err != nil {
		return pairSample{}, fmt.Errorf("%s: %w", o.name, err)
	}
	t1 := time.Now()
	at := append(log.take([]time.Time{t0}), t1)
	parts := make([]time.Duration, len(at)-1)
	for i := range parts {
		parts[i] = at[i+1].Sub(at[i])
	}
	return pairSample{total: t1.Sub(t0), parts: parts, cmds: o.c.Total() - c0}, nil
}

// cmdsPerPair returns the mean of ps' client commands.
func cmdsPerPair(ps []pairSample) float64 {
	var n int64
	for _, p := range ps {
		n += p.cmds
	}
	return float64(n) / float64(len(ps))
}

// totalP50 returns the p50 of ps' times.
func totalP50(ps []pairSample) time.Duration {
	d := make([]time.Duration, len(ps))
	for i, p := range ps {
		d[i] = p.total
	}
	return pct(d, 50)
}

// partsP50 returns the number of client calls most of ps made, the share of ps that made
// that many, and the p50 of each part of those.
func partsP50(ps []pairSample) (calls int, share float64, p50 []time.Duration) {
	byLen := map[int][]pairSample{}
	best := 0
	for _, p := range ps {
		k := len(p.parts)
		byLen[k] = append(byLen[k], p)
		if len(byLen[k]) > len(byLen[best]) {
			best = k
		}
	}
	mode := byLen[best]
	for i := range best {
		d := make([]time.Duration, len(mode))
		for j, p := range mode {
			d[j] = p.parts[i]
		}
		p50 = append(p50, pct(d, 50))
	}
	return (best - 1) / 2, float64(len(mode)) / float64(len(ps)), p50
}

// printBreakdown prints the breakdown's table and what its columns mean.
func printBreakdown(rows []bdRow, n, traced int, traceFor time.Duration) {
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond)) }
	join := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "—"
		}
		s := make([]string, len(ds))
		for i, d := range ds {
			s[i] = us(d)
		}
		return strings.Join(s, " + ")
	}
	fmt.Printf("\n### Client-side breakdown of one uncontended pair\n\n")
	fmt.Printf("| pair | run | pair p50, µs (× floor) | before the 1st call, µs | in each call, µs | between calls, µs | after the last call, µs | client calls / pair (share) | client cmds / pair | allocs / pair | goroutine wake-ups / pair: woken ← by |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		p50 := totalP50(r.pairs)
		calls, share, parts := partsP50(r.pairs)
		var in, between []time.Duration
		for i := 1; i < len(parts)-1; i++ {
			if i%2 == 1 {
				in = append(in, parts[i])
			} else {
				between = append(between, parts[i])
			}
		}
		allocs := "—"
		if r.allocs >= 0 {
			allocs = fmt.Sprintf("%.1f", r.allocs)
		}
		fmt.Printf("| %s | %s | %s (%.2f×) | %s | %s | %s | %s | %d (%.0f%%) | %.2f | %s | %s |\n",
			r.name, r.run, us(p50), float64(p50)/float64(r.floor), us(parts[0]), join(in), join(between),
			us(parts[len(parts)-1]), calls, 100*share, cmdsPerPair(r.pairs), allocs, wakeCell(r.wake))
	}
	fmt.Printf("\nOne goroutine, one idle key per pair, a lease of %v, a context with a deadline (as in the main table; rueidis then sends each command from the caller's goroutine, not through the connection's writer and reader goroutines). Back-to-back: %d pairs of each, in blocks of %d in a row, the pairs taking turns block by block in a new random order each round, after one block each to warm up; interleaved: %d pairs, taking turns with the floor pair by pair, which goes first chosen at random each round (the floor's interleaved row pools its pairs from every interleaving). "+
		"A client call is a Do or DoMulti on the rueidis.Client the library was given (a wrapper stamps its call and return); the parts are p50s each over the pairs that made the most common number of calls (its share in brackets), so they need not add up to the pair's p50. "+
		"Allocations: runtime.MemStats.Mallocs over %d pairs back to back, the whole process's (the client's goroutines included). "+
		"Wake-ups: goroutine transitions Waiting→Runnable in a runtime/trace of the pairs back to back, at least %d and for at least %v (a renewal period, TTL/3, and a tenth: a Handle's renewal loop wakes when a renewal is due, and a wake-up of it per pair, if a Lock caused one, would show at its true rate), parsed with golang.org/x/exp/trace, per pair, by the woken goroutine (the innermost distsync or rueidis function of the stack it waited in, else its start function) and who woke it (the goroutine that ran the unblock, or, with none running, the runtime: netpoll for a network wait, a timer, most likely, for a sleep, select or channel receive). Groups under 0.02/pair are left out of the list, not of the total.\n",
		leaseTTL, n, pairBlock, n, n, traced, traceFor.Round(time.Millisecond))
}

// wakeCell formats w for the breakdown's table: the total per pair, then the groups of at least
// 0.02 per pair.
func wakeCell(w *wakeStats) string {
	if w == nil {
		return "—"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%.2f", w.total)
	if w.created >= 0.005 {
		fmt.Fprintf(&b, " (%.2f goroutines started)", w.created)
	}
	groups := slices.DeleteFunc(slices.Clone(w.groups), func(g wakeGroup) bool { return g.perPair < 0.02 })
	for i, g := range groups {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s ← %s %.2f", sep, g.woken, g.by, g.perPair)
	}
	return b.String()
}

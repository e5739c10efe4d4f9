package main

// Goroutine wake-ups of a pair, read from a runtime/trace of the pairs, for the breakdown.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/trace"
	"slices"
	"strings"
	"time"

	xtrace "golang.org/x/exp/trace"
)

// wakeCategory is the user-log category that marks the traced pairs' start and end.
const wakeCategory = "distsync-bench"

// wakeStats is what the goroutines did for one pair, on average over the traced pairs.
type wakeStats struct {
	total   float64     // goroutine wake-ups (Waiting→Runnable) per pair
	created float64     // goroutines started per pair
	groups  []wakeGroup // the wake-ups per pair by who was woken, and by whom; most first
}

// wakeGroup is the wake-ups per pair of one goroutine, woken by one waker.
type wakeGroup struct {
	woken, by string
	perPair   float64
}

// traceWakeups runs pairs of o back to back under runtime/trace, at least n and for at least
// d, and counts, per pair, the goroutine transitions from Waiting to Runnable (every wake-up
// of a goroutine) and the goroutines started. It fails if a trace is already running (go test
// -trace).
func traceWakeups(ctx context.Context, o pairOp, n int, d time.Duration) (wakeStats, error) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		return wakeStats{}, err
	}
	// The logs name the caller's goroutine and bound the counted span: starting the trace
	// and stopping it wake goroutines of their own.
	trace.Log(ctx, wakeCategory, "start")
	var err error
	pairs := 0
	for until := time.Now().Add(d); pairs < n || time.Now().Before(until); pairs++ {
		if err = o.run(ctx); err != nil {
			break
		}
	}
	trace.Log(ctx, wakeCategory, "stop")
	trace.Stop()
	if err != nil {
		return wakeStats{}, fmt.Errorf("%s: %w", o.name, err)
	}
	fmt.Fprintf(os.Stderr, "breakdown: %s: %d pairs traced in %.1f MB\n", o.name, pairs, float64(buf.Len())/1e6)
	return countWakeups(&buf, pairs)
}

// goroutines is what the trace told so far of every goroutine, to name it when it is woken.
type goroutines struct {
	caller  xtrace.GoID
	start   map[xtrace.GoID]string       // the function it started in, if it started in the trace
	waiting map[xtrace.GoID]xtrace.Stack // its stack when it last blocked
	reason  map[xtrace.GoID]string       // why it last blocked ("network", "select", "sleep", …)
}

// countWakeups reads a trace of n pairs made by traceWakeups.
func countWakeups(r io.Reader, n int) (wakeStats, error) {
	tr, err := xtrace.NewReader(r)
	if err != nil {
		return wakeStats{}, err
	}
	gs := goroutines{caller: xtrace.NoGoroutine, start: map[xtrace.GoID]string{},
		waiting: map[xtrace.GoID]xtrace.Stack{}, reason: map[xtrace.GoID]string{}}
	on := false
	var created, total int
	counts := map[[2]string]int{}
	for {
		e, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return wakeStats{}, err
		}
		switch e.Kind() {
		case xtrace.EventLog:
			if l := e.Log(); l.Category == wakeCategory {
				on = l.Message == "start"
				gs.caller = e.Goroutine()
			}
		case xtrace.EventStateTransition:
			st := e.StateTransition()
			if st.Resource.Kind != xtrace.ResourceGoroutine {
				continue
			}
			g := st.Resource.Goroutine()
			from, to := st.Goroutine()
			switch {
			case from == xtrace.GoNotExist:
				gs.start[g] = bottomFunc(st.Stack)
				if on {
					created++
				}
			case to == xtrace.GoWaiting:
				// A block, or the goroutine's state when the trace began: its stack either way.
				gs.waiting[g], gs.reason[g] = st.Stack, st.Reason
			case from == xtrace.GoWaiting && to == xtrace.GoRunnable && on:
				woken := gs.name(g)
				if strings.HasPrefix(woken, "runtime/trace.") {
					continue // the trace's own writer
				}
				total++
				counts[[2]string{woken, gs.waker(e, g)}]++
			}
		}
	}
	return summarize(counts, total, created, n), nil
}

// summarize turns the counts over n pairs into per-pair figures, the largest group first.
func summarize(counts map[[2]string]int, total, created, n int) wakeStats {
	out := wakeStats{total: float64(total) / float64(n), created: float64(created) / float64(n)}
	for k, c := range counts {
		out.groups = append(out.groups, wakeGroup{k[0], k[1], float64(c) / float64(n)})
	}
	slices.SortFunc(out.groups, func(a, b wakeGroup) int {
		return cmp.Or(cmp.Compare(b.perPair, a.perPair), cmp.Compare(a.woken, b.woken), cmp.Compare(a.by, b.by))
	})
	return out
}

// name names goroutine g by where it waits: "caller" for the goroutine that runs the pairs
// (with the innermost distsync or rueidis function it waited in), else the innermost distsync or rueidis function of the stack it blocked in (the renewal
// loop, a connection's reader), else the function it started in.
func (gs goroutines) name(g xtrace.GoID) string {
	if g == gs.caller {
		if f, _ := libFunc(gs.waiting[g]); f != "" {
			return "caller (in " + f + ")"
		}
		return "caller"
	}
	if f, from := libFunc(gs.waiting[g]); f != "" {
		if from != "" {
			// The innermost is often a helper (readNextMessage): its caller says which loop.
			return f + " < " + from
		}
		return f
	}
	if f := gs.start[g]; f != "" {
		return shortFunc(f)
	}
	if f := bottomFunc(gs.waiting[g]); f != "" {
		return shortFunc(f) // started before the trace: the bottom of its stack is its start
	}
	return "another goroutine"
}

// waker names who made woken g runnable in unblock event e: the goroutine that ran it, by
// the innermost distsync or rueidis function it was in, or, with no goroutine running (the
// scheduler's own work), the runtime by what g waited for: netpoll for a network read, a
// timer for a sleep or (most likely) a select or channel receive.
func (gs goroutines) waker(e xtrace.Event, g xtrace.GoID) string {
	w := e.Goroutine()
	switch {
	case w == gs.caller:
		return "caller"
	case w != xtrace.NoGoroutine:
		if f, _ := libFunc(e.Stack()); f != "" {
			return f
		}
		return gs.name(w)
	}
	switch r := gs.reason[g]; r {
	case "network":
		return "netpoll"
	case "sleep", "select", "chan receive":
		return "runtime (timer?; waited in " + r + ")"
	default:
		return "runtime (waited in " + r + ")"
	}
}

// libFunc returns the innermost function of s that is distsync's or rueidis' and the next
// such function out, its caller's, both shortened, or "".
func libFunc(s xtrace.Stack) (f, from string) {
	for fr := range s.Frames() { // innermost first
		if !strings.HasPrefix(fr.Func, "github.com/distsync/distsync") && !strings.HasPrefix(fr.Func, "github.com/redis/rueidis") {
			continue
		}
		if f != "" {
			return f, shortFunc(fr.Func)
		}
		f = shortFunc(fr.Func)
	}
	return f, ""
}

// bottomFunc returns the outermost function of s, or "".
func bottomFunc(s xtrace.Stack) string {
	last := ""
	for f := range s.Frames() {
		last = f.Func
	}
	return last
}

// shortFunc drops a function's import path but for its last element:
// github.com/distsync/distsync/internal/core.(*renewer).run is core.(*renewer).run.
func shortFunc(f string) string {
	if f == "" {
		return ""
	}
	if i := strings.LastIndex(f, "/"); i >= 0 && !strings.HasPrefix(f, "runtime/trace.") {
		return f[i+1:]
	}
	return f
}

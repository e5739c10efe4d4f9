package faulttest

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Checks of the order in which waiters are served, and of election, waitgroup and the once
// primitives that keep a success: pure functions over a digested history, as in check_test.go.

// orderGrace is how long after an acquire call begins (or after Redis, or the waiter's own
// process, comes back) its request can be assumed to have reached Redis: a process's first
// command can lag its wait event by a hundred milliseconds on a loaded machine.
const orderGrace = 300 * time.Millisecond

// arrival returns when the request of an acquire call that worker w began at start can be
// assumed to be in Redis, with its place in the queue: orderGrace after it began, or, if later,
// when the worker's observer saw it queued (queued, 0 if not seen: a first request can lag on a
// loaded machine, or be lost with a connection CLIENT KILL closed, and be sent again); or after
// the end of a blackout (Redis paused or restarting: a paused Redis expires queue entries when
// it resumes, a restarted one has none) or of w's own stop (its entry may have lapsed) that
// began before until (the call's end, when its place is what matters); time the machine did
// not run the processes pushes it further.
func arrival(h *history, w string, start, queued, until int64) int64 {
	grace := int64(orderGrace)
	t := max(start+grace, queued)
	gaps := append([]span(nil), h.f.blackouts...)
	gaps = append(gaps, h.f.stops[w]...)
	for _, g := range gaps {
		if g.from < max(until, t) && g.to > start {
			if g.to == forever {
				return forever
			}
			t = max(t, g.to+grace)
		}
	}
	return t + h.f.hiccupTime(start, start+grace)
}

// orderRule says, for a primitive, whether the order of service is asserted and what the
// documentation promises, for the violation's message.
func orderRule(prim string) (assert bool, promise string) {
	switch prim {
	case pMutex:
		return true, "processes are served round-robin in the order of their first failed attempt: each other process overtakes a waiting one at most once"
	case pReentrant:
		return true, "as for mutex (per-process order, round-robin): each other process overtakes a waiting one at most once"
	case pFair, pElection:
		return true, "strict FIFO by arrival at Redis: each other process (one call at a time) overtakes a waiting call at most once"
	case pSemaphore:
		return true, "FIFO by arrival, weighted: a request that does not fit holds back the ones behind it, so each other process (one request at a time) overtakes a waiting request at most once, its request that was queued ahead"
	case pRWMutex:
		return true, "writers of different processes take turns (each other writer overtakes a waiting writer at most once); a writer's Unlock admits the readers waiting then before the next writer (each writer overtakes a waiting reader at most once)"
	}
	return false, ""
}

// orderStats are the figures of bounded waiting in one history.
type orderStats struct {
	waited   int           // acquire calls during which another process acquired
	longest  time.Duration // the longest of them, from its arrival to its end
	most     int           // most acquisitions by one other process during one call
	mostWho  string        // "w3 during w1#4"
	readersW int           // rwmutex: most writer acquisitions (all writers) during one reader's call
}

// checkOrder measures, for every acquire call that waited, how many acquisitions each other
// process made between the call's arrival at Redis (see arrival) and its end, and how long it
// waited meanwhile; where the primitive promises an order, a process that acquired more than
// once during one call is a violation. Readers of a rwmutex are overtaken by readers at will
// (no order is promised among them): only writers' acquisitions count against a reader.
func checkOrder(m model, h *history) ([]violation, orderStats) {
	var out []violation
	var st orderStats
	assert, promise := orderRule(m.prim)
	byStart := append([]*hold(nil), h.holds...) // in start order already
	for _, w := range h.waits {
		// Counted until the call ended, or the run did: SIGTERM ends the calls that wait, and a
		// place one of them leaves goes on to the next in line.
		end := min(w.end, h.f.term, h.f.end)
		if w.queued == 0 && h.byID[w.id] == nil {
			// The call ended without acquiring and without its first reply, which would have
			// said that it queued: when, or whether, its request reached Redis is unknown (a
			// run saw a call wait 479 ms for that reply while the others were served in
			// milliseconds), so no order is asserted against it.
			continue
		}
		arr := arrival(h, w.w, w.start, w.queued, end)
		if arr >= end {
			continue
		}
		counts := map[string][]*hold{}
		total, writers := 0, 0
		i := sort.Search(len(byStart), func(i int) bool { return byStart[i].start > arr })
		for ; i < len(byStart) && byStart[i].start < end; i++ {
			x := byStart[i]
			if x.w == w.w || foundFree(m, h, byStart, i) {
				continue
			}
			total++
			if m.prim == pRWMutex && x.role != "w" {
				continue // a reader, overtaking a reader or a writer: readers are admitted together
			}
			if m.prim == pRWMutex {
				writers++
			}
			counts[x.w] = append(counts[x.w], x)
		}
		if total == 0 {
			continue
		}
		st.waited++
		st.longest = max(st.longest, dur(end-arr))
		if m.prim == pRWMutex && w.role == "r" {
			st.readersW = max(st.readersW, writers)
		}
		var names []string
		for other := range counts {
			names = append(names, other)
		}
		sort.Strings(names)
		for _, other := range names {
			xs := counts[other]
			if len(xs) > st.most {
				st.most, st.mostWho = len(xs), fmt.Sprintf("%s during %s", other, w.id)
			}
			if !assert || len(xs) <= 1 || len(out) >= 5 {
				continue
			}
			var at []string
			for _, x := range xs {
				at = append(at, fmt.Sprintf("%s at %s", x.id, rel(h, x.start)))
			}
			what := "acquire call"
			if w.role != "" {
				what = map[string]string{"r": "reader's call", "w": "writer's call"}[w.role]
			}
			how := "acquired at " + rel(h, w.end)
			switch {
			case w.end == forever:
				how = "still waiting at the end of the run"
			case w.killed:
				how = "killed while waiting, at " + rel(h, w.end)
			case h.byID[w.id] == nil:
				how = "gave up at " + rel(h, w.end)
			}
			out = append(out, violation{at: xs[1].start, from: w.start, to: end, workers: []string{w.w, other},
				msg: fmt.Sprintf("overtaken: %s's %s %s began at %s (in Redis by %s) and waited %v (%s) while %s acquired %d times (%s); promised: %s",
					w.w, what, w.id, rel(h, w.start), rel(h, arr), dur(end-arr).Round(time.Millisecond), how, other, len(xs),
					strings.Join(at, ", "), promise)})
		}
	}
	return out, st
}

// foundFree reports whether holds[i] may have found the lock free rather than been handed it,
// for a mutex (and reentrant, which is to get the mutex's order): "a Lock that finds the mutex
// free (a grant to a dead waiter lapsed, a lease expired) takes it even if others are queued"
// (docs/guarantees.md, Order). It is so if the hold before it was a killed or stopped
// holder's (its lease expired), or if it came well after the release before it while a killed
// worker was still waiting then (the release may have granted the lock to the dead waiter,
// whose grant lapsed).
func foundFree(m model, h *history, holds []*hold, i int) bool {
	if (m.prim != pMutex && m.prim != pReentrant) || i == 0 {
		return false
	}
	x, prev := holds[i], holds[i-1]
	if prev.killed || len(h.f.stops[prev.w]) > 0 && prev.claimEnd < prev.exit {
		return true
	}
	rel := prev.released
	if rel == 0 || x.start-rel < int64(100*time.Millisecond) {
		return false
	}
	for _, w := range h.waits {
		if w.killed && w.start < rel && w.end < rel {
			return true
		}
	}
	return false
}

// checkElection: every Info an observer received names a term of the history (the hold whose
// id is its value, with that token; or a candidate that was granted the lead but never
// returned as leader: killed, or gone from the queue), (Term, Rev) increase within each
// Observe call, and an observer sees every new term (or a later one) within the bound,
// unless a fault in between may have made it skip one (it then converges on the leader, which
// the test's own last term checks).
func checkElection(m model, h *history) []violation {
	var out []violation
	add := func(v violation) {
		if len(out) < 8 {
			out = append(out, v)
		}
	}
	var observers []string
	for id := range h.obs {
		observers = append(observers, id)
	}
	sort.Strings(observers)
	for _, id := range observers {
		var last Event
		seen := false
		for _, e := range h.obs[id] {
			switch e.Ev {
			case evObsStart:
				seen = false
				continue
			case evObsEnd:
				continue
			}
			if x := h.byID[e.Val]; x != nil && x.tok != e.Tok {
				add(violation{at: e.T, from: min(x.start, e.T) - int64(time.Second), to: max(x.start, e.T) + 1, workers: []string{e.W, x.w},
					msg: fmt.Sprintf("observer %s saw %s lead with term %d, but that candidate's term was %d", id, e.Val, e.Tok, x.tok)})
			} else if _, queued := h.waitIDs[e.Val]; x == nil && !queued {
				add(violation{at: e.T, from: e.T - int64(time.Second), to: e.T + 1, workers: []string{e.W},
					msg: fmt.Sprintf("observer %s saw %q lead with term %d: no candidate campaigned with that value", id, e.Val, e.Tok)})
			}
			if seen && !(e.Tok > last.Tok || e.Tok == last.Tok && e.N > last.N) {
				add(violation{at: e.T, from: last.T, to: e.T + 1, workers: []string{e.W},
					msg: fmt.Sprintf("observer %s saw term %d rev %d after term %d rev %d: not in increasing order", id, e.Tok, e.N, last.Tok, last.N)})
			}
			last, seen = e, true
		}
	}
	// Lag: each observer whose Observe was running when a term began sees it, or a later one,
	// within the bound.
	disrupted := func(from, to int64) bool {
		for _, b := range h.f.blackouts {
			if b.from < to && b.to > from {
				return true
			}
		}
		for _, k := range h.f.kills2 {
			if k >= from && k < to {
				return true
			}
		}
		return false
	}
	for _, x := range h.holds {
		if x.tok == 0 {
			continue
		}
		s := x.start
		b := int64(m.bound) + h.f.hiccupTime(s, s+int64(m.bound))
		if s+b >= h.f.term || s+b > h.f.end || (x.w != driver && disrupted(s-int64(time.Second), s+b)) {
			continue
		}
		for _, id := range observers {
			evs := h.obs[id]
			w := evs[0].W
			running := false
			for _, e := range evs {
				if e.T > s {
					break
				}
				running = e.Ev != evObsEnd
			}
			if !running || !liveThrough(h, w, s, s+b) {
				continue
			}
			var lastSeen *Event
			ok := false
			for i, e := range evs {
				if e.T > s+b {
					break
				}
				if e.Ev == evObserve {
					lastSeen = &evs[i]
					ok = ok || e.Tok >= x.tok
				}
			}
			if ok {
				continue
			}
			had := "nothing"
			if lastSeen != nil {
				had = fmt.Sprintf("term %d (%s) at %s", lastSeen.Tok, lastSeen.Val, rel(h, lastSeen.T))
			}
			add(violation{at: s + b, from: s - int64(300*time.Millisecond), to: s + b + 1, workers: []string{w, x.w},
				msg: fmt.Sprintf("observer %s had not seen term %d (%s, leading from %s) %v after it began; the last it saw: %s",
					id, x.tok, x.id, rel(h, s), dur(b).Round(time.Millisecond), had)})
		}
	}
	return out
}

// liveThrough reports whether worker w ran throughout [from, to): not killed before to, not
// stopped in between.
func liveThrough(h *history, w string, from, to int64) bool {
	if k, ok := h.f.kills[w]; ok && k < to {
		return false
	}
	for _, s := range h.f.stops[w] {
		if s.from < to && s.to > from {
			return false
		}
	}
	return true
}

// A member of a waitgroup, from the history.
type member struct {
	*hold
	sureTo int64  // it was surely pending in Redis over [start, sureTo)
	fate   string // "done", "lost" or "" (unknown)
}

func members(h *history) []member {
	var ms []member
	for _, x := range h.holds {
		to := x.exit
		if k, ok := h.f.kills[x.w]; ok && k > x.start {
			to = min(to, k)
		}
		for _, s := range h.f.stops[x.w] {
			if s.from > x.start {
				to = min(to, s.from)
			}
		}
		for _, b := range h.f.blackouts {
			if b.from > x.start {
				to = min(to, b.from)
			}
		}
		restarted := false // pending when Redis restarted empty, which forgot it
		for _, r := range h.f.restarts {
			restarted = restarted || (r.from > x.start && r.from < x.exit)
		}
		fate := ""
		switch {
		case x.told() || x.killed || restarted:
			fate = "lost"
		case x.released != 0 && x.relErr == "":
			fate = "done"
		}
		ms = append(ms, member{x, to, fate})
	}
	return ms
}

// wgAnchor is how long before a member's pending time ends a Wait must have begun for its
// check to have surely run while the member was pending: its round is then the member's.
const wgAnchor = 300 * time.Millisecond

// checkWaitGroup: a Wait never returns nil while a member of its round is pending; a Wait
// whose round had a lost member never returns nil (the member is never counted as done): it
// reports ErrMembersLost (or ErrExpired if Redis restarted empty); and a member whose lease cannot have outlived a fault (its process stopped, or Redis paused,
// past its lease; Redis restarted) is not reported done by its own Done.
//
// A Wait's round is known when a member was surely pending in Redis from the Wait's start
// until wgAnchor later (its check ran in that round): every member surely pending at some
// moment of that member's pending time is in the same round.
func checkWaitGroup(m model, h *history) []violation {
	vs, _ := judgeWaits(m, h)
	return vs
}

// wgCounts says what checkWaitGroup could judge: Waits that returned, of which the round was
// known, of which the round had a lost member, and how those returned.
type wgCounts struct {
	returned, known, withLost, reportedLost, expired int
}

func (c wgCounts) String() string {
	return fmt.Sprintf("%d returned, %d with their round known, %d of them in a round with a lost member: %d reported ErrMembersLost, %d ErrExpired",
		c.returned, c.known, c.withLost, c.reportedLost, c.expired)
}

func judgeWaits(m model, h *history) ([]violation, wgCounts) {
	var out []violation
	var cnt wgCounts
	add := func(v violation) {
		if len(out) < 8 {
			out = append(out, v)
		}
	}
	ms := members(h)
	anchor := int64(wgAnchor)
	for _, w := range h.wgWaits {
		if w.end == forever || w.killed || w.x {
			continue
		}
		cnt.returned++
		var m0 *member
		for i := range ms {
			c := &ms[i]
			if w.member != "" && c.id != w.member {
				continue
			}
			if c.start <= w.start && w.start+anchor < c.sureTo && h.f.hiccupTime(w.start, w.start+anchor) == 0 &&
				liveThrough(h, w.w, w.start, w.start+anchor) {
				m0 = c
				break
			}
		}
		if m0 == nil {
			continue
		}
		cnt.known++
		var lost, lostW, pending, pendingW []string
		for _, v := range ms {
			if v.start >= m0.sureTo || m0.start >= v.sureTo {
				continue // not in the round
			}
			if v.fate == "lost" {
				lost = append(lost, v.String())
				lostW = append(lostW, v.w)
			}
			if v.start <= w.end && w.end < v.sureTo {
				pending = append(pending, fmt.Sprintf("%v (pending from %s until %s)", v, rel(h, v.start), rel(h, v.sureTo)))
				pendingW = append(pendingW, v.w)
			}
		}
		if w.ok && len(pending) > 0 {
			add(violation{at: w.end, from: min(w.start, m0.start), to: w.end + 1, workers: append([]string{w.w}, pendingW...),
				msg: fmt.Sprintf("Wait %s (%s, begun at %s, its round the one of member %s) returned nil at %s while members of its round were still pending: %s",
					w.id, w.w, rel(h, w.start), m0.id, rel(h, w.end), strings.Join(pending, ", "))})
			continue
		}
		if len(lost) == 0 {
			continue
		}
		cnt.withLost++
		if w.lost {
			cnt.reportedLost++
		}
		if w.expired {
			cnt.expired++
		}
		restarted := false
		for _, r := range h.f.restarts {
			restarted = restarted || (r.from < w.end && r.to > m0.start)
		}
		var bad string
		switch {
		case w.ok:
			bad = "returned nil: the lost members were counted as done"
		case w.lost:
		case w.expired && restarted:
		case w.expired:
			bad = fmt.Sprintf("returned %q (ErrExpired) although Redis did not restart", w.ret.Err)
		default:
			bad = fmt.Sprintf("returned %q, which does not report the lost members (ErrMembersLost)", w.ret.Err)
		}
		if bad == "" {
			continue
		}
		add(violation{at: w.end, from: min(w.start, m0.start), to: w.end + 1, workers: append([]string{w.w, m0.w}, lostW...),
			msg: fmt.Sprintf("Wait %s (%s, begun at %s, its round the one of member %s) %s; lost in that round: %s",
				w.id, w.w, rel(h, w.start), m0.id, bad, strings.Join(lost, ", "))})
	}
	// A member that cannot have survived is not done.
	ttl := int64(m.ttl)
	for _, v := range ms {
		if v.released == 0 || v.relErr != "" {
			continue
		}
		why := ""
		for _, s := range h.f.stops[v.w] {
			if s.from >= v.start && s.from < v.exit && s.to-s.from > ttl+int64(300*time.Millisecond) {
				why = fmt.Sprintf("its process was stopped %v (lease %v)", dur(s.to-s.from).Round(time.Millisecond), m.ttl)
			}
		}
		for _, p := range h.f.pauses {
			if p.from >= v.start && p.from < v.exit && p.to-p.from > ttl+int64(300*time.Millisecond) {
				why = fmt.Sprintf("Redis was paused %v (lease %v)", dur(p.to-p.from).Round(time.Millisecond), m.ttl)
			}
		}
		for _, r := range h.f.restarts {
			if r.from >= v.start && r.from < v.exit {
				why = "Redis restarted empty while it was pending"
			}
		}
		if why != "" {
			add(violation{at: v.released, from: v.start, to: v.released + 1, workers: []string{v.w},
				msg: fmt.Sprintf("member %v was reported done by its Done, but %s: it was lost", v, why)})
		}
	}
	return out, cnt
}

// wgLiveness: no Wait is stranded, and no Join or Claim hangs. A Wait must return within the
// bound of the first moment after its check ran (its arrival) when nothing can be pending in
// the group (no member possibly pending: from its Join call to the end of its claim); Join
// and Claim calls return within the bound outside blackouts. After a plain unit may have been
// left pending by nobody (an Add whose outcome is unknown), Waits are not judged.
func wgLiveness(m model, h *history) ([]violation, time.Duration) {
	var out []violation
	var longest time.Duration
	var busy []span
	for _, x := range h.holds {
		busy = append(busy, span{x.asked, max(x.claimEnd, x.start)})
	}
	for _, w := range h.waits {
		if h.byID[w.id] == nil { // a Join or Claim that failed may have applied until it returned
			busy = append(busy, span{w.start, w.end})
		}
	}
	busy = union(busy)
	inBlackout := func(t int64) (int64, bool) {
		for _, b := range h.f.blackouts {
			if t >= b.from && t < b.to {
				return b.to, true
			}
		}
		return t, false
	}
	firstIdle := func(t int64) int64 {
		for range 100 {
			moved := false
			for _, b := range busy {
				if t >= b.from && t < b.to {
					t, moved = b.to, true
				}
			}
			if nt, in := inBlackout(t); in {
				t, moved = nt, true
			}
			if !moved {
				return t
			}
		}
		return forever
	}
	suspect := int64(forever)
	if len(h.suspects) > 0 {
		suspect = h.suspects[0]
	}
	for _, w := range h.wgWaits {
		if w.killed {
			continue
		}
		arr := arrival(h, w.w, w.start, 0, w.start) // when its check surely ran
		t := firstIdle(arr)
		if t == forever || t >= h.f.term || t >= suspect {
			continue
		}
		end := w.end
		cut := false
		if end > h.f.term {
			end, cut = h.f.term, true
		}
		if end <= t {
			continue
		}
		// Neither a machine stall nor the waiter's own stop (SIGSTOP) counts.
		d := dur(end - t - h.f.hiccupTime(t, end) - h.f.stoppedTime(w.w, t, end))
		longest = max(longest, d)
		if d > m.bound && len(out) < 5 {
			how := "returned at " + rel(h, end)
			if cut {
				how = "was still waiting at the end of the run"
			}
			out = append(out, violation{at: t, from: w.start, to: end + int64(200*time.Millisecond), workers: []string{w.w},
				msg: fmt.Sprintf("stranded: Wait %s (%s) began at %s; nothing was pending in the group from %s, and it %s, %v later (bound %v)",
					w.id, w.w, rel(h, w.start), rel(h, t), how, d.Round(time.Millisecond), m.bound)})
		}
	}
	for _, w := range h.waits {
		end := w.end
		if w.killed || end == forever && h.f.term == forever {
			continue
		}
		end = min(end, h.f.term)
		var off int64
		for _, b := range h.f.blackouts {
			if b.from < end && b.to > w.start {
				off += min(b.to, end) - max(b.from, w.start)
			}
		}
		d := dur(end - w.start - off - h.f.hiccupTime(w.start, end))
		if d > m.bound && len(out) < 8 {
			out = append(out, violation{at: w.start, from: w.start, to: end + 1, workers: []string{w.w},
				msg: fmt.Sprintf("Join/Claim %s (%s) took %v outside blackouts (bound %v)", w.id, w.w, d.Round(time.Millisecond), m.bound)})
		}
	}
	return out, longest
}

// checkOnceKept, for a once primitive that keeps its success until Reset (once.Once, OnceFunc,
// OnceValue, OnceValues):
//   - after a run succeeded (fn returned its value, and its Do returned it), fn does not run
//     again until a Reset (or a restart of Redis, which forgets the done-marker: its data is
//     not persisted). A Reset made while the run led also counts: Reset is an invalidation,
//     and the success of a run it found in flight is not kept (once.Group.Forget);
//   - every caller gets the success: a Do that returned a value got the value of a run that
//     succeeded, and Do calls between the same two Resets got the same value;
//   - a caller that waited while a run succeeded does not get an error (unless its own
//     context ended, or it ran fn itself after and that run failed).
func checkOnceKept(m model, h *history) []violation {
	var out []violation
	add := func(v violation) {
		if len(out) < 8 {
			out = append(out, v)
		}
	}
	exits := map[string]Event{}
	calls := map[string]int64{} // Do call -> when it started: its lead began after that
	for _, e := range h.evs {
		switch e.Ev {
		case evFnExit:
			exits[e.Hold] = e
		case evDoStart:
			calls[e.Hold] = e.T
		}
	}
	okRun := func(x *hold) bool {
		e, ok := exits[x.id]
		return ok && e.Err == "" && !e.Lost && !x.told()
	}
	// led returns the earliest its lead can have begun: when the Do call that ran it started.
	led := func(x *hold) int64 {
		if t, ok := calls[x.call]; ok {
			return t
		}
		return x.start
	}
	// resetBetween reports whether a Reset or a restart may have deleted the marker between
	// from and to.
	resetBetween := func(from, to int64) bool {
		for _, r := range h.resets {
			if r.to > from && r.from < to {
				return true
			}
		}
		for _, r := range h.f.restarts {
			if r.to > from && r.from < to {
				return true
			}
		}
		return false
	}
	type success struct {
		x  *hold
		at int64 // its Do returned: the marker was set by then
	}
	var succs []success
	for _, x := range h.holds {
		r, ok := h.doRets[x.call]
		if ok && r.OK && okRun(x) && r.W == x.w && (m.prim == pOnceOnce || r.Val == x.id) {
			succs = append(succs, success{x, r.T})
		}
	}
	for _, s := range succs {
		for _, y := range h.holds {
			if y.start <= s.at || resetBetween(led(s.x), y.start) {
				continue
			}
			add(violation{at: y.start, from: s.x.start, to: y.start + 1, workers: []string{s.x.w, y.w},
				msg: fmt.Sprintf("fn ran again: run %v began at %s, after run %v had succeeded (its Do returned at %s), with no Reset in between",
					y, rel(h, y.start), s.x, rel(h, s.at))})
			break
		}
	}
	// Values.
	type ret struct {
		call  string
		e     Event
		start int64
	}
	var rets []ret
	for call, e := range h.doRets {
		if e.OK {
			rets = append(rets, ret{call, e, h.doArgs[call]})
		}
	}
	sort.Slice(rets, func(i, j int) bool { return rets[i].e.T < rets[j].e.T })
	if m.prim == pOnceValue || m.prim == pOnceValues {
		for i, r := range rets {
			if x := h.byID[r.e.Val]; x == nil || !okRun(x) {
				add(violation{at: r.e.T, from: r.start, to: r.e.T + 1, workers: []string{r.e.W},
					msg: fmt.Sprintf("Do %s returned the value %q, which no successful run returned", r.call, r.e.Val)})
			}
			if i == 0 {
				continue
			}
			p := rets[i-1]
			if p.e.Val != r.e.Val && !resetBetween(min(p.start, r.start), r.e.T) {
				add(violation{at: r.e.T, from: p.start, to: r.e.T + 1, workers: []string{p.e.W, r.e.W},
					msg: fmt.Sprintf("Do %s returned %q and Do %s returned %q, with no Reset in between: callers got different successes",
						p.call, p.e.Val, r.call, r.e.Val)})
			}
		}
	}
	// Callers that waited while a run succeeded.
	ranDuring := map[string]bool{}
	for _, x := range h.holds {
		ranDuring[x.call] = true
	}
	for _, s := range succs {
		for call, e := range h.doRets {
			start, ok := h.doArgs[call]
			if !ok || e.OK || e.Ctx || e.W == s.x.w || ranDuring[call] || strings.Contains(e.Err, "closed") ||
				start < s.x.start || start > s.x.exit || e.T < s.at {
				continue
			}
			disrupted := false
			for _, b := range h.f.blackouts {
				disrupted = disrupted || (b.from < e.T && b.to > start)
			}
			for _, k := range h.f.kills2 {
				disrupted = disrupted || (k >= start && k < e.T)
			}
			if disrupted {
				continue
			}
			add(violation{at: e.T, from: start, to: e.T + 1, workers: []string{e.W, s.x.w},
				msg: fmt.Sprintf("Do %s began at %s while run %v ran, which succeeded, and returned an error: %q", call, rel(h, start), s.x, e.Err)})
		}
	}
	return out
}

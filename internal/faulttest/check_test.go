package faulttest

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// The checker: pure functions over a merged history (the workers' events and the test's
// fault events), no Redis, no clocks. Each check returns violations; a violation carries the
// span and the workers that a reader needs to see.

const forever = math.MaxInt64

// model says what the history is of.
type model struct {
	prim  string
	size  int64         // semaphore
	ttl   time.Duration // the lease TTL: a dead or stopped holder's claim lapses by then...
	grant time.Duration // ...or, if it died before confirming a hand-off, by the grant's end
	bound time.Duration // liveness: a free claim that someone waits for is taken within this
}

// claimMax is the longest a claim outlives its holder's death or pause.
func (m model) claimMax() int64 { return int64(max(m.ttl, m.grant)) }

type violation struct {
	at, from, to int64
	workers      []string
	msg          string
}

// hold is one acquisition, from the history: for once, one run of fn.
type hold struct {
	id, w    string
	role     string // rwmutex: "r" or "w"
	call     string // once: the Do call that ran fn
	tok, n   int64
	start    int64
	exit     int64 // left the critical section (or died, or the history ended): forever if unknown
	released int64 // the release returned (0 if not)
	relErr   string
	lostAt   int64    // first time the holder was told of a loss: 0 if never
	asked    int64    // the acquire call (for once, the Do call) began
	dead     bool     // the lease had ended when the acquire returned
	killed   bool     // the worker was SIGKILLed while holding
	claimEnd int64    // when the claim was free in Redis at the latest (forever if unknown)
	names    []string // all: the names of the set (tok is the first one's), in NewAll's order
	toks     []int64  // all: their tokens
}

func (h *hold) told() bool { return h.lostAt != 0 }

func (h *hold) tell(t int64) {
	if h.lostAt == 0 || t < h.lostAt {
		h.lostAt = t
	}
}

func (h *hold) writer(prim string) bool { return prim != pRWMutex || h.role == "w" }

func (h *hold) String() string {
	s := fmt.Sprintf("%s (%s", h.id, h.w)
	if h.role != "" {
		s += " role=" + h.role
	}
	if h.tok != 0 {
		s += fmt.Sprintf(" tok=%d", h.tok)
	}
	if h.n != 0 {
		s += fmt.Sprintf(" n=%d", h.n)
	}
	if h.told() {
		s += " told-lost"
	} else {
		s += " not-told"
	}
	if h.killed {
		s += " killed"
	}
	return s + ")"
}

// wait is one acquire call (for once: one Do call) that had to wait, from its start until
// it returned (or its worker died, or the history ended).
type wait struct {
	w, id      string // id: the hold (or once call) it is for
	start, end int64
	queued     int64            // when the worker's observer saw it queued in Redis (0: not seen)
	queuedAt   map[string]int64 // all: name -> when the call was first seen queued for it
	n          int64
	role       string
	killed     bool // ended by the worker's death
}

// span is a time range, [from, to).
type span struct{ from, to int64 }

// faults are the test's own events, digested.
type faults struct {
	kills     map[string]int64  // worker -> SIGKILL time
	stops     map[string][]span // worker -> SIGSTOP..SIGCONT
	blackouts []span            // Redis unavailable: paused or restarting
	restarts  []span
	pauses    []span
	hiccups   []span  // some process of the run was not scheduled (merged, in order)
	partial   []span  // one primary of a quorum down (killed until started again, or stopped)
	kills2    []int64 // CLIENT KILL (any type)
	trigger   int64   // the trigger was written (0 if never)
	term      int64   // SIGTERM to every worker: the end of the run (forever if none)
	t0        int64   // the first event
	end       int64   // the last event
}

// history is a merged history, digested.
type history struct {
	evs    []Event
	f      faults
	holds  []*hold
	waits  []wait
	byID   map[string]*hold
	doRets map[string]Event // once: Do call -> its return
	doArgs map[string]int64 // once: Do call -> its start

	resets    []span             // once: Reset calls (to: forever if it never returned)
	obs       map[string][]Event // election: observer -> its observe-start, observe and observe-end events
	wgWaits   []*wgWait          // waitgroup: Wait calls
	suspects  []int64            // waitgroup: a plain unit may be pending by nobody from then on
	triggered map[string]int64   // worker -> when it saw the trigger
	waitIDs   map[string]wait    // acquire call (hold id) -> its wait, for calls that did not acquire
}

// wgWait is one WaitGroup.Wait call.
type wgWait struct {
	w, id, member        string // member: the hold whose round a tied wait waits for
	start, end           int64  // end: forever if it never returned
	ret                  Event  // its return (if any)
	killed               bool
	ok, lost, expired, x bool // x: it returned with the ctx's error or the Handle's close
}

// digest builds holds and waits from the merged events.
func digest(m model, evs []Event) *history {
	h := &history{evs: evs, byID: map[string]*hold{}, doRets: map[string]Event{}, doArgs: map[string]int64{},
		obs: map[string][]Event{}, triggered: map[string]int64{}, waitIDs: map[string]wait{}}
	f := &h.f
	f.kills, f.stops, f.term = map[string]int64{}, map[string][]span{}, forever
	if len(evs) > 0 {
		f.t0, f.end = evs[0].T, evs[len(evs)-1].T
	}
	var pause, restart int64
	var hiccups []Event
	for _, e := range evs {
		if e.Ev == evHiccup {
			hiccups = append(hiccups, e)
		}
		if e.W != driver {
			continue
		}
		switch e.Ev {
		case drvKill:
			f.kills[e.Target] = e.T
		case drvStop:
			f.stops[e.Target] = append(f.stops[e.Target], span{e.T, forever})
		case drvCont:
			if s := f.stops[e.Target]; len(s) > 0 && s[len(s)-1].to == forever {
				s[len(s)-1].to = e.T
			}
		case drvTerm:
			if f.term == forever {
				f.term = e.T
			}
		case drvRedisPause:
			pause = e.T
		case drvRedisResume:
			f.pauses = append(f.pauses, span{pause, e.T})
			f.blackouts = append(f.blackouts, span{pause, e.T})
		case drvRestartBegin:
			restart = e.T
		case drvRestartDone:
			f.restarts = append(f.restarts, span{restart, e.T})
			f.blackouts = append(f.blackouts, span{restart, e.T})
		case drvPrimaryDown:
			f.partial = append(f.partial, span{e.T, forever})
		case drvPrimaryUp:
			for i := len(f.partial) - 1; i >= 0; i-- {
				if f.partial[i].to == forever {
					f.partial[i].to = e.T
					break
				}
			}
		case drvClientKill:
			f.kills2 = append(f.kills2, e.T)
		case drvTrigger:
			if f.trigger == 0 {
				f.trigger = e.T
			}
		}
	}

	// A worker that was SIGSTOPped sees its own stop as a hiccup: that is the fault, not the
	// machine.
	for _, e := range hiccups {
		sp, own := span{e.T - e.N, e.T}, false
		for _, st := range f.stops[e.W] {
			own = own || (sp.from < st.to && st.from < sp.to)
		}
		if !own {
			f.hiccups = append(f.hiccups, sp)
		}
	}
	f.hiccups = union(f.hiccups)
	waiting := map[string]wait{} // worker -> its acquire call in progress
	endWait := func(w string, t int64) int64 {
		if x, ok := waiting[w]; ok {
			x.end = t
			h.waits = append(h.waits, x)
			delete(waiting, w)
			return x.start
		}
		return t
	}
	wgw := map[string]*wgWait{}
	resetAt := map[string]int{}
	for _, e := range evs {
		if e.W == driver {
			switch e.Ev {
			case drvLead: // the test's own term (election)
				x := &hold{id: e.Hold, w: driver, tok: e.Tok, start: e.T, asked: e.T, exit: forever, claimEnd: forever}
				h.holds = append(h.holds, x)
				h.byID[x.id] = x
			case drvResign:
				if x := h.byID[e.Hold]; x != nil {
					x.exit, x.released, x.relErr = e.T, e.T, e.Err
				}
			}
			continue
		}
		switch e.Ev {
		case evTriggered:
			h.triggered[e.W] = e.T
		case evResetStart:
			resetAt[e.Hold] = len(h.resets)
			h.resets = append(h.resets, span{e.T, forever})
		case evReset:
			if i, ok := resetAt[e.Hold]; ok {
				h.resets[i].to = e.T
			}
		case evObsStart, evObserve, evObsEnd:
			h.obs[e.Hold] = append(h.obs[e.Hold], e)
		case evWGWait:
			x := &wgWait{w: e.W, id: e.Hold, member: e.Call, start: e.T, end: forever}
			wgw[e.Hold] = x
			h.wgWaits = append(h.wgWaits, x)
		case evWGReturn:
			if x := wgw[e.Hold]; x != nil {
				x.end, x.ret = e.T, e
				x.ok, x.lost, x.expired = e.OK, e.Lost, e.Expired
				x.x = e.Ctx || strings.Contains(e.Err, "closed")
			}
		case evSuspect:
			h.suspects = append(h.suspects, e.T)
		}
		switch e.Ev {
		case evWait, evDoStart:
			endWait(e.W, e.T)
			waiting[e.W] = wait{w: e.W, id: e.Hold, start: e.T, n: e.N, role: e.Role}
			if e.Ev == evDoStart {
				h.doArgs[e.Hold] = e.T
			}
		case evAcquired:
			asked := endWait(e.W, e.T)
			x := &hold{id: e.Hold, w: e.W, role: e.Role, tok: e.Tok, n: e.N, start: e.T, asked: asked, exit: forever, claimEnd: forever, dead: e.Dead,
				names: e.Names, toks: e.Toks}
			if e.Dead {
				x.tell(e.T)
			}
			h.holds = append(h.holds, x)
			h.byID[x.id] = x
		case evQueued:
			if x, ok := waiting[e.W]; ok && x.id == e.Hold {
				if x.queued == 0 {
					x.queued = e.T
				}
				if _, seen := x.queuedAt[e.Val]; !seen && e.Val != "" {
					if x.queuedAt == nil {
						x.queuedAt = map[string]int64{}
					}
					x.queuedAt[e.Val] = e.T
				}
				waiting[e.W] = x
			}
		case evFailed:
			endWait(e.W, e.T)
		case evDoReturn:
			endWait(e.W, e.T)
			h.doRets[e.Hold] = e
		case evFnEnter:
			asked := e.T
			if a, ok := h.doArgs[e.Call]; ok {
				asked = a
			}
			x := &hold{id: e.Hold, w: e.W, call: e.Call, start: e.T, asked: asked, exit: forever, claimEnd: forever}
			h.holds = append(h.holds, x)
			h.byID[x.id] = x
		case evLost, evFnCtx:
			if x := h.byID[e.Hold]; x != nil && (e.Ev == evLost || e.Lost) {
				x.tell(e.T)
			}
		case evReenter:
			if x := h.byID[e.Hold]; x != nil && e.Lost {
				x.tell(e.T)
			}
		case evExit, evFnExit:
			if x := h.byID[e.Hold]; x != nil {
				x.exit = e.T
				if e.Lost {
					x.tell(e.T)
				}
			}
		case evRelease:
			if x := h.byID[e.Hold]; x != nil {
				x.released, x.relErr = e.T, e.Err
				if e.Lost {
					x.tell(e.T)
				}
			}
		}
	}
	for _, x := range waiting {
		x.end = forever
		h.waits = append(h.waits, x)
	}
	// A killed worker's hold ends at its death, and its claim a lease later at the latest;
	// its wait ends at its death.
	for i := range h.waits {
		if k, ok := f.kills[h.waits[i].w]; ok && h.waits[i].end > k && h.waits[i].start <= k {
			h.waits[i].end, h.waits[i].killed = k, true
		}
	}
	for _, x := range h.wgWaits {
		if k, ok := f.kills[x.w]; ok && x.end > k && x.start <= k {
			x.end, x.killed = k, true
		}
	}
	for _, x := range h.waits {
		if _, ok := h.byID[x.id]; !ok && x.id != "" {
			h.waitIDs[x.id] = x
		}
	}
	sort.Slice(h.waits, func(i, j int) bool { return h.waits[i].start < h.waits[j].start })
	lapse := m.claimMax()
	for _, x := range h.holds {
		if k, ok := f.kills[x.w]; ok && x.exit > k && x.start <= k {
			x.exit, x.killed = k, true
		}
		if x.exit == forever {
			x.exit = f.end + 1
		}
		// The claim's end in Redis, at the latest.
		end := int64(forever)
		if onceKind(m.prim) {
			// The lead ends when fn has returned and the leader has published; its Do returns
			// after that, unless its ctx ended earlier (fn goes on for the others).
			if !x.killed && x.exit <= f.end {
				end = x.exit + int64(50*time.Millisecond)
				if r, ok := h.doRets[x.call]; ok && r.T >= x.exit {
					end = r.T
				}
			}
		} else if x.released != 0 {
			end = x.released
		}
		if x.lostAt != 0 && x.lostAt < end {
			end = x.lostAt
		}
		if x.killed {
			end = min(end, f.kills[x.w]+lapse)
		}
		for _, s := range f.stops[x.w] {
			if s.from >= x.start && s.from < end {
				end = min(end, s.from+lapse)
			}
		}
		for _, r := range f.restarts {
			if r.from >= x.start && r.from < end {
				end = min(end, r.to)
			}
		}
		x.claimEnd = end
	}
	if onceKind(m.prim) {
		// A leader is told of a lost lead by fn's ctx, or, if fn returned first, by Do.
		for _, x := range h.holds {
			if r, ok := h.doRets[x.call]; ok && r.Lost && r.T >= x.start {
				x.tell(r.T)
			}
		}
	}
	sort.SliceStable(h.holds, func(i, j int) bool { return h.holds[i].start < h.holds[j].start })
	return h
}

func overlap(a, b *hold) bool { return a.start < b.exit && b.start < a.exit }

// perName returns h, or, for all, its projection on each name.
func perName(prim string, h *history) []*history {
	if prim != pAll {
		return []*history{h}
	}
	var out []*history
	for _, n := range h.names() {
		out = append(out, h.project(n))
	}
	return out
}

// names returns every name the holds of an all history hold, sorted.
func (h *history) names() []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range h.holds {
		for _, n := range x.names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// project returns the history of one name of an all history: the holds whose set has it,
// each with that name's token (and its id suffixed with the name, for the messages); the rest
// is shared with h.
func (h *history) project(name string) *history {
	p := *h
	p.holds = nil
	for _, x := range h.holds {
		for i, n := range x.names {
			if n != name {
				continue
			}
			y := *x
			y.tok = x.toks[i]
			y.id = x.id + "[" + name + "]"
			p.holds = append(p.holds, &y)
		}
	}
	return &p
}

// union merges spans into disjoint ones, in order.
func union(ss []span) []span {
	sort.Slice(ss, func(i, j int) bool { return ss[i].from < ss[j].from })
	var out []span
	for _, s := range ss {
		if n := len(out); n > 0 && s.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// hiccupTime returns how much of [from, to) the machine did not run some process of the run.
// stoppedTime returns how long worker w was stopped (SIGSTOP) between from and to: time in
// which it could not act, whatever it waited for.
func (f *faults) stoppedTime(w string, from, to int64) int64 {
	var d int64
	for _, s := range f.stops[w] {
		if s.to > from && s.from < to {
			d += min(s.to, to) - max(s.from, from)
		}
	}
	return d
}

func (f *faults) hiccupTime(from, to int64) int64 {
	var d int64
	for _, s := range f.hiccups {
		if s.to > from && s.from < to {
			d += min(s.to, to) - max(s.from, from)
		}
	}
	return d
}

// checkExclusion: two holds that overlap must be explained by a loss the holder was told of,
// with a token smaller than the other's (for readers of a rwmutex, which carry the last
// write's token, by the loss alone). Readers may overlap readers.
func checkExclusion(m model, h *history) []violation {
	var out []violation
	var active []*hold
	for _, b := range h.holds {
		kept := active[:0]
		for _, a := range active {
			if a.exit > b.start {
				kept = append(kept, a)
			}
		}
		active = kept
		for _, a := range active {
			if !overlap(a, b) {
				continue
			}
			aw, bw := a.writer(m.prim), b.writer(m.prim)
			if !aw && !bw {
				continue // readers share
			}
			var ok bool
			if aw && bw {
				ok = (a.told() && a.tok < b.tok) || (b.told() && b.tok < a.tok)
			} else {
				ok = a.told() || b.told()
			}
			if !ok {
				out = append(out, violation{at: b.start, from: a.start, to: min(a.exit, b.exit),
					workers: []string{a.w, b.w},
					msg: fmt.Sprintf("holds overlap without a told loss (with a smaller token): %v held %s..%s, %v from %s",
						a, rel(h, a.start), rel(h, a.exit), b, rel(h, b.start))})
			}
		}
		active = append(active, b)
	}
	return out
}

// checkTokens: holds that do not overlap get strictly increasing tokens in the order they
// were acquired (writers only, for a rwmutex).
func checkTokens(m model, h *history) []violation {
	var ws []*hold
	for _, x := range h.holds {
		// A set (all) whose lease was lost when its Lock returned may hold a member's token
		// from before the loss (taken before Redis restarted, while it waited for the rest):
		// its place in that name's order is when the member was taken, which the history does
		// not have. It was told at once, so checkExclusion still judges its overlaps.
		if x.writer(m.prim) && !(m.prim == pAll && x.dead) {
			ws = append(ws, x)
		}
	}
	byExit := append([]*hold(nil), ws...)
	sort.Slice(byExit, func(i, j int) bool { return byExit[i].exit < byExit[j].exit })
	var out []violation
	var best *hold // the hold with the largest token among those that ended before b began
	j := 0
	for _, b := range ws { // ws is in start order
		for ; j < len(byExit) && byExit[j].exit <= b.start; j++ {
			if best == nil || byExit[j].tok > best.tok {
				best = byExit[j]
			}
		}
		if best != nil && b.tok <= best.tok {
			out = append(out, violation{at: b.start, from: best.start, to: b.start + 1, workers: []string{best.w, b.w},
				msg: fmt.Sprintf("token did not increase: %v acquired at %s after %v ended at %s",
					b, rel(h, b.start), best, rel(h, best.exit))})
		}
	}
	return out
}

// checkCapacity: the permits held by holds that were never told of a loss never exceed the
// size.
func checkCapacity(m model, h *history) []violation {
	type step struct {
		t int64
		d int64
		x *hold
	}
	var steps []step
	for _, x := range h.holds {
		if x.told() {
			continue
		}
		steps = append(steps, step{x.start, x.n, x}, step{x.exit, -x.n, x})
	}
	sort.Slice(steps, func(i, j int) bool {
		if steps[i].t != steps[j].t {
			return steps[i].t < steps[j].t
		}
		return steps[i].d < steps[j].d // leave before enter at the same instant
	})
	var out []violation
	used := int64(0)
	live := map[*hold]bool{}
	for _, s := range steps {
		used += s.d
		if s.d > 0 {
			live[s.x] = true
		} else {
			delete(live, s.x)
		}
		if used > m.size && len(out) < 5 {
			var names []string
			var ws []string
			from := s.t
			for x := range live {
				names = append(names, x.String())
				ws = append(ws, x.w)
				from = min(from, x.start)
			}
			sort.Strings(names)
			out = append(out, violation{at: s.t, from: from, to: s.t + 1, workers: ws,
				msg: fmt.Sprintf("%d permits in use at %s, size %d, none of the holders told of a loss: %s",
					used, rel(h, s.t), m.size, strings.Join(names, ", "))})
		}
	}
	return out
}

// checkOnce: runs of fn for the key overlap only if the earlier run was told its lead was
// lost (its ctx ended with the loss, or, if fn returned before a renewal could tell, its Do
// returned the loss); and a leader whose lead was lost (told, or overtaken by a later run)
// must not get a success from Do.
func checkOnce(m model, h *history) []violation {
	var out []violation
	overtaken := map[*hold]*hold{}
	for i, a := range h.holds {
		for _, b := range h.holds[i+1:] {
			if b.start >= a.exit {
				break
			}
			first := overtaken[a] == nil
			if first {
				overtaken[a] = b
			}
			if !a.told() && first { // one report per earlier run
				out = append(out, violation{at: b.start, from: a.start, to: min(a.exit, b.exit), workers: []string{a.w, b.w},
					msg: fmt.Sprintf("fn ran twice at once: run %v from %s to %s, run %v from %s, and the first run was never told its lead was lost (neither by fn's ctx nor by Do)",
						a, rel(h, a.start), rel(h, a.exit), b, rel(h, b.start))})
			}
		}
	}
	for _, a := range h.holds {
		b, over := overtaken[a]
		if !a.told() && !over {
			continue
		}
		r, ok := h.doRets[a.call]
		if !ok || !r.OK {
			continue
		}
		why := "its ctx ended with the loss"
		if over {
			why = fmt.Sprintf("run %s started at %s while it ran", b.id, rel(h, b.start))
		}
		out = append(out, violation{at: r.T, from: a.start, to: r.T + 1, workers: []string{a.w},
			msg: fmt.Sprintf("a leader whose lead was lost got a success from Do: run %v (%s), Do %s returned ok at %s",
				a, why, a.call, rel(h, r.T))})
	}
	return out
}

// checkEarlyLoss: an acquisition returns a live lease. A lease that had ended when the call
// returned, or is lost less than a renewal period later with no fault in between that could
// take it (a restart, a pause of Redis or of the holder, its death, the machine not running
// the processes), was granted after its local deadline.
func checkEarlyLoss(m model, h *history) []violation {
	var out []violation
	ttl := int64(m.ttl)
	for _, x := range h.holds {
		if onceKind(m.prim) || !x.told() || x.lostAt-x.start >= ttl/3-int64(20*time.Millisecond) {
			continue
		}
		excused := false
		in := func(t int64) bool { return t >= x.start-ttl && t <= x.lostAt }
		for _, s := range h.f.restarts {
			excused = excused || in(s.from) || in(s.to)
		}
		for _, s := range h.f.pauses {
			excused = excused || in(s.from)
		}
		for _, s := range h.f.partial { // one primary of a quorum down or back
			excused = excused || in(s.from) || in(s.to)
		}
		for _, s := range h.f.stops[x.w] {
			excused = excused || in(s.from) || in(s.to)
		}
		excused = excused || h.f.hiccupTime(x.start-ttl, x.lostAt+int64(50*time.Millisecond)) > 0
		if excused {
			continue
		}
		what := fmt.Sprintf("lost %s after it was acquired", ms(x.lostAt-x.start))
		if x.dead {
			what = "already ended when the acquire returned"
		}
		out = append(out, violation{at: x.start, from: x.start - int64(200*time.Millisecond), to: x.lostAt + 1, workers: []string{x.w},
			msg: fmt.Sprintf("an acquisition returned a lease that was %s (lease %v): %v", what, m.ttl, x)})
	}
	return out
}

// checkCtxErrors: a call fails with a context error only when its own context ended; an
// internal timeout must not pass for the caller's.
func checkCtxErrors(h *history) []violation {
	var out []violation
	for _, e := range h.evs {
		if e.W == driver || !e.Ctx || !e.Alive {
			continue
		}
		if len(out) == 5 {
			break
		}
		out = append(out, violation{at: e.T, from: e.T - int64(500*time.Millisecond), to: e.T + 1, workers: []string{e.W},
			msg: fmt.Sprintf("%s of %s returned a context error while its context was live: %q", e.Ev, e.Hold, e.Err)})
	}
	return out
}

// waits reports whether the primitive's acquire calls wait until they acquire or their ctx
// ends (Lock, Acquire, Campaign; a WaitGroup's Join returns when Redis cannot be reached).
func waits(prim string) bool { return lockLike(prim) && prim != pRate }

// checkEarlyEnd: an acquire call that waits ends only when it acquires, when its ctx ends, or
// when Redis refuses it (an error reply that does not go away by itself): a fault (a pause, a
// restart, a connection killed) is waited out, never returned.
func checkEarlyEnd(m model, h *history) []violation {
	var out []violation
	for _, e := range h.evs {
		if e.W == driver || e.Ev != evFailed || !e.Alive || e.Ctx || e.Refused {
			continue
		}
		if len(out) == 5 {
			break
		}
		out = append(out, violation{at: e.T, from: e.T - int64(500*time.Millisecond), to: e.T + 1, workers: []string{e.W},
			msg: fmt.Sprintf("the %s acquire of %s ended before its ctx, which Redis did not refuse: %q", m.prim, e.Hold, e.Err)})
	}
	return out
}

// stall is a stretch in which the claim was free and someone waited, and nobody acquired.
type stall struct {
	from, to int64
	waiter   string
	cut      bool // ended by the end of the run, not by an acquisition
}

// stalls finds every time a claim was free (no live claim in Redis, counting a dead or
// stopped holder's claim until it lapses) while a live worker waited, and measures how long
// until someone acquired or a waiter's call ended. Time when Redis was unavailable (paused,
// restarting) does not count.
func stalls(m model, h *history) []stall {
	// Progress: any acquisition, any acquire call that returned (for once: any Do return,
	// any run of fn starting). A waiter's death is not progress.
	var progress []int64
	for _, x := range h.holds {
		progress = append(progress, x.start)
	}
	for _, w := range h.waits {
		if w.end != forever && !w.killed {
			progress = append(progress, w.end)
		}
	}
	sort.Slice(progress, func(i, j int) bool { return progress[i] < progress[j] })
	nextProgress := func(t int64) int64 {
		i := sort.Search(len(progress), func(i int) bool { return progress[i] > t })
		if i == len(progress) {
			return forever
		}
		return progress[i]
	}
	stopped := func(w string, t int64) bool {
		for _, s := range h.f.stops[w] {
			if t >= s.from && t < s.to {
				return true
			}
		}
		return false
	}
	inBlackout := func(t int64) bool {
		for _, b := range h.f.blackouts {
			if t >= b.from && t < b.to {
				return true
			}
		}
		return false
	}
	// Candidate instants: whenever a claim ends, a wait starts, a blackout or a stop ends.
	var cands []int64
	for _, x := range h.holds {
		if x.claimEnd != forever {
			cands = append(cands, x.claimEnd)
		}
	}
	for _, w := range h.waits {
		cands = append(cands, w.start)
	}
	for _, b := range h.f.blackouts {
		cands = append(cands, b.to)
	}
	for _, ss := range h.f.stops {
		for _, s := range ss {
			if s.to != forever {
				cands = append(cands, s.to)
			}
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i] < cands[j] })

	// Sweep: holds and waits are in start order; the active ones are kept as t grows.
	var out []stall
	var activeH []*hold
	var activeW []wait
	hi, wi := 0, 0
	covered := int64(math.MinInt64) // a stall already found runs until here
	for _, t := range cands {
		if t >= h.f.term {
			break
		}
		for ; hi < len(h.holds) && h.holds[hi].start <= t; hi++ {
			activeH = append(activeH, h.holds[hi])
		}
		for ; wi < len(h.waits) && h.waits[wi].start <= t; wi++ {
			activeW = append(activeW, h.waits[wi])
		}
		kh := activeH[:0]
		for _, x := range activeH {
			if x.claimEnd > t {
				kh = append(kh, x)
			}
		}
		activeH = kh
		kw := activeW[:0]
		for _, w := range activeW {
			if w.end > t {
				kw = append(kw, w)
			}
		}
		activeW = kw
		if t < covered || inBlackout(t) {
			continue
		}
		var ws []wait
		for _, w := range activeW {
			if !stopped(w.w, t) {
				ws = append(ws, w)
			}
		}
		if len(ws) == 0 {
			continue
		}
		used, maxN := int64(0), int64(0)
		for _, x := range activeH {
			used += max(x.n, 1)
		}
		for _, w := range ws {
			maxN = max(maxN, w.n, 1)
		}
		size := int64(1)
		if m.prim == pSemaphore {
			size = m.size
		}
		if used+maxN > size {
			continue // not free for every waiter (and, but for a semaphore, not free at all)
		}
		end, cut := nextProgress(t), false
		if end > h.f.term {
			end, cut = h.f.term, true
		}
		if m.prim == pSemaphore {
			// A waiter that does not fit, arriving meanwhile, ends the stretch: its request
			// may have reached Redis before those of the waiters that fit (a process's first
			// command can lag its wait event by a hundred ms on a loaded machine), and then
			// they rightly wait behind it (FIFO: no small request overtakes a larger one).
			for _, w := range h.waits {
				if w.start > t && w.start < end && used+max(w.n, 1) > size {
					end, cut = w.start, false
					break
				}
			}
		}
		// A blackout inside the stretch restarts the count after it.
		from := t
		for _, b := range h.f.blackouts {
			if b.from < end && b.to > from {
				from = max(from, b.to)
			}
		}
		if end <= from {
			continue
		}
		out = append(out, stall{from: from, to: end, waiter: ws[0].w, cut: cut})
		covered = end
	}
	return out
}

// checkLiveness: no stall longer than the bound.
func checkLiveness(m model, h *history) ([]violation, time.Duration) {
	var out []violation
	longest := time.Duration(0)
	for _, s := range stalls(m, h) {
		idle := h.f.hiccupTime(s.from, s.to)
		d := time.Duration(s.to - s.from - idle)
		longest = max(longest, d)
		if d > m.bound {
			how := "until someone acquired"
			if s.cut {
				how = "until the end of the run, with nobody acquiring"
			}
			note := ""
			if idle > 0 {
				note = fmt.Sprintf(", not counting %v the machine did not run the processes", dur(idle).Round(time.Millisecond))
			}
			out = append(out, violation{at: s.from, from: s.from - int64(time.Second), to: s.to + int64(200*time.Millisecond),
				msg: fmt.Sprintf("stranded: the claim was free from %s and %s waited, %v %s (bound %v%s)",
					rel(h, s.from), s.waiter, d.Round(time.Millisecond), how, m.bound, note)})
		}
	}
	return out, longest
}

// check runs every check that applies to the primitive.
func check(m model, h *history) []violation {
	var out []violation
	switch {
	case onceKind(m.prim):
		out = append(out, checkOnce(m, h)...)
		if resettable(m.prim) {
			out = append(out, checkOnceKept(m, h)...)
		}
	case m.prim == pSemaphore:
		out = append(out, checkCapacity(m, h)...)
	case m.prim == pWaitGroup:
		out = append(out, checkWaitGroup(m, h)...)
	case m.prim == pAll:
		for _, name := range h.names() {
			p := h.project(name)
			out = append(out, checkExclusion(m, p)...)
			out = append(out, checkTokens(m, p)...)
		}
	default:
		out = append(out, checkExclusion(m, h)...)
		out = append(out, checkTokens(m, h)...)
		if m.prim == pElection {
			out = append(out, checkElection(m, h)...)
		}
	}
	out = append(out, checkEarlyLoss(m, h)...)
	out = append(out, checkCtxErrors(h)...)
	if waits(m.prim) {
		out = append(out, checkEarlyEnd(m, h)...)
	}
	lv, _ := liveness(m, h)
	out = append(out, lv...)
	if lockLike(m.prim) {
		ov, _ := checkOrder(m, h)
		out = append(out, ov...)
	}
	return out
}

// liveness runs the primitive's liveness check and returns the longest stall.
func liveness(m model, h *history) ([]violation, time.Duration) {
	if m.prim == pWaitGroup {
		return wgLiveness(m, h)
	}
	return checkLiveness(m, h)
}

// lockLike reports whether the primitive's acquire calls wait in turn for holds: the order
// of service is measured for them.
func lockLike(prim string) bool { return !onceKind(prim) && prim != pWaitGroup }

// report formats violations with the slice of the history each one needs.
func report(h *history, vs []violation, limit int) string {
	var b strings.Builder
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].at < vs[j].at })
	for i, v := range vs {
		if i == limit {
			fmt.Fprintf(&b, "... and %d more violations\n", len(vs)-limit)
			break
		}
		fmt.Fprintf(&b, "VIOLATION at %s: %s\n", rel(h, v.at), v.msg)
		from := v.from - int64(300*time.Millisecond)
		to := v.to + int64(300*time.Millisecond)
		b.WriteString(excerpt(h.evs, h.f.t0, v.at, from, to, v.workers, 60))
	}
	return b.String()
}

// rel formats t relative to the start of the history.
func rel(h *history, t int64) string {
	if t == forever {
		return "(never)"
	}
	return fmt.Sprintf("%.1fms", float64(t-h.f.t0)/1e6)
}

package faulttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// mono returns CLOCK_MONOTONIC in nanoseconds. On Linux it is one clock for every process of
// the machine, and it keeps running while a process is stopped, so the events of the workers
// and of the test can be merged into one history.
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// Event kinds written by workers.
const (
	evStart    = "start"          // the worker is ready (PID)
	evWait     = "wait"           // an acquire call starts (Role, N)
	evAcquired = "acquired"       // it returned success (Hold, Tok, N, Role; Dead: the lease had ended already)
	evFailed   = "acquire-failed" // it returned an error (Err, Ctx: the error matches ctx's)
	evReenter  = "reenter"        // reentrant: the nested Lock (Err if it failed)
	evWrite    = "write"          // a fenced write (Hold, Tok, Phase entry|late, OK accepted)
	evLost     = "lost"           // the worker saw the lease end with ErrLost (Hold, Err)
	evExit     = "exit"           // the critical section is left (Hold, Lost: lease.Err is ErrLost)
	evRelease  = "release"        // the release returned (Hold, Err, Lost, NotHeld)
	evClosed   = "closed"         // Handle.Close returned (Err)
	evFatal    = "fatal"          // the worker could not run (Err)
	evHiccup   = "hiccup"         // the process was not scheduled for N ns, until T (any W)
	evQueued   = "queued"         // the Handle's observer: the acquire call of Hold found the claim taken and is in Redis's queue

	// once
	evDoStart  = "do-start"  // Group.Do is called (Hold: the call id)
	evFnEnter  = "fn-enter"  // fn starts (Hold: the run id, Call: the Do call that started it)
	evFnCtx    = "fn-ctx"    // fn saw its ctx end (Hold, Err: the cause, Lost: the cause is ErrLost)
	evFnExit   = "fn-exit"   // fn returns (Hold, Lost: its ctx had ended with a loss, Err: the cause)
	evDoReturn = "do-return" // Do returned (Hold: the call id, OK: nil error, Val: the run whose result it got, Err, Shared)

	// once.Once and the Once functions: the resetter
	evResetStart = "reset-start" // Once.Reset is called (Hold: the call id)
	evReset      = "reset"       // it returned (Hold, Err)

	// election observers
	evObsStart = "observe-start" // Election.Observe is called (Hold: the observer id)
	evObserve  = "observe"       // it sent an Info (Hold: the observer id, Tok: Term, N: Rev, Val: Value)
	evObsEnd   = "observe-end"   // its channel closed before the worker stopped (Hold)

	// waitgroup
	evWGWait   = "wg-wait"   // WaitGroup.Wait is called (Hold: the wait id; Call: the member hold whose round it waits for, if tied)
	evWGReturn = "wg-return" // it returned (Hold, OK: nil, Lost: ErrMembersLost, Expired: ErrExpired, Err, Ctx, Alive)
	evSuspect  = "suspect"   // a plain unit may be left pending by nobody (an Add whose outcome is unknown): Err

	evTriggered = "triggered" // the worker saw its trigger and starts its calls

	// rate
	evAdmit = "admit" // a Wait returned nil (At, Made, Wall; Val: the limit in force, as the reply said)
)

// Event kinds written by the test (worker "test").
const (
	drvKill         = "kill"          // SIGKILL of Target
	drvStop         = "stop"          // SIGSTOP of Target
	drvCont         = "cont"          // SIGCONT of Target
	drvTerm         = "term"          // SIGTERM to every worker: the end of the run
	drvRedisPause   = "redis-pause"   // SIGSTOP of the lock's redis-server
	drvRedisResume  = "redis-resume"  // SIGCONT of it
	drvRestartBegin = "restart-begin" // SIGKILL of the lock's redis-server
	drvRestartDone  = "restart-done"  // the new one answers
	drvClientKill   = "client-kill"   // CLIENT KILL TYPE Err; N connections
	drvBegin        = "begin"         // every worker is ready
	drvTrigger      = "trigger"       // the trigger file is written: triggered workers start their calls
	drvPrimaryDown  = "primary-down"  // one primary of a quorum (Target p1..p3) is SIGKILLed (Err "kill") or SIGSTOPped (Err "stop")
	drvPrimaryUp    = "primary-up"    // it answers again: started empty (Err "start") or SIGCONTed (Err "cont")
	drvLead         = "lead"          // election: the test itself leads (Hold, Tok: its term)
	drvResign       = "resign"        // ...and resigned (Hold, Err)
)

// driver is the W of the test's own events.
const driver = "test"

// Event is one line of a history.
type Event struct {
	T       int64    `json:"t"` // CLOCK_MONOTONIC, ns
	W       string   `json:"w"`
	Ev      string   `json:"ev"`
	Hold    string   `json:"hold,omitempty"`
	Call    string   `json:"call,omitempty"`
	Val     string   `json:"val,omitempty"`
	Tok     int64    `json:"tok,omitempty"`
	N       int64    `json:"n,omitempty"`
	Role    string   `json:"role,omitempty"`
	Phase   string   `json:"phase,omitempty"`
	OK      bool     `json:"ok,omitempty"`
	Lost    bool     `json:"lost,omitempty"`
	NotHeld bool     `json:"notheld,omitempty"`
	Ctx     bool     `json:"ctx,omitempty"`     // the error matches context.Canceled or DeadlineExceeded
	Alive   bool     `json:"alive,omitempty"`   // ...while the call's own ctx had not ended
	Refused bool     `json:"refused,omitempty"` // the error is Redis's refusal (an error reply that does not go away by itself)
	Dead    bool     `json:"dead,omitempty"`
	Shared  bool     `json:"shared,omitempty"`
	Expired bool     `json:"expired,omitempty"`
	Target  string   `json:"target,omitempty"`
	PID     int      `json:"pid,omitempty"`
	Err     string   `json:"err,omitempty"`
	Names   []string `json:"names,omitempty"` // all: the names of the set acquired, in NewAll's order
	Toks    []int64  `json:"toks,omitempty"`  // all: each name's token
	// rate admissions: Redis's decision, server clock (µs), and CLOCK_REALTIME (µs) when Wait
	// returned (T is CLOCK_MONOTONIC then)
	At   int64 `json:"at,omitempty"`   // the reservation's time to act
	Made int64 `json:"made,omitempty"` // when the script decided
	Wall int64 `json:"wall,omitempty"`
}

func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-4s %-14s", e.W, e.Ev)
	add := func(k string, v any) { fmt.Fprintf(&b, " %s=%v", k, v) }
	if e.Hold != "" {
		add("hold", e.Hold)
	}
	if e.Call != "" {
		add("call", e.Call)
	}
	if e.Val != "" {
		add("val", e.Val)
	}
	if e.Tok != 0 {
		add("tok", e.Tok)
	}
	if len(e.Names) > 0 {
		add("names", e.Names)
		add("toks", e.Toks)
	}
	if e.N != 0 {
		add("n", e.N)
	}
	if e.Role != "" {
		add("role", e.Role)
	}
	if e.Phase != "" {
		add("phase", e.Phase)
	}
	if e.Target != "" {
		add("target", e.Target)
	}
	if e.PID != 0 {
		add("pid", e.PID)
	}
	for _, f := range []struct {
		k string
		v bool
	}{{"ok", e.OK}, {"lost", e.Lost}, {"notheld", e.NotHeld}, {"ctx", e.Ctx}, {"alive", e.Alive}, {"dead", e.Dead}, {"shared", e.Shared}, {"expired", e.Expired}} {
		if f.v {
			b.WriteString(" " + f.k)
		}
	}
	if e.Err != "" {
		add("err", fmt.Sprintf("%q", e.Err))
	}
	return b.String()
}

// recorder appends events to a file, one write(2) per line, so that a SIGKILL loses nothing
// already recorded.
type recorder struct {
	mu      sync.Mutex
	f       *os.File
	w       string
	waiting string // the Hold of the last evWait: the acquire call in progress
}

func (r *recorder) rec(e Event) {
	if e.T == 0 {
		e.T = mono()
	}
	e.W = r.w
	if e.Ev == evWait {
		r.mu.Lock()
		r.waiting = e.Hold
		r.mu.Unlock()
	}
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	b = append(b, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		_, _ = r.f.Write(b)
	}
}

// queued records evQueued for the acquire call in progress (an observer's EventQueued: one
// acquire at a time per worker loop), naming the primitive it queued for (Val; for all, the
// member).
func (r *recorder) queued(name string) {
	r.mu.Lock()
	hold := r.waiting
	r.mu.Unlock()
	if hold != "" {
		r.rec(Event{Ev: evQueued, Hold: hold, Val: name})
	}
}

// tailer reads a history file as it grows.
type tailer struct {
	path string
	off  int64
	part []byte
	evs  []Event
}

// read parses what was appended since the last call. A line cut short (a worker killed in
// the middle of a write, which write(2) of a short line makes unlikely) is kept for the next
// call.
func (t *tailer) read() error {
	f, err := os.Open(t.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	t.off += int64(len(b))
	b = append(t.part, b...)
	last := bytes.LastIndexByte(b, '\n')
	if last < 0 {
		t.part = b
		return nil
	}
	t.part = append([]byte(nil), b[last+1:]...)
	sc := bufio.NewScanner(bytes.NewReader(b[:last+1]))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("%s: %w: %q", t.path, err, sc.Text())
		}
		t.evs = append(t.evs, e)
	}
	return sc.Err()
}

// merge returns the events of every history in time order.
func merge(hs ...[]Event) []Event {
	var out []Event
	for _, h := range hs {
		out = append(out, h...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].T < out[j].T })
	return out
}

// excerpt formats the events between from and to (ns), of the workers named (all if none),
// with times relative to t0, at most limit lines (the ones nearest to at).
func excerpt(evs []Event, t0, at, from, to int64, workers []string, limit int) string {
	keep := func(e Event) bool {
		if len(workers) == 0 || e.W == driver {
			return true
		}
		for _, w := range workers {
			if e.W == w || e.Target == w {
				return true
			}
		}
		return false
	}
	var sel []Event
	for _, e := range evs {
		if e.T >= from && e.T <= to && keep(e) {
			sel = append(sel, e)
		}
	}
	cut := ""
	if len(sel) > limit {
		i := sort.Search(len(sel), func(i int) bool { return sel[i].T >= at })
		lo := max(0, i-limit/2)
		hi := min(len(sel), lo+limit)
		cut = fmt.Sprintf("      ... %d events left out before, %d after\n", lo, len(sel)-hi)
		sel = sel[lo:hi]
	}
	var b strings.Builder
	for _, e := range sel {
		fmt.Fprintf(&b, "  %9.1fms %s\n", float64(e.T-t0)/1e6, e)
	}
	b.WriteString(cut)
	return b.String()
}

// hiccupMin is how late a 50ms ticker must fire for the process to count as not scheduled.
const hiccupMin = 300 * time.Millisecond

// watchHiccups records, until stop is closed, every time this process was not scheduled for
// hiccupMin or more (a machine so loaded that nothing runs): the checker does not count that
// time against the library.
func watchHiccups(r *recorder, stop <-chan struct{}) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	last := mono()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			now := mono()
			if gap := now - last; gap >= int64(hiccupMin) {
				r.rec(Event{T: now, Ev: evHiccup, N: gap})
			}
			last = now
		}
	}
}

func ms(ns int64) string { return fmt.Sprintf("%.0fms", float64(ns)/1e6) }

func dur(d int64) time.Duration { return time.Duration(d) }

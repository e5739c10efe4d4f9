package faulttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/once"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
	"github.com/distsync/distsync/waitgroup"
)

// Bounds of every scenario: the happy path never comes near them on a loaded 2-core machine,
// and the library's fallback delays (leases, hand-off windows, waiter leases) are chosen far
// above them where a scenario is about lost wake-ups, so that a wake-up lost or a grant
// stranded shows up as a multi-second stall.
const (
	happyBound   = 1500 * time.Millisecond // a free claim someone waits for is taken within this
	keyTTLLimit  = time.Minute             // queue entries, request ids, void marks
	fenceRetain  = 2 * time.Minute         // WithFenceRetention in every scenario
	workerMaxRun = 90 * time.Second        // a worker left alone stops by itself after this
	startLimit   = 30 * time.Second        // to start the workers
	exitLimit    = 15 * time.Second        // for a worker to exit after SIGTERM
)

// workerRole is one worker of a scenario.
type workerRole struct {
	role    string   // rwmutex: "r" or "w"; waitgroup: "m" or "w"; election: "" or "o"; once: "", "func" or "reset"
	n       int64    // semaphore weight
	trigger bool     // starts its calls only when the test triggers it (during a fault)
	names   []string // all: the names this worker draws its sets from (config.names if nil)
}

// config is one scenario.
type config struct {
	prim    string
	fault   string
	ttl     time.Duration
	window  time.Duration // hand-off window (mutex, rwmutex admissions)
	wlease  time.Duration // waiter lease (fair, semaphore)
	hold    time.Duration
	gap     time.Duration
	random  bool
	size    int64 // semaphore
	workers []workerRole
	bound   time.Duration // liveness bound
	slot    time.Duration // waitgroup: members start their rounds on multiples of it
	// resetEvery: once primitives that keep a success: how often the resetter resets
	resetEvery time.Duration
	burst      int // election burst: rounds (see TestElectionBurst)
	// all: the names sets are drawn from, and the sets' sizes (2..3 of a, b, c if unset: any
	// two sets then share a name, so the checks of one lock apply to the whole); one in
	// singleEvery acquisitions is a Mutex.Lock of one name
	names          []string
	setMin, setMax int
	singleEvery    int
	jitter         bool   // hold and gap uniform in [0, hold] and [0, gap]
	backend        string // "" (a redis-server of the scenario's own), redistest.Mini or redistest.ClusterB
	// rate: the limiter's settings, the goroutines per worker calling Wait, and how long a
	// worker runs by itself at most (workerMaxRun if zero)
	rateLimit  float64
	rateBurst  int
	goroutines int
	maxRun     time.Duration
}

func (c config) settings() string {
	if c.prim == pRate {
		return fmt.Sprintf("limit=%v/s burst=%d goroutines=%dx%d", c.rateLimit, c.rateBurst, len(c.workers), c.goroutines)
	}
	s := fmt.Sprintf("lease=%v window=%v waiter-lease=%v hold=%v", c.ttl, c.window, c.wlease, c.hold)
	if c.prim == pSemaphore {
		s += fmt.Sprintf(" size=%d", c.size)
	}
	return s
}

// proc is one worker process.
type proc struct {
	id      string
	sp      spec
	cmd     *exec.Cmd
	done    chan struct{} // closed when Wait returned
	waitErr error
	tail    *tailer
	killed  bool // by the test, on purpose
	stopped bool
	termed  bool
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// run is one scenario in progress.
type run struct {
	t       *testing.T
	cfg     config
	dir     string
	lock    *redistest.Proc
	store   string
	ns      string
	prefix  string
	name    string
	procs   []*proc
	drv     *recorder
	drvTail *tailer
	t0      int64
	checks  []func(h *history) []violation
	lapse   int64              // what the killed workers left in Redis has lapsed by then
	others  []*redistest.Proc  // quorum: the other primaries (lock is the first)
	trig    string             // the trigger file of the workers that wait for one
	backend *redistest.Backend // the lock's Redis when it is not lock (miniredis, the Cluster)
}

// start starts the lock's redis-server and the workers, and waits until every worker is ready.
func start(t *testing.T, cfg config) *run {
	t.Helper()
	long(t)
	if cfg.bound == 0 {
		cfg.bound = happyBound
	}
	store := sharedStore(t)
	var lock *redistest.Proc
	var backend *redistest.Backend
	var addrs []string
	switch cfg.backend {
	case "":
		lock = redistest.StartRedis(t)
	case redistest.ClusterB:
		backend = sharedCluster(t)
		addrs = backend.Addrs()
	default:
		backend = redistest.Open(t, cfg.backend)
		addrs = backend.Addrs()
	}
	if cfg.prim == pAll && cfg.names == nil {
		cfg.names, cfg.setMin, cfg.setMax = []string{"a", "b", "c"}, 2, 3
	}
	dir := t.TempDir()
	tag := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	r := &run{t: t, cfg: cfg, dir: dir, lock: lock, store: store, backend: backend,
		ns: fmt.Sprintf("fence:%s:%d", tag, time.Now().UnixNano()), prefix: "ft." + tag + ":", name: "res",
		trig: filepath.Join(dir, "trigger")}
	var quorum []string
	if cfg.prim == pQuorum {
		for range 2 {
			p := redistest.StartRedis(t)
			r.others = append(r.others, p)
			quorum = append(quorum, p.Addr())
		}
	}
	candidates := int64(0)
	for _, wr := range cfg.workers {
		if wr.role != "o" {
			candidates++
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, "test.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	r.drv = &recorder{f: f, w: driver}
	r.drvTail = &tailer{path: f.Name()}
	hstop := make(chan struct{})
	go watchHiccups(r.drv, hstop)
	t.Cleanup(func() {
		close(hstop)
		r.drv.mu.Lock()
		_ = f.Close()
		r.drv.f = nil
		r.drv.mu.Unlock()
	})
	t.Cleanup(r.reap)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	verbose := os.Getenv("FAULTTEST_VERBOSE") == "1"
	for i, wr := range cfg.workers {
		id := fmt.Sprintf("w%d", i+1)
		sp := spec{ID: id, Prim: cfg.prim, Role: wr.role, N: wr.n, Size: cfg.size,
			Addrs: addrs, Mini: cfg.backend == redistest.Mini, Quorum: quorum,
			Names: cfg.names, SetMin: cfg.setMin, SetMax: cfg.setMax, SingleEvery: cfg.singleEvery, Jitter: cfg.jitter, Prefix: r.prefix, Name: r.name, Slot: cfg.slot,
			LeaseTTL: cfg.ttl, Window: cfg.window, WaiterLease: cfg.wlease, FenceRetention: fenceRetain,
			Hold: cfg.hold, Gap: cfg.gap, Random: cfg.random, Seed: uint64(time.Now().UnixNano()) + uint64(i),
			MaxIter: 1_000_000, MaxRun: workerMaxRun, Out: filepath.Join(dir, id+".jsonl"),
			Stderr: filepath.Join(dir, id+".stderr"), Verbose: verbose}
		if lock != nil {
			sp.Addr = lock.Addr()
		}
		if wr.names != nil {
			sp.Names = wr.names
		}
		if cfg.maxRun > 0 {
			sp.MaxRun = cfg.maxRun
		}
		sp.RateLimit, sp.RateBurst, sp.Goroutines = cfg.rateLimit, cfg.rateBurst, cfg.goroutines
		if wr.trigger {
			sp.Trigger = r.trig
		}
		if wr.role == "reset" {
			sp.Hold = cfg.resetEvery
		}
		if cfg.prim == pElection && (cfg.burst == 0 || i%2 == 0) {
			sp.Observe = true // every candidate observes too (in the burst, every other one)
		}
		if cfg.burst > 0 {
			sp.Burst, sp.Rounds, sp.N = filepath.Join(dir, "burst"), cfg.burst, candidates
		}
		if exclusive(cfg.prim) || (cfg.prim == pRWMutex && wr.role == "w") {
			sp.Store, sp.StoreNS = store, r.ns
		}
		raw, err := json.Marshal(sp)
		if err != nil {
			t.Fatal(err)
		}
		errf, err := os.Create(sp.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorker+"="+string(raw))
		cmd.Stdout, cmd.Stderr = errf, errf
		// If the test binary dies, its workers die with it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			_ = errf.Close()
			t.Fatalf("start worker %s: %v", id, err)
		}
		p := &proc{id: id, sp: sp, cmd: cmd, done: make(chan struct{}), tail: &tailer{path: sp.Out}}
		go func() {
			p.waitErr = cmd.Wait()
			_ = errf.Close()
			close(p.done)
		}()
		r.procs = append(r.procs, p)
	}
	r.waitFor("every worker to start", startLimit, func(evs []Event) bool {
		ready := map[string]bool{}
		for _, e := range evs {
			if e.Ev == evFatal {
				t.Fatalf("worker %s could not start: %s", e.W, e.Err)
			}
			if e.Ev == evStart {
				ready[e.W] = true
			}
		}
		return len(ready) == len(r.procs)
	})
	r.mark(Event{Ev: drvBegin})
	r.t0 = mono()
	return r
}

// reap is the last cleanup: a worker still running then is killed by its PID, and that is a
// failure unless the test failed already (then it is expected).
func (r *run) reap() {
	for _, p := range r.procs {
		if !p.alive() {
			continue
		}
		_ = p.signal(syscall.SIGCONT)
		_ = p.signal(syscall.SIGKILL)
		<-p.done
		if !r.t.Failed() {
			r.t.Errorf("worker %s (PID %d) was still running at cleanup and had to be killed", p.id, p.cmd.Process.Pid)
		}
	}
}

// mark records one of the test's own events.
func (r *run) mark(e Event) int64 {
	e.T = mono()
	r.drv.rec(e)
	return e.T
}

// events returns the merged history so far.
func (r *run) events() []Event {
	hs := [][]Event{}
	for _, tl := range append([]*tailer{r.drvTail}, r.tails()...) {
		if err := tl.read(); err != nil {
			r.t.Fatalf("read history: %v", err)
		}
		hs = append(hs, tl.evs)
	}
	return merge(hs...)
}

func (r *run) tails() []*tailer {
	var ts []*tailer
	for _, p := range r.procs {
		ts = append(ts, p.tail)
	}
	return ts
}

// waitFor polls the history until cond holds, or fails the test after limit with the recent
// history.
func (r *run) waitFor(what string, limit time.Duration, cond func(evs []Event) bool) []Event {
	r.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		evs := r.events()
		if cond(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			now := mono()
			r.t.Fatalf("gave up after %v waiting for %s; %s; history of the last 3s:\n%s", limit, what, r.diagnose(),
				excerpt(evs, r.t0, now, now-int64(3*time.Second), now, nil, 80))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sleep waits d.
func (r *run) sleep(d time.Duration) { time.Sleep(d) }

// state is what each worker is doing, from the history so far.
type state struct {
	holding map[string]Event // worker -> its acquired (or fn-enter) event, while in the critical section
	waiting map[string]Event // worker -> its wait (or do-start) event, while waiting
}

func stateOf(evs []Event) state {
	s := state{holding: map[string]Event{}, waiting: map[string]Event{}}
	for _, e := range evs {
		if e.W == driver {
			continue
		}
		switch e.Ev {
		case evWait:
			s.waiting[e.W] = e
		case evDoStart:
			if _, ok := s.holding[e.W]; !ok {
				s.waiting[e.W] = e
			}
		case evAcquired, evFnEnter:
			delete(s.waiting, e.W)
			s.holding[e.W] = e
		case evWGWait:
			s.waiting[e.W] = e
		case evFailed, evDoReturn, evWGReturn:
			delete(s.waiting, e.W)
		case evExit, evFnExit:
			delete(s.holding, e.W)
		}
	}
	return s
}

// waitHolder waits until some worker for which ok holds has been in its critical section
// for at least into (and not much longer: a fault is aimed at a hold that has most of its
// time left), with at least waiters workers waiting, and returns it and its event.
func (r *run) waitHolder(limit, into time.Duration, waiters int, ok func(e Event) bool) (*proc, Event) {
	r.t.Helper()
	var got *proc
	var ev Event
	late := into + 250*time.Millisecond
	r.waitFor(fmt.Sprintf("a holder %v into its hold with %d waiting", into, waiters), limit, func(evs []Event) bool {
		s := stateOf(evs)
		if len(s.waiting) < waiters {
			return false
		}
		now := mono()
		for w, e := range s.holding {
			p := r.proc(w)
			if p == nil || !p.alive() || p.stopped || now-e.T < int64(into) || now-e.T > int64(late) || (ok != nil && !ok(e)) {
				continue
			}
			got, ev = p, e
			return true
		}
		return false
	})
	return got, ev
}

func (r *run) proc(id string) *proc {
	for _, p := range r.procs {
		if p.id == id {
			return p
		}
	}
	return nil
}

// kill SIGKILLs p and waits until it is gone. What p left in Redis lapses within lapse (its
// lease for a holder; a hand-off window or a waiter lease for a waiter): finish waits that
// long before it checks that the claim is free.
func (r *run) kill(p *proc, lapse time.Duration) int64 {
	r.t.Helper()
	t := r.mark(Event{Ev: drvKill, Target: p.id})
	p.killed = true
	if err := p.signal(syscall.SIGKILL); err != nil {
		r.t.Fatalf("SIGKILL %s: %v", p.id, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		r.t.Fatalf("worker %s did not die of SIGKILL", p.id)
	}
	r.lapse = max(r.lapse, t+int64(lapse))
	return t
}

func (r *run) stop(p *proc) int64 {
	r.t.Helper()
	t := r.mark(Event{Ev: drvStop, Target: p.id})
	if err := p.signal(syscall.SIGSTOP); err != nil {
		r.t.Fatalf("SIGSTOP %s: %v", p.id, err)
	}
	p.stopped = true
	return t
}

func (r *run) cont(p *proc) int64 {
	r.t.Helper()
	if err := p.signal(syscall.SIGCONT); err != nil {
		r.t.Fatalf("SIGCONT %s: %v", p.id, err)
	}
	p.stopped = false
	return r.mark(Event{Ev: drvCont, Target: p.id})
}

func (r *run) pauseRedis() int64 {
	r.t.Helper()
	t := r.mark(Event{Ev: drvRedisPause})
	if err := r.lock.Pause(); err != nil {
		r.t.Fatalf("SIGSTOP redis-server: %v", err)
	}
	return t
}

func (r *run) resumeRedis() int64 {
	r.t.Helper()
	if err := r.lock.Resume(); err != nil {
		r.t.Fatalf("SIGCONT redis-server: %v", err)
	}
	return r.mark(Event{Ev: drvRedisResume})
}

func (r *run) restartRedis() (int64, int64) {
	r.t.Helper()
	return r.restartRedisWith(nil)
}

// restartRedisWith kills the lock's redis-server, runs during (if not nil) while it is down,
// and starts it again, empty.
func (r *run) restartRedisWith(during func()) (int64, int64) {
	r.t.Helper()
	begin := r.mark(Event{Ev: drvRestartBegin})
	r.lock.Kill()
	if during != nil {
		during()
	}
	if err := r.lock.Start(20 * time.Second); err != nil {
		r.t.Fatalf("restart redis-server: %v", err)
	}
	return begin, r.mark(Event{Ev: drvRestartDone})
}

// primary returns primary i of a quorum (0 is the lock's, the one the Mutex is made on) and
// its name in the history (p1..p3).
func (r *run) primary(i int) (*redistest.Proc, string) {
	if i == 0 {
		return r.lock, "p1"
	}
	return r.others[i-1], fmt.Sprintf("p%d", i+1)
}

// primaryDown takes primary i of a quorum down: "kill" (SIGKILL; it stays down until
// primaryUp) or "stop" (SIGSTOP).
func (r *run) primaryDown(i int, how string) int64 {
	r.t.Helper()
	p, name := r.primary(i)
	t := r.mark(Event{Ev: drvPrimaryDown, Target: name, Err: how})
	switch how {
	case "kill":
		p.Kill()
	case "stop":
		if err := p.Pause(); err != nil {
			r.t.Fatalf("SIGSTOP %s: %v", name, err)
		}
	}
	return t
}

// primaryUp brings primary i back: "start" (empty) after a kill, "cont" after a stop.
func (r *run) primaryUp(i int, how string) int64 {
	r.t.Helper()
	p, name := r.primary(i)
	switch how {
	case "start":
		if err := p.Start(20 * time.Second); err != nil {
			r.t.Fatalf("start %s again: %v", name, err)
		}
	case "cont":
		if err := p.Resume(); err != nil {
			r.t.Fatalf("SIGCONT %s: %v", name, err)
		}
	}
	return r.mark(Event{Ev: drvPrimaryUp, Target: name, Err: how})
}

// trigger starts the workers that wait for the trigger: their first call begins now.
func (r *run) trigger() int64 {
	r.t.Helper()
	t := r.mark(Event{Ev: drvTrigger})
	if err := os.WriteFile(r.trig, nil, 0o644); err != nil {
		r.t.Fatalf("trigger: %v", err)
	}
	// Every triggered worker began its first call and was served by the end of the run.
	r.after(func(h *history) []violation {
		var vs []violation
		for _, p := range r.triggered() {
			if p.killed {
				continue
			}
			began, got := served(h.evs, p.id)
			switch {
			case began == 0:
				vs = append(vs, violation{at: t, from: t, to: t + int64(time.Second), workers: []string{p.id},
					msg: fmt.Sprintf("%s, triggered at %s, never began a call: the scenario did not happen", p.id, rel(h, t))})
			case got == 0:
				vs = append(vs, violation{at: began, from: began - int64(500*time.Millisecond), to: h.f.end, workers: []string{p.id},
					msg: fmt.Sprintf("%s began its first call at %s, during the fault, and was never served (acquired, returned, observed) by the end of the run at %s",
						p.id, rel(h, began), rel(h, h.f.term))})
			default:
				r.figure("waiter begun during the fault: trigger -> first call, -> served", fmt.Sprintf("%v, %v",
					dur(began-t).Round(time.Millisecond), dur(got-t).Round(time.Millisecond)))
			}
		}
		return vs
	})
	return t
}

// served returns, for a worker that waited for the trigger, when it began its first call
// after it and when it was first served (0 if not yet): acquired, its Do or Wait returned
// (other than by its context), or, an observer, it received an Info.
func served(evs []Event, w string) (began, got int64) {
	trig := int64(0)
	for _, e := range evs {
		if e.W != w {
			continue
		}
		switch {
		case e.Ev == evTriggered:
			trig = e.T
		case trig == 0:
		case began == 0 && (e.Ev == evWait || e.Ev == evDoStart || e.Ev == evWGWait || e.Ev == evObsStart):
			began = e.T
		case began != 0 && (e.Ev == evAcquired || e.Ev == evObserve ||
			(e.Ev == evDoReturn || e.Ev == evWGReturn) && !e.Ctx):
			return began, e.T
		}
	}
	return began, 0
}

// waitServed waits, up to limit, until every worker that waited for the trigger has been
// served (the check itself is the one trigger registered).
func (r *run) waitServed(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		evs := r.events()
		all := true
		for _, p := range r.triggered() {
			if _, got := served(evs, p.id); got == 0 && !p.killed {
				all = false
			}
		}
		if all {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// triggered returns the workers that wait for the trigger.
func (r *run) triggered() []*proc {
	var ps []*proc
	for _, p := range r.procs {
		if p.sp.Trigger != "" {
			ps = append(ps, p)
		}
	}
	return ps
}

// clientKill runs CLIENT KILL TYPE typ SKIPME yes and returns how many connections it killed.
func (r *run) clientKill(typ string) int64 {
	r.t.Helper()
	n, err := r.lock.ClientKill(typ)
	if err != nil {
		r.t.Fatalf("CLIENT KILL TYPE %s: %v", typ, err)
	}
	r.mark(Event{Ev: drvClientKill, Err: typ, N: n})
	return n
}

// after adds a scenario's own check of the final history.
func (r *run) after(f func(h *history) []violation) { r.checks = append(r.checks, f) }

// figure reports a measured figure: logged, and appended to $FAULTTEST_FIGURES if set.
func (r *run) figure(name string, v any) {
	r.t.Logf("FIGURE %s %s: %s = %v (%s)", r.cfg.fault, r.cfg.prim, name, v, r.cfg.settings())
	if path := os.Getenv("FAULTTEST_FIGURES"); path != "" {
		b, _ := json.Marshal(map[string]any{"fault": r.cfg.fault, "prim": r.cfg.prim, "figure": name,
			"value": fmt.Sprint(v), "settings": r.cfg.settings()})
		figMu.Lock()
		defer figMu.Unlock()
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err == nil {
			_, _ = f.Write(append(b, '\n'))
			_ = f.Close()
		}
	}
}

var figMu sync.Mutex

func (r *run) model() model {
	return model{prim: r.cfg.prim, size: r.cfg.size, ttl: r.cfg.ttl, grant: r.cfg.grant(), bound: r.cfg.bound}
}

// grant is how long a claim handed to a waiter lasts until that waiter confirms it: the
// hand-off window (mutex, reentrant; rwmutex reader admissions), the waiter lease (fair,
// semaphore).
func (c config) grant() time.Duration {
	switch c.prim {
	case pMutex, pReentrant, pRWMutex, pQuorum, pAll:
		return c.window
	case pFair, pSemaphore, pElection:
		return c.wlease
	}
	return 0
}

// finish stops every worker with SIGTERM, checks that they exit by themselves, checks what is
// left in Redis, and checks the history.
func (r *run) finish() *history {
	t := r.t
	t.Helper()
	for _, p := range r.procs {
		if p.stopped {
			r.cont(p)
		}
	}
	if r.cfg.prim == pElection && r.cfg.burst == 0 {
		r.settleElection()
	}
	evs := r.terminate()
	// What a killed worker left lapses within its lease, hand-off window or waiter lease.
	if d := time.Duration(r.lapse + int64(200*time.Millisecond) - mono()); r.lapse != 0 && d > 0 {
		time.Sleep(d)
	}
	r.checkKeys()
	r.checkFree()

	h := digest(r.model(), evs)
	vs := check(r.model(), h)
	for _, c := range r.checks {
		vs = append(vs, c(h)...)
	}
	if len(vs) > 0 {
		t.Errorf("%d violations (%s, %s):\n%s", len(vs), r.cfg.prim, r.cfg.settings(), report(h, vs, 6))
	}
	_, longest := liveness(r.model(), h)
	if r.cfg.prim == pWaitGroup {
		r.figure("longest Wait after nothing was pending (stranded waiter)", longest.Round(time.Millisecond))
	} else {
		r.figure("longest stall", longest.Round(time.Millisecond))
	}
	switch {
	case r.cfg.prim == pWaitGroup:
		_, cnt := judgeWaits(r.model(), h)
		r.figure("Waits judged", cnt)
	case r.cfg.prim == pElection:
		n := 0
		for _, evs := range h.obs {
			for _, e := range evs {
				if e.Ev == evObserve {
					n++
				}
			}
		}
		r.figure("Infos observed (every one matched with a term of the history)", n)
	case resettable(r.cfg.prim):
		ok, fails := 0, 0
		for _, e := range h.doRets {
			if e.OK {
				ok++
			} else {
				fails++
			}
		}
		r.figure("runs of fn / Resets / Do calls that returned nil / an error", fmt.Sprintf("%d / %d / %d / %d", len(h.holds), len(h.resets), ok, fails))
	}
	if lockLike(r.cfg.prim) {
		_, st := checkOrder(r.model(), h)
		r.figure("longest wait while others acquired", st.longest.Round(time.Millisecond))
		r.figure("most acquisitions by one other process during one wait", fmt.Sprintf("%d (%s)", st.most, st.mostWho))
		if r.cfg.prim == pRWMutex {
			r.figure("most writer acquisitions during one reader's wait", st.readersW)
		}
	}
	if frozen := h.f.hiccupTime(h.f.t0, h.f.end); frozen > 0 {
		r.figure("machine stalls (time some process was not scheduled, not counted above)", dur(frozen).Round(time.Millisecond))
	}
	r.figure("acquisitions", len(h.holds))
	if exclusive(r.cfg.prim) || r.cfg.prim == pRWMutex {
		r.checkStore(h)
	}
	r.keep()
	return h
}

// keep copies the scenario's histories to $FAULTTEST_KEEP if it failed (or always, with
// FAULTTEST_KEEP_ALL=1).
func (r *run) keep() {
	t := r.t
	if keep := os.Getenv("FAULTTEST_KEEP"); keep != "" && (t.Failed() || os.Getenv("FAULTTEST_KEEP_ALL") == "1") {
		dst := filepath.Join(keep, strings.NewReplacer("/", "_").Replace(t.Name()))
		if err := os.MkdirAll(dst, 0o755); err == nil {
			files, _ := filepath.Glob(filepath.Join(r.dir, "*"))
			for _, f := range files {
				if b, err := os.ReadFile(f); err == nil {
					_ = os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644)
				}
			}
			t.Logf("histories kept in %s", dst)
		}
	}
}

// terminate ends the run: SIGTERM to every worker still running, each must exit by itself
// within exitLimit with status 0; it returns the merged history, failing the test for every
// worker that reported a fatal error.
func (r *run) terminate() []Event {
	t := r.t
	t.Helper()
	r.mark(Event{Ev: drvTerm})
	for _, p := range r.procs {
		if p.alive() {
			p.termed = true
			_ = p.signal(syscall.SIGTERM)
		}
	}
	for _, p := range r.procs {
		if !p.termed {
			continue
		}
		select {
		case <-p.done:
			if p.waitErr != nil {
				t.Errorf("worker %s exited with %v after SIGTERM; its stderr:\n%s", p.id, p.waitErr, tailFile(p.sp.Stderr))
			}
		case <-time.After(exitLimit):
			_ = p.signal(syscall.SIGKILL)
			<-p.done
			t.Errorf("worker %s (PID %d) did not exit within %v of SIGTERM and had to be killed; its stderr:\n%s",
				p.id, p.cmd.Process.Pid, exitLimit, tailFile(p.sp.Stderr))
		}
	}
	evs := r.events()
	for _, e := range evs {
		if e.Ev == evFatal {
			t.Errorf("worker %s failed: %s", e.W, e.Err)
		}
	}
	return evs
}

// storeNSs returns the fenced store's namespaces of the scenario: one, or one per name (all).
func (r *run) storeNSs() []string {
	if r.cfg.prim != pAll {
		return []string{r.ns}
	}
	var out []string
	for _, n := range r.allNames() {
		out = append(out, storeNS(r.ns, n))
	}
	return out
}

// allNames returns every name the workers of an all scenario draw from.
func (r *run) allNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range r.procs {
		for _, n := range p.sp.Names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// readStores reads every namespace of the scenario's store.
func (r *run) readStores() (acc, rej []fencedWriteRec) {
	for _, ns := range r.storeNSs() {
		a, b := readStore(r.t, r.store, ns)
		for _, bad := range checkFencedLog(a) {
			r.t.Errorf("fenced store %s: %s", ns, bad)
		}
		acc, rej = append(acc, a...), append(rej, b...)
	}
	return acc, rej
}

// checkStore checks the fenced store's log and counts the rejected late writes.
func (r *run) checkStore(h *history) (rejectedLate int) {
	acc, rej := r.readStores()
	for _, w := range rej {
		if w.Phase == "late" {
			rejectedLate++
		}
	}
	r.figure("fenced writes accepted/rejected/rejected late", fmt.Sprintf("%d/%d/%d", len(acc), len(rej), rejectedLate))
	return rejectedLate
}

// rejectedLate returns the late writes of holds of worker w that the store rejected.
func (r *run) rejectedLate(w string) int {
	_, rej := r.readStores()
	n := 0
	for _, x := range rej {
		if x.Phase == "late" && strings.HasPrefix(x.Hold, w+"#") {
			n++
		}
	}
	return n
}

// tailFile returns the end of a worker's stderr, or, if the race detector reported there, its
// first report.
func tailFile(path string) string {
	b, _ := os.ReadFile(path)
	if i := strings.Index(string(b), "WARNING: DATA RACE"); i >= 0 {
		return string(b[i:min(len(b), i+8000)])
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// checkKeys: after every worker stopped and closed its Handle, every key under the prefix has
// a TTL no larger than the documented maximum for its kind (on every primary of a quorum).
// The done-marker of once.Once and the Once functions has none, on purpose.
func (r *run) checkKeys() {
	if r.backend != nil {
		r.checkKeysIn(r.backend)
		return
	}
	r.checkKeysOf(r.lock)
	for _, p := range r.others {
		r.checkKeysOf(p)
	}
}

// checkKeysIn is checkKeys on a backend of the harness (miniredis, the Cluster).
func (r *run) checkKeysIn(b *redistest.Backend) {
	keys := b.Keys(r.t, r.prefix)
	sort.Strings(keys)
	other := max(keyTTLLimit, 2*r.cfg.ttl+r.cfg.wlease+r.cfg.window) + time.Second
	for _, k := range keys {
		pttl, err := b.Do(r.t, func(c rueidis.Client) rueidis.Completed { return c.B().Pttl().Key(k).Build() }).AsInt64()
		if err != nil {
			r.t.Fatalf("PTTL %s: %v", k, err)
		}
		limit := other
		if strings.HasSuffix(k, ":fence") {
			limit = fenceRetain + time.Second
		}
		switch {
		case pttl == -1:
			r.t.Errorf("key %s has no TTL after every worker stopped", k)
		case pttl >= 0 && time.Duration(pttl)*time.Millisecond > limit:
			r.t.Errorf("key %s lives %v more, above its limit %v", k, time.Duration(pttl)*time.Millisecond, limit)
		}
	}
	r.figure("keys left (all with a TTL)", len(keys))
}

func (r *run) checkKeysOf(p *redistest.Proc) {
	t := r.t
	c := r.clientOf(p.Addr())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	cursor := uint64(0)
	for range 10000 {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(r.prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	sort.Strings(keys)
	other := max(keyTTLLimit, 2*r.cfg.ttl+r.cfg.wlease+r.cfg.window) + time.Second
	for _, k := range keys {
		pttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		limit := other
		if strings.HasSuffix(k, ":fence") {
			limit = fenceRetain + time.Second
		}
		switch {
		case pttl == -1 && resettable(r.cfg.prim) && strings.HasSuffix(k, ":kept"):
		case pttl == -1:
			t.Errorf("key %s has no TTL after every worker stopped", k)
		case pttl >= 0 && time.Duration(pttl)*time.Millisecond > limit:
			t.Errorf("key %s lives %v more, above its limit %v", k, time.Duration(pttl)*time.Millisecond, limit)
		}
	}
	r.figure("keys left (all with a TTL)", len(keys))
}

func (r *run) client() rueidis.Client {
	if r.backend != nil {
		c, err := rueidis.NewClient(r.backend.ClientOption())
		if err != nil {
			r.t.Fatalf("rueidis.NewClient: %v", err)
		}
		return c
	}
	return r.clientOf(r.lock.Addr())
}

// handle returns a Handle of the driver's own on the lock's Redis, under the run's prefix
// with opts, its client, and a func that closes both (waiting at most 5 s).
func (r *run) handle(opts ...distsync.Option) (*distsync.Handle, rueidis.Client, func()) {
	r.t.Helper()
	c := r.client()
	h, err := distsync.New(c, append([]distsync.Option{distsync.WithKeyPrefix(r.prefix)}, opts...)...)
	if err != nil {
		c.Close()
		r.t.Fatal(err)
	}
	return h, c, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Close(ctx)
		c.Close()
	}
}

// diagnose describes the lock's redis-server, if the scenario has its own.
func (r *run) diagnose() string {
	if r.lock == nil {
		return r.backend.Name
	}
	return r.lock.Diagnose()
}

func (r *run) clientOf(addr string) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		why := ""
		if addr == r.lock.Addr() {
			why = "; " + r.lock.Diagnose()
		}
		r.t.Fatalf("rueidis.NewClient: %v%s", err, why)
	}
	return c
}

// dumpKeys describes every key under the prefix: type, PTTL and contents.
func (r *run) dumpKeys() string {
	c := r.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := c.Do(ctx, c.B().Keys().Pattern(r.prefix+"*").Build()).AsStrSlice()
	if err != nil {
		return err.Error()
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		typ, err := c.Do(ctx, c.B().Type().Key(k).Build()).ToString()
		pttl, err2 := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
		var v any
		var err3 error
		switch typ {
		case "string":
			v, err3 = c.Do(ctx, c.B().Get().Key(k).Build()).ToString()
		case "hash":
			v, err3 = c.Do(ctx, c.B().Hgetall().Key(k).Build()).AsStrMap()
		case "zset":
			v, err3 = c.Do(ctx, c.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()).AsZScores()
		case "list":
			v, err3 = c.Do(ctx, c.B().Lrange().Key(k).Start(0).Stop(-1).Build()).AsStrSlice()
		}
		fmt.Fprintf(&b, "  %s %s pttl=%dms %q", k, typ, pttl, fmt.Sprint(v))
		if e := errors.Join(err, err2, err3); e != nil {
			fmt.Fprintf(&b, " (%v)", e)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// checkFree: once every worker is gone, a new client takes the claim at once ("a call that
// returns has finished its Redis side").
func (r *run) checkFree() {
	t := r.t
	// A long lease: the check's own hold must not lapse if the machine stalls between its
	// acquire and its release.
	h, c, closeH := r.handle(distsync.WithLeaseTTL(30 * time.Second))
	defer closeH()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var took bool
	var err error
	var release func() error
	switch r.cfg.prim {
	case pMutex:
		m, _ := mutex.New(h, r.name)
		took, err = m.TryLock(ctx)
		release = func() error { return m.Unlock(ctx) }
	case pAll:
		var ms []*mutex.Mutex
		for _, n := range r.allNames() {
			m, _ := mutex.New(h, n)
			ms = append(ms, m)
		}
		a, aerr := mutex.NewAll(ms...)
		if aerr != nil {
			t.Fatal(aerr)
		}
		took, err = a.TryLock(ctx)
		release = func() error { return a.Unlock(ctx) }
	case pQuorum:
		var hs []*distsync.Handle
		for _, p := range r.others {
			oc := r.clientOf(p.Addr())
			defer oc.Close()
			oh, err := distsync.New(oc, distsync.WithKeyPrefix(r.prefix), distsync.WithLeaseTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = oh.Close(ctx)
			}()
			hs = append(hs, oh)
		}
		m, merr := mutex.New(h, r.name, mutex.WithQuorum(hs...))
		if merr != nil {
			t.Fatal(merr)
		}
		// A quorum TryLock gives up on a primary that has not answered within QuorumWait
		// (50 ms): on a loaded machine that is not a claim left behind, so it tries a few times
		// (a claim left behind would still be there).
		for i := 0; i < 5 && err == nil && !took; i++ {
			if i > 0 {
				time.Sleep(100 * time.Millisecond)
			}
			took, err = m.TryLock(ctx)
		}
		release = func() error { return m.Unlock(ctx) }
	case pElection:
		e, _ := election.New(h, r.name)
		var term *election.Term
		term, took, err = e.TryCampaign(ctx, "free")
		release = func() error { return term.Resign(ctx) }
	case pWaitGroup:
		// Free means that a Wait returns at once: nothing is pending, whatever the last round's
		// outcome.
		wg, _ := waitgroup.New(h, r.name)
		if werr := wg.Wait(ctx); isCtxErr(werr) || errors.Is(werr, distsync.ErrNotAcquired) {
			t.Errorf("waitgroup: a Wait after every worker stopped did not return: %v; keys left:\n%s", werr, r.dumpKeys())
		}
		return
	case pOnceOnce, pOnceValue, pOnceValues:
		r.checkOnceFree(ctx, c, h)
		return
	case pFair:
		m, _ := fair.New(h, r.name)
		took, err = m.TryLock(ctx)
		release = func() error { return m.Unlock(ctx) }
	case pRWMutex:
		m, _ := rwmutex.New(h, r.name)
		took, err = m.TryLock(ctx)
		release = func() error { return m.Unlock(ctx) }
	case pReentrant:
		m, _ := reentrant.New(h, r.name)
		octx := reentrant.WithOwner(ctx, reentrant.NewOwner())
		took, err = m.TryLock(octx)
		release = func() error { return m.Unlock(octx) }
	case pSemaphore:
		s, _ := semaphore.New(h, r.name, r.cfg.size)
		took, err = s.TryAcquire(ctx, r.cfg.size)
		release = func() error { return s.Release(ctx, r.cfg.size) }
	case pOnce:
		// Free means no lead is left in Redis (a Do would wait for it); then a Do leads. Its
		// time is not asserted: on a loaded machine a round trip can take long.
		if !r.noLeadLeft(ctx, c) {
			return
		}
		g, _ := once.NewGroup[string](h, r.name)
		var ran atomic.Bool // fn runs on the Group's goroutine
		start := time.Now()
		_, err, _ = g.Do(ctx, "k", func(context.Context) (string, error) { ran.Store(true); return "end", nil })
		took = ran.Load() && err == nil
		if !took {
			t.Errorf("once: a Do after every worker stopped did not lead (ran fn: %v, err: %v, after %v); keys left:\n%s",
				ran.Load(), err, time.Since(start), r.dumpKeys())
		}
		return
	default:
		t.Fatalf("no free check for %q", r.cfg.prim)
	}
	if err != nil || !took {
		t.Errorf("%s not free at once after every worker stopped: took=%v err=%v; keys left:\n%s", r.cfg.prim, took, err, r.dumpKeys())
		return
	}
	if err := release(); err != nil {
		t.Errorf("release after the free check: %v", err)
	}
}

// firstAfter returns the first event after t (strictly) for which ok holds.
func firstAfter(evs []Event, t int64, ok func(Event) bool) (Event, bool) {
	for _, e := range evs {
		if e.T > t && ok(e) {
			return e, true
		}
	}
	return Event{}, false
}

func isAcquire(e Event) bool { return e.Ev == evAcquired || e.Ev == evFnEnter }

// noLeadLeft reports whether no once lead is left in Redis (a Do would wait for it), failing
// the test if one is.
func (r *run) noLeadLeft(ctx context.Context, c rueidis.Client) bool {
	keys, err := c.Do(ctx, c.B().Keys().Pattern(r.prefix+"*").Build()).AsStrSlice()
	if err != nil {
		r.t.Errorf("once: listing keys: %v", err)
		return false
	}
	for _, k := range keys {
		if strings.HasSuffix(k, ":once") {
			r.t.Errorf("once: a lead was left after every worker stopped: %s; keys left:\n%s", k, r.dumpKeys())
			return false
		}
	}
	return true
}

// checkOnceFree: no lead is left, and after a Reset a Do runs fn.
func (r *run) checkOnceFree(ctx context.Context, c rueidis.Client, h *distsync.Handle) {
	if !r.noLeadLeft(ctx, c) {
		return
	}
	o, _ := once.NewOnce(h, r.name)
	if err := o.Reset(ctx); err != nil {
		r.t.Errorf("%s: Reset after every worker stopped: %v", r.cfg.prim, err)
		return
	}
	var ran atomic.Bool
	start := time.Now()
	var err error
	switch r.cfg.prim {
	case pOnceOnce:
		err = o.Do(ctx, func(context.Context) error { ran.Store(true); return nil })
	case pOnceValue:
		f, _ := once.OnceValue(h, r.name, func(context.Context) (string, error) { ran.Store(true); return "end", nil })
		_, err = f(ctx)
	case pOnceValues:
		f, _ := once.OnceValues(h, r.name, func(context.Context) (string, string, error) { ran.Store(true); return "end", "end'", nil })
		_, _, err = f(ctx)
	}
	if !ran.Load() || err != nil {
		r.t.Errorf("%s: a Do after every worker stopped and a Reset did not run fn (ran fn: %v, err: %v, after %v); keys left:\n%s",
			r.cfg.prim, ran.Load(), err, time.Since(start), r.dumpKeys())
	}
}

// settleElection ends an election scenario with a leader that stays: the test campaigns
// itself (its Campaign queues behind the workers' and leads in its turn), gives every observer
// still running a while to see its term (the checker asserts that they did: Observe
// converges), and resigns.
func (r *run) settleElection() {
	t := r.t
	h, _, closeH := r.handle(distsync.WithLeaseTTL(30*time.Second),
		distsync.WithFenceRetention(fenceRetain))
	defer closeH()
	e, err := election.New(h, r.name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	term, err := e.Campaign(ctx, finalHold)
	if err != nil {
		t.Errorf("the test's own Campaign at the end did not lead: %v; keys:\n%s", err, r.dumpKeys())
		return
	}
	at := r.mark(Event{Ev: drvLead, Hold: finalHold, Tok: term.Token()})
	if info, err := e.Leader(ctx); err != nil || info.Term != term.Token() || info.Value != finalHold {
		t.Errorf("the test leads with term %d, and Leader returned %+v, %v", term.Token(), info, err)
	}
	// Observe converges: every observer still running sees the leader that Leader names.
	deadline := time.Now().Add(settleLimit)
	var behind []string
	for {
		last := map[string]Event{}
		for _, ev := range r.events() {
			if ev.Ev == evObserve {
				last[ev.W] = ev
			}
		}
		behind = nil
		for _, p := range r.procs {
			if e := last[p.id]; p.alive() && !p.stopped && e.Tok != term.Token() {
				behind = append(behind, fmt.Sprintf("%s last saw term %d (%q)", p.id, e.Tok, e.Val))
			}
		}
		if len(behind) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(behind) > 0 {
		t.Errorf("observers did not converge on the leader (the test, term %d) within %v: %s", term.Token(), settleLimit,
			strings.Join(behind, "; "))
	} else {
		r.figure("every live observer saw the test's final term (lead -> last observer)", dur(mono()-at).Round(time.Millisecond))
	}
	// The test's term ends when it calls Resign (as a worker's hold ends at its exit): the next
	// leader may be told before Resign returns.
	r.mark(Event{Ev: drvResign, Hold: finalHold})
	if err := term.Resign(ctx); err != nil {
		t.Errorf("the test's own Resign at the end: %v", err)
	}
}

// finalHold is the value (and hold id) of the test's own term at the end of an election
// scenario; settleLimit is how long observers are given to see it.
const (
	finalHold   = "final"
	settleLimit = 5 * time.Second
)

package faulttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/internal/rediserr"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/once"
	"github.com/distsync/distsync/rate"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
	"github.com/distsync/distsync/waitgroup"
)

// envWorker holds a worker's spec: TestMain runs the worker instead of the tests when it is set.
const envWorker = "DISTSYNC_FAULT_WORKER"

// Primitive names.
const (
	pMutex     = "mutex"
	pReentrant = "reentrant"
	pRWMutex   = "rwmutex"
	pFair      = "fair"
	pSemaphore = "semaphore"
	pOnce      = "once" // once.Group
	// pOnceOnce is once.Once: odd workers call Once.Do, even ones a function of OnceFunc of
	// the same name (the same kind and record); a resetter worker calls Once.Reset.
	pOnceOnce   = "Once"
	pOnceValue  = "OnceValue"  // once.OnceValue[string], with a resetter
	pOnceValues = "OnceValues" // once.OnceValues[string, string], with a resetter
	// pElection: Campaign is the acquire (its value the hold's id), Resign the release, the
	// term's lease and token the hold's; workers may also observe (Role "o": only observe).
	pElection  = "election"
	pWaitGroup = "waitgroup" // Role "m": a member (Join, or Add(1)+Claim), Done; Role "w": Wait
	pQuorum    = "quorum"    // a mutex WithQuorum over three independent redis-servers
	// pAll: mutex.NewAll over a set of the worker's Names, chosen per acquisition (see
	// allClaim); one in SingleEvery acquisitions is a plain Mutex.Lock of one name.
	pAll = "all"
	// pRate: rate.Limiter; each worker runs Goroutines goroutines calling Wait in a loop and
	// records every admission (see rateLoop).
	pRate = "rate"
)

// exclusive reports whether a primitive has one holder at a time and fencing tokens.
func exclusive(prim string) bool {
	switch prim {
	case pMutex, pReentrant, pFair, pElection, pQuorum, pAll:
		return true
	}
	return false
}

// onceKind reports whether a primitive is of package once (its holds are runs of fn).
func onceKind(prim string) bool {
	switch prim {
	case pOnce, pOnceOnce, pOnceValue, pOnceValues:
		return true
	}
	return false
}

// resettable reports whether a once primitive keeps its success until Reset.
func resettable(prim string) bool { return onceKind(prim) && prim != pOnce }

// spec is what one worker process does.
type spec struct {
	ID   string `json:"id"`
	Prim string `json:"prim"`
	Role string `json:"role,omitempty"` // rwmutex: "r" reader, "w" writer; see the primitives
	N    int64  `json:"n,omitempty"`    // semaphore: the weight of each acquisition
	Size int64  `json:"size,omitempty"` // semaphore: its size

	Addr    string   `json:"addr"`               // the lock's Redis
	Addrs   []string `json:"addrs,omitempty"`    // ...or these (a Cluster's nodes)
	Mini    bool     `json:"mini,omitempty"`     // the lock's Redis is miniredis (RESP2, no cache)
	Quorum  []string `json:"quorum,omitempty"`   // quorum: the other primaries
	Store   string   `json:"store,omitempty"`    // the fenced store ("" for no fenced writes)
	StoreNS string   `json:"store_ns,omitempty"` // its key namespace
	Prefix  string   `json:"prefix"`
	Name    string   `json:"name"`
	// all: the names sets are drawn from, SetMin..SetMax of them per acquisition, in a random
	// order; one acquisition in SingleEvery (0: none) is a Mutex.Lock of one of them.
	Names       []string `json:"names,omitempty"`
	SetMin      int      `json:"set_min,omitempty"`
	SetMax      int      `json:"set_max,omitempty"`
	SingleEvery int      `json:"single_every,omitempty"`
	Jitter      bool     `json:"jitter,omitempty"` // hold and gap uniform in [0, Hold] and [0, Gap]

	LeaseTTL       time.Duration `json:"lease_ttl"`
	Window         time.Duration `json:"window,omitempty"`
	WaiterLease    time.Duration `json:"waiter_lease,omitempty"`
	FenceRetention time.Duration `json:"fence_retention,omitempty"`

	Hold    time.Duration `json:"hold"`              // time in the critical section
	Gap     time.Duration `json:"gap"`               // time between a release and the next acquire
	Random  bool          `json:"random,omitempty"`  // random short deadlines on every call
	Seed    uint64        `json:"seed,omitempty"`    // for Random
	MaxIter int           `json:"max_iter"`          // acquisitions at most
	MaxRun  time.Duration `json:"max_run"`           // the worker stops by itself after this
	Out     string        `json:"out"`               // the history file
	Stderr  string        `json:"stderr,omitempty"`  // informational
	Verbose bool          `json:"verbose,omitempty"` // log the Handle's warnings to stderr

	// Trigger: a file whose appearance the worker waits for before its first call (a waiter
	// that starts during a fault). If it holds a CLOCK_MONOTONIC time (ns), the worker starts
	// at that time.
	Trigger string        `json:"trigger,omitempty"`
	Slot    time.Duration `json:"slot,omitempty"`    // waitgroup: members start on multiples of it; waiters wait up to it between Waits
	Observe bool          `json:"observe,omitempty"` // election: a candidate also observes
	Burst   string        `json:"burst,omitempty"`   // election burst: round k starts at trigger Burst.k (see burstLoop)
	Rounds  int           `json:"rounds,omitempty"`  // election burst: how many rounds

	// rate: the limiter's limit and burst (NewLimiter's), and how many goroutines call Wait
	RateLimit  float64 `json:"rate_limit,omitempty"`
	RateBurst  int     `json:"rate_burst,omitempty"`
	Goroutines int     `json:"goroutines,omitempty"`
}

// claim is one exclusive-or-shared primitive, seen the same way by the worker loop. hold is
// the id of the hold the acquire is for.
type claim interface {
	acquire(ctx context.Context, hold string) (*distsync.Lease, error)
	release(ctx context.Context) error
}

type mutexClaim struct{ m *mutex.Mutex }

func (c mutexClaim) acquire(ctx context.Context, _ string) (*distsync.Lease, error) {
	return c.m.LockLease(ctx)
}
func (c mutexClaim) release(ctx context.Context) error { return c.m.Unlock(ctx) }

type fairClaim struct{ m *fair.Mutex }

func (c fairClaim) acquire(ctx context.Context, _ string) (*distsync.Lease, error) {
	return c.m.LockLease(ctx)
}
func (c fairClaim) release(ctx context.Context) error { return c.m.Unlock(ctx) }

type rwClaim struct {
	m      *rwmutex.RWMutex
	reader bool
}

func (c rwClaim) acquire(ctx context.Context, _ string) (*distsync.Lease, error) {
	if c.reader {
		return c.m.RLockLease(ctx)
	}
	return c.m.LockLease(ctx)
}

func (c rwClaim) release(ctx context.Context) error {
	if c.reader {
		return c.m.RUnlock(ctx)
	}
	return c.m.Unlock(ctx)
}

type semClaim struct {
	s *semaphore.Semaphore
	n int64
}

func (c semClaim) acquire(ctx context.Context, _ string) (*distsync.Lease, error) {
	return c.s.AcquireLease(ctx, c.n)
}
func (c semClaim) release(ctx context.Context) error { return c.s.Release(ctx, c.n) }

// reentrantClaim locks twice (nested) and unlocks as often as it holds.
type reentrantClaim struct {
	m     *reentrant.Mutex
	owner reentrant.Owner
}

func (c reentrantClaim) acquire(ctx context.Context, _ string) (*distsync.Lease, error) {
	return c.m.LockLease(reentrant.WithOwner(ctx, c.owner))
}

// reenter takes the nested hold.
func (c reentrantClaim) reenter(ctx context.Context) error {
	return c.m.Lock(reentrant.WithOwner(ctx, c.owner))
}

func (c reentrantClaim) release(ctx context.Context) error {
	ctx = reentrant.WithOwner(ctx, c.owner)
	var errs []error
	for i := c.m.HoldCount(ctx); i > 0; i-- { // bounded: the count drops by one per Unlock
		errs = append(errs, c.m.Unlock(ctx))
	}
	return errors.Join(errs...)
}

// newClaim makes the primitive of sp on h (and, for a quorum, the other primaries' Handles).
func newClaim(h *distsync.Handle, others []*distsync.Handle, sp spec) (claim, error) {
	switch sp.Prim {
	case pMutex:
		m, err := mutex.New(h, sp.Name)
		return mutexClaim{m}, err
	case pQuorum:
		m, err := mutex.New(h, sp.Name, mutex.WithQuorum(others...))
		return mutexClaim{m}, err
	case pElection:
		// Its own Election value: the observer has another.
		e, err := election.New(h, sp.Name)
		return &electionClaim{e: e}, err
	case pWaitGroup:
		wg, err := waitgroup.New(h, sp.Name, waitgroup.WithExpiry(wgExpiry))
		return &wgClaim{wg: wg, claims: !sp.Random}, err
	case pFair:
		m, err := fair.New(h, sp.Name)
		return fairClaim{m}, err
	case pRWMutex:
		m, err := rwmutex.New(h, sp.Name)
		return rwClaim{m, sp.Role == "r"}, err
	case pSemaphore:
		s, err := semaphore.New(h, sp.Name, sp.Size)
		return semClaim{s, sp.N}, err
	case pReentrant:
		m, err := reentrant.New(h, sp.Name)
		return reentrantClaim{m, reentrant.NewOwner()}, err
	case pAll:
		return newAllClaim(h, sp)
	}
	return nil, fmt.Errorf("no claim for primitive %q", sp.Prim)
}

// workerMain runs the worker described by raw (JSON) and returns the exit code.
func workerMain(raw string) int {
	var sp spec
	if err := json.Unmarshal([]byte(raw), &sp); err != nil {
		fmt.Fprintln(os.Stderr, "worker spec:", err)
		return 2
	}
	f, err := os.OpenFile(sp.Out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker history:", err)
		return 2
	}
	r := &recorder{f: f, w: sp.ID}
	w := &worker{sp: sp, r: r, rnd: rand.New(rand.NewPCG(sp.Seed, uint64(os.Getpid())))}
	code := w.run()
	r.mu.Lock()
	_ = f.Close()
	r.f = nil
	r.mu.Unlock()
	return code
}

type worker struct {
	sp    spec
	r     *recorder
	rnd   *rand.Rand
	store *fencedStore
	stop  context.Context // ends at SIGTERM or MaxRun
	bg    sync.WaitGroup  // goroutines besides the loop: an observer, tied waits
}

func (w *worker) fatal(format string, a ...any) int {
	msg := fmt.Sprintf(format, a...)
	w.r.rec(Event{Ev: evFatal, Err: msg})
	fmt.Fprintln(os.Stderr, "worker", w.sp.ID+":", msg)
	return 2
}

func (w *worker) run() int {
	sp := w.sp
	stop, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	stop, cancelRun := context.WithTimeout(stop, sp.MaxRun)
	defer cancelRun()
	w.stop = stop

	hstop := make(chan struct{})
	defer close(hstop)
	go watchHiccups(w.r, hstop)
	// On a machine loaded by other work the first dial can time out: try for a while.
	var client rueidis.Client
	var err error
	copt := rueidis.ClientOption{InitAddress: []string{sp.Addr}}
	if len(sp.Addrs) > 0 {
		copt.InitAddress = sp.Addrs
	}
	if sp.Mini {
		copt.DisableCache, copt.AlwaysRESP2, copt.ForceSingleClient = true, true, true
	}
	for i := 0; i < 4; i++ {
		if client, err = rueidis.NewClient(copt); err == nil {
			break
		}
	}
	if err != nil {
		return w.fatal("rueidis.NewClient(%s): %v", sp.Addr, err)
	}
	defer client.Close()
	if sp.Store != "" {
		sc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{sp.Store}, DisableCache: true})
		if err != nil {
			return w.fatal("fenced store client: %v", err)
		}
		defer sc.Close()
		w.store = &fencedStore{c: sc, ns: sp.StoreNS}
	}
	opts := []distsync.Option{distsync.WithKeyPrefix(sp.Prefix), distsync.WithLeaseTTL(sp.LeaseTTL)}
	if sp.Window > 0 {
		opts = append(opts, distsync.WithHandoffWindow(sp.Window))
	}
	if sp.WaiterLease > 0 {
		opts = append(opts, distsync.WithWaiterLease(sp.WaiterLease))
	}
	if sp.FenceRetention > 0 {
		opts = append(opts, distsync.WithFenceRetention(sp.FenceRetention))
	}
	// The observer tells when an acquire call is queued in Redis (the order check counts the
	// others' acquisitions from then at the latest); with Verbose, for diagnosis, the Handle's
	// log and every event go to the worker's stderr, with CLOCK_MONOTONIC times that match the
	// history's.
	var mu sync.Mutex
	opts = append(opts, distsync.WithObserver(func(e distsync.Event) {
		if e.Kind == distsync.EventQueued {
			w.r.queued(e.Name)
		}
		if sp.Verbose {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(os.Stderr, "%d observer %s %s call=%d tok=%d wait=%v err=%v\n", mono(), e.Kind, e.Primitive, e.Call, e.Token, e.Wait, e.Err)
		}
	}))
	if sp.Verbose {
		opts = append(opts, distsync.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	hc := client
	if sp.Prim == pRate {
		hc = &tapClient{Client: client} // the workers record Redis's decisions
	}
	h, err := distsync.New(hc, opts...)
	if err != nil {
		return w.fatal("distsync.New: %v", err)
	}
	var others []*distsync.Handle // quorum: the other primaries
	for _, addr := range sp.Quorum {
		var oc rueidis.Client
		for i := 0; i < 4; i++ {
			if oc, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}}); err == nil {
				break
			}
		}
		if err != nil {
			return w.fatal("rueidis.NewClient(%s): %v", addr, err)
		}
		defer oc.Close()
		oh, err := distsync.New(oc, opts...)
		if err != nil {
			return w.fatal("distsync.New: %v", err)
		}
		others = append(others, oh)
	}
	var loop func()
	switch {
	case sp.Prim == pOnce:
		g, err := once.NewGroup[string](h, sp.Name, distsync.WithLeaseTTL(sp.LeaseTTL))
		if err != nil {
			return w.fatal("once.NewGroup: %v", err)
		}
		loop = func() {
			w.onceLoop(func(ctx context.Context, fn func(context.Context) (string, error)) (string, error, bool) {
				return g.Do(ctx, "k", fn)
			})
		}
	case onceKind(sp.Prim) && sp.Role == "reset":
		o, err := once.NewOnce(h, sp.Name)
		if err != nil {
			return w.fatal("once.NewOnce: %v", err)
		}
		loop = func() { w.resetLoop(o) }
	case onceKind(sp.Prim):
		do, err := w.onceDoer(h)
		if err != nil {
			return w.fatal("%s: %v", sp.Prim, err)
		}
		loop = func() { w.onceLoop(do) }
	case sp.Prim == pWaitGroup && sp.Role == "w":
		wg, err := waitgroup.New(h, sp.Name, waitgroup.WithExpiry(wgExpiry))
		if err != nil {
			return w.fatal("waitgroup.New: %v", err)
		}
		loop = func() { w.waitLoop(wg) }
	case sp.Prim == pRate:
		lim, err := rate.NewLimiter(h, sp.Name, rate.Limit(sp.RateLimit), sp.RateBurst)
		if err != nil {
			return w.fatal("rate.NewLimiter: %v", err)
		}
		loop = func() { w.rateLoop(lim) }
	case sp.Prim == pElection && sp.Role == "o":
		loop = func() { <-w.stop.Done() } // the observer alone
	case sp.Prim == pElection && sp.Burst != "":
		e, err := election.New(h, sp.Name)
		if err != nil {
			return w.fatal("election.New: %v", err)
		}
		loop = func() { w.burstLoop(e) }
	default:
		c, err := newClaim(h, others, sp)
		if err != nil {
			return w.fatal("%v", err)
		}
		if wc, ok := c.(*wgClaim); ok {
			wc.w = w
			if wc.tied, err = waitgroup.New(h, sp.Name, waitgroup.WithExpiry(wgExpiry)); err != nil {
				return w.fatal("waitgroup.New: %v", err)
			}
		}
		loop = func() { w.lockLoop(c) }
	}
	w.r.rec(Event{Ev: evStart, PID: os.Getpid()})
	if w.waitTrigger(sp.Trigger) {
		if sp.Prim == pElection && (sp.Observe || sp.Role == "o") {
			e, err := election.New(h, sp.Name)
			if err != nil {
				return w.fatal("election.New: %v", err)
			}
			w.bg.Add(1)
			go func() {
				defer w.bg.Done()
				w.observe(e)
			}()
		}
		loop()
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = h.Close(cctx)
	for _, oh := range others {
		err = errors.Join(err, oh.Close(cctx))
	}
	ccancel()
	w.r.rec(Event{Ev: evClosed, Err: errText(err)})
	w.bg.Wait() // observers and tied waits end with the worker's stop and the Handle's Close
	return 0
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// refused reports whether err carries an error reply of Redis that does not go away by itself
// (not a restart's LOADING or a failover's READONLY): a Lock may end with it before its ctx.
func refused(err error) bool {
	re, ok := rediserr.As(err)
	return ok && !rediserr.Transient(re)
}

// callCtx returns the context of one call: in random mode a deadline of 0-20ms, one time in
// ten already cancelled; otherwise the worker's own (which ends at SIGTERM) or, for a
// release, a fresh one that SIGTERM does not cut short.
func (w *worker) callCtx(release bool) (context.Context, context.CancelFunc) {
	base := w.stop
	if release {
		base = context.Background()
	}
	if !w.sp.Random {
		if release {
			return context.WithTimeout(base, 10*time.Second)
		}
		return context.WithCancel(base)
	}
	if w.rnd.IntN(10) == 0 {
		ctx, cancel := context.WithCancel(base)
		cancel()
		return ctx, cancel
	}
	return context.WithTimeout(base, time.Duration(w.rnd.Int64N(int64(20*time.Millisecond))))
}

// sleep waits d or until the worker stops; it reports whether the worker goes on.
func (w *worker) sleep(d time.Duration) bool {
	if d <= 0 {
		return w.stop.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.stop.Done():
		return false
	}
}

func (w *worker) holdTime() time.Duration {
	if w.sp.Random {
		return time.Duration(w.rnd.Int64N(int64(3 * time.Millisecond)))
	}
	if w.sp.Jitter && w.sp.Hold > 0 {
		return time.Duration(w.rnd.Int64N(int64(w.sp.Hold) + 1))
	}
	return w.sp.Hold
}

func (w *worker) gapTime() time.Duration {
	if w.sp.Random {
		return time.Duration(w.rnd.Int64N(int64(3 * time.Millisecond)))
	}
	if w.sp.Jitter && w.sp.Gap > 0 {
		return time.Duration(w.rnd.Int64N(int64(w.sp.Gap) + 1))
	}
	return w.sp.Gap
}

// fenced writes to the store with the hold's token, and records the result.
func (w *worker) fenced(hold string, tok int64, phase string) {
	if w.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	ok, err := w.store.write(ctx, tok, hold, phase)
	cancel()
	w.r.rec(Event{Ev: evWrite, Hold: hold, Tok: tok, Phase: phase, OK: ok, Err: errText(err)})
}

// fencedSet writes to the store of each name of a set (its own namespace, storeNS) with that
// name's token, and records each result (Val: the name).
func (w *worker) fencedSet(hold string, names []string, toks []int64, phase string) {
	if w.store == nil {
		return
	}
	for i, name := range names {
		s := fencedStore{c: w.store.c, ns: storeNS(w.store.ns, name)}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := s.write(ctx, toks[i], hold, phase)
		cancel()
		w.r.rec(Event{Ev: evWrite, Hold: hold, Tok: toks[i], Val: name, Phase: phase, OK: ok, Err: errText(err)})
	}
}

// lockLoop is the life of a lock worker: acquire, critical section, release, over and over.
func (w *worker) lockLoop(c claim) {
	sp := w.sp
	role := sp.Role
	for i := 0; i < sp.MaxIter && w.stop.Err() == nil; i++ {
		if sp.Slot > 0 && !sp.Random && !w.sleep(untilSlot(sp.Slot)) {
			break
		}
		hold := fmt.Sprintf("%s#%d", sp.ID, i)
		w.r.rec(Event{Ev: evWait, Hold: hold, Role: role, N: sp.N})
		ctx, cancel := w.callCtx(false)
		lease, err := c.acquire(ctx, hold)
		alive := ctx.Err() == nil
		cancel()
		if err == nil && lease == nil {
			err = errors.New("acquired, but the primitive has no lease")
		}
		if err != nil {
			w.r.rec(Event{Ev: evFailed, Hold: hold, Err: err.Error(), Ctx: isCtxErr(err), Alive: alive, Refused: refused(err)})
			if !sp.Random && !isCtxErr(err) {
				w.sleep(50 * time.Millisecond) // an error other than the ctx: do not spin
			}
			continue
		}
		tok := lease.Token()
		if sp.Prim == pSemaphore || sp.Prim == pWaitGroup {
			tok = 0 // permits and members carry no fencing token
		}
		var names []string
		var toks []int64
		if ac, ok := c.(*allClaim); ok {
			names, toks = ac.held()
		}
		w.r.rec(Event{Ev: evAcquired, Hold: hold, Tok: tok, N: sp.N, Role: role, Dead: lease.Err() != nil, Err: errText(lease.Err()),
			Names: names, Toks: toks})
		quit := make(chan struct{})
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			select {
			case <-lease.Done():
				if err := lease.Err(); errors.Is(err, distsync.ErrLost) {
					w.r.rec(Event{Ev: evLost, Hold: hold, Err: err.Error()})
				}
			case <-quit:
			}
		}()
		if wc, ok := c.(*wgClaim); ok {
			wc.tiedWait(hold) // a Wait for the round this member is in
		}
		if rc, ok := c.(reentrantClaim); ok {
			ctx, cancel := w.callCtx(false)
			err := rc.reenter(ctx)
			alive := ctx.Err() == nil
			cancel()
			w.r.rec(Event{Ev: evReenter, Hold: hold, Err: errText(err), Lost: errors.Is(err, distsync.ErrLost),
				Ctx: isCtxErr(err), Alive: alive && err != nil})
		}
		fencedWrites := exclusive(sp.Prim) || (sp.Prim == pRWMutex && role == "w")
		write := func(phase string) {
			switch {
			case !fencedWrites:
			case names != nil:
				w.fencedSet(hold, names, toks, phase)
			default:
				w.fenced(hold, tok, phase)
			}
		}
		write("entry")
		t := time.NewTimer(w.holdTime())
		select {
		case <-t.C:
		case <-lease.Done():
		case <-w.stop.Done():
		}
		t.Stop()
		// The late write: a naive holder writes whether or not it still holds the lock;
		// the store must refuse it if a newer token wrote meanwhile.
		write("late")
		lerr := lease.Err()
		w.r.rec(Event{Ev: evExit, Hold: hold, Lost: errors.Is(lerr, distsync.ErrLost), Err: errText(lerr)})
		ctx, cancel = w.callCtx(true)
		err = c.release(ctx)
		alive = ctx.Err() == nil
		cancel()
		w.r.rec(Event{Ev: evRelease, Hold: hold, Err: errText(err), Lost: errors.Is(err, distsync.ErrLost),
			NotHeld: errors.Is(err, distsync.ErrNotHeld), Ctx: isCtxErr(err), Alive: alive && err != nil})
		// The lease ends at the release (or the Handle finishes it in the background): give
		// the watcher a moment to report a loss the release found, then let it go.
		select {
		case <-watched:
		case <-time.After(100 * time.Millisecond):
		}
		close(quit)
		<-watched
		if !w.sleep(w.gapTime()) {
			break
		}
	}
}

// onceLoop calls Group.Do on one key over and over; fn is the critical section.
// leadEnded reports whether fn's ctx ended because its lead did: lost, or given up by the
// Handle's Close, which ends the lead's context before it releases the lead in Redis (a
// worker closes its Handle when the run ends, and another may lead while fn returns). Either
// way fn was told its lead was over before another could take it.
func leadEnded(cause error) bool {
	return errors.Is(cause, distsync.ErrLost) || errors.Is(cause, distsync.ErrClosed)
}

// doer is one Do of a once primitive: v is the run whose value it got ("" if it has none).
type doer func(ctx context.Context, fn func(context.Context) (string, error)) (v string, err error, shared bool)

func (w *worker) onceLoop(do doer) {
	sp := w.sp
	var runs atomic.Int64 // fn may outlive a cancelled Do and run on the Group's goroutine
	for i := 0; i < sp.MaxIter && w.stop.Err() == nil; i++ {
		call := fmt.Sprintf("%s#%d", sp.ID, i)
		w.r.rec(Event{Ev: evDoStart, Hold: call})
		ctx, cancel := w.callCtx(false)
		hold := w.holdTime()
		v, err, shared := do(ctx, func(fctx context.Context) (string, error) {
			run := fmt.Sprintf("%s@%d", sp.ID, runs.Add(1))
			w.r.rec(Event{Ev: evFnEnter, Hold: run, Call: call})
			t := time.NewTimer(hold)
			defer t.Stop()
			select {
			case <-t.C:
			case <-fctx.Done():
				cause := context.Cause(fctx)
				w.r.rec(Event{Ev: evFnCtx, Hold: run, Err: errText(cause), Lost: leadEnded(cause)})
			case <-w.stop.Done():
			}
			if fctx.Err() != nil {
				cause := context.Cause(fctx)
				w.r.rec(Event{Ev: evFnExit, Hold: run, Lost: leadEnded(cause), Ctx: true, Err: errText(cause)})
				return "", cause
			}
			if w.stop.Err() != nil {
				w.r.rec(Event{Ev: evFnExit, Hold: run, Err: "worker stopping"})
				return "", errors.New("worker stopping")
			}
			w.r.rec(Event{Ev: evFnExit, Hold: run})
			return run, nil
		})
		alive := ctx.Err() == nil
		cancel()
		w.r.rec(Event{Ev: evDoReturn, Hold: call, OK: err == nil, Val: v, Shared: shared, Err: errText(err),
			Lost: errors.Is(err, distsync.ErrLost), Ctx: isCtxErr(err), Alive: alive && err != nil})
		if err != nil && !sp.Random && !isCtxErr(err) {
			w.sleep(50 * time.Millisecond)
		}
		if !w.sleep(w.gapTime()) {
			break
		}
	}
}

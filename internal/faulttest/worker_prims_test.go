package faulttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/once"
	"github.com/distsync/distsync/waitgroup"
)

// The worker's side of election, waitgroup and the once functions: claims, and the loops that
// are not acquire/release.

// wgExpiry is how long a waitgroup's keys live after its last change, in the workers: within
// the limit that the end of every scenario checks (keyTTLLimit).
const wgExpiry = time.Minute

// electionClaim campaigns with the hold's id as its value, so that what an observer sees can
// be matched with the history's holds.
type electionClaim struct {
	e    *election.Election
	term *election.Term
}

func (c *electionClaim) acquire(ctx context.Context, hold string) (*distsync.Lease, error) {
	t, err := c.e.Campaign(ctx, hold)
	if err != nil {
		return nil, err
	}
	c.term = t
	return t.Lease(), nil
}

func (c *electionClaim) release(ctx context.Context) error { return c.term.Resign(ctx) }

// wgClaim makes one member of the group per acquisition: a Join, or, every other time (not in
// random mode), an Add(1) and a Claim of a plain unit. Done is the release.
type wgClaim struct {
	wg     *waitgroup.WaitGroup
	tied   *waitgroup.WaitGroup // for the tied waits: a value of its own
	w      *worker
	claims bool
	n      int
	m      *waitgroup.Member
}

func (c *wgClaim) acquire(ctx context.Context, _ string) (*distsync.Lease, error) {
	c.n++
	if !c.claims || c.n%2 == 1 {
		m, err := c.wg.Join(ctx)
		if err != nil {
			return nil, err
		}
		c.m = m
		return m.Lease(), nil
	}
	if err := c.wg.Add(ctx, 1); err != nil {
		if strings.Contains(err.Error(), "outcome unknown") {
			c.w.r.rec(Event{Ev: evSuspect, Err: "Add(1) outcome unknown: " + err.Error()})
		}
		return nil, fmt.Errorf("add: %w", err)
	}
	m, err := c.wg.Claim(ctx)
	if err != nil {
		// A Claim that failed took nothing (Claim settles a request in flight first); the plain
		// unit the Add made is still pending, unless another worker's Claim took it: take one
		// back, which is the same.
		if !errors.Is(err, waitgroup.ErrNothingToClaim) {
			bctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if derr := c.wg.Add(bctx, -1); derr != nil && !errors.Is(derr, waitgroup.ErrNegative) {
				c.w.r.rec(Event{Ev: evSuspect, Err: "Add(-1) after a failed Claim: " + derr.Error()})
			}
			cancel()
		}
		return nil, fmt.Errorf("claim: %w", err)
	}
	c.m = m
	return m.Lease(), nil
}

func (c *wgClaim) release(ctx context.Context) error { return c.m.Done(ctx) }

// tiedWait starts a Wait for the round of the member just acquired (its id is hold), in the
// background: its round is the member's, which the checker can then tell.
func (c *wgClaim) tiedWait(hold string) {
	w := c.w
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		w.oneWait(w.stop, c.tied, hold+"/w", hold)
	}()
}

// oneWait runs one Wait and records it.
func (w *worker) oneWait(ctx context.Context, wg *waitgroup.WaitGroup, id, member string) {
	w.r.rec(Event{Ev: evWGWait, Hold: id, Call: member})
	err := wg.Wait(ctx)
	alive := ctx.Err() == nil
	w.r.rec(Event{Ev: evWGReturn, Hold: id, Call: member, OK: err == nil, Lost: errors.Is(err, waitgroup.ErrMembersLost),
		Expired: errors.Is(err, waitgroup.ErrExpired), Err: errText(err), Ctx: isCtxErr(err), Alive: alive && err != nil})
}

// waitLoop is a waiter's life: Wait, then a pause of up to a slot (so that Waits start at every
// phase of the members' rounds), over and over.
func (w *worker) waitLoop(wg *waitgroup.WaitGroup) {
	sp := w.sp
	for i := 0; i < sp.MaxIter && w.stop.Err() == nil; i++ {
		ctx, cancel := w.callCtx(false)
		w.oneWait(ctx, wg, fmt.Sprintf("%s#%d", sp.ID, i), "")
		cancel()
		gap := w.gapTime()
		if !sp.Random && sp.Slot > 0 {
			gap = time.Duration(w.rnd.Int64N(int64(sp.Slot)))
		}
		if !w.sleep(gap) {
			break
		}
	}
}

// untilSlot returns how long until the next multiple of slot on CLOCK_MONOTONIC, which every
// process of the machine shares: members that start there make rounds that end together.
func untilSlot(slot time.Duration) time.Duration {
	now := mono()
	return time.Duration((now/int64(slot)+1)*int64(slot) - now)
}

// observe follows the election until the worker stops, recording every Info. An Observe whose
// channel closes early is called again.
func (w *worker) observe(e *election.Election) {
	id := w.sp.ID + "/obs"
	for i := 0; i < 1000 && w.stop.Err() == nil; i++ {
		w.r.rec(Event{Ev: evObsStart, Hold: id})
		for info := range e.Observe(w.stop) {
			w.r.rec(Event{Ev: evObserve, Hold: id, Tok: info.Term, N: info.Rev, Val: info.Value})
		}
		if w.stop.Err() == nil {
			w.r.rec(Event{Ev: evObsEnd, Hold: id})
			w.sleep(50 * time.Millisecond)
		}
	}
}

// waitTrigger waits until the file path exists (at once if path is ""), and, if it names a
// CLOCK_MONOTONIC time, until then. It reports whether the worker goes on.
func (w *worker) waitTrigger(path string) bool {
	if path == "" {
		return w.stop.Err() == nil
	}
	for w.stop.Err() == nil { // bounded by MaxRun
		b, err := os.ReadFile(path)
		if err != nil {
			w.sleep(5 * time.Millisecond)
			continue
		}
		if at, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			w.sleep(time.Duration(at - mono()))
		}
		w.r.rec(Event{Ev: evTriggered})
		return w.stop.Err() == nil
	}
	return false
}

// burstLoop is a candidate of the election burst: in round k (1..Rounds) it campaigns when the
// trigger Burst.k fires (every candidate at the same instant), and leads for 200 ms, unless it
// is the round's last leader (a counter in the fenced store says so): that one leads until the
// test writes Burst.k.end, so that the election is empty before the next round.
func (w *worker) burstLoop(e *election.Election) {
	sp := w.sp
	for k := 1; k <= sp.Rounds && w.stop.Err() == nil; k++ {
		if !w.waitTrigger(fmt.Sprintf("%s.%d", sp.Burst, k)) {
			return
		}
		hold := fmt.Sprintf("%s#%d", sp.ID, k)
		w.r.rec(Event{Ev: evWait, Hold: hold})
		t, err := e.Campaign(w.stop, hold)
		if err != nil {
			w.r.rec(Event{Ev: evFailed, Hold: hold, Err: err.Error(), Ctx: isCtxErr(err), Alive: w.stop.Err() == nil})
			return
		}
		lease := t.Lease()
		w.r.rec(Event{Ev: evAcquired, Hold: hold, Tok: t.Token(), Dead: lease.Err() != nil, Err: errText(lease.Err())})
		w.fenced(hold, t.Token(), "entry")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := w.store.c.Do(ctx, w.store.c.B().Incr().Key(fmt.Sprintf("%s:burst:%d", w.store.ns, k)).Build()).AsInt64()
		cancel()
		if err != nil {
			w.r.rec(Event{Ev: evFatal, Err: "burst counter: " + err.Error()})
		}
		if n >= sp.N {
			w.waitTrigger(fmt.Sprintf("%s.%d.end", sp.Burst, k))
		} else {
			w.sleep(200 * time.Millisecond)
		}
		w.fenced(hold, t.Token(), "late")
		lerr := lease.Err()
		w.r.rec(Event{Ev: evExit, Hold: hold, Lost: errors.Is(lerr, distsync.ErrLost), Err: errText(lerr)})
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		err = t.Resign(ctx)
		cancel()
		w.r.rec(Event{Ev: evRelease, Hold: hold, Err: errText(err), Lost: errors.Is(err, distsync.ErrLost),
			NotHeld: errors.Is(err, distsync.ErrNotHeld)})
	}
	<-w.stop.Done()
}

// resetLoop calls Once.Reset every Hold, so that the once primitive runs again.
func (w *worker) resetLoop(o *once.Once) {
	sp := w.sp
	for i := 0; i < sp.MaxIter && w.sleep(sp.Hold); i++ {
		id := fmt.Sprintf("%s#%d", sp.ID, i)
		w.r.rec(Event{Ev: evResetStart, Hold: id})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := o.Reset(ctx)
		cancel()
		w.r.rec(Event{Ev: evReset, Hold: id, Err: errText(err)})
	}
}

// onceDoer returns the Do of the worker's once primitive: once.Once's Do, or the function of
// OnceFunc (Role "func"), OnceValue or OnceValues. Those three take their fn when they are
// made: outside random mode the worker makes each once and its fn runs the current call's fn
// (fn runs only while its Do waits, as the Do calls come one at a time and are not cancelled);
// in random mode, where fn may still start after its call gave up, it makes one per call, so
// that every run is matched with the call that started it.
func (w *worker) onceDoer(h *distsync.Handle) (doer, error) {
	name := w.sp.Name
	type fnT = func(context.Context) (string, error)
	var cur atomic.Pointer[fnT]
	var strays atomic.Int64
	current := func(ctx context.Context) (string, error) {
		if f := cur.Load(); f != nil {
			return (*f)(ctx)
		}
		// A lead taken as the worker stops: it runs nothing, but the history says so.
		run := fmt.Sprintf("%s@stray%d", w.sp.ID, strays.Add(1))
		w.r.rec(Event{Ev: evFnEnter, Hold: run})
		w.r.rec(Event{Ev: evFnExit, Hold: run, Err: "fn started with no call in progress"})
		return "", errors.New("fn started with no call in progress")
	}
	switch {
	case w.sp.Prim == pOnceOnce && w.sp.Role != "func":
		o, err := once.NewOnce(h, name)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, fn fnT) (string, error, bool) {
			err := o.Do(ctx, func(ctx context.Context) error { _, err := fn(ctx); return err })
			return "", err, false
		}, nil
	case w.sp.Prim == pOnceOnce:
		mk := func(fn fnT) (func(context.Context) error, error) {
			return once.OnceFunc(h, name, func(ctx context.Context) error { _, err := fn(ctx); return err })
		}
		f, err := mk(current)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, fn fnT) (string, error, bool) {
			g := f
			if w.sp.Random {
				var err error
				if g, err = mk(fn); err != nil {
					return "", err, false
				}
			} else {
				cur.Store(&fn)
				defer cur.Store(nil)
			}
			return "", g(ctx), false
		}, nil
	case w.sp.Prim == pOnceValue:
		mk := func(fn fnT) (func(context.Context) (string, error), error) { return once.OnceValue(h, name, fn) }
		f, err := mk(current)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, fn fnT) (string, error, bool) {
			g := f
			if w.sp.Random {
				var err error
				if g, err = mk(fn); err != nil {
					return "", err, false
				}
			} else {
				cur.Store(&fn)
				defer cur.Store(nil)
			}
			v, err := g(ctx)
			return v, err, false
		}, nil
	case w.sp.Prim == pOnceValues:
		// The pair is (run, run+"'"): a caller that gets two halves of different runs says so in
		// its value, which then names no run.
		mk := func(fn fnT) (func(context.Context) (string, string, error), error) {
			return once.OnceValues(h, name, func(ctx context.Context) (string, string, error) {
				v, err := fn(ctx)
				return v, v + "'", err
			})
		}
		f, err := mk(current)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, fn fnT) (string, error, bool) {
			g := f
			if w.sp.Random {
				var err error
				if g, err = mk(fn); err != nil {
					return "", err, false
				}
			} else {
				cur.Store(&fn)
				defer cur.Store(nil)
			}
			v1, v2, err := g(ctx)
			if err == nil && v2 != v1+"'" {
				v1 = fmt.Sprintf("%s | %s (a mismatched pair)", v1, v2)
			}
			return v1, err, false
		}, nil
	}
	return nil, fmt.Errorf("no Do for %q", w.sp.Prim)
}

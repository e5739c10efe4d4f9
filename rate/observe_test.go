package rate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/rate"
)

// decisions is an Observer that keeps every event, and cancels the ctx of a Wait it is told
// to once that Wait reports its delay.
type decisions struct {
	mu     sync.Mutex
	events []distsync.Event
	cancel context.CancelFunc // called at the first EventDelayed of a ctx carrying waitKey
}

type waitKey struct{}

func (d *decisions) observe(e distsync.Event) {
	d.mu.Lock()
	d.events = append(d.events, e)
	cancel := d.cancel
	if e.Kind == distsync.EventDelayed && e.Context != nil && e.Context.Value(waitKey{}) != nil {
		d.cancel = nil
	} else {
		cancel = nil
	}
	d.mu.Unlock()
	if cancel != nil {
		cancel() // quick, and blocks nothing: the Wait sees its ctx done at its select
	}
}

// take returns the events recorded since the last take.
func (d *decisions) take() []distsync.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.events
	d.events = nil
	return out
}

// TestObserverReportsDecisions: each outcome of a decision is one event of its own kind,
// with the tokens asked as Weight, the delay as Wait, the call's ctx, and the refusal's error;
// a reservation given back reports EventCanceled with its decision's Call.
func TestObserverReportsDecisions(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		d := &decisions{}
		p := b.Pod(t, b.Prefix(t), distsync.WithObserver(d.observe))
		// One token per 100 s: a reservation short of one waits about 100 s, far more than
		// any step of this test takes, however loaded the machine.
		l := newLimiter(t, p, "obs", rate.Every(100*time.Second), 2)
		ctx := ctxFor(t, 10*time.Minute) // beyond the 100 s a Wait below reserves for

		name := "obs"
		one := func(what string, want distsync.EventKind, n int64) distsync.Event {
			t.Helper()
			es := d.take()
			if len(es) != 1 {
				t.Fatalf("%s: %d events %v, want one %v", what, len(es), es, want)
			}
			e := es[0]
			if e.Kind != want || e.Primitive != "rate" || e.Name != name || e.Weight != n ||
				e.Identity != p.H.Identity() || e.Call == 0 {
				t.Fatalf("%s: %+v, want %v of rate %s, weight %d, identity %q", what, e, want, name, n, p.H.Identity())
			}
			return e
		}

		if ok, err := l.AllowN(ctx, 2); !ok || err != nil {
			t.Fatalf("AllowN(2) = %v, %v on a full bucket", ok, err)
		}
		if e := one("AllowN(2)", distsync.EventAllowed, 2); e.Context != ctx || e.Wait != 0 || e.Err != nil {
			t.Errorf("allowed: %+v", e)
		}
		if ok, err := l.Allow(ctx); ok || err != nil {
			t.Fatalf("Allow = %v, %v on an empty bucket", ok, err)
		}
		if e := one("Allow", distsync.EventRefused, 1); e.Err != nil {
			t.Errorf("refused Allow: Err %v, want nil", e.Err)
		}

		r, err := l.Reserve(ctx)
		if err != nil || !r.OK() {
			t.Fatalf("Reserve: %v, %v", r, err)
		}
		delayed := one("Reserve", distsync.EventDelayed, 1)
		if delayed.Wait < 50*time.Second || delayed.Wait > 100*time.Second {
			t.Errorf("delayed: Wait %v, want about 100 s", delayed.Wait)
		}
		if err := r.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if e := one("Cancel", distsync.EventCanceled, 1); e.Call != delayed.Call || e.Err != nil || e.Context != ctx {
			t.Errorf("canceled: %+v, want Call %d and no Err", e, delayed.Call)
		}
		if err := r.Cancel(ctx); err != nil { // a second Cancel does nothing, and says nothing
			t.Fatal(err)
		}
		if es := d.take(); len(es) != 0 {
			t.Errorf("second Cancel: %v", es)
		}

		err = l.WaitN(ctx, 3)
		if !errors.Is(err, rate.ErrExceedsBurst) {
			t.Fatalf("WaitN(3): %v", err)
		}
		if e := one("WaitN(3)", distsync.EventRefused, 3); e.Err != err {
			t.Errorf("refused WaitN(3): Err %v, want %v", e.Err, err)
		}
		near, cancelNear := context.WithTimeout(ctx, 5*time.Second)
		err = l.Wait(near)
		cancelNear()
		if !errors.Is(err, rate.ErrWouldExceedDeadline) {
			t.Fatalf("Wait with a near deadline: %v", err)
		}
		if e := one("Wait (near deadline)", distsync.EventRefused, 1); e.Err != err || e.Context != near {
			t.Errorf("refused Wait: %+v, want Err %v", e, err)
		}

		// A Wait that sleeps reports its delay, and, cancelled, gives its tokens back.
		wctx, cancel := context.WithCancel(context.WithValue(ctx, waitKey{}, true))
		defer cancel()
		d.mu.Lock()
		d.cancel = cancel
		d.mu.Unlock()
		err = l.Wait(wctx)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, distsync.ErrNotAcquired) {
			t.Fatalf("cancelled Wait: %v", err)
		}
		es := d.take()
		if len(es) != 2 || es[0].Kind != distsync.EventDelayed || es[1].Kind != distsync.EventCanceled ||
			es[0].Call != es[1].Call || es[0].Wait < 50*time.Second || !errors.Is(es[1].Err, context.Canceled) ||
			es[1].Weight != 1 || es[0].Context != wctx || es[1].Context != wctx {
			t.Fatalf("cancelled Wait: events %+v, want delayed (about 100 s) then canceled (context.Canceled), one Call", es)
		}

		// A Wait that need not wait is allowed; so is any call of an infinite limiter.
		name = "obs-inf"
		inf := newLimiter(t, p, name, rate.Inf, 0)
		if err := inf.WaitN(ctx, 5); err != nil {
			t.Fatal(err)
		}
		one("WaitN(5) at Inf", distsync.EventAllowed, 5)
		name = "obs"

		// Bad input sends nothing, and reports nothing.
		if _, err := l.AllowN(ctx, -1); !errors.Is(err, distsync.ErrInvalid) {
			t.Fatal(err)
		}
		if es := d.take(); len(es) != 0 {
			t.Errorf("AllowN(-1): %v", es)
		}
		// A Wait whose ctx is done already is refused with its error, sending nothing.
		done, stop := context.WithCancel(ctx)
		stop()
		if err := l.Wait(done); !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		if e := one("Wait (ctx done)", distsync.EventRefused, 1); !errors.Is(e.Err, context.Canceled) {
			t.Errorf("refused Wait: Err %v", e.Err)
		}
	})
}

package distsync_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/once"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []distsync.Event
}

func (r *recorder) observe(e distsync.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// call returns the events of the n-th call (0-based) that started, in order.
func (r *recorder) call(n int) []distsync.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var id uint64
	for _, e := range r.events {
		if e.Kind == distsync.EventAcquireStarted {
			if n == 0 {
				id = e.Call
				break
			}
			n--
		}
	}
	var out []distsync.Event
	for _, e := range r.events {
		if id != 0 && e.Call == id {
			out = append(out, e)
		}
	}
	return out
}

// waitFor waits until some event of kind was recorded, for at most 20 s.
func (r *recorder) waitFor(t *testing.T, kind distsync.EventKind) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		found := slices.ContainsFunc(r.events, func(e distsync.Event) bool { return e.Kind == kind })
		r.mu.Unlock()
		if found {
			return
		}
	}
	t.Fatalf("no %v event in 20s", kind)
}

func kinds(es []distsync.Event) []distsync.EventKind {
	out := make([]distsync.EventKind, len(es))
	for i, e := range es {
		out[i] = e.Kind
	}
	return out
}

type ctxKey struct{}

// The observer sees a contended mutex's call in order: it started, queued, was woken (by the
// release's hand-off) and granted, acquired with the token of its lease, and its hold was
// released; a TryLock that found it held and a Lock whose ctx ended are not acquired, with
// why.
func TestObserverSeesAContendedMutexInOrder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Again, with new keys and a longer short ctx, if a loaded machine held the Lock with
		// the short ctx up until its ctx ended before it queued.
		redistest.RetryScaled(t, 4, 200*time.Millisecond, func(short time.Duration) error {
			prefix := b.Prefix(t)
			var rec recorder
			// A long hand-off window: the hold handed to the waiting Lock lasts it until the
			// confirm reaches Redis, which a loaded machine can delay past the default's.
			holder := b.Pod(t, prefix, distsync.WithLeaseTTL(20*time.Second), distsync.WithHandoffWindow(10*time.Second)).H
			watched := b.Pod(t, prefix, distsync.WithLeaseTTL(20*time.Second), distsync.WithObserver(rec.observe),
				distsync.WithIdentity("watched:{1}")).H
			mh, _ := mutex.New(holder, "orders")
			mw, _ := mutex.New(watched, "orders")
			bg := context.Background()
			if err := mh.Lock(bg); err != nil {
				t.Fatal(err)
			}

			// 0: a TryLock that finds it held.
			if ok, err := mw.TryLock(bg); ok || err != nil {
				t.Fatalf("TryLock = %v, %v; want false, nil", ok, err)
			}
			// 1: a Lock whose ctx ends while it waits (200ms at first).
			began := time.Now()
			sctx, cancel := context.WithTimeout(bg, short)
			err := mw.Lock(sctx)
			ended := time.Now()
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Lock with a short ctx: %v", err)
			}
			// 2: a Lock that waits for the release.
			ctx := context.WithValue(bg, ctxKey{}, "caller")
			got := make(chan *distsync.Lease, 1)
			go func() {
				l, err := mw.LockLease(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			for deadline := time.Now().Add(20 * time.Second); len(rec.call(2)) < 2 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			// Queued, it subscribes, then tries again, and listens: the release's hand-off is
			// told to it then (a hand-off made before, it finds in its own attempt).
			if !redistest.Eventually(10*time.Second, func() bool { return len(b.Channels(t, escape(prefix)+"*")) > 0 }) {
				t.Fatal("the waiting Lock did not subscribe within 10s")
			}
			if err := mh.Unlock(bg); err != nil {
				t.Fatal(err)
			}
			var lease *distsync.Lease
			select {
			case lease = <-got:
			case <-time.After(30 * time.Second):
				t.Fatal("Lock did not return after the release")
			}
			if lease == nil {
				t.FailNow()
			}
			if err := mw.Unlock(bg); err != nil {
				t.Fatal(err)
			}

			try := rec.call(0)
			if k := kinds(try); !slices.Equal(k, []distsync.EventKind{distsync.EventAcquireStarted, distsync.EventNotAcquired}) || try[1].Err != nil {
				t.Errorf("TryLock's events: %v (err %v); want acquire_started, not_acquired with no error", k, try[len(try)-1].Err)
			}
			// The Lock with a short ctx waited, from its start to its end, about the ctx's
			// time: no more than from the ctx's making to the return, no less than the ctx's
			// time less what a loaded machine stalled this process meanwhile. Its start came
			// after the ctx was made, and so its end may have come before it queued.
			var late error
			timedOut := rec.call(1)
			if k := kinds(timedOut); slices.Equal(k, []distsync.EventKind{distsync.EventAcquireStarted, distsync.EventNotAcquired}) &&
				errors.Is(timedOut[1].Err, context.DeadlineExceeded) {
				late = fmt.Errorf("the Lock with a %v ctx ended before it queued: %v after the ctx was made", short, ended.Sub(began).Round(time.Millisecond))
			} else if !slices.Equal(k, []distsync.EventKind{distsync.EventAcquireStarted, distsync.EventQueued, distsync.EventNotAcquired}) {
				t.Errorf("timed-out Lock's events: %v; want acquire_started, queued, not_acquired", k)
			} else if e := timedOut[2]; !errors.Is(e.Err, context.DeadlineExceeded) || !errors.Is(e.Err, distsync.ErrNotAcquired) || e.Wait > ended.Sub(began) {
				t.Errorf("timed-out Lock's not_acquired: err %v, wait %v (%v from the ctx's making to the return)", e.Err, e.Wait, ended.Sub(began))
			} else {
				late = redistest.Late("the timed-out Lock's wait fell short of its ctx's time:", short-e.Wait, short/4, began, ended)
			}

			// The hand-off's confirm goes out through the renewal loop, at once: when it gets
			// there before the Unlock, it is reported as a renewal of the hold.
			es := slices.DeleteFunc(rec.call(2), func(e distsync.Event) bool { return e.Kind == distsync.EventRenewed })
			k := kinds(es)
			if slices.Equal(k, []distsync.EventKind{distsync.EventAcquireStarted, distsync.EventQueued, distsync.EventAcquired, distsync.EventReleased}) {
				// The attempt it makes once subscribed found the hand-off in Redis, and took it:
				// the Unlock came before that attempt, which a loaded machine can delay.
				return fmt.Errorf("the waiting Lock took the hand-off in its attempt, not from the release's message: %v", k)
			}
			if len(k) < 5 || k[0] != distsync.EventAcquireStarted || k[1] != distsync.EventQueued ||
				k[len(k)-2] != distsync.EventAcquired || k[len(k)-1] != distsync.EventReleased {
				t.Fatalf("Lock's events (renewals left out): %v; want acquire_started, queued, woken/granted..., acquired, released", k)
			}
			for _, mid := range k[2 : len(k)-2] {
				if mid != distsync.EventWoken && mid != distsync.EventGranted {
					t.Fatalf("Lock's events: %v; between queued and acquired only woken and granted", k)
				}
			}
			if full := kinds(rec.call(2)); !slices.Equal(full[:len(k)-1], k[:len(k)-1]) {
				t.Fatalf("Lock's events: %v; a renewal before the hold was acquired", full)
			}
			acq, rel := es[len(es)-2], es[len(es)-1]
			for _, e := range rec.call(2) {
				if e.Primitive != "mutex" || e.Name != "orders" || e.Weight != 1 || e.Shared || e.Identity != "watched:{1}" {
					t.Errorf("event %v: primitive %q name %q weight %d shared %v identity %q", e.Kind, e.Primitive, e.Name, e.Weight, e.Shared, e.Identity)
				}
			}
			for _, e := range es[:len(es)-1] {
				if e.Context == nil || e.Context.Value(ctxKey{}) != "caller" {
					t.Errorf("event %v does not carry the caller's context", e.Kind)
				}
			}
			if rel.Context != nil {
				t.Errorf("released carries a context")
			}
			if acq.Token != lease.Token() || rel.Token != lease.Token() {
				t.Errorf("tokens: acquired %d, released %d; the lease's is %d", acq.Token, rel.Token, lease.Token())
			}
			if acq.Wait <= 0 || rel.Held <= 0 || rel.Err != nil {
				t.Errorf("acquired after %v, released after %v with %v", acq.Wait, rel.Held, rel.Err)
			}
			return late
		})
	})
}

// logRecords is a slog.Handler that keeps the records at Warn and above.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

// A hold whose key is deleted behind it is reported lost to the observer, with why and how
// long it was held, and logged at Warn; its Unlock reports the loss, and the hold reports no
// second end.
func TestObserverAndLogTellALoss(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		var rec recorder
		var logs logRecords
		h := b.Pod(t, prefix, distsync.WithLeaseTTL(300*time.Millisecond), distsync.WithObserver(rec.observe),
			distsync.WithLogger(slog.New(&logs))).H
		m, _ := mutex.New(h, "jobs")
		ctx := context.Background()
		lease, err := m.LockLease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(prefix + "{jobs}:mutex").Build() }).Error(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-lease.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("the lease did not end after its key was deleted")
		}
		if err := m.Unlock(ctx); !errors.Is(err, distsync.ErrLost) {
			t.Fatalf("Unlock after the loss: %v", err)
		}
		// The end is reported just after the lease ends (outside the renewer's lock), so
		// Done may close a moment before the observer hears of it.
		rec.waitFor(t, distsync.EventLost)
		es := rec.call(0)
		k := kinds(es)
		if len(k) < 3 || k[len(k)-1] != distsync.EventLost || k[1] != distsync.EventAcquired {
			t.Fatalf("events: %v; want acquire_started, acquired, renewed..., lost", k)
		}
		for _, mid := range k[2 : len(k)-1] {
			if mid != distsync.EventRenewed && mid != distsync.EventRenewalFailed {
				t.Fatalf("events: %v; between acquired and lost only renewals", k)
			}
		}
		lost := es[len(es)-1]
		if !errors.Is(lost.Err, distsync.ErrLost) || lost.Held <= 0 || lost.Token != lease.Token() {
			t.Errorf("lost: err %v, held %v, token %d (lease's %d)", lost.Err, lost.Held, lost.Token, lease.Token())
		}
		logs.mu.Lock()
		defer logs.mu.Unlock()
		var warned bool
		for _, r := range logs.recs {
			warned = warned || (r.Level == slog.LevelWarn && r.Message == "distsync: lease lost")
		}
		if !warned {
			t.Errorf("no Warn record of the loss in %d records", len(logs.recs))
		}
	})
}

// Every primitive reports its calls and holds: the kind, the weight a semaphore call asks
// for, a read lock's Shared, once's roles.
func TestObserverSeesEveryPrimitive(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Standalone)
	prefix := b.Prefix(t)
	var rec recorder
	h := b.Pod(t, prefix, distsync.WithObserver(rec.observe)).H
	ctx := context.Background()
	call := 0
	check := func(what, primitive string, weight int64, shared bool, want ...distsync.EventKind) {
		t.Helper()
		es := rec.call(call)
		call++
		if k := kinds(es); !slices.Equal(k, want) {
			t.Errorf("%s: events %v; want %v", what, k, want)
			return
		}
		for _, e := range es {
			if e.Primitive != primitive || e.Weight != weight || e.Shared != shared || e.Identity != h.Identity() {
				t.Errorf("%s: event %v: primitive %q weight %d shared %v identity %q; want %q %d %v %q", what, e.Kind, e.Primitive, e.Weight, e.Shared, e.Identity, primitive, weight, shared, h.Identity())
			}
		}
	}
	held := []distsync.EventKind{distsync.EventAcquireStarted, distsync.EventAcquired, distsync.EventReleased}

	rw, _ := rwmutex.New(h, "rw")
	if err := rw.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	check("RLock", "rwmutex", 1, true, held...)

	sem, _ := semaphore.New(h, "sem", 5)
	if err := sem.Acquire(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := sem.Release(ctx, 3); err != nil {
		t.Fatal(err)
	}
	check("Acquire(3)", "semaphore", 3, false, held...)

	fm, _ := fair.New(h, "fair")
	if err := fm.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	check("fair Lock", "fair", 1, false, held...)

	// once: a leader here; a follower in another process, while fn runs.
	var rec2 recorder
	other := b.Pod(t, prefix, distsync.WithObserver(rec2.observe)).H
	g, _ := once.NewGroup[int](h, "g")
	g2, _ := once.NewGroup[int](other, "g")
	running, release := make(chan struct{}), make(chan struct{})
	led := make(chan error, 1)
	go func() {
		_, err, _ := g.Do(ctx, "k", func(context.Context) (int, error) {
			close(running)
			<-release
			return 1, nil
		})
		led <- err
	}()
	<-running
	followed := make(chan error, 1)
	go func() {
		_, err, _ := g2.Do(ctx, "k", func(context.Context) (int, error) { return 2, nil })
		followed <- err
	}()
	rec2.waitFor(t, distsync.EventOnceFollower)
	close(release)
	if err := <-led; err != nil {
		t.Fatal(err)
	}
	if err := <-followed; err != nil {
		t.Fatal(err)
	}
	check("once leader", "once.Group", 1, false,
		distsync.EventAcquireStarted, distsync.EventOnceLeader, distsync.EventAcquired, distsync.EventReleased)
	if k := kinds(rec2.call(0)); !slices.Equal(k, []distsync.EventKind{distsync.EventAcquireStarted, distsync.EventOnceFollower, distsync.EventNotAcquired}) {
		t.Errorf("once follower: events %v", k)
	} else if e := rec2.call(0)[2]; e.Err != nil {
		t.Errorf("once follower's not_acquired: %v; want nil (it got the leader's result)", e.Err)
	}
}

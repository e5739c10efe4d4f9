package once_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/once"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func group[T any](t *testing.T, p *redistest.Pod, name string, opts ...distsync.Option) *once.Group[T] {
	t.Helper()
	g, err := once.NewGroup[T](p.H, name, opts...)
	if err != nil {
		t.Fatalf("NewGroup(%q): %v", name, err)
	}
	return g
}

func bg(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// Many callers in several processes, one key, a slow fn: fn runs once and every caller gets
// its value.
func TestOneCallForManyCallers(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const pods, callers = 4, 25
		prefix := b.Prefix(t)
		var runs, called atomic.Int32
		joined := make(chan struct{})
		letGo := sync.OnceFunc(func() { close(joined) })
		defer letGo()
		fn := func(ctx context.Context) (string, error) {
			runs.Add(1)
			<-joined // a caller that came after the result would rightly run fn again
			time.Sleep(300 * time.Millisecond)
			return "loaded", nil
		}
		var wg sync.WaitGroup
		var sharedN atomic.Int32
		errs := make(chan error, pods*callers)
		start := make(chan struct{})
		var gs []*once.Group[string]
		for range pods {
			g := group[string](t, b.Pod(t, prefix), "db")
			gs = append(gs, g)
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ctx, cancel := bg(20 * time.Second)
					defer cancel()
					called.Add(1)
					v, err, shared := g.Do(ctx, "hot", fn)
					if err != nil || v != "loaded" {
						errs <- fmt.Errorf("Do = %q, %v", v, err)
					}
					if shared {
						sharedN.Add(1)
					}
				}()
			}
		}
		close(start)
		// Every caller has called Do, every process has the call in flight, and the processes
		// that do not lead listen for its result (the leader's does not).
		if !redistest.Eventually(20*time.Second, func() bool {
			if called.Load() != pods*callers {
				return false
			}
			for _, g := range gs {
				if !g.InFlight("hot") {
					return false
				}
			}
			return b.Subscribers(t, gs[0].Channel("hot")) >= pods-1
		}) {
			t.Fatalf("the callers did not all join the call: %d of %d called Do", called.Load(), pods*callers)
		}
		letGo()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("fn ran %d times for %d callers, want once", n, pods*callers)
		}
		if n := sharedN.Load(); n != pods*callers {
			t.Fatalf("%d of %d callers saw shared = true", n, pods*callers)
		}
	})
}

// fn's error reaches every waiting caller: the leader's process gets the error itself, the
// others one matching ErrLeaderFailed with its message. It is not kept: the next call runs fn.
func TestErrorsAreSharedNotKept(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		ga := group[int](t, b.Pod(t, prefix), "err")
		gb := group[int](t, b.Pod(t, prefix), "err")
		boom := errors.New("boom: database down")
		var runs atomic.Int32
		entered, release := make(chan struct{}), make(chan struct{})
		fn := func(ctx context.Context) (int, error) {
			if runs.Add(1) == 1 {
				close(entered)
				<-release
				return 0, boom
			}
			return 7, nil
		}
		ctx, cancel := bg(20 * time.Second)
		defer cancel()
		leader := make(chan error, 1)
		go func() { _, err, _ := ga.Do(ctx, "k", fn); leader <- err }()
		<-entered
		follower := gb.DoChan(ctx, "k", fn)
		waitSubscribed(t, b, ga.Channel("k"), 1) // the leader does not listen: this is b waiting
		close(release)
		r := recv(t, "the follower", follower)
		ferr, shared := r.Err, r.Shared
		if !errors.Is(ferr, once.ErrLeaderFailed) || !strings.Contains(ferr.Error(), "database down") || !shared {
			t.Fatalf("follower got %v (shared %v), want ErrLeaderFailed with the leader's message", ferr, shared)
		}
		if err := <-leader; !errors.Is(err, boom) {
			t.Fatalf("leader's caller got %v, want fn's error itself", err)
		}
		if v, err, _ := gb.Do(ctx, "k", fn); err != nil || v != 7 {
			t.Fatalf("next call = %d, %v; the error must not be kept", v, err)
		}
		if n := runs.Load(); n != 2 {
			t.Fatalf("fn ran %d times, want 2", n)
		}
	})
}

// A panic in fn panics in the callers of its process and reaches the others as ErrPanicked.
func TestPanicInFn(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		ga := group[int](t, b.Pod(t, prefix), "panic")
		gb := group[int](t, b.Pod(t, prefix), "panic")
		entered, release := make(chan struct{}), make(chan struct{})
		fn := func(ctx context.Context) (int, error) {
			close(entered)
			<-release
			panic("kaput")
		}
		ctx, cancel := bg(20 * time.Second)
		defer cancel()
		recovered := make(chan any, 1)
		go func() {
			defer func() { recovered <- recover() }()
			ga.Do(ctx, "k", fn)
		}()
		<-entered
		other := gb.DoChan(ctx, "k", func(context.Context) (int, error) { t.Error("second fn ran"); return 0, nil })
		waitSubscribed(t, b, ga.Channel("k"), 1) // the leader does not listen: this is b waiting
		close(release)
		err := recv(t, "the other process", other).Err
		if !errors.Is(err, once.ErrPanicked) || !strings.Contains(err.Error(), "kaput") {
			t.Fatalf("other process got %v, want ErrPanicked", err)
		}
		if r := <-recovered; fmt.Sprint(r) != "kaput" {
			t.Fatalf("leader's caller recovered %v, want the panic", r)
		}
	})
}

// A follower whose context ends leaves at once, while the call goes on; the others still get
// the result.
func TestCancelledFollowerLeaves(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			ga := group[string](t, b.Pod(t, prefix), "cancel")
			gb := group[string](t, b.Pod(t, prefix), "cancel")
			entered, release := make(chan struct{}), make(chan struct{})
			fn := func(ctx context.Context) (string, error) {
				close(entered)
				<-release // until the cancelled follower has left
				return "v", nil
			}
			ctx, cancel := bg(20 * time.Second)
			defer cancel()
			leader := make(chan error, 1)
			go func() { _, err, _ := ga.Do(ctx, "k", fn); leader <- err }()
			<-entered
			stay := make(chan string, 1)
			go func() { v, _, _ := gb.Do(ctx, "k", fn); stay <- v }()
			waitSubscribed(t, b, ga.Channel("k"), 1) // the leader does not listen: this is b waiting
			short, scancel := bg(100 * time.Millisecond)
			defer scancel()
			start := time.Now()
			left := redistest.Async(short, func(ctx context.Context) error { _, err, _ := gb.Do(ctx, "k", fn); return err })
			r := redistest.Await(t, left, 10*time.Second) // fn runs until it returns
			if !errors.Is(r.Err, context.DeadlineExceeded) {
				t.Fatalf("cancelled follower: %v after %v", r.Err, r.At.Sub(start))
			}
			close(release)
			if v := <-stay; v != "v" {
				t.Fatalf("the follower that stayed got %q", v)
			}
			if err := <-leader; err != nil {
				t.Fatal(err)
			}
			return redistest.Late("the cancelled follower left", r.At.Sub(start), 300*time.Millisecond, start, r.At)
		})
	})
}

// A leader that dies mid-fn (its process cut off) is replaced by exactly one follower, and
// everyone waiting gets that follower's result.
func TestLeaderDeathTakeover(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A lease of a second, doubled at each attempt: a stall that outlasted the lease
		// before the cut spoils an attempt, not the next.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			dead := group[string](t, b.PodVia(t, prefix, net, distsync.WithLeaseTTL(ttl)), "take")
			entered := make(chan struct{})
			hang := make(chan struct{})
			defer close(hang)
			var lead *distsync.Lease // the dead leader's, read once entered is closed
			go func() {
				ctx, cancel := bg(30 * time.Second)
				defer cancel()
				dead.Do(ctx, "k", func(ctx context.Context) (string, error) {
					lead, _ = distsync.LeaseFromContext(ctx)
					close(entered)
					<-hang
					return "from the dead", nil
				})
			}()
			<-entered
			var takeovers, called atomic.Int32
			fn := func(ctx context.Context) (string, error) {
				takeovers.Add(1)
				time.Sleep(100 * time.Millisecond)
				return "from the new leader", nil
			}
			var wg sync.WaitGroup
			errs := make(chan error, 9)
			var gs []*once.Group[string]
			for range 3 {
				// The followers' leases are the default: a stall of a loaded machine must not
				// end the new leader's lead while its fn runs.
				g := group[string](t, b.Pod(t, prefix), "take")
				gs = append(gs, g)
				for range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := bg(20 * time.Second)
						defer cancel()
						called.Add(1)
						if v, err, _ := g.Do(ctx, "k", fn); err != nil || v != "from the new leader" {
							errs <- fmt.Errorf("Do = %q, %v", v, err)
						}
					}()
				}
			}
			// The followers are waiting: every call made, and every process has it in flight and
			// listens for its result (the dead leader's process does not).
			waiting := redistest.Eventually(10*time.Second, func() bool {
				if called.Load() != 9 || takeovers.Load() > 0 {
					return false
				}
				for _, g := range gs {
					if !g.InFlight("k") {
						return false
					}
				}
				return b.Subscribers(t, gs[0].Channel("k")) >= 3
			})
			if err := lead.Err(); err != nil {
				// Its process stalled past its lease before the cut: taking over was right.
				return fmt.Errorf("the leader's lead ended before the cut: %w", err)
			}
			if !waiting {
				t.Fatalf("the followers did not all wait (%d of 9 called Do, %d took over while the leader led)", called.Load(), takeovers.Load())
			}
			net.Cut()
			start := time.Now()
			wg.Wait()
			done := time.Now()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if n := takeovers.Load(); n != 1 {
				t.Fatalf("%d followers took over, want exactly one", n)
			}
			t.Logf("taken over and done %v after the leader died", done.Sub(start))
			net.Restore()
			return redistest.Late(fmt.Sprintf("with a %v lease, the takeover was done after the leader died,", ttl), done.Sub(start), 3*ttl, start, done)
		})
	})
}

// With WithKeep, callers within the window get the kept result without fn; after it, one
// caller runs fn again; Forget drops the kept result.
func TestKeepAndForget(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A window of 700 ms, doubled at each attempt: calls that a stall kept past it spoil
		// an attempt, not the next.
		redistest.RetryScaled(t, 3, 700*time.Millisecond, func(keep time.Duration) error {
			prefix := b.Prefix(t)
			ga := group[int](t, b.Pod(t, prefix), "keep", once.WithKeep(keep))
			gb := group[int](t, b.Pod(t, prefix), "keep", once.WithKeep(keep))
			var runs atomic.Int32
			fn := func(ctx context.Context) (int, error) { return int(runs.Add(1)), nil }
			ctx, cancel := bg(10 * time.Second)
			defer cancel()
			// The result is kept from when the first call finishes, after this: until keep
			// from now it is surely there.
			window := time.Now().Add(keep)
			if v, _, _ := ga.Do(ctx, "k", fn); v != 1 {
				t.Fatalf("first call = %d", v)
			}
			for range 3 {
				if v, err, shared := gb.Do(ctx, "k", fn); v != 1 || err != nil || !shared {
					if !time.Now().Before(window) {
						return fmt.Errorf("a call %v after the first one began got %d, %v, %v: the window (%v) may have passed", time.Since(window.Add(-keep)), v, err, shared, keep)
					}
					t.Fatalf("call within the window = %d, %v, %v; want the kept 1", v, err, shared)
				}
			}
			time.Sleep(keep + 100*time.Millisecond)
			if v, _, _ := gb.Do(ctx, "k", fn); v != 2 {
				t.Fatalf("call after the window = %d, want fn run again (2)", v)
			}
			if err := ga.Forget(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if v, _, _ := ga.Do(ctx, "k", fn); v != 3 {
				t.Fatalf("call after Forget = %d, want fn run again (3)", v)
			}
			return nil
		})
	})
}

// Results too large to share, and results the codec cannot encode, are clear errors.
func TestTooLargeAndCodecErrors(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		ctx, cancel := bg(10 * time.Second)
		defer cancel()
		small := group[string](t, b.Pod(t, prefix), "big", once.WithMaxValueSize(10))
		_, err, _ := small.Do(ctx, "k", func(context.Context) (string, error) { return strings.Repeat("x", 100), nil })
		if !errors.Is(err, once.ErrTooLarge) {
			t.Fatalf("100 bytes with a 10-byte limit: %v", err)
		}
		funcs := group[func()](t, b.Pod(t, prefix), "codec")
		_, err, _ = funcs.Do(ctx, "k", func(context.Context) (func(), error) { return func() {}, nil })
		if !errors.Is(err, once.ErrCodec) {
			t.Fatalf("a func result through JSON: %v", err)
		}
		p := b.Pod(t, prefix)
		if _, err := once.NewGroup[string](p.H, "x", once.WithCodec(once.JSON[int]())); !errors.Is(err, distsync.ErrInvalid) {
			t.Fatalf("a codec of another type: %v", err)
		}
		if _, err := once.NewGroup[string](p.H, ""); !errors.Is(err, distsync.ErrInvalid) {
			t.Fatalf("an empty name: %v", err)
		}
		if _, err := once.NewGroup[string](p.H, "x", once.WithKeep(-time.Second)); !errors.Is(err, distsync.ErrInvalid) {
			t.Fatalf("a negative keep: %v", err)
		}
	})
}

// Once: exactly one success across processes; a failure lets the next caller try; Reset
// forgets the success.
func TestOnce(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		var attempts, successes atomic.Int32
		migrate := func(ctx context.Context) error {
			if attempts.Add(1) == 1 {
				time.Sleep(100 * time.Millisecond)
				return errors.New("lock timeout")
			}
			time.Sleep(100 * time.Millisecond)
			successes.Add(1)
			return nil
		}
		var os []*once.Once
		for range 3 {
			o, err := once.NewOnce(b.Pod(t, prefix).H, "migration-42")
			if err != nil {
				t.Fatal(err)
			}
			os = append(os, o)
		}
		ctx, cancel := bg(20 * time.Second)
		defer cancel()
		if err := os[0].Do(ctx, migrate); err == nil {
			t.Fatal("the failing first attempt returned nil")
		}
		if done, _ := os[1].Done(ctx); done {
			t.Fatal("Done after a failure")
		}
		var wg sync.WaitGroup
		errs := make(chan error, 9)
		for _, o := range os {
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- o.Do(ctx, migrate)
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := successes.Load(); n != 1 {
			t.Fatalf("%d successful runs, want exactly one", n)
		}
		for _, o := range os {
			if err := o.Do(ctx, func(context.Context) error { t.Error("ran after success"); return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if done, _ := os[2].Done(ctx); !done {
			t.Fatal("not Done after the success")
		}
		if err := os[1].Reset(ctx); err != nil {
			t.Fatal(err)
		}
		if err := os[2].Do(ctx, migrate); err != nil || successes.Load() != 2 {
			t.Fatalf("after Reset: %v, %d successes", err, successes.Load())
		}
	})
}

// A leader whose Handle closes mid-fn gives the lead up: a waiter takes over at once and gets
// its own result, not an error made of the closing leader's cancelled context.
func TestLeaderHandleClosesMidCall(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			lp := b.Pod(t, prefix)
			leader := group[string](t, lp, "close")
			follower := group[string](t, b.Pod(t, prefix), "close")
			entered := make(chan struct{})
			go func() {
				ctx, cancel := bg(20 * time.Second)
				defer cancel()
				leader.Do(ctx, "k", func(ctx context.Context) (string, error) {
					close(entered)
					<-ctx.Done() // ends when the lead is lost: here, the Handle closes
					return "", ctx.Err()
				})
			}()
			<-entered
			res := follower.DoChan(context.Background(), "k", func(context.Context) (string, error) { return "taken over", nil })
			waitSubscribed(t, b, leader.Channel("k"), 1) // the leader does not listen: this is the follower waiting
			cctx, ccancel := bg(5 * time.Second)
			defer ccancel()
			start := time.Now()
			if err := lp.H.Close(cctx); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-res:
				done := time.Now()
				if r.Err != nil || r.Val != "taken over" {
					t.Fatalf("follower got %q, %v; want to take over", r.Val, r.Err)
				}
				// Not when the lead's lease (10 s) would have run out.
				return redistest.Late("the follower took over after the leader's Handle closed,", done.Sub(start), 2*time.Second, start, done)
			case <-time.After(15 * time.Second):
				t.Fatal("the follower never finished")
			}
			return nil
		})
	})
}

// Calls cancelled while their first script is in flight leave no lead behind: the next
// caller leads at once.
func TestCancelledCallsLeaveNoLead(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		// A lead left behind would lapse only a minute later: what is gone before, the
		// cancelled calls took away.
		g := group[int](t, b.Pod(t, prefix), "brief", distsync.WithLeaseTTL(time.Minute))
		for i := range 100 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%5)*100*time.Microsecond)
			g.Do(ctx, fmt.Sprint(i), func(context.Context) (int, error) { return i, nil })
			cancel()
		}
		ok := redistest.Eventually(10*time.Second, func() bool {
			for _, k := range b.Keys(t, prefix) {
				if strings.HasSuffix(k, "}:once") {
					return false
				}
			}
			return true
		})
		if !ok {
			t.Fatalf("leads left behind by cancelled calls: %v", b.Keys(t, prefix))
		}
	})
}

// On a closed Handle, Do and Once.Do return ErrClosed and never run fn: fn would run without
// any coordination with the other processes.
func TestClosedHandleRunsNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := b.Pod(t, prefix)
		g := group[string](t, p, "closed")
		o, err := once.NewOnce(p.H, "closed-once")
		if err != nil {
			t.Fatal(err)
		}
		if err := p.H.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		ran := false
		v, err, _ := g.Do(context.Background(), "k", func(context.Context) (string, error) { ran = true; return "v", nil })
		if !errors.Is(err, distsync.ErrClosed) || v != "" || ran {
			t.Fatalf("Group.Do on a closed Handle = %q, %v (fn ran: %v); want ErrClosed without running fn", v, err, ran)
		}
		err = o.Do(context.Background(), func(context.Context) error { ran = true; return nil })
		if !errors.Is(err, distsync.ErrClosed) || ran {
			t.Fatalf("Once.Do on a closed Handle = %v (fn ran: %v); want ErrClosed without running fn", err, ran)
		}
		if done, err := o.Done(context.Background()); err != nil || done {
			t.Fatalf("Once.Done = %v, %v after a refused Do", done, err)
		}
	})
}

// A leader that loses its lead while fn runs (here its network is cut past the lease, and
// another process takes over meanwhile) is told: fn's context ends with the loss as its
// cause, its Do returns an error matching ErrLost, not fn's success, and its result is not
// shared (the other process gets its own leader's).
func TestLeaderThatLostItsLeadIsTold(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A lease of 400 ms, doubled at each attempt: a stall that outlasted the other
		// process's own lead spoils an attempt, not the next.
		redistest.RetryScaled(t, 3, 400*time.Millisecond, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			leader := group[string](t, b.PodVia(t, prefix, net), "lost", distsync.WithLeaseTTL(ttl))
			other := group[string](t, b.Pod(t, prefix), "lost", distsync.WithLeaseTTL(ttl))
			entered, release := make(chan struct{}), make(chan struct{})
			var cause error
			res := make(chan error, 1)
			go func() {
				ctx, cancel := bg(20 * time.Second)
				defer cancel()
				_, err, _ := leader.Do(ctx, "k", func(ctx context.Context) (string, error) {
					close(entered)
					<-release // a leader that does not look at its context
					cause = context.Cause(ctx)
					return "stale", nil
				})
				res <- err
			}()
			<-entered
			net.Cut()
			ctx, cancel := bg(10 * time.Second)
			defer cancel()
			v, err, _ := other.Do(ctx, "k", func(context.Context) (string, error) { return "fresh", nil })
			if errors.Is(err, distsync.ErrLost) {
				close(release)
				return fmt.Errorf("the other process lost its own lead: %w", err)
			}
			if err != nil || v != "fresh" {
				t.Fatalf("the other process got %q, %v; want to lead after the lost lease", v, err)
			}
			net.Restore()
			close(release)
			select {
			case err := <-res:
				if !errors.Is(err, distsync.ErrLost) {
					t.Fatalf("the leader that lost its lead got %v from Do; want an error matching ErrLost", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the leader's Do did not return")
			}
			if !errors.Is(cause, distsync.ErrLost) {
				t.Fatalf("fn's context ended with %v, want the loss", cause)
			}
			return nil
		})
	})
}

package once_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/once"
)

// waitSubscribed waits until channel has at least n subscribers: the processes that wait on it
// are listening.
func waitSubscribed(t *testing.T, b *redistest.Backend, channel string, n int64) {
	t.Helper()
	if !redistest.Eventually(30*time.Second, func() bool { return b.Subscribers(t, channel) >= n }) {
		t.Fatalf("%s: %d subscribers after 30 s, want %d", channel, b.Subscribers(t, channel), n)
	}
}

// recv returns what ch receives within 20 s.
func recv[T any](t *testing.T, what string, ch <-chan once.Result[T]) once.Result[T] {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no result after 20 s", what)
		panic("unreachable")
	}
}

// x/sync's TestForget, ported as it is (with ctx, and a Group[int] whose first fn returns 0):
// a call after Forget runs its own fn although the forgotten call is still in flight, and a
// call after that joins it.
func TestForget(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		g := group[int](t, b.Pod(t, b.Prefix(t)), "forget")
		ctx, cancel := bg(30 * time.Second)
		defer cancel()

		var (
			firstStarted  = make(chan struct{})
			unblockFirst  = make(chan struct{})
			firstFinished = make(chan struct{})
		)

		go func() {
			g.Do(ctx, "key", func(context.Context) (i int, e error) {
				close(firstStarted)
				<-unblockFirst
				close(firstFinished)
				return
			})
		}()
		<-firstStarted
		if err := g.Forget(ctx, "key"); err != nil {
			t.Fatal(err)
		}

		unblockSecond := make(chan struct{})
		secondResult := g.DoChan(ctx, "key", func(context.Context) (int, error) {
			<-unblockSecond
			return 2, nil
		})

		close(unblockFirst)
		<-firstFinished

		thirdResult := g.DoChan(ctx, "key", func(context.Context) (int, error) {
			return 3, nil
		})

		close(unblockSecond)
		<-secondResult
		r := <-thirdResult
		if r.Val != 2 || r.Err != nil {
			t.Errorf("We should receive result produced by second call, expected: 2, got %d (%v)", r.Val, r.Err)
		}
	})
}

// A Do in another process that starts after Forget does not take the result of the flight
// that was in flight during the Forget: it waits for that flight's lead to end, then leads.
// The callers that joined the flight before the Forget get its result.
func TestForgetAcrossProcesses(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		ga := group[string](t, b.Pod(t, prefix), "fx")
		gb := group[string](t, b.Pod(t, prefix), "fx")
		ctx, cancel := bg(30 * time.Second)
		defer cancel()
		entered, release := make(chan struct{}), make(chan struct{})
		first := ga.DoChan(ctx, "k", func(context.Context) (string, error) {
			close(entered)
			<-release
			return "before", nil
		})
		<-entered
		if err := ga.Forget(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		var ran atomic.Int32
		second := gb.DoChan(ctx, "k", func(context.Context) (string, error) {
			ran.Add(1)
			return "after", nil
		})
		waitSubscribed(t, b, ga.Channel("k"), 1) // the leader does not listen: this is b waiting
		close(release)
		if r := recv(t, "the forgotten flight", first); r.Val != "before" || r.Err != nil {
			t.Fatalf("the flight in flight during Forget returned %q, %v to its caller; want its own result", r.Val, r.Err)
		}
		if r := recv(t, "the Do after Forget", second); r.Val != "after" || r.Err != nil || ran.Load() != 1 {
			t.Fatalf("the Do after Forget in another process got %q, %v (its fn ran %d times); want its own result",
				r.Val, r.Err, ran.Load())
		}
	})
}

// A call of another process that waits for a flight when Forget runs still gets that flight's
// result (its callers came before the Forget), but is no longer joined once the Forget's
// notice reaches its process: a later Do there runs fn for itself.
func TestForgetDetachesWaitersInOtherProcesses(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		ga := group[string](t, b.Pod(t, prefix), "fd")
		gb := group[string](t, b.Pod(t, prefix), "fd")
		ctx, cancel := bg(30 * time.Second)
		defer cancel()
		entered, release := make(chan struct{}), make(chan struct{})
		first := ga.DoChan(ctx, "k", func(context.Context) (string, error) {
			close(entered)
			<-release
			return "before", nil
		})
		<-entered
		early := gb.DoChan(ctx, "k", func(context.Context) (string, error) { return "", fmt.Errorf("the early caller's fn ran") })
		waitSubscribed(t, b, ga.Channel("k"), 1)
		if err := ga.Forget(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if !redistest.Eventually(10*time.Second, func() bool { return !gb.InFlight("k") }) {
			t.Fatal("the waiting call of the other process was still joined 10 s after Forget")
		}
		late := gb.DoChan(ctx, "k", func(context.Context) (string, error) { return "after", nil })
		close(release)
		if r := recv(t, "the leader", first); r.Val != "before" || r.Err != nil {
			t.Fatalf("leader: %q, %v", r.Val, r.Err)
		}
		if r := recv(t, "the caller that joined before Forget", early); r.Val != "before" || r.Err != nil {
			t.Fatalf("the caller that waited before Forget got %q, %v; want the flight's result", r.Val, r.Err)
		}
		if r := recv(t, "the caller after Forget", late); r.Val != "after" || r.Err != nil {
			t.Fatalf("the caller after Forget got %q, %v; want its own fn's result", r.Val, r.Err)
		}
	})
}

// keptKeys returns the kept results (WithKeep; a Once's done-marker) under prefix.
func keptKeys(t *testing.T, b *redistest.Backend, prefix string) []string {
	t.Helper()
	var out []string
	for _, k := range b.Keys(t, prefix) {
		if strings.HasSuffix(k, ":once:kept") {
			out = append(out, k)
		}
	}
	return out
}

// With WithKeep, a flight in flight when Forget runs, in its process or another, does not
// leave its result kept, whichever of its finish and the Forget reaches Redis first: the next
// Do runs fn.
func TestForgetInFlightKeepsNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		ga := group[int](t, b.Pod(t, prefix), "fk", once.WithKeep(time.Minute))
		gb := group[int](t, b.Pod(t, prefix), "fk", once.WithKeep(time.Minute))
		ctx, cancel := bg(60 * time.Second)
		defer cancel()
		for i := range 40 {
			key := fmt.Sprint("k", i)
			forgetter := ga // the leader's process: the call Forget detaches must not keep
			if i%2 == 1 {
				forgetter = gb // another process: the finish must see the Forget in Redis
			}
			entered, release := make(chan struct{}), make(chan struct{})
			res := ga.DoChan(ctx, key, func(context.Context) (int, error) {
				close(entered)
				<-release
				return 1, nil
			})
			<-entered
			if i < 4 {
				// Forget while fn runs, then let it finish.
				if err := forgetter.Forget(ctx, key); err != nil {
					t.Fatal(err)
				}
				close(release)
			} else {
				// Forget as fn returns: either may reach Redis first.
				go close(release)
				if err := forgetter.Forget(ctx, key); err != nil {
					t.Fatal(err)
				}
			}
			if r := recv(t, "the flight", res); r.Val != 1 || r.Err != nil {
				t.Fatalf("round %d: the flight's caller got %d, %v", i, r.Val, r.Err)
			}
			for _, k := range keptKeys(t, b, prefix) {
				if strings.Contains(k, ":"+key+"}") {
					t.Fatalf("round %d: a result kept after Forget and the flight's end: %s", i, k)
				}
			}
			if v, err, _ := gb.Do(ctx, key, func(context.Context) (int, error) { return 2, nil }); v != 2 || err != nil {
				t.Fatalf("round %d: Do after Forget and the flight's end = %d, %v; want fn run again (2)", i, v, err)
			}
		}
	})
}

// A Once run in flight during Reset, in its process or another, does not set the done-marker:
// its callers get its outcome, Done reports false, and the next Do runs fn again.
func TestResetDuringRunLeavesNotDone(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		ctx, cancel := bg(30 * time.Second)
		defer cancel()
		for _, where := range []string{"same process", "other process"} {
			name := "reset-" + strings.ReplaceAll(where, " ", "-")
			oa, err := once.NewOnce(b.Pod(t, prefix).H, name)
			if err != nil {
				t.Fatal(err)
			}
			ob, err := once.NewOnce(b.Pod(t, prefix).H, name)
			if err != nil {
				t.Fatal(err)
			}
			resetter := oa
			if where == "other process" {
				resetter = ob
			}
			entered, release := make(chan struct{}), make(chan struct{})
			res := make(chan error, 1)
			go func() {
				res <- oa.Do(ctx, func(context.Context) error {
					close(entered)
					<-release
					return nil
				})
			}()
			<-entered
			if err := resetter.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			close(release)
			if err := <-res; err != nil {
				t.Fatalf("%s: the run in flight during Reset returned %v to its caller", where, err)
			}
			if done, err := ob.Done(ctx); err != nil || done {
				t.Fatalf("%s: Done = %v, %v after a run that was in flight during Reset; want false", where, done, err)
			}
			var ran atomic.Int32
			if err := ob.Do(ctx, func(context.Context) error { ran.Add(1); return nil }); err != nil || ran.Load() != 1 {
				t.Fatalf("%s: Do after Reset: %v, fn ran %d times; want it run", where, err, ran.Load())
			}
			if done, err := oa.Done(ctx); err != nil || !done {
				t.Fatalf("%s: Done = %v, %v after the run that followed Reset", where, done, err)
			}
		}
	})
}

// After flights with waiters in two processes, Forgets in flight and not, kept results,
// cancelled callers, and Onces done and reset mid-run, every key has a TTL except the
// done-marker of the Once that is done; once the leases, the result linger, the keep period
// and the fence retention have passed, only that marker is left.
func TestNoLeakedKeys(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = time.Second
		opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithFenceRetention(2 * time.Second)}
		redistest.Retry(t, 3, func() error { return noLeakedKeys(t, b, opts) })
	})
}

// noLeakedKeys is one attempt of TestNoLeakedKeys.
func noLeakedKeys(t *testing.T, b *redistest.Backend, opts []distsync.Option) error {
	prefix := b.Prefix(t)
	pa, pb := b.Pod(t, prefix, opts...), b.Pod(t, prefix, opts...)
	ga := group[int](t, pa, "leak", once.WithKeep(500*time.Millisecond))
	gb := group[int](t, pb, "leak", once.WithKeep(500*time.Millisecond))
	ctx, cancel := bg(60 * time.Second)
	defer cancel()

	// flight starts a call in a that runs until the returned func is called, with a caller
	// waiting in b; the func returns the caller's result. It returns an error, for
	// redistest.Retry, if the caller in b did not wait: a stall of a loaded machine past the
	// lead's lease of a second let it lead.
	flight := func(key string) (func(), func() once.Result[int], error) {
		entered, release := make(chan struct{}), make(chan struct{})
		res := ga.DoChan(ctx, key, func(context.Context) (int, error) {
			close(entered)
			<-release
			return 1, nil
		})
		<-entered
		follower := gb.DoChan(ctx, key, func(context.Context) (int, error) { return 2, nil })
		// The leader does not listen: a subscriber is b waiting.
		if !redistest.Eventually(30*time.Second, func() bool { return b.Subscribers(t, ga.Channel(key)) >= 1 || len(follower) > 0 }) {
			t.Fatalf("%s: nobody waited after 30 s", key)
		}
		if len(follower) > 0 {
			close(release)
			return nil, nil, fmt.Errorf("%s: the caller in b did not wait (%+v)", key, <-follower)
		}
		return func() { close(release) }, func() once.Result[int] {
			recv(t, key, res)
			return recv(t, key, follower)
		}, nil
	}
	release, wait, err := flight("plain")
	if err != nil {
		return err
	}
	release()
	wait()
	release, wait, err = flight("forgotten")
	if err != nil {
		return err
	}
	if err := gb.Forget(ctx, "forgotten"); err != nil {
		t.Fatal(err)
	}
	after := ga.DoChan(ctx, "forgotten", func(context.Context) (int, error) { return 3, nil })
	release()
	wait()
	recv(t, "after Forget", after)
	if err := ga.Forget(ctx, "idle"); err != nil {
		t.Fatal(err)
	}
	short, scancel := bg(100 * time.Millisecond)
	defer scancel()
	release, wait, err = flight("cancelled")
	if err != nil {
		return err
	}
	group[int](t, b.Pod(t, prefix, opts...), "leak", once.WithKeep(500*time.Millisecond)).
		Do(short, "cancelled", func(context.Context) (int, error) { return 2, nil })
	scancel()
	release()
	wait()

	done, err := once.NewOnce(pa.H, "leak-done")
	if err != nil {
		t.Fatal(err)
	}
	if err := done.Do(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	reset, err := once.NewOnce(pa.H, "leak-reset")
	if err != nil {
		t.Fatal(err)
	}
	entered, unblock := make(chan struct{}), make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- reset.Do(ctx, func(context.Context) error { close(entered); <-unblock; return nil })
	}()
	<-entered
	if err := reset.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	close(unblock)
	if err := <-res; err != nil {
		t.Fatal(err)
	}

	isMarker := func(k string) bool { return strings.Contains(k, "leak-done") && strings.HasSuffix(k, ":once:kept") }
	for _, k := range b.KeysWithoutTTL(t, prefix) {
		if !isMarker(k) {
			t.Errorf("a key without TTL: %s", k)
		}
	}
	var left []string
	if !redistest.Eventually(15*time.Second, func() bool {
		left = slices.DeleteFunc(b.Keys(t, prefix), isMarker)
		return len(left) == 0
	}) {
		t.Fatalf("keys left after every lease, linger, keep period and the fence retention passed: %v", left)
	}
	if k := keptKeys(t, b, prefix); len(k) != 1 || !isMarker(k[0]) {
		t.Fatalf("kept results left: %v; want only the done-marker of the Once that is done", k)
	}
	return nil
}

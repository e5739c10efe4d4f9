package once_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/once"
)

// OnceFunc: a failure goes to its callers and is retried; the first success runs once across
// processes and is remembered, in the Once of the same name too, until its Reset.
func TestOnceFunc(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		notReady := errors.New("database not ready")
		var attempts, successes atomic.Int32
		seed := func(ctx context.Context) error {
			time.Sleep(100 * time.Millisecond)
			if attempts.Add(1) == 1 {
				return notReady
			}
			successes.Add(1)
			return nil
		}
		var fs []func(context.Context) error
		for range 3 {
			f, err := once.OnceFunc(b.Pod(t, prefix).H, "seed", seed)
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, f)
		}
		ctx, cancel := bg(20 * time.Second)
		defer cancel()
		if err := fs[0](ctx); !errors.Is(err, notReady) {
			t.Fatalf("the failing first call = %v; want fn's error itself", err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 9)
		for _, f := range fs {
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- f(ctx)
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
		for _, f := range fs {
			if err := f(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := attempts.Load(); n != 2 {
			t.Fatalf("fn ran %d times, want 2", n)
		}
		o, err := once.NewOnce(b.Pod(t, prefix).H, "seed")
		if err != nil {
			t.Fatal(err)
		}
		if done, err := o.Done(ctx); !done || err != nil {
			t.Fatalf("the Once of the same name: Done = %v, %v", done, err)
		}
		if err := o.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		if err := fs[2](ctx); err != nil || successes.Load() != 2 {
			t.Fatalf("after Reset: %v, %d successes; want fn run again", err, successes.Load())
		}
	})
}

// A failure in the process that runs fn reaches the callers waiting in another as
// ErrLeaderFailed with its message, and is not kept.
func TestOnceFuncFailureReachesOtherProcesses(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		entered, release := make(chan struct{}), make(chan struct{})
		var runs atomic.Int32
		fn := func(context.Context) error {
			if runs.Add(1) == 1 {
				close(entered)
				<-release
				return errors.New("disk full")
			}
			return nil
		}
		fa, err := once.OnceFunc(b.Pod(t, prefix).H, "fail", fn)
		if err != nil {
			t.Fatal(err)
		}
		gb := group[struct{}](t, b.Pod(t, prefix), "fail") // to see when b waits
		fb, err := once.OnceFunc(b.Pod(t, prefix).H, "fail", fn)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := bg(20 * time.Second)
		defer cancel()
		leader := make(chan error, 1)
		go func() { leader <- fa(ctx) }()
		<-entered
		waiter := make(chan error, 1)
		go func() { waiter <- fb(ctx) }()
		if !redistest.Eventually(10*time.Second, func() bool { return b.Subscribers(t, gb.Channel("")) > 0 }) {
			t.Fatal("the other process never waited")
		}
		close(release)
		if err := <-waiter; !errors.Is(err, once.ErrLeaderFailed) || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("the other process got %v; want ErrLeaderFailed with the message", err)
		}
		if err := <-leader; err == nil || errors.Is(err, once.ErrLeaderFailed) {
			t.Fatalf("the leader's process got %v; want fn's error itself", err)
		}
		if err := fb(ctx); err != nil || runs.Load() != 2 {
			t.Fatalf("the next call = %v (fn ran %d times); want fn run again", err, runs.Load())
		}
	})
}

type endpoint struct {
	Host string
	Port int
}

// OnceValues: the first successful pair is computed once across processes, kept, and given to
// every later call, in every process, as it was returned; a failure is not kept.
func TestOnceValues(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		var runs atomic.Int32
		var ready atomic.Bool
		plan := func(pod string) func(context.Context) (endpoint, []byte, error) {
			return func(context.Context) (endpoint, []byte, error) {
				runs.Add(1)
				if !ready.Load() {
					return endpoint{Host: pod}, []byte("partial"), errors.New("not ready")
				}
				time.Sleep(100 * time.Millisecond)
				return endpoint{Host: pod, Port: 6379}, []byte{0, 1, 0xff}, nil
			}
		}
		var vs []func(context.Context) (endpoint, []byte, error)
		for i := range 3 {
			v, err := once.OnceValues(b.Pod(t, prefix).H, "plan", plan(fmt.Sprint("pod ", i)))
			if err != nil {
				t.Fatal(err)
			}
			vs = append(vs, v)
		}
		ctx, cancel := bg(20 * time.Second)
		defer cancel()
		e, k, err := vs[0](ctx)
		if err == nil || e.Host != "pod 0" || string(k) != "partial" {
			t.Fatalf("a failing call = %v, %q, %v; want fn's values and error, as fn returned them", e, k, err)
		}
		ready.Store(true)
		type result struct {
			e   endpoint
			k   []byte
			err error
		}
		var wg sync.WaitGroup
		results := make(chan result, 9)
		for _, v := range vs {
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					e, k, err := v(ctx)
					results <- result{e, k, err}
				}()
			}
		}
		wg.Wait()
		close(results)
		var first *result
		for r := range results {
			if r.err != nil || r.e.Port != 6379 || !reflect.DeepEqual(r.k, []byte{0, 1, 0xff}) {
				t.Fatalf("a call = %v, %q, %v", r.e, r.k, r.err)
			}
			if first == nil {
				first = &r
			} else if r.e != first.e {
				t.Fatalf("calls got %v and %v: one pair, computed once, for every call", first.e, r.e)
			}
		}
		if n := runs.Load(); n != 2 {
			t.Fatalf("fn ran %d times, want 2 (one failure, one success)", n)
		}
		for _, v := range vs {
			if e, k, err := v(ctx); err != nil || e != first.e || !reflect.DeepEqual(k, first.k) {
				t.Fatalf("a later call = %v, %q, %v; want the kept pair %v, %q", e, k, err, first.e, first.k)
			}
		}
	})
}

// OnceValues bounds the encoded pair (WithMaxValueSize), and a pair JSON cannot encode is an
// ErrCodec error.
func TestOnceValuesTooLargeAndCodecErrors(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		p := b.Pod(t, b.Prefix(t))
		ctx, cancel := bg(10 * time.Second)
		defer cancel()
		big, err := once.OnceValues(p.H, "big", func(context.Context) (string, string, error) {
			return "a", strings.Repeat("x", 100), nil
		}, once.WithMaxValueSize(50))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := big(ctx); !errors.Is(err, once.ErrTooLarge) {
			t.Fatalf("a pair of 100 bytes with a 50-byte limit: %v", err)
		}
		funcs, err := once.OnceValues(p.H, "codec", func(context.Context) (int, func(), error) { return 1, func() {}, nil })
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := funcs(ctx); !errors.Is(err, once.ErrCodec) {
			t.Fatalf("a func through JSON: %v", err)
		}
	})
}

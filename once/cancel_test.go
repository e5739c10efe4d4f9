package once_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/once"
)

// checkNotAcquired fails t unless err matches both ErrNotAcquired and want (the context's
// error).
func checkNotAcquired(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, want) {
		t.Errorf("%s: %v; want an error matching both ErrNotAcquired and %v", what, err, want)
	}
}

// waits are the ways a caller's context can end its wait: a timeout, a cancellation, and a
// context that ended before the call.
var waits = []struct {
	name string
	ctx  func() (context.Context, context.CancelFunc)
	want error
}{
	{"timeout", func() (context.Context, context.CancelFunc) { return bg(50 * time.Millisecond) }, context.DeadlineExceeded},
	{"cancel", func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		return ctx, cancel
	}, context.Canceled},
	{"ended before", func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, cancel
	}, context.Canceled},
}

// A caller whose context ends while it waits for a call, led in its own process or in another,
// gets an error matching both ErrNotAcquired and the context's error, from every way in: Do,
// DoChan, Once.Do, OnceFunc, OnceValue and OnceValues. The call goes on for the others.
func TestCancelledWaitIsNotAcquired(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		pa, pb := b.Pod(t, prefix), b.Pod(t, prefix)
		// lead starts a call in process a that runs until the test lets it go, and returns a
		// function that lets it go and waits for its result.
		lead := func(t *testing.T, start func(fn func() error) <-chan error) {
			entered, release := make(chan struct{}), make(chan struct{})
			done := start(func() error {
				close(entered)
				<-release
				return nil
			})
			<-entered
			t.Cleanup(func() {
				close(release)
				if err := <-done; err != nil {
					t.Errorf("the leader's call: %v", err)
				}
			})
		}
		async := func(f func() error) <-chan error {
			ch := make(chan error, 1)
			go func() { ch <- f() }()
			return ch
		}

		t.Run("Group", func(t *testing.T) {
			ga, gb := group[int](t, pa, "g"), group[int](t, pb, "g")
			lead(t, func(fn func() error) <-chan error {
				return async(func() error {
					_, err, _ := ga.Do(context.Background(), "k", func(context.Context) (int, error) { return 1, fn() })
					return err
				})
			})
			never := func(context.Context) (int, error) { t.Error("a waiter ran fn"); return 0, nil }
			for _, w := range waits {
				for _, c := range []struct {
					process string
					g       *once.Group[int]
				}{{"same process", ga}, {"other process", gb}} {
					ctx, cancel := w.ctx()
					_, err, _ := c.g.Do(ctx, "k", never)
					checkNotAcquired(t, "Do, "+c.process+", "+w.name, err, w.want)
					cancel()
					ctx, cancel = w.ctx()
					select {
					case r := <-c.g.DoChan(ctx, "k", never):
						checkNotAcquired(t, "DoChan, "+c.process+", "+w.name, r.Err, w.want)
					case <-time.After(10 * time.Second):
						t.Fatalf("DoChan, %s, %s: no result", c.process, w.name)
					}
					cancel()
				}
			}
		})

		t.Run("Once", func(t *testing.T) {
			oa, err := once.NewOnce(pa.H, "o")
			if err != nil {
				t.Fatal(err)
			}
			ob, err := once.NewOnce(pb.H, "o")
			if err != nil {
				t.Fatal(err)
			}
			lead(t, func(fn func() error) <-chan error {
				return async(func() error { return oa.Do(context.Background(), func(context.Context) error { return fn() }) })
			})
			never := func(context.Context) error { t.Error("a waiter ran fn"); return nil }
			fa, err := once.OnceFunc(pa.H, "o", never)
			if err != nil {
				t.Fatal(err)
			}
			fb, err := once.OnceFunc(pb.H, "o", never)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range waits {
				for _, c := range []struct {
					what string
					do   func(ctx context.Context) error
				}{
					{"Once.Do, same process", func(ctx context.Context) error { return oa.Do(ctx, never) }},
					{"Once.Do, other process", func(ctx context.Context) error { return ob.Do(ctx, never) }},
					{"OnceFunc, same process", fa},
					{"OnceFunc, other process", fb},
				} {
					ctx, cancel := w.ctx()
					checkNotAcquired(t, c.what+", "+w.name, c.do(ctx), w.want)
					cancel()
				}
			}
		})

		t.Run("OnceValue", func(t *testing.T) {
			var gate func() error // set before any call
			fn := func(context.Context) (int, error) { return 1, gate() }
			va, err := once.OnceValue(pa.H, "v", fn)
			if err != nil {
				t.Fatal(err)
			}
			vb, err := once.OnceValue(pb.H, "v", fn)
			if err != nil {
				t.Fatal(err)
			}
			lead(t, func(f func() error) <-chan error {
				gate = f
				return async(func() error { _, err := va(context.Background()); return err })
			})
			for _, w := range waits {
				for _, c := range []struct {
					process string
					v       func(context.Context) (int, error)
				}{{"same process", va}, {"other process", vb}} {
					ctx, cancel := w.ctx()
					v, err := c.v(ctx)
					checkNotAcquired(t, "OnceValue, "+c.process+", "+w.name, err, w.want)
					if v != 0 {
						t.Errorf("OnceValue, %s, %s: value %d with the error", c.process, w.name, v)
					}
					cancel()
				}
			}
		})

		t.Run("OnceValues", func(t *testing.T) {
			var gate func() error
			fn := func(context.Context) (int, string, error) { return 1, "one", gate() }
			va, err := once.OnceValues(pa.H, "vs", fn)
			if err != nil {
				t.Fatal(err)
			}
			vb, err := once.OnceValues(pb.H, "vs", fn)
			if err != nil {
				t.Fatal(err)
			}
			lead(t, func(f func() error) <-chan error {
				gate = f
				return async(func() error { _, _, err := va(context.Background()); return err })
			})
			for _, w := range waits {
				for _, c := range []struct {
					process string
					v       func(context.Context) (int, string, error)
				}{{"same process", va}, {"other process", vb}} {
					ctx, cancel := w.ctx()
					v1, v2, err := c.v(ctx)
					checkNotAcquired(t, "OnceValues, "+c.process+", "+w.name, err, w.want)
					if v1 != 0 || v2 != "" {
						t.Errorf("OnceValues, %s, %s: values %d, %q with the error", c.process, w.name, v1, v2)
					}
					cancel()
				}
			}
		})
	})
}

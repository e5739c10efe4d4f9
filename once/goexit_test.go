package once_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/once"
)

// goexitLease is long, so that a test that waited for a lead left behind by a Goexit would
// take that long; promptly is what such a test allows instead.
const goexitLease, promptly = 5 * time.Second, 2 * time.Second

// leads returns the lead keys (…}:once) left under prefix.
func leads(t *testing.T, b *redistest.Backend, prefix string) []string {
	var out []string
	for _, k := range b.Keys(t, prefix) {
		if strings.HasSuffix(k, "}:once") {
			out = append(out, k)
		}
	}
	return out
}

// A fn that calls runtime.Goexit neither succeeds nor leaves its lead behind: the callers get
// an error matching ErrGoexit, nothing is kept, the lead is given up in Redis when Do returns,
// and the next call runs fn again at once, not when the lease would have run out.
func TestGoexitInFnIsAnErrorAndFreesTheLead(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			p := b.Pod(t, prefix)
			g := group[string](t, p, "goexit", distsync.WithLeaseTTL(goexitLease))
			ctx, cancel := bg(20 * time.Second)
			defer cancel()
			v, err, _ := g.Do(ctx, "k", func(context.Context) (string, error) {
				runtime.Goexit()
				return "unreachable", nil
			})
			if !errors.Is(err, once.ErrGoexit) || v != "" {
				t.Fatalf("Do of a fn that called Goexit = %q, %v; want an error matching ErrGoexit", v, err)
			}
			if l := leads(t, b, prefix); len(l) != 0 {
				t.Fatalf("leads left after Do returned: %v", l)
			}
			start := time.Now()
			v, err, _ = g.Do(ctx, "k", func(context.Context) (string, error) { return "again", nil })
			done := time.Now()
			if err != nil || v != "again" {
				t.Fatalf("the next Do = %q, %v; want fn run again", v, err)
			}
			if err := redistest.Late(fmt.Sprintf("the next Do (lease %v) returned", goexitLease), done.Sub(start), promptly, start, done); err != nil {
				return err
			}

			// A Once: not done, and the next Do runs fn.
			o, err := once.NewOnce(p.H, "goexit-once", distsync.WithLeaseTTL(goexitLease))
			if err != nil {
				t.Fatal(err)
			}
			if err := o.Do(ctx, func(context.Context) error { runtime.Goexit(); return nil }); !errors.Is(err, once.ErrGoexit) {
				t.Fatalf("Once.Do of a fn that called Goexit = %v; want ErrGoexit", err)
			}
			if done, err := o.Done(ctx); done || err != nil {
				t.Fatalf("Done after a Goexit = %v, %v", done, err)
			}
			start = time.Now()
			ran := false
			err = o.Do(ctx, func(context.Context) error { ran = true; return nil })
			done = time.Now()
			if err != nil || !ran {
				t.Fatalf("the next Once.Do = %v (fn ran: %v)", err, ran)
			}
			return redistest.Late(fmt.Sprintf("the next Once.Do (lease %v) returned", goexitLease), done.Sub(start), promptly, start, done)
		})
	})
}

// A process that waits for a call that ends in Goexit in another process gets an error
// matching ErrGoexit, not a success, and its next call leads at once.
func TestGoexitReachesOtherProcesses(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			ga := group[string](t, b.Pod(t, prefix), "goexit", distsync.WithLeaseTTL(goexitLease))
			gb := group[string](t, b.Pod(t, prefix), "goexit", distsync.WithLeaseTTL(goexitLease))
			entered, release := make(chan struct{}), make(chan struct{})
			ctx, cancel := bg(20 * time.Second)
			defer cancel()
			leader := ga.DoChan(ctx, "k", func(context.Context) (string, error) {
				close(entered)
				<-release
				runtime.Goexit()
				return "unreachable", nil
			})
			<-entered
			var ranB atomic.Int32
			fnB := func(context.Context) (string, error) { ranB.Add(1); return "b", nil }
			waiter := gb.DoChan(ctx, "k", fnB)
			// Once b listens on the key's channel (a leads without listening), the result
			// reaches it whenever it is published.
			if !redistest.Eventually(10*time.Second, func() bool { return b.Subscribers(t, gb.Channel("k")) > 0 }) {
				t.Fatal("the other process never waited")
			}
			released := time.Now()
			close(release)
			for _, c := range []struct {
				who string
				ch  <-chan once.Result[string]
			}{{"the leader's process", leader}, {"the other process", waiter}} {
				r := recv(t, c.who, c.ch)
				got := time.Now()
				if !errors.Is(r.Err, once.ErrGoexit) || r.Val != "" {
					t.Fatalf("%s got %q, %v; want an error matching ErrGoexit", c.who, r.Val, r.Err)
				}
				// Not when the lease would have run out.
				if err := redistest.Late(c.who+" had its result after the Goexit,", got.Sub(released), promptly, released, got); err != nil {
					return err
				}
			}
			if ranB.Load() != 0 {
				t.Fatal("the other process ran fn while it waited")
			}
			start := time.Now()
			v, err, _ := gb.Do(ctx, "k", fnB)
			done := time.Now()
			if err != nil || v != "b" || ranB.Load() != 1 {
				t.Fatalf("the other process's next Do = %q, %v (fn ran %d times); want it to lead", v, err, ranB.Load())
			}
			return redistest.Late(fmt.Sprintf("the other process's next Do (lease %v) returned", goexitLease), done.Sub(start), promptly, start, done)
		})
	})
}

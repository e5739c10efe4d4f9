package once_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/once"
)

// An option given where it does not apply is an error matching ErrInvalid that names it, for
// every constructor of the package; nothing is sent to Redis.
func TestOptionsThatDoNotApply(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Mini)
	h := b.Pod(t, b.Prefix(t)).H
	intFn := func(context.Context) (int, error) { return 1, nil }
	pairFn := func(context.Context) (int, string, error) { return 1, "a", nil }
	errFn := func(context.Context) error { return nil }
	for _, c := range []struct {
		what   string
		option string // named in the error; "" for a bad value
		make   func() error
	}{
		{"NewOnce with WithKeep", "WithKeep", func() error { _, err := once.NewOnce(h, "x", once.WithKeep(time.Second)); return err }},
		{"NewOnce with WithMaxValueSize", "WithMaxValueSize", func() error { _, err := once.NewOnce(h, "x", once.WithMaxValueSize(10)); return err }},
		{"NewOnce with WithCodec", "WithCodec", func() error { _, err := once.NewOnce(h, "x", once.WithCodec(once.JSON[int]())); return err }},
		{"OnceValue with WithKeep", "WithKeep", func() error { _, err := once.OnceValue(h, "x", intFn, once.WithKeep(time.Second)); return err }},
		{"OnceValue with WithKeepErrors", "WithKeepErrors", func() error { _, err := once.OnceValue(h, "x", intFn, once.WithKeepErrors()); return err }},
		{"OnceValue with a codec of another type", "", func() error {
			_, err := once.OnceValue(h, "x", intFn, once.WithCodec(once.String()))
			return err
		}},
		{"OnceFunc with WithKeep", "WithKeep", func() error { _, err := once.OnceFunc(h, "x", errFn, once.WithKeep(time.Second)); return err }},
		{"OnceFunc with WithMaxValueSize", "WithMaxValueSize", func() error { _, err := once.OnceFunc(h, "x", errFn, once.WithMaxValueSize(10)); return err }},
		{"OnceValues with WithKeep", "WithKeep", func() error { _, err := once.OnceValues(h, "x", pairFn, once.WithKeep(time.Second)); return err }},
		{"OnceValues with WithCodec", "WithCodec", func() error { _, err := once.OnceValues(h, "x", pairFn, once.WithCodec(once.JSON[int]())); return err }},
		{"NewGroup with WithWaiterLease", "WithWaiterLease", func() error {
			_, err := once.NewGroup[int](h, "x", distsync.WithWaiterLease(time.Second))
			return err
		}},
		{"NewGroup with WithHandoffWindow", "WithHandoffWindow", func() error {
			_, err := once.NewGroup[int](h, "x", distsync.WithHandoffWindow(time.Second))
			return err
		}},
		{"NewGroup with WithKeyPrefix", "WithKeyPrefix", func() error { _, err := once.NewGroup[int](h, "x", distsync.WithKeyPrefix("p:")); return err }},
		{"NewGroup with a lease below MinLeaseTTL", "", func() error {
			_, err := once.NewGroup[int](h, "x", distsync.WithLeaseTTL(time.Millisecond))
			return err
		}},
		{"OnceValues with a non-positive size", "", func() error { _, err := once.OnceValues(h, "x", pairFn, once.WithMaxValueSize(0)); return err }},
		{"OnceFunc with an empty name", "", func() error { _, err := once.OnceFunc(h, "", errFn); return err }},
		{"distsync.New with WithKeep", "WithKeep", func() error { _, err := distsync.New(b.Client(t), once.WithKeep(time.Second)); return err }},
	} {
		err := c.make()
		if !errors.Is(err, distsync.ErrInvalid) || !strings.Contains(err.Error(), c.option) {
			t.Errorf("%s: %v; want an error matching ErrInvalid naming %q", c.what, err, c.option)
		}
	}

	// And where they apply, they are taken.
	for _, c := range []struct {
		what string
		make func() error
	}{
		{"NewOnce with WithFixedLease", func() error { _, err := once.NewOnce(h, "x", distsync.WithFixedLease(time.Second)); return err }},
		{"OnceFunc with WithLeaseTTL", func() error { _, err := once.OnceFunc(h, "x", errFn, distsync.WithLeaseTTL(time.Second)); return err }},
		{"OnceValue with WithMaxValueSize and WithCodec", func() error {
			_, err := once.OnceValue(h, "x", intFn, once.WithMaxValueSize(10), once.WithCodec(once.JSON[int]()))
			return err
		}},
		{"OnceValues with WithMaxValueSize and WithFixedLease", func() error {
			_, err := once.OnceValues(h, "x", pairFn, once.WithMaxValueSize(10), distsync.WithFixedLease(time.Second))
			return err
		}},
		{"NewGroup with its options", func() error {
			_, err := once.NewGroup[int](h, "x", once.WithKeep(time.Second), once.WithKeepErrors(), once.WithMaxValueSize(10),
				once.WithCodec(once.JSON[int]()), distsync.WithFixedLease(time.Second))
			return err
		}},
	} {
		if err := c.make(); err != nil {
			t.Errorf("%s: %v", c.what, err)
		}
	}
}

// A Group with a fixed lease: the lead ends that long after it was taken, even though fn still
// runs (fn's context ends, with a cause matching ErrLost), another process may lead then, and
// the first leader's Do reports the loss.
func TestFixedLeaseEndsTheLead(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A fixed lease of 300 ms, doubled at each attempt: a stall that outlasted the other
		// process's own lead spoils an attempt, not the next.
		redistest.RetryScaled(t, 3, 300*time.Millisecond, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			leader := group[string](t, b.Pod(t, prefix), "fixed", distsync.WithFixedLease(ttl))
			other := group[string](t, b.Pod(t, prefix), "fixed", distsync.WithFixedLease(ttl))
			entered, release := make(chan struct{}), make(chan struct{})
			type end struct {
				at       time.Time // when fn saw its context end
				deadline time.Time // its lease's deadline
				cause    error
			}
			ended := make(chan end, 1)
			res := make(chan error, 1)
			asked := time.Now()
			go func() {
				ctx, cancel := bg(30 * time.Second)
				defer cancel()
				_, err, _ := leader.Do(ctx, "k", func(ctx context.Context) (string, error) {
					var deadline time.Time
					if l, ok := distsync.LeaseFromContext(ctx); ok {
						deadline = l.Deadline()
					}
					close(entered)
					select {
					case <-ctx.Done():
						ended <- end{time.Now(), deadline, context.Cause(ctx)}
					case <-time.After(20 * time.Second):
						ended <- end{time.Now(), deadline, nil}
					}
					<-release // fn goes on after its lease ended
					return "stale", nil
				})
				res <- err
			}()
			<-entered
			e := <-ended
			if !errors.Is(e.cause, distsync.ErrLost) {
				t.Fatalf("fn's context: cause %v after %v; want it to end with ErrLost", e.cause, e.at.Sub(asked))
			}
			// The deadline counts from when the lead was asked for, less 1% and 2 ms for drift, and
			// fn's context ends at it, not before. (How much of it fn sees depends on how soon a
			// loaded machine starts fn.)
			if earliest := asked.Add(ttl - ttl/100 - 2*time.Millisecond); e.deadline.Before(earliest) {
				t.Fatalf("the fixed lease's deadline came %v after the lead was asked for, with a fixed lease of %v", e.deadline.Sub(asked), ttl)
			}
			if e.at.Before(e.deadline) {
				t.Fatalf("fn's context ended %v before its lease's deadline (%v after the lead was asked for, fixed lease %v)",
					e.deadline.Sub(e.at), e.deadline.Sub(asked), ttl)
			}
			ctx, cancel := bg(10 * time.Second)
			defer cancel()
			v, err, _ := other.Do(ctx, "k", func(context.Context) (string, error) { return "fresh", nil })
			if errors.Is(err, distsync.ErrLost) {
				close(release)
				return fmt.Errorf("the other process lost its own lead: %w", err)
			}
			if err != nil || v != "fresh" {
				t.Fatalf("another process got %q, %v; want to lead once the fixed lease ended", v, err)
			}
			close(release)
			select {
			case err := <-res:
				if !errors.Is(err, distsync.ErrLost) {
					t.Fatalf("the leader whose fixed lease ended got %v; want ErrLost", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the leader's Do did not return")
			}
			return nil
		})
	})
}

// The leader's fn finds its lease in its context: held, with a fencing token that grows from
// one lead to the next and a deadline ahead; released when the call is done.
func TestLeaderSeesItsLease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 5 * time.Second
		g := group[int64](t, b.Pod(t, b.Prefix(t)), "lease", distsync.WithLeaseTTL(ttl))
		ctx, cancel := bg(10 * time.Second)
		defer cancel()
		var leases []*distsync.Lease
		for i := range 2 {
			token, err, _ := g.Do(ctx, "k", func(ctx context.Context) (int64, error) {
				l, ok := distsync.LeaseFromContext(ctx)
				switch {
				case !ok:
					return 0, errors.New("no lease in fn's context")
				case l.Err() != nil:
					return 0, l.Err()
				case l.TTL() != ttl:
					return 0, errors.New("lease of " + l.TTL().String())
				case !l.Deadline().After(time.Now()) || time.Until(l.Deadline()) > ttl:
					return 0, errors.New("deadline " + time.Until(l.Deadline()).String() + " ahead")
				}
				leases = append(leases, l)
				return l.Token(), nil
			})
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if token <= 0 {
				t.Fatalf("call %d: fencing token %d; want a positive one (once_begin.lua must hand one out)", i, token)
			}
			if i > 0 && token <= leases[i-1].Token() {
				t.Fatalf("call %d: fencing token %d after %d; want it to grow", i, token, leases[i-1].Token())
			}
		}
		for _, l := range leases {
			if !errors.Is(l.Err(), distsync.ErrReleased) {
				t.Fatalf("a lead's lease after its call: %v; want ErrReleased", l.Err())
			}
		}
		if _, ok := distsync.LeaseFromContext(ctx); ok {
			t.Fatal("a lease in the caller's own context")
		}
	})
}

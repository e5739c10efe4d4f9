package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Prim is one primitive as the acquire path knows it: the handle it was made from, its kind
// (one of the Kind constants, as errors and the observer name it) and its name. Every blocking
// and trying acquisition of the family runs through its Wait and Try, which own what is the
// same for all of them: the observer's begin and end, the context check, the handle's
// enter and exit, the sink that carries the hold's lease up from the waiting machinery, and
// the mapping of errors. A primitive supplies only what is its own: how to wait or try, and
// what to clean up when that fails.
type Prim struct {
	H    *Handle
	Kind string
	Name string
}

// Weight is what an acquisition asks for, as the observer reports it: N units (1 but for a
// semaphore), Shared for a read hold.
type Weight struct {
	N      int64
	Shared bool
}

// One is the weight of an exclusive hold.
var One = Weight{N: 1}

// Wait runs a blocking acquisition. wait waits, under a context that carries the call's
// observer and a lease sink, until it holds the claim, and returns its lease or an error;
// a lease the waiting machinery delivered to the sink (Deliver) is the call's, in preference
// to the one wait returns (a primitive's current hold, which another goroutine may have
// released and replaced meanwhile). Its errors are mapped by Fail with verb ("lock",
// "acquire", "campaign").
func (p Prim) Wait(ctx context.Context, w Weight, verb string, wait func(ctx context.Context) (*Lease, error)) (*Lease, error) {
	obs := p.H.Begin(ctx, p.Kind, p.Name, w.N, w.Shared)
	l, _, err := p.enter(obs.Bind(ctx), verb, func(ctx context.Context) (*Lease, bool, error) {
		l, err := wait(ctx)
		return l, true, err
	})
	obs.Done(l, err)
	return l, err
}

// Try runs one try without waiting: try returns the lease it took and true, or false with a
// nil error if the claim was not free. The rest is as for Wait.
func (p Prim) Try(ctx context.Context, w Weight, verb string, try func(ctx context.Context) (*Lease, bool, error)) (*Lease, bool, error) {
	obs := p.H.Begin(ctx, p.Kind, p.Name, w.N, w.Shared)
	l, ok, err := p.enter(obs.Bind(ctx), verb, try)
	obs.Done(l, err)
	return l, ok, err
}

func (p Prim) enter(ctx context.Context, verb string, f func(ctx context.Context) (*Lease, bool, error)) (*Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, p.NotAcquired(err)
	}
	if err := p.H.Enter(); err != nil {
		return nil, false, p.Wrap(err)
	}
	defer p.H.Exit()
	sctx, sink := WithSink(ctx)
	l, ok, err := f(sctx)
	if err != nil {
		return nil, false, p.Fail(ctx, verb, err)
	}
	if !ok {
		return nil, false, nil
	}
	if sink.Lease != nil {
		l = sink.Lease
	}
	return l, true, nil
}

// Fail maps the error of an acquisition that did not take its claim: an error that matches
// ErrNotAcquired already as it is; not acquired (matching
// ErrNotAcquired) with ctx's error if ctx ended, or with ErrLate if the claim came too late to
// use; ErrClosed, and a loss, as they are; any other error after verb. Each names the
// primitive.
func (p Prim) Fail(ctx context.Context, verb string, err error) error {
	switch {
	case errors.Is(err, ErrNotAcquired):
		return err // made by the primitive, with more to say (a quorum's primaries)
	case ctx.Err() != nil:
		return p.NotAcquired(ctx.Err())
	case errors.Is(err, ErrLate):
		return p.NotAcquired(err)
	case errors.Is(err, ErrClosed):
		return p.Wrap(ErrClosed)
	case errors.Is(err, ErrLost):
		return p.Wrap(err) // a hold it would have joined or re-entered was lost
	}
	return fmt.Errorf("%s %q: %s: %w", p.Kind, p.Name, verb, err)
}

// NotAcquired returns err as the error of an acquisition that ended before it acquired: it
// matches ErrNotAcquired and err.
func (p Prim) NotAcquired(err error) error {
	return fmt.Errorf("%s %q: %w: %w", p.Kind, p.Name, ErrNotAcquired, err)
}

// Wrap returns err after the primitive's kind and name.
func (p Prim) Wrap(err error) error {
	return fmt.Errorf("%s %q: %w", p.Kind, p.Name, err)
}

// Errorf returns an error after the primitive's kind and name, formatted as fmt.Errorf does.
func (p Prim) Errorf(format string, args ...any) error {
	return p.Wrap(fmt.Errorf(format, args...))
}

// Backstop is how long a waiter may wait without a message before it checks again: until
// the claim it waits behind would lapse (left, as Redis reported it), plus slack, since a
// claim that lapses publishes nothing. The slack keeps an idle waiter to one command per lease
// against a holder that renews (its lease never drops below 2/3 of ttl, so left + ttl/3 >=
// ttl), and shrinks for a claim about to lapse anyway (a fixed lease, a crashed holder), so
// that the waiter is there soon after it does.
func Backstop(left time.Duration, ttl time.Duration) time.Duration {
	return left + min(ttl/RenewDivisor, left/2) + time.Millisecond
}

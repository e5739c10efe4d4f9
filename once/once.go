package once

import (
	"context"
	"errors"
	"fmt"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/kind"
)

// Once is sync.Once across processes: Do runs its function until it succeeds once, for every
// process that shares the Once's name and Redis. Make it with [NewOnce]; it is safe for
// concurrent use and must not be copied.
//
// The success is remembered in Redis by a done-marker without a TTL — it outlives every
// process, as a schema migration's record should — until [Once.Reset] deletes it.
type Once struct {
	g *Group[struct{}]
}

// NewOnce returns the Once called name. It sends nothing to Redis. Its options are
// [distsync.WithLeaseTTL] and [distsync.WithFixedLease], for the lease of the call that runs
// fn. It returns an error matching [distsync.ErrInvalid] for an empty name, a bad option value,
// or an option that does not apply to a Once.
func NewOnce(h *distsync.Handle, name string, opts ...distsync.Option) (*Once, error) {
	g, err := onceGroup[struct{}](h, kind.Once, name, opts, nil)
	if err != nil {
		return nil, err
	}
	return &Once{g: g}, nil
}

// onceGroup returns the Group behind a Once, OnceFunc, OnceValue or OnceValues of kind called
// name: its one key's first success is kept without a TTL, and errors are not kept. ext, if
// not nil, checks and completes the package's own settings.
func onceGroup[T any](h *distsync.Handle, kind, name string, opts []distsync.Option, ext func(o *options) error) (*Group[T], error) {
	c, set, o, err := settings(h, kind, name, opts)
	if err != nil {
		return nil, err
	}
	o.keep, o.keepErrors = -1, false
	if ext != nil {
		if err := ext(o); err != nil {
			return nil, fmt.Errorf("once %q: %w: %v", name, distsync.ErrInvalid, err)
		}
	}
	return newGroup[T](c, kind, name, set.LeaseTTL, !set.Fixed, *o)
}

// Do calls fn unless a call of it has already succeeded, in any process: then it returns nil
// at once. While a call runs, anywhere, other callers wait for it and share its outcome. If
// the call fails, Do returns its error (matching [ErrLeaderFailed] in other processes) to the
// callers that waited for it, and the next Do calls fn again. ctx bounds the caller's wait,
// not fn, whose context ends only if the call's lead is lost (see [Group.Do]): if ctx ends
// first, Do returns an error matching both [distsync.ErrNotAcquired] and ctx.Err(). A panic
// in fn panics in the callers of its process; a [runtime.Goexit] in fn is an error matching
// [ErrGoexit] for every caller. Neither is remembered: the next Do calls fn again.
func (o *Once) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	_, err, _ := o.g.Do(ctx, "", func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// Done reports whether a call has succeeded (and Reset has not been called since). It returns
// false and an error if Redis could not be asked (ctx bounds the round trip).
func (o *Once) Done(ctx context.Context) (bool, error) {
	ks, err := o.g.keys("")
	if err != nil {
		return false, err
	}
	n, err := o.g.c.Client.Do(ctx, o.g.c.Client.B().Exists().Key(ks.kept).Build()).AsInt64()
	if err != nil {
		return false, fmt.Errorf("once %q: done: %w", o.g.name, err)
	}
	return n == 1, nil
}

// Reset forgets the success: a Do after Reset runs fn again, and Done reports false until a
// run succeeds. A run in flight during Reset does not set the done-marker, whether it ends
// before or after the Reset reaches Redis: its callers get its outcome, and a Do after Reset
// waits for it to end, then runs fn itself. Reset is [Group.Forget] of the Once's key, with
// its rules for calls in other processes. It returns Redis's error; ctx bounds the round trip.
func (o *Once) Reset(ctx context.Context) error { return o.g.Forget(ctx, "") }

// OnceFunc returns a function that calls fn until it succeeds once across processes, as
// sync.OnceFunc does within one, except that fn may fail: the first success is remembered in
// Redis (without a TTL) and every later call, in every process, returns nil at once; a failure
// is returned to the callers that waited for it (matching [ErrLeaderFailed] in other
// processes), and the next call calls fn again. The returned function is [Once.Do] with fn, of
// the Once called name: a Once of that name shares the record, and its Reset makes the next
// call run fn again. ctx bounds a caller's wait, as for Once.Do; a panic or a
// [runtime.Goexit] in fn is treated as Once.Do treats it (unlike sync.OnceFunc, a panic is
// not remembered: the next call calls fn again).
//
// The options are those of [NewOnce], and its errors name it as a once.Once: OnceFunc returns
// an error matching [distsync.ErrInvalid] for an empty name, a bad option value, or an option
// that does not apply to a Once.
func OnceFunc(h *distsync.Handle, name string, fn func(ctx context.Context) error, opts ...distsync.Option) (func(ctx context.Context) error, error) {
	o, err := NewOnce(h, name, opts...)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return o.Do(ctx, fn) }, nil
}

// OnceValue returns a function that computes fn's value once across processes, as
// sync.OnceValue does within one: the first successful value is kept in Redis (without a TTL)
// and returned to every later call, in every process; a failure is returned to the callers
// that waited for it and the next call tries again. ctx bounds a caller's wait: if it ends
// first, the function returns an error matching both [distsync.ErrNotAcquired] and
// ctx.Err(). A panic in fn panics in the callers of its process, and a [runtime.Goexit] in fn
// is an error matching [ErrGoexit], as in [Group.Do]; neither is kept.
//
// Its options are [WithMaxValueSize], [WithCodec] (for values that JSON does not round-trip),
// [distsync.WithLeaseTTL] and [distsync.WithFixedLease]. It returns an error matching
// [distsync.ErrInvalid] for an empty name, a bad option value, a codec of another type, or an
// option that does not apply to a OnceValue.
func OnceValue[T any](h *distsync.Handle, name string, fn func(ctx context.Context) (T, error), opts ...distsync.Option) (func(ctx context.Context) (T, error), error) {
	g, err := onceGroup[T](h, kind.OnceValue, name, opts, nil)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (T, error) {
		v, err, _ := g.Do(ctx, "", fn)
		return v, err
	}, nil
}

// OnceValues is [OnceValue] for a function of two values, as sync.OnceValues is for
// sync.OnceValue: the first successful pair is kept in Redis (without a TTL) and returned to
// every later call, in every process; a failure is returned to the callers that waited for it
// and the next call tries again. In the process that ran fn, its callers get what fn
// returned, values and error; in the others, a failure comes with zero values. ctx bounds a
// caller's wait, and a panic or a [runtime.Goexit] in fn is treated, as for OnceValue.
//
// The pair is stored as a JSON array of the two values, each encoded as [JSON] encodes it, so
// both must round-trip through encoding/json. [WithCodec] does not apply: for a codec of your
// own, use OnceValue with a struct of the two. The other options of OnceValue do
// ([WithMaxValueSize] bounds the encoded pair), and its errors name it as a
// once.OnceValue: it returns an error matching [distsync.ErrInvalid] for an empty name, a bad
// option value, WithCodec, or an option that does not apply to a OnceValue.
func OnceValues[T1, T2 any](h *distsync.Handle, name string, fn func(ctx context.Context) (T1, T2, error), opts ...distsync.Option) (func(ctx context.Context) (T1, T2, error), error) {
	g, err := onceGroup[pair[T1, T2]](h, kind.OnceValue, name, opts, func(o *options) error {
		if o.codec != nil {
			return errors.New("WithCodec does not apply to OnceValues, which stores the pair as JSON (use OnceValue with a struct)")
		}
		o.codec = pairCodec[T1, T2]{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	call := func(ctx context.Context) (pair[T1, T2], error) {
		v1, v2, err := fn(ctx)
		return pair[T1, T2]{v1, v2}, err
	}
	return func(ctx context.Context) (T1, T2, error) {
		p, err, _ := g.Do(ctx, "", call)
		return p.v1, p.v2, err
	}, nil
}

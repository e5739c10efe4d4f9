package once

import (
	"context"
	"fmt"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/core"
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

// NewOnce returns the Once called name. It sends nothing to Redis. Of the Group options, only
// WithLeaseTTL applies; it returns an error matching [distsync.ErrInvalid] for an empty name.
func NewOnce(h *distsync.Handle, name string, opts ...Option) (*Once, error) {
	c := core.Of(h)
	if c == nil {
		return nil, fmt.Errorf("once: %w: nil handle", distsync.ErrInvalid)
	}
	o := options{ttl: c.Config.LeaseTTL}
	for _, opt := range opts {
		opt(&o)
	}
	g, err := newGroup[struct{}](c, name, options{ttl: o.ttl, keep: -1, maxSize: DefaultMaxValueSize})
	if err != nil {
		return nil, err
	}
	return &Once{g: g}, nil
}

// Do calls fn unless a call of it has already succeeded, in any process: then it returns nil
// at once. While a call runs, anywhere, other callers wait for it and share its outcome. If
// the call fails, Do returns its error (matching [ErrLeaderFailed] in other processes) to the
// callers that waited for it, and the next Do calls fn again. ctx bounds the caller's wait,
// not fn, whose context ends only if the call's lead is lost (see [Group.Do]). A panic in fn
// panics in the callers of its process.
func (o *Once) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	_, err, _ := o.g.Do(ctx, "", func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// Done reports whether a call has succeeded (and Reset has not been called since).
func (o *Once) Done(ctx context.Context) (bool, error) {
	ks, err := o.g.keys("")
	if err != nil {
		return false, err
	}
	n, err := o.g.c.Client.Do(ctx, o.g.c.Client.B().Exists().Key(ks.kept).Build()).AsInt64()
	return n == 1, err
}

// Reset deletes the done-marker: the next Do runs fn again.
func (o *Once) Reset(ctx context.Context) error { return o.g.Forget(ctx, "") }

// OnceValue returns a function that computes fn's value once across processes, as
// sync.OnceValue does within one: the first successful value is kept in Redis (without a TTL)
// and returned to every later call, in every process; a failure is returned to the callers
// that waited for it and the next call tries again. Use a codec option ([WithCodec]) for
// values that JSON does not round-trip.
func OnceValue[T any](h *distsync.Handle, name string, fn func(ctx context.Context) (T, error), opts ...Option) (func(ctx context.Context) (T, error), error) {
	c := core.Of(h)
	if c == nil {
		return nil, fmt.Errorf("once: %w: nil handle", distsync.ErrInvalid)
	}
	o := options{ttl: c.Config.LeaseTTL, maxSize: DefaultMaxValueSize}
	for _, opt := range opts {
		opt(&o)
	}
	o.keep, o.keepErrors = -1, false
	g, err := newGroup[T](c, name, o)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (T, error) {
		v, err, _ := g.Do(ctx, "", fn)
		return v, err
	}, nil
}

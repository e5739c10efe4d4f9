package core

import (
	"context"
	"fmt"
	"time"

	"github.com/distsync/distsync/internal/keys"
)

// MinLease is the shortest lease: a lease must outlast the margin taken off its local deadline
// (Drift: 1% and 2 ms) by enough for its holder to use it, or every acquisition would come too
// late to use (ErrLate) and a Lock would try for ever.
const MinLease = 10 * time.Millisecond

// Package distsync sets these at init. They let a primitive package reach the core of a
// *distsync.Handle and hand out a *distsync.Lease without either direction being part of the
// public API (the same pattern as grpc's internal package).
var (
	handleOf    func(h any) *Handle
	wrapLease   func(l *Lease) any
	leaseOf     func(l any) *Lease // nil for a nil *distsync.Lease
	wrapHolders func(hs []HolderInfo) any
)

// Bridge installs the conversions; only package distsync calls it.
func Bridge(of func(h any) *Handle, wrap func(l *Lease) any, unwrap func(l any) *Lease, wrapO func(Opt) any,
	unwrapO func(any) Opt, holders func([]HolderInfo) any) {
	handleOf, wrapLease, leaseOf, wrapOpt, unwrapOpt, wrapHolders = of, wrap, unwrap, wrapO, unwrapO, holders
}

// Of returns the core of a *distsync.Handle (nil for a nil handle).
func Of(h any) *Handle { return handleOf(h) }

// Open returns the core of a *distsync.Handle for a primitive of kind, or an error matching
// ErrInvalid if the handle is nil.
func Open(h any, kind string) (*Handle, error) {
	if c := Of(h); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("%s: %w: nil handle", kind, ErrInvalid)
}

// Space checks what every primitive's New checks, a lease of at least MinLease and a
// name that makes keys, and returns the key space of the primitive of kind named name. Its
// errors match ErrInvalid.
func (h *Handle) Space(kind, name string, ttl time.Duration) (keys.Space, error) {
	if ttl < MinLease {
		return keys.Space{}, fmt.Errorf("%s %q: %w: lease TTL must be at least %v, got %v", kind, name, ErrInvalid, MinLease, ttl)
	}
	ks, err := h.Keys(kind, name)
	if err != nil {
		return ks, fmt.Errorf("%s %q: %w", kind, name, err)
	}
	return ks, nil
}

// sinkKey is the context key of a lease sink (WithSink).
type sinkKey struct{}

// Sink receives the lease of an acquisition (WithSink). It is also the context that carries
// it, so that a Lock pays one allocation for both.
type Sink struct {
	context.Context
	Lease *Lease
}

// Value returns the sink itself for its key, and asks the context it wraps otherwise.
func (s *Sink) Value(key any) any {
	if key == (sinkKey{}) {
		return s
	}
	return s.Context.Value(key)
}

// WithSink returns a copy of ctx that carries a sink for the lease that an acquisition under
// it takes: code deep in an acquire path (a waiting loop's attempt) hands its lease to the call
// that started it with Deliver, which is how a lease-returning Lock learns which hold it took.
func WithSink(ctx context.Context) (context.Context, *Sink) {
	s := &Sink{Context: ctx}
	return s, s
}

// Deliver puts l in ctx's sink, if it has one.
func Deliver(ctx context.Context, l *Lease) {
	if s, _ := ctx.Value(sinkKey{}).(*Sink); s != nil {
		s.Lease = l
	}
}

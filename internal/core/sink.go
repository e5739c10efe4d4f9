package core

import "context"

// sinkKey is the context key of a lease sink (WithSink).
type sinkKey struct{}

// Sink receives the lease of an acquisition (WithSink). It is also the context that carries
// it, so that an acquisition pays one allocation for both.
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
// that started it with Deliver (Prim.Wait and Prim.Try make the sink and read it).
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

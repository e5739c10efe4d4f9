package distsyncotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/kind"
)

var spanKind = trace.WithSpanKind(trace.SpanKindInternal)

// spanNames are the span names of every kind, made once.
var spanNames = func() map[string]string {
	m := make(map[string]string, len(kind.All))
	for _, k := range kind.All {
		m[k] = k + " acquire"
	}
	return m
}()

// spanName returns the name of the span of a call to a primitive: "<primitive> acquire".
func spanName(primitive string) string {
	if n, ok := spanNames[primitive]; ok {
		return n
	}
	return primitive + " acquire"
}

// start starts the span of the call e begins, a child of the call's context, and keeps it
// for the call's later events if it records.
func (o *observer) start(ctx context.Context, e distsync.Event) {
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, keyPrimitive.String(e.Primitive), keyName.String(e.Name), keyIdentity.String(e.Identity))
	if e.Weight != 1 {
		attrs = append(attrs, keyWeight.Int64(e.Weight))
	}
	if e.Shared {
		attrs = append(attrs, keyShared.Bool(true))
	}
	_, span := o.tracer.Start(ctx, spanName(e.Primitive), spanKind, trace.WithAttributes(attrs...))
	if !span.IsRecording() {
		return // nothing to add to it, nor to end: keep it out of the map
	}
	o.mu.Lock()
	o.spans[e.Call] = span
	o.mu.Unlock()
}

// note adds e to its call's span as an event.
func (o *observer) note(e distsync.Event) {
	o.mu.Lock()
	span := o.spans[e.Call]
	o.mu.Unlock()
	if span != nil {
		span.AddEvent(e.Kind.String())
	}
}

// take removes the span of e's call from the calls in flight and returns it: nil if the call
// has none.
func (o *observer) take(e distsync.Event) trace.Span {
	o.mu.Lock()
	span := o.spans[e.Call]
	delete(o.spans, e.Call)
	o.mu.Unlock()
	return span
}

// end ends span, the span of e's call, with the call's result r. A nil span is left alone.
func end(span trace.Span, e distsync.Event, r int) {
	if span == nil {
		return
	}
	span.SetAttributes(keyResult.String(results[r]))
	switch r {
	case resultAcquired:
		span.SetAttributes(keyToken.Int64(e.Token))
	case resultBusy, resultShared:
	default:
		span.SetAttributes(keyErrorType.String(results[r]))
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End()
}

package distsyncotel

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/distsync/distsync"
)

// The event kinds of a rate limiter's decisions: distsync's EventAllowed, EventDelayed,
// EventRefused and EventCanceled, by value, so that this module builds against a root
// release that predates them (v0.1.0) as well as against one that has them: the root never
// renumbers a kind, and a test checks these values against its names when it has them.
const (
	eventAllowed  distsync.EventKind = 14
	eventDelayed  distsync.EventKind = 15
	eventRefused  distsync.EventKind = 16
	eventCanceled distsync.EventKind = 17
)

// The decisions of a rate limiter (distsync.rate.decision).
const (
	decisionAllowed = iota
	decisionDelayed
	decisionRefused
	decisionCanceled
	decisionError
	nDecisions
)

var decisions = [nDecisions]string{"allowed", "delayed", "refused", "canceled", "error"}

// refusalTexts are the words of the errors with which a rate limiter's Wait refuses (package
// rate's ErrExceedsBurst and ErrWouldExceedDeadline): this module cannot name them as
// values, since the root releases it builds against may not have package rate.
var refusalTexts = []string{"n exceeds the burst", "wait would exceed the context's deadline"}

// decisionOf returns what e, a rate limiter's event, decided.
func decisionOf(e distsync.Event) int {
	switch e.Kind {
	case eventAllowed:
		return decisionAllowed
	case eventDelayed:
		return decisionDelayed
	case eventCanceled:
		return decisionCanceled
	}
	if e.Err == nil {
		return decisionRefused
	}
	msg := e.Err.Error()
	for _, t := range refusalTexts {
		if strings.Contains(msg, t) {
			return decisionRefused
		}
	}
	return decisionError
}

const keyDecision = attribute.Key("distsync.rate.decision")
const keyDelay = attribute.Key("distsync.rate.delay")

// delayBounds are waitBounds after a bucket of their own for no delay at all (an allowed
// decision), carried on to a minute: a slow limiter's reservations wait for seconds.
var delayBounds = append(append([]float64{0}, waitBounds...), 30, 60)

// decide records e, a rate limiter's decision or a reservation given back: it counts it, its
// delay if it took tokens, and adds it as an event to the span of the call's context, if that
// span records.
func (o *observer) decide(ctx context.Context, e distsync.Event) {
	d := decisionOf(e)
	ds := o.sets(e).decision(d)
	o.decisions.Add(ctx, 1, ds.add...)
	if d == decisionAllowed || d == decisionDelayed {
		o.delay.Record(ctx, e.Wait.Seconds(), ds.record...)
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, keyName.String(e.Name), keyWeight.Int64(e.Weight))
	switch d {
	case decisionDelayed:
		attrs = append(attrs, keyDelay.Float64(e.Wait.Seconds()))
	case decisionError:
		attrs = append(attrs, keyErrorType.String(results[resultOf(e)]))
	}
	span.AddEvent(e.Primitive+" "+decisions[d], trace.WithAttributes(attrs...))
}

package distsyncotel_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/distsync/distsync"
	distsyncotel "github.com/distsync/distsync/otel"
)

// A rate limiter's kinds of event, by value: the root release this module requires predates
// them (see rate.go).
const (
	kindAllowed  distsync.EventKind = 14
	kindDelayed  distsync.EventKind = 15
	kindRefused  distsync.EventKind = 16
	kindCanceled distsync.EventKind = 17
)

// A rate limiter's decisions are counted by what they decided, their delays recorded (0 for
// an allowed one), and each is an event of the span of the call's context.
func TestRateDecisions(t *testing.T) {
	r := newRig(t)
	obs := distsyncotel.Observer(r.opts...)
	ctx, span := r.tp.Tracer("test").Start(context.Background(), "request")
	ev := func(k distsync.EventKind, call uint64, n int64, wait time.Duration, err error) {
		obs(distsync.Event{Kind: k, Primitive: "rate", Identity: "pod-1", Name: "api", Call: call, Context: ctx,
			Weight: n, Wait: wait, Err: err})
	}
	ev(kindAllowed, 1, 1, 0, nil)
	ev(kindDelayed, 2, 2, 250*time.Millisecond, nil)
	ev(kindCanceled, 2, 2, 0, nil)
	ev(kindRefused, 3, 1, 0, nil)                                                                              // Allow: false
	ev(kindRefused, 4, 5, 0, fmt.Errorf(`rate "api": n exceeds the burst: WaitN(5) with a burst of 2`))        // ErrExceedsBurst
	ev(kindRefused, 5, 1, 0, fmt.Errorf("rate \"api\": not acquired: %w", context.Canceled))                   // ctx done
	ev(kindRefused, 6, 1, 0, errors.New(`rate "api": not acquired: wait would exceed the context's deadline`)) // ErrWouldExceedDeadline
	span.End()

	rm := r.collect(t)
	for d, want := range map[string]int64{"allowed": 1, "delayed": 1, "canceled": 1, "refused": 3, "error": 1} {
		if n := sum(rm, "distsync.rate.decisions", attrs("distsync.primitive", "rate", "distsync.name", "api",
			"distsync.identity", "pod-1", "distsync.rate.decision", d)...); n != want {
			t.Errorf("distsync.rate.decisions{decision=%s} = %d, want %d", d, n, want)
		}
	}
	if n, s := hist(rm, "distsync.rate.delay.duration", attrs("distsync.rate.decision", "allowed")...); n != 1 || s != 0 {
		t.Errorf("allowed delays: %d, sum %v; want one of 0", n, s)
	}
	if n, s := hist(rm, "distsync.rate.delay.duration", attrs("distsync.rate.decision", "delayed")...); n != 1 || math.Abs(s-0.25) > 1e-9 {
		t.Errorf("delayed delays: %d, sum %v; want one of 0.25", n, s)
	}
	if n, _ := hist(rm, "distsync.rate.delay.duration"); n != 2 {
		t.Errorf("%d delays recorded, want 2 (refusals and cancellations have none)", n)
	}

	ended := r.spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans, want the caller's own only", len(ended))
	}
	want := []string{"rate allowed", "rate delayed", "rate canceled", "rate refused", "rate refused", "rate error", "rate refused"}
	if got := eventNames(ended[0]); !slices.Equal(got, want) {
		t.Errorf("span events %v, want %v", got, want)
	}
	for _, e := range ended[0].Events() {
		set := attribute.NewSet(e.Attributes...)
		switch e.Name {
		case "rate delayed":
			if v, ok := set.Value("distsync.rate.delay"); !ok || v.AsFloat64() != 0.25 {
				t.Errorf("delayed: distsync.rate.delay %v", v)
			}
		case "rate error":
			if v, ok := set.Value("error.type"); !ok || v.AsString() != "canceled" {
				t.Errorf("error: error.type %v", v)
			}
		}
	}

	// Without a span, or without a context, a decision is still counted.
	obs(distsync.Event{Kind: kindAllowed, Primitive: "rate", Name: "api", Call: 7, Context: context.Background(), Weight: 1})
	obs(distsync.Event{Kind: kindRefused, Primitive: "rate", Name: "api", Call: 8, Weight: 1})
	rm = r.collect(t)
	if n := sum(rm, "distsync.rate.decisions", attrs("distsync.name", "api")...); n != 9 {
		t.Errorf("%d decisions counted, want 9", n)
	}
}

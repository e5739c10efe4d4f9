package distsyncotel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/once"
	distsyncotel "github.com/distsync/distsync/otel"
	"github.com/distsync/distsync/reentrant"
)

const prefix = "otel-test:"

// rig is an embedded Redis and the SDK's in-memory metric reader and span recorder.
type rig struct {
	srv    *embedded.Server
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	opts   []distsyncotel.Option
}

func newRig(t *testing.T, opts ...distsyncotel.Option) *rig {
	t.Helper()
	srv, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	r := &rig{srv: srv, reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	r.opts = append([]distsyncotel.Option{distsyncotel.WithMeterProvider(mp), distsyncotel.WithTracerProvider(r.tp)}, opts...)
	return r
}

// handle returns a Handle, as one process has, observed by an Observer of its own on the
// rig's providers.
func (r *rig) handle(t *testing.T, opts ...distsync.Option) *distsync.Handle {
	t.Helper()
	opts = append([]distsync.Option{distsync.WithKeyPrefix(prefix), distsync.WithObserver(distsyncotel.Observer(r.opts...))}, opts...)
	h, err := r.srv.NewHandle(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (r *rig) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// matches reports whether set has every attribute of want.
func matches(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sum returns the total of the int64 sum name over the points with the attributes want.
func sum(rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) int64 {
	m, _ := find(rm, name)
	s, _ := m.Data.(metricdata.Sum[int64])
	var n int64
	for _, p := range s.DataPoints {
		if matches(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// hist returns the count and sum of the histogram name over the points with the attributes
// want.
func hist(rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) (uint64, float64) {
	m, _ := find(rm, name)
	h, _ := m.Data.(metricdata.Histogram[float64])
	var n uint64
	var s float64
	for _, p := range h.DataPoints {
		if matches(p.Attributes, want) {
			n += p.Count
			s += p.Sum
		}
	}
	return n, s
}

// eventually waits, for at most 20 s, until ok holds of a collection, and returns it.
func (r *rig) eventually(t *testing.T, what string, ok func(metricdata.ResourceMetrics) bool) metricdata.ResourceMetrics {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		rm := r.collect(t)
		if ok(rm) {
			return rm
		}
		if time.Now().After(deadline) {
			t.Fatalf("not in 20s: %s", what)
		}
	}
}

func attrs(kv ...string) []attribute.KeyValue {
	var out []attribute.KeyValue
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, attribute.String(kv[i], kv[i+1]))
	}
	return out
}

func spanAttr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func eventNames(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

// Two processes contend for a mutex: the wait histogram, the acquisitions by result, the
// holds, and one span per call, a child of the caller's span, record what happened; at the
// end no call waits and nothing is held.
func TestContendedMutex(t *testing.T) {
	r := newRig(t)
	a, err := mutex.New(r.handle(t), "orders")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := mutex.New(r.handle(t), "orders")
	bg := context.Background()
	caller, parent := r.tp.Tracer("test").Start(bg, "caller")

	if err := a.Lock(caller); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryLock(caller); ok || err != nil {
		t.Fatalf("TryLock = %v, %v; want false, nil", ok, err)
	}
	short, cancel := context.WithTimeout(caller, 50*time.Millisecond)
	err = b.Lock(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a short ctx: %v", err)
	}

	got := make(chan error, 1)
	go func() { got <- b.Lock(caller) }()
	r.eventually(t, "one waiter", func(rm metricdata.ResourceMetrics) bool {
		return sum(rm, "distsync.waiters") == 1
	})
	const held = 50 * time.Millisecond
	time.Sleep(held)
	if err := a.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Lock did not return in 20s after the release")
	}
	if err := b.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	parent.End()

	mx := attrs("distsync.primitive", "mutex", "distsync.name", "orders")
	rm := r.eventually(t, "two holds ended", func(rm metricdata.ResourceMetrics) bool {
		n, _ := hist(rm, "distsync.hold.duration")
		return n == 2
	})
	for result, want := range map[string]int64{"acquired": 2, "busy": 1, "timeout": 1, "canceled": 0} {
		if n := sum(rm, "distsync.acquisitions", append(mx, attribute.String("distsync.result", result))...); n != want {
			t.Errorf("acquisitions{result=%s} = %d; want %d", result, n, want)
		}
	}
	if n, s := hist(rm, "distsync.acquire.wait.duration", append(mx, attribute.String("distsync.result", "acquired"))...); n != 2 || s < held.Seconds() {
		t.Errorf("wait{acquired}: count %d, sum %vs; want 2, at least %v", n, s, held.Seconds())
	}
	if n, s := hist(rm, "distsync.acquire.wait.duration", attribute.String("distsync.result", "timeout")); n != 1 || s < 0.05 {
		t.Errorf("wait{timeout}: count %d, sum %vs; want 1, at least 0.05", n, s)
	}
	if n, s := hist(rm, "distsync.hold.duration", append(mx, attribute.String("distsync.end", "released"))...); n != 2 || s < held.Seconds() {
		t.Errorf("hold{released}: count %d, sum %vs; want 2, at least %v", n, s, held.Seconds())
	}
	if w, h := sum(rm, "distsync.waiters", mx...), sum(rm, "distsync.holders", mx...); w != 0 || h != 0 {
		t.Errorf("at the end: waiters %d, holders %d; want 0, 0", w, h)
	}

	if m, _ := find(rm, "distsync.acquire.wait.duration"); len(m.Data.(metricdata.Histogram[float64]).DataPoints) > 0 {
		if b := m.Data.(metricdata.Histogram[float64]).DataPoints[0].Bounds; len(b) == 0 || b[0] != 0.005 || b[len(b)-1] != 10 {
			t.Errorf("wait histogram's bounds: %v; want the advised 0.005 ... 10", b)
		}
	}
	if m, _ := find(rm, "distsync.hold.duration"); m.Unit != "s" {
		t.Errorf("hold histogram's unit: %q; want s", m.Unit)
	}

	spans := r.spans.Ended()
	if started := len(r.spans.Started()); started != len(spans) {
		t.Errorf("%d spans started, %d ended", started, len(spans))
	}
	var acquires []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "mutex acquire" {
			acquires = append(acquires, s)
		}
	}
	if len(acquires) != 4 {
		t.Fatalf("%d mutex acquire spans; want 4", len(acquires))
	}
	byResult := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range acquires {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("span %v is not a child of the caller's span", s.Attributes())
		}
		if v, ok := spanAttr(s, "distsync.name"); !ok || v.AsString() != "orders" {
			t.Errorf("span's distsync.name = %v", v.String())
		}
		res, _ := spanAttr(s, "distsync.result")
		byResult[res.AsString()] = s // spans end in order: the last acquired one is the contended Lock's
	}
	if s := byResult["busy"]; s == nil || s.Status().Code != codes.Unset {
		t.Errorf("busy span: %v; want status Unset", s)
	}
	if s := byResult["timeout"]; s == nil || s.Status().Code != codes.Error {
		t.Errorf("timeout span: %v; want status Error", s)
	} else if v, _ := spanAttr(s, "error.type"); v.AsString() != "timeout" {
		t.Errorf("timeout span's error.type = %q", v.AsString())
	}
	// The contended Lock's span: it queued, and a release let it in.
	s := byResult["acquired"]
	if s == nil || s.Status().Code != codes.Unset {
		t.Fatalf("acquired span: %v; want status Unset", s)
	}
	if tok, ok := spanAttr(s, "distsync.token"); !ok || tok.AsInt64() <= 0 {
		t.Errorf("acquired span's token: %v", tok.String())
	}
	ev := eventNames(s)
	if len(ev) < 2 || ev[0] != "queued" || (ev[len(ev)-1] != "woken" && ev[len(ev)-1] != "granted") {
		t.Errorf("contended span's events: %v; want queued, then woken or granted", ev)
	}
	if d := s.EndTime().Sub(s.StartTime()); d < held {
		t.Errorf("contended span lasted %v; want at least %v", d, held)
	}
}

// A hold whose key is deleted behind it is lost at its next renewal: the loss is counted
// with its reason, and its hold recorded as lost.
func TestLoss(t *testing.T) {
	r := newRig(t)
	m, _ := mutex.New(r.handle(t, distsync.WithLeaseTTL(300*time.Millisecond)), "orders")
	lease, err := m.LockLease(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !r.srv.Miniredis().Del(prefix + "{orders}:mutex") {
		t.Fatal("no key to delete: the mutex's key is not " + prefix + "{orders}:mutex")
	}
	select {
	case <-lease.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the lease was not lost in 20s")
	}
	mx := attrs("distsync.primitive", "mutex", "distsync.name", "orders")
	rm := r.eventually(t, "a loss", func(rm metricdata.ResourceMetrics) bool {
		return sum(rm, "distsync.lease.losses") > 0
	})
	if n := sum(rm, "distsync.lease.losses", append(mx, attribute.String("distsync.reason", "expired_or_taken"))...); n != 1 {
		t.Errorf("losses{expired_or_taken} = %d; want 1 (lease error: %v)", n, lease.Err())
	}
	if n, _ := hist(rm, "distsync.hold.duration", append(mx, attribute.String("distsync.end", "lost"))...); n != 1 {
		t.Errorf("hold{lost} count = %d; want 1", n)
	}
	if h := sum(rm, "distsync.holders"); h != 0 {
		t.Errorf("holders = %d after the loss; want 0", h)
	}
	if err := m.Unlock(context.Background()); !errors.Is(err, distsync.ErrLost) {
		t.Errorf("Unlock after the loss: %v; want ErrLost", err)
	}
	if n := sum(r.collect(t), "distsync.lease.losses"); n != 1 {
		t.Errorf("losses = %d after Unlock; want still 1", n)
	}
}

// A hold that no renewal reaches Redis for is lost at its deadline; the failed renewals are
// counted.
func TestLossAtDeadline(t *testing.T) {
	r := newRig(t)
	m, _ := mutex.New(r.handle(t, distsync.WithLeaseTTL(300*time.Millisecond)), "orders")
	lease, err := m.LockLease(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r.srv.Miniredis().SetError("ERR injected")
	select {
	case <-lease.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the lease was not lost in 20s")
	}
	r.srv.Miniredis().SetError("")
	rm := r.eventually(t, "a loss", func(rm metricdata.ResourceMetrics) bool {
		return sum(rm, "distsync.lease.losses") > 0
	})
	if n := sum(rm, "distsync.lease.losses", attrs("distsync.primitive", "mutex", "distsync.reason", "deadline")...); n != 1 {
		t.Errorf("losses{deadline} = %d; want 1 (lease error: %v)", n, lease.Err())
	}
	if n := sum(rm, "distsync.lease.renewal.failures", attrs("distsync.primitive", "mutex", "distsync.name", "orders")...); n < 1 {
		t.Errorf("renewal failures = %d; want at least 1", n)
	}
}

// A hold whose key was deleted is lost when its release finds it gone.
func TestLossAtRelease(t *testing.T) {
	r := newRig(t)
	m, _ := mutex.New(r.handle(t, distsync.WithLeaseTTL(time.Minute)), "orders")
	if err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.srv.Miniredis().Del(prefix + "{orders}:mutex")
	if err := m.Unlock(context.Background()); !errors.Is(err, distsync.ErrLost) {
		t.Fatalf("Unlock: %v; want ErrLost", err)
	}
	rm := r.eventually(t, "a loss", func(rm metricdata.ResourceMetrics) bool {
		return sum(rm, "distsync.lease.losses") > 0
	})
	if n := sum(rm, "distsync.lease.losses", attribute.String("distsync.reason", "expired_or_taken")); n != 1 {
		t.Errorf("losses{expired_or_taken} = %d; want 1", n)
	}
}

// A reentrant owner's nested Lock is an acquisition but not another hold.
func TestReentrantNestedLockIsOneHold(t *testing.T) {
	r := newRig(t)
	m, _ := reentrant.New(r.handle(t), "account")
	ctx := reentrant.WithOwner(context.Background(), reentrant.NewOwner())
	for range 2 {
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rm := r.collect(t)
	if h := sum(rm, "distsync.holders"); h != 1 {
		t.Errorf("holders = %d with a nested lock; want 1", h)
	}
	for range 2 {
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rm = r.collect(t)
	if a := sum(rm, "distsync.acquisitions", attribute.String("distsync.result", "acquired")); a != 2 {
		t.Errorf("acquisitions = %d; want 2", a)
	}
	if h := sum(rm, "distsync.holders"); h != 0 {
		t.Errorf("holders = %d after the last Unlock; want 0", h)
	}
	if n, _ := hist(rm, "distsync.hold.duration", attribute.String("distsync.end", "released")); n != 1 {
		t.Errorf("holds released = %d; want 1", n)
	}
}

// Two processes call a once Group for one key: one leads, the other follows and gets the
// leader's result, which is "shared", not an error.
func TestOnceRoles(t *testing.T) {
	r := newRig(t)
	g1, _ := once.NewGroup[string](r.handle(t), "products")
	g2, _ := once.NewGroup[string](r.handle(t), "products")
	ctx := context.Background()
	release := make(chan struct{})
	led := make(chan error, 1)
	go func() {
		_, err, _ := g1.Do(ctx, "42", func(context.Context) (string, error) {
			<-release
			return "product 42", nil
		})
		led <- err
	}()
	r.eventually(t, "a leader", func(rm metricdata.ResourceMetrics) bool {
		return sum(rm, "distsync.once.calls", attribute.String("distsync.once.role", "leader")) == 1
	})
	followed := make(chan error, 1)
	go func() {
		v, err, _ := g2.Do(ctx, "42", func(context.Context) (string, error) { return "led twice", nil })
		if err == nil && v != "product 42" {
			err = errors.New("follower got " + v)
		}
		followed <- err
	}()
	r.eventually(t, "a follower", func(rm metricdata.ResourceMetrics) bool {
		return sum(rm, "distsync.once.calls", attribute.String("distsync.once.role", "follower")) == 1
	})
	close(release)
	for _, ch := range []chan error{led, followed} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Do did not return in 20s")
		}
	}
	g := attrs("distsync.primitive", "once.Group", "distsync.name", "products")
	rm := r.eventually(t, "the lead released", func(rm metricdata.ResourceMetrics) bool {
		return sum(rm, "distsync.holders") == 0 && sum(rm, "distsync.waiters") == 0
	})
	for result, want := range map[string]int64{"acquired": 1, "shared": 1, "busy": 0} {
		if n := sum(rm, "distsync.acquisitions", append(g, attribute.String("distsync.result", result))...); n != want {
			t.Errorf("acquisitions{result=%s} = %d; want %d", result, n, want)
		}
	}
	for _, s := range r.spans.Ended() {
		if res, _ := spanAttr(s, "distsync.result"); res.AsString() == "shared" && s.Status().Code != codes.Unset {
			t.Errorf("shared span's status: %v; want Unset", s.Status())
		}
	}
}

// WithoutNames leaves distsync.name out of the metrics; the spans keep it.
func TestWithoutNames(t *testing.T) {
	r := newRig(t, distsyncotel.WithoutNames())
	m, _ := mutex.New(r.handle(t), "orders")
	if err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	points := 0
	eachPoint(t, r.collect(t), func(name string, s attribute.Set) {
		points++
		if s.HasValue("distsync.name") {
			t.Errorf("%s has distsync.name: %v", name, s.Encoded(attribute.DefaultEncoder()))
		}
		if v, _ := s.Value("distsync.primitive"); v.AsString() != "mutex" {
			t.Errorf("%s: distsync.primitive = %q", name, v.AsString())
		}
	})
	if points == 0 {
		t.Error("no metric recorded")
	}
	for _, s := range r.spans.Ended() {
		if v, _ := spanAttr(s, "distsync.name"); v.AsString() != "orders" {
			t.Errorf("span %q lacks distsync.name", s.Name())
		}
	}
}

// eachPoint calls f with the name and attributes of every point of rm, whose scope must be
// the Observer's.
func eachPoint(t *testing.T, rm metricdata.ResourceMetrics, f func(name string, s attribute.Set)) {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != distsyncotel.ScopeName {
			t.Errorf("scope %q; want %q", sm.Scope.Name, distsyncotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					f(m.Name, p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					f(m.Name, p.Attributes)
				}
			}
		}
	}
}

// Every metric and span says whose Handle it is: distsync.identity is the Handle's identity,
// so two processes' metrics on one backend stay apart. WithoutIdentity leaves it out of the
// metrics; the spans keep it.
func TestIdentity(t *testing.T) {
	for _, without := range []bool{false, true} {
		t.Run(fmt.Sprintf("without=%v", without), func(t *testing.T) {
			var r *rig
			if without {
				r = newRig(t, distsyncotel.WithoutIdentity())
			} else {
				r = newRig(t)
			}
			ids := []string{"pod-a:1", "pod-b:{2} \u00e9"}
			for _, id := range ids {
				m, _ := mutex.New(r.handle(t, distsync.WithIdentity(id)), "orders")
				if err := m.Lock(context.Background()); err != nil {
					t.Fatal(err)
				}
				if err := m.Unlock(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			rm := r.collect(t)
			points := 0
			eachPoint(t, rm, func(name string, s attribute.Set) {
				points++
				if v, ok := s.Value("distsync.identity"); ok == without || ok && !slices.Contains(ids, v.AsString()) {
					t.Errorf("%s: distsync.identity = %q (set: %v), want one of %q, or none WithoutIdentity", name, v.AsString(), ok, ids)
				}
			})
			if points == 0 {
				t.Error("no metric recorded")
			}
			if !without {
				for _, id := range ids {
					if n := sum(rm, "distsync.acquisitions", attrs("distsync.identity", id)...); n != 1 {
						t.Errorf("acquisitions of %q = %d; want 1", id, n)
					}
				}
			}
			var seen []string
			for _, s := range r.spans.Ended() {
				v, _ := spanAttr(s, "distsync.identity")
				seen = append(seen, v.AsString())
			}
			if !slices.Equal(seen, ids) {
				t.Errorf("spans' distsync.identity %q; want %q", seen, ids)
			}
		})
	}
}

// Events of a call with no span, a hold's events, and events with no context are recorded
// or ignored without a panic, and leave no span in flight.
func TestStrayEvents(t *testing.T) {
	r := newRig(t)
	obs := distsyncotel.Observer(r.opts...)
	for k := distsync.EventAcquireStarted; k <= distsync.EventOnceTakeover; k++ {
		obs(distsync.Event{Kind: k, Primitive: "mutex", Name: "x", Call: 99, Weight: 1, Err: distsync.ErrClosed})
	}
	obs(distsync.Event{Kind: distsync.EventKind(200), Call: 99})
	if n := len(r.spans.Ended()); n != 1 {
		t.Errorf("%d spans ended; want the one the stray start began", n)
	}
	if n := len(r.spans.Started()); n != 1 {
		t.Errorf("%d spans started; want 1", n)
	}
}

// Past the attribute sets it keeps (2000 names), the Observer still records every event.
func TestManyNames(t *testing.T) {
	r := newRig(t)
	obs := distsyncotel.Observer(r.opts...)
	const n = 2500
	for i := range n {
		e := distsync.Event{Primitive: "mutex", Name: "order:" + strconv.Itoa(i), Call: uint64(i + 1), Weight: 1, Token: 1}
		for _, k := range []distsync.EventKind{distsync.EventAcquireStarted, distsync.EventAcquired, distsync.EventReleased} {
			e.Kind = k
			obs(e)
		}
	}
	rm := r.collect(t)
	// The SDK keeps 2000 series per instrument; it counts the others in one overflow series.
	if a := sum(rm, "distsync.acquisitions"); a != n {
		t.Errorf("acquisitions = %d; want %d", a, n)
	}
	if c, _ := hist(rm, "distsync.hold.duration"); c != n {
		t.Errorf("holds recorded: %d; want %d", c, n)
	}
	if h := sum(rm, "distsync.holders"); h != 0 {
		t.Errorf("holders = %d; want 0", h)
	}
}

package distsyncotel

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/distsync/distsync"
)

// ScopeName is the instrumentation scope of the meter and tracer: this module's path.
const ScopeName = "github.com/distsync/distsync/otel"

// An Option configures an [Observer].
type Option interface{ apply(*config) }

type config struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	names    bool
	identity bool
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMeterProvider makes the Observer record its metrics with mp instead of the global
// MeterProvider ([otel.GetMeterProvider]). A nil mp keeps the global one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	})
}

// WithTracerProvider makes the Observer start its spans with tp instead of the global
// TracerProvider ([otel.GetTracerProvider]). A nil tp keeps the global one.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	})
}

// WithoutNames leaves the attribute distsync.name out of the metrics, so that a process
// that locks many names (one per order, per user) records a few series per primitive kind
// rather than a few per name. Spans keep it: a span's attributes make no series.
func WithoutNames() Option { return optionFunc(func(c *config) { c.names = false }) }

// WithoutIdentity leaves the attribute distsync.identity, the Handle's
// [distsync.Handle.Identity], out of the metrics: by default a host name and process id,
// which makes new series at every restart of every process (and one Observer given to
// several Handles records a series per identity). Leave it out where the metrics' resource
// names the process already, or their backend charges by series. Spans keep it.
func WithoutIdentity() Option { return optionFunc(func(c *config) { c.identity = false }) }

// Observer returns a [distsync.Observer] that records the events of a Handle's primitives as
// the metrics and spans the package documents. Give it to [distsync.New] with
// [distsync.WithObserver].
//
// One Observer may serve several Handles: it pairs the events of a call by their
// [distsync.Event.Call], which is unique in the process. Observers share the instruments of
// their providers, so their metrics add up. If an instrument cannot be created the error
// goes to [otel.Handle] and that instrument records nothing.
//
// The Observer runs on the goroutines of the Handle's calls, and ends their spans there: give
// the TracerProvider a batching span processor ([go.opentelemetry.io/otel/sdk/trace.WithBatcher]),
// not a synchronous one, or every Lock waits for its span's export.
func Observer(opts ...Option) distsync.Observer {
	c := config{names: true, identity: true}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	o := &observer{
		tracer:   c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version())),
		names:    c.names,
		identity: c.identity,
		spans:    make(map[uint64]trace.Span),
	}
	o.instruments(c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version())))
	return o.observe
}

// Version returns this module's version, as the build records it; "" if it does not (a
// test, or a build from within the module's own work tree).
func Version() string { return version }

var version = func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == ScopeName {
				if m.Replace != nil {
					m = m.Replace
				}
				if m.Version != "(devel)" {
					return m.Version
				}
			}
		}
	}
	return ""
}()

// waitBounds are the bucket boundaries, in seconds, that OpenTelemetry's semantic
// conventions advise for the durations of requests (http.server.request.duration,
// rpc.server.call.duration): 5 ms to 10 s. They are advice, which a View overrides.
var waitBounds = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// holdBounds are waitBounds carried on to an hour: an election's leader or a long job holds
// for minutes.
var holdBounds = append(waitBounds[:len(waitBounds):len(waitBounds)], 30, 60, 300, 900, 3600)

type observer struct {
	tracer   trace.Tracer
	names    bool
	identity bool

	wait, held             metric.Float64Histogram
	acquisitions, losses   metric.Int64Counter
	renewalFailures, onces metric.Int64Counter
	waiters, holders       metric.Int64UpDownCounter
	decisions              metric.Int64Counter
	delay                  metric.Float64Histogram

	attrs  sync.Map // attrKey → *attrSets
	nattrs atomic.Int64

	mu    sync.Mutex
	spans map[uint64]trace.Span // the span of each call in flight, by Event.Call
}

// instruments creates the observer's instruments on m. One that cannot be created is
// reported to otel.Handle and replaced by a no-op one.
func (o *observer) instruments(m metric.Meter) {
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	histogram := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(bounds...))
		check(err)
		if h == nil {
			return noop.Float64Histogram{}
		}
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		check(err)
		if c == nil {
			return noop.Int64Counter{}
		}
		return c
	}
	upDown := func(name, unit, desc string) metric.Int64UpDownCounter {
		c, err := m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		check(err)
		if c == nil {
			return noop.Int64UpDownCounter{}
		}
		return c
	}
	o.wait = histogram("distsync.acquire.wait.duration",
		"How long calls that acquire (Lock, TryLock, Acquire, Campaign, Do...) took, acquired or not.", waitBounds)
	o.acquisitions = counter("distsync.acquisitions", "{acquisition}", "Calls that acquire, by how they ended.")
	o.waiters = upDown("distsync.waiters", "{call}", "Calls that acquire in progress in this process.")
	o.holders = upDown("distsync.holders", "{hold}", "Holds taken and not yet ended in this process.")
	o.held = histogram("distsync.hold.duration", "How long holds lasted, by how they ended.", holdBounds)
	o.losses = counter("distsync.lease.losses", "{loss}", "Holds lost: ended without being released.")
	o.renewalFailures = counter("distsync.lease.renewal.failures", "{failure}",
		"Renewals of a lease that failed; they are retried until the lease's deadline.")
	o.onces = counter("distsync.once.calls", "{call}", "Once calls, by the role they took.")
	o.decisions = counter("distsync.rate.decisions", "{decision}",
		"Decisions of rate limiters (Allow, Reserve, Wait), and reservations given back, by what they decided.")
	o.delay = histogram("distsync.rate.delay.duration",
		"How long after a rate limiter's decision that took tokens the caller may act (0: at once).", delayBounds)
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err)
	}
}

// observe records e. It runs on the primitives' hot paths: it looks up precomputed
// attribute sets, and holds o.mu only to find a call's span.
func (o *observer) observe(e distsync.Event) {
	ctx := e.Context
	if ctx == nil {
		ctx = context.Background()
	}
	switch e.Kind {
	case distsync.EventAcquireStarted:
		o.waiters.Add(ctx, 1, o.sets(e).base.add...)
		o.start(ctx, e)
	case distsync.EventAcquired, distsync.EventNotAcquired:
		r := resultAcquired
		if e.Kind == distsync.EventNotAcquired {
			r = resultOf(e)
		}
		span := o.take(e)
		if span != nil {
			ctx = trace.ContextWithSpan(ctx, span) // the measurements' exemplars point to it
		}
		s := o.sets(e)
		o.waiters.Add(ctx, -1, s.base.add...)
		rs := s.result(r)
		o.acquisitions.Add(ctx, 1, rs.add...)
		o.wait.Record(ctx, e.Wait.Seconds(), rs.record...)
		if r == resultAcquired && !e.Nested { // a re-entry is not a hold of its own
			o.holders.Add(ctx, 1, s.base.add...)
		}
		end(span, e, r)
	case distsync.EventReleased, distsync.EventLost:
		s := o.sets(e)
		o.holders.Add(ctx, -1, s.base.add...)
		switch {
		case e.Kind == distsync.EventLost:
			o.held.Record(ctx, e.Held.Seconds(), s.end(endLost).record...)
			o.losses.Add(ctx, 1, s.reason(reasonOf(e.Err)).add...)
		case e.Err != nil: // ErrClosed
			o.held.Record(ctx, e.Held.Seconds(), s.end(endClosed).record...)
		default:
			o.held.Record(ctx, e.Held.Seconds(), s.end(endReleased).record...)
		}
	case distsync.EventRenewalFailed:
		o.renewalFailures.Add(ctx, 1, o.sets(e).base.add...)
	case distsync.EventOnceLeader, distsync.EventOnceFollower, distsync.EventOnceTakeover:
		o.onces.Add(ctx, 1, o.sets(e).role(roleOf(e.Kind)).add...)
		o.note(e)
	case distsync.EventQueued, distsync.EventWoken, distsync.EventGranted:
		o.note(e)
	case eventAllowed, eventDelayed, eventRefused, eventCanceled:
		o.decide(ctx, e)
	}
}

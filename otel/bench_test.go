package distsyncotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/mutex"
	distsyncotel "github.com/distsync/distsync/otel"
)

// BenchmarkObserver measures what the Observer adds: per call that acquires and releases
// (the three events started, acquired, released), on its own; and per uncontended
// Lock+Unlock on the embedded miniredis, against no observer at all. "noop" is the
// Observer on the no-op providers (the global ones before an SDK is installed); "sdk" on
// the SDK's, with every span sampled, recorded and exported in batches to an exporter that drops them.
func BenchmarkObserver(b *testing.B) {
	observers := []struct {
		name string
		opts func() []distsyncotel.Option
	}{
		{"noop", func() []distsyncotel.Option {
			return []distsyncotel.Option{distsyncotel.WithMeterProvider(noop.NewMeterProvider()),
				distsyncotel.WithTracerProvider(tracenoop.NewTracerProvider())}
		}},
		{"sdk", func() []distsyncotel.Option {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			return []distsyncotel.Option{distsyncotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))),
				distsyncotel.WithTracerProvider(tp)}
		}},
	}

	b.Run("events", func(b *testing.B) {
		for _, o := range observers {
			b.Run(o.name, func(b *testing.B) {
				obs := distsyncotel.Observer(o.opts()...)
				ctx := context.Background()
				b.ReportAllocs()
				var call uint64
				for b.Loop() {
					call++
					e := distsync.Event{Primitive: "mutex", Name: "orders", Call: call, Context: ctx, Weight: 1, Token: int64(call)}
					e.Kind = distsync.EventAcquireStarted
					obs(e)
					e.Kind, e.Wait = distsync.EventAcquired, 100_000
					obs(e)
					e.Kind, e.Context, e.Held = distsync.EventReleased, nil, 200_000
					obs(e)
				}
			})
		}
	})

	b.Run("lock-unlock", func(b *testing.B) {
		srv, err := embedded.Start()
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		run := func(b *testing.B, opts ...distsync.Option) {
			h, err := srv.NewHandle(opts...)
			if err != nil {
				b.Fatal(err)
			}
			m, _ := mutex.New(h, b.Name())
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run("none", func(b *testing.B) { run(b) })
		for _, o := range observers {
			b.Run(o.name, func(b *testing.B) { run(b, distsync.WithObserver(distsyncotel.Observer(o.opts()...))) })
		}
	})
}

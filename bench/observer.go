package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/mutex"
	distsyncotel "github.com/distsync/distsync/otel"
)

// observerCost measures what an observer costs an uncontended mutex Lock+Unlock: one Handle
// without an observer, one with an observer that does nothing, and one with the otel module on
// the OpenTelemetry SDK (a meter provider with a reader, and a tracer provider that samples
// every span, exporting nowhere: the SDK's work without an exporter's), pair by pair in a new
// order each round, with a PING as the unit.
func observerCost(ctx context.Context, addr string, iters int) ([]primRow, error) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer tp.Shutdown(context.Background())

	setups := []struct {
		name string
		opts []distsync.Option
	}{
		{"no observer", nil},
		{"an observer that does nothing", []distsync.Option{distsync.WithObserver(func(distsync.Event) {})}},
		{"the otel module on the SDK (metrics and spans)", []distsync.Option{distsync.WithObserver(
			distsyncotel.Observer(distsyncotel.WithMeterProvider(mp), distsyncotel.WithTracerProvider(tp)))}},
	}
	var ops []pairOp
	for i, s := range setups {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		h, err := distsync.New(c, append([]distsync.Option{distsync.WithKeyPrefix(keyPrefix), distsync.WithLeaseTTL(leaseTTL)}, s.opts...)...)
		if err != nil {
			return nil, err
		}
		defer h.Close(context.Background())
		m, err := mutex.New(h, fmt.Sprintf("observer-%d", i))
		if err != nil {
			return nil, err
		}
		ops = append(ops, pairOp{s.name, func(ctx context.Context) error {
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		}})
	}
	pinger, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	defer pinger.Close()

	times, pings, err := interleave(ctx, pinger, ops, iters)
	if err != nil {
		return nil, err
	}
	rtt, base := pct(pings, 50), pct(times[0], 50)
	var rows []primRow
	for k, s := range setups {
		p50 := pct(times[k], 50)
		rows = append(rows, primRow{
			scenario: "uncontended mutex Lock + Unlock, " + s.name,
			result: fmt.Sprintf("%v p50 (%v p99), %+.1f%% against no observer", p50.Round(time.Microsecond),
				pct(times[k], 99).Round(time.Microsecond), 100*(float64(p50)/float64(base)-1)),
			rtt:        fmt.Sprintf("%.2f", float64(p50)/float64(rtt)),
			clientCmds: -1, redisCmds: -1, redisCPU: -1,
		})
	}
	return rows, nil
}

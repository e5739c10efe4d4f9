package main

import (
	"context"
	"fmt"
	"runtime"
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
// every span, exporting nowhere: the SDK's work without an exporter's).
func observerCost(ctx context.Context, addr string, iters int) ([]primRow, error) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer tp.Shutdown(context.Background())

	return handleCost(ctx, addr, iters, "observer", "no observer", []handleSetup{
		{"no observer", nil},
		{"an observer that does nothing", []distsync.Option{distsync.WithObserver(func(distsync.Event) {})}},
		{"the otel module on the SDK (metrics and spans)", []distsync.Option{distsync.WithObserver(
			distsyncotel.Observer(distsyncotel.WithMeterProvider(mp), distsyncotel.WithTracerProvider(tp)))}},
	}, false)
}

// handleSetup is one Handle's options, for handleCost.
type handleSetup struct {
	name string
	opts []distsync.Option
}

// handleCost measures what Handle options cost an uncontended mutex Lock+Unlock: one Handle
// and client per setup, pair by pair in a new order each round, with a PING as the unit; each
// row compares a setup with the first (base). With allocs, it then runs 1000 pairs of each
// setup in turn and reports the process's allocations per pair (the client's goroutines'
// included, the same for every setup). Keys are named <what>-<n>.
func handleCost(ctx context.Context, addr string, iters int, what, base string, setups []handleSetup, allocs bool) ([]primRow, error) {
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
		m, err := mutex.New(h, fmt.Sprintf("%s-%d", what, i))
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
	rtt, p50base := pct(pings, 50), pct(times[0], 50)
	var rows []primRow
	for k, s := range setups {
		p50 := pct(times[k], 50)
		result := fmt.Sprintf("%v p50 (%v p99), %+.1f%% against %s", p50.Round(time.Microsecond),
			pct(times[k], 99).Round(time.Microsecond), 100*(float64(p50)/float64(p50base)-1), base)
		if allocs {
			n, b, err := allocsPerPair(ctx, ops[k], 1000)
			if err != nil {
				return nil, err
			}
			result += fmt.Sprintf("; %.1f allocations, %.0f B per pair", n, b)
		}
		rows = append(rows, primRow{
			scenario:   "uncontended mutex Lock + Unlock, " + s.name,
			result:     result,
			rtt:        fmt.Sprintf("%.2f", float64(p50)/float64(rtt)),
			clientCmds: -1, redisCmds: -1, redisCPU: -1,
		})
	}
	return rows, nil
}

// allocsPerPair runs op n times and returns the process's allocations and bytes allocated
// per run.
func allocsPerPair(ctx context.Context, op pairOp, n int) (allocs, bytes float64, err error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		if err := op.run(ctx); err != nil {
			return 0, 0, err
		}
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(n), float64(after.TotalAlloc-before.TotalAlloc) / float64(n), nil
}

package distsyncotel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/mutex"
	distsyncotel "github.com/distsync/distsync/otel"
)

// Two processes contend for a mutex; the metrics go to stdout when the MeterProvider shuts
// down. (A real program leaves out WithEncoder, and the exporter prints JSON; this example
// prints a summary without the durations, which vary from run to run.)
func Example() {
	exporter, err := stdoutmetric.New(stdoutmetric.WithEncoder(summary{}))
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exporter)))
	otel.SetMeterProvider(mp)

	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	var pods [2]*mutex.Mutex
	for i := range pods {
		// With a client of yours: distsync.New(client, distsync.WithObserver(distsyncotel.Observer()))
		// (the identity, by default "<host name>:<pid>", names each pod's series)
		h, err := srv.NewHandle(distsync.WithObserver(distsyncotel.Observer()), distsync.WithIdentity(fmt.Sprintf("pod-%d", i)))
		if err != nil {
			panic(err)
		}
		pods[i], _ = mutex.New(h, "orders")
	}

	ctx := context.Background()
	if err := pods[0].Lock(ctx); err != nil {
		panic(err)
	}
	if ok, _ := pods[1].TryLock(ctx); !ok {
		fmt.Println("pod 1: TryLock found it held")
	}
	done := make(chan error)
	go func() { done <- pods[1].Lock(ctx) }() // waits for pod 0's Unlock
	time.Sleep(10 * time.Millisecond)
	if err := pods[0].Unlock(ctx); err != nil {
		panic(err)
	}
	if err := <-done; err != nil {
		panic(err)
	}
	if err := pods[1].Unlock(ctx); err != nil {
		panic(err)
	}

	if err := mp.Shutdown(ctx); err != nil { // exports what was recorded
		panic(err)
	}
	// Output:
	// pod 1: TryLock found it held
	// distsync.acquire.wait.duration{identity=pod-0,name=orders,primitive=mutex,result=acquired} count 1
	// distsync.acquire.wait.duration{identity=pod-1,name=orders,primitive=mutex,result=acquired} count 1
	// distsync.acquire.wait.duration{identity=pod-1,name=orders,primitive=mutex,result=busy} count 1
	// distsync.acquisitions{identity=pod-0,name=orders,primitive=mutex,result=acquired} 1
	// distsync.acquisitions{identity=pod-1,name=orders,primitive=mutex,result=acquired} 1
	// distsync.acquisitions{identity=pod-1,name=orders,primitive=mutex,result=busy} 1
	// distsync.hold.duration{end=released,identity=pod-0,name=orders,primitive=mutex} count 1
	// distsync.hold.duration{end=released,identity=pod-1,name=orders,primitive=mutex} count 1
	// distsync.holders{identity=pod-0,name=orders,primitive=mutex} 0
	// distsync.holders{identity=pod-1,name=orders,primitive=mutex} 0
	// distsync.waiters{identity=pod-0,name=orders,primitive=mutex} 0
	// distsync.waiters{identity=pod-1,name=orders,primitive=mutex} 0
}

// summary is a stdoutmetric.Encoder that prints one line per series, sorted: its attributes
// (without "distsync.") and its value, or a histogram's count.
type summary struct{}

func (summary) Encode(v any) error {
	var lines []string
	for _, sm := range v.(*metricdata.ResourceMetrics).ScopeMetrics {
		for _, m := range sm.Metrics {
			line := func(set attribute.Set, value string) {
				var kv []string
				for _, a := range set.ToSlice() {
					kv = append(kv, strings.TrimPrefix(string(a.Key), "distsync.")+"="+a.Value.String())
				}
				lines = append(lines, fmt.Sprintf("%s{%s} %s", m.Name, strings.Join(kv, ","), value))
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					line(p.Attributes, fmt.Sprint(p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					line(p.Attributes, fmt.Sprintf("count %d", p.Count))
				}
			}
		}
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	return nil
}

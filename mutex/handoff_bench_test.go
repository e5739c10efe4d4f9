package mutex_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
)

// BenchmarkClusterHandOff is two processes (pods) taking one mutex in turns on the harness's
// 3-master Cluster, so that nearly every acquisition is a hand-off woken by a message: what
// sharded pub/sub (Redis 7.0+) and the broadcast PUBLISH of a Redis 6.2 Cluster cost. Beside
// the time per acquisition it reports, per acquisition, the Redis CPU of all three nodes
// (INFO cpu), the PUBLISH messages the nodes sent each other over the Cluster bus (CLUSTER
// INFO), and the publishes the scripts made (PUBLISH or SPUBLISH, INFO commandstats). Run it
// on each server:
//
//	DISTSYNC_REDIS_SERVER=$bin/redis-server DISTSYNC_REDIS_CLI=$bin/redis-cli \
//		go test -run '^$' -bench ClusterHandOff -benchtime 4000x -count 5 ./mutex
func BenchmarkClusterHandOff(b *testing.B) {
	be := redistest.Open(b, redistest.ClusterB)
	prefix := be.Prefix(b)
	var ms []*mutex.Mutex
	for range 2 {
		c, err := rueidis.NewClient(be.ClientOption())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		h := redistest.Handle(b, c, distsync.WithKeyPrefix(prefix))
		m, err := mutex.New(h, "handoff")
		if err != nil {
			b.Fatal(err)
		}
		ms = append(ms, m)
	}
	nodes := be.Nodes(b)
	ctx := context.Background()
	before := clusterStats(b, nodes)
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, m := range ms {
		n := b.N / 2
		if i == 0 {
			n = b.N - n
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if err := m.Lock(ctx); err != nil {
					b.Error(err)
					return
				}
				if err := m.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	after := clusterStats(b, nodes)
	per := func(k string) float64 { return (after[k] - before[k]) / float64(b.N) }
	b.ReportMetric(per("cpu")*1e6, "redis-cpu-µs/op")
	b.ReportMetric(per("bus"), "bus-publish/op")
	b.ReportMetric(per("publishes"), "publishes/op")
}

// clusterStats sums, over nodes, the Redis CPU in seconds ("cpu"), the PUBLISH messages sent
// over the Cluster bus ("bus") and the calls of PUBLISH and SPUBLISH ("publishes").
func clusterStats(b *testing.B, nodes []rueidis.Client) map[string]float64 {
	b.Helper()
	out := map[string]float64{}
	for _, c := range nodes {
		ctx := context.Background()
		info, err := c.Do(ctx, c.B().Info().Section("cpu").Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		ci, err := c.Do(ctx, c.B().ClusterInfo().Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		stats, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.Lines(info + "\n" + ci + "\n" + stats) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			switch k {
			case "used_cpu_sys", "used_cpu_user":
				f, _ := strconv.ParseFloat(v, 64)
				out["cpu"] += f
			case "cluster_stats_messages_publish_sent":
				f, _ := strconv.ParseFloat(v, 64)
				out["bus"] += f
			case "cmdstat_publish", "cmdstat_spublish":
				calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
				f, _ := strconv.ParseFloat(calls, 64)
				out["publishes"] += f
			}
		}
	}
	return out
}

// BenchmarkClusterPublish isolates what a wake-up's publish costs the harness's 3-master
// Cluster: one message on a channel with one subscriber, as PUBLISH (which a Cluster
// broadcasts to every node over its bus: all a Redis 6.2 Cluster has) and, where the server
// has it, as SPUBLISH (delivered by the shard that owns the channel). The subscriber is on the
// node that owns the channel's slot, as distsync's notifier subscribes. Per message: the time
// until the subscriber has it, the Redis CPU of all three nodes, and the bus messages.
func BenchmarkClusterPublish(b *testing.B) {
	be := redistest.Open(b, redistest.ClusterB)
	cmds := []string{"PUBLISH"}
	if be.Sharded() {
		cmds = append(cmds, "SPUBLISH")
	}
	for _, cmd := range cmds {
		b.Run(cmd, func(b *testing.B) {
			c, err := rueidis.NewClient(be.ClientOption())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			channel := be.Prefix(b) + "{bench}:ch"
			sub := c.B().Subscribe().Channel(channel).Build().SetSlot(channel)
			if cmd == "SPUBLISH" {
				sub = c.B().Ssubscribe().Channel(channel).Build()
			}
			got := make(chan struct{}, 1)
			ready := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rctx := rueidis.WithOnSubscriptionHook(ctx, func(rueidis.PubSubSubscription) { close(ready) })
			go func() { _ = c.Receive(rctx, sub, func(rueidis.PubSubMessage) { got <- struct{}{} }) }()
			<-ready
			nodes := be.Nodes(b)
			before := clusterStats(b, nodes)
			b.ResetTimer()
			for b.Loop() {
				if err := c.Do(ctx, c.B().Arbitrary(cmd).Keys(channel).Args("m").Build()).Error(); err != nil {
					b.Fatal(err)
				}
				<-got
			}
			b.StopTimer()
			after := clusterStats(b, nodes)
			per := func(k string) float64 { return (after[k] - before[k]) / float64(b.N) }
			b.ReportMetric(per("cpu")*1e6, "redis-cpu-µs/op")
			b.ReportMetric(per("bus"), "bus-publish/op")
		})
	}
}

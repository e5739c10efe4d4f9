package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// The Sentinel topology fails over gracefully and after a kill: the client made through the
// Sentinels follows the primary, the data written before is there, the old primary becomes
// a replica of the new one, and every process is gone when the test ends.
func TestSentinelFailoverAndKill(t *testing.T) {
	Long(t, "a replicated topology of its own, failed over")
	t.Parallel()
	var topo *Sentinel
	t.Cleanup(func() { // runs after the topology's own cleanups
		if topo != nil {
			assertGone(t, append(slices.Clone(topo.data), topo.sentinels...))
		}
	})
	topo = StartSentinel(t, 2)
	if topo.MasterName() != "distsync" || len(topo.SentinelAddrs()) != 3 {
		t.Fatalf("MasterName %q, SentinelAddrs %v", topo.MasterName(), topo.SentinelAddrs())
	}
	first := topo.Primary()
	if first != topo.data[0] || len(topo.Replicas()) != 2 {
		t.Fatalf("primary %v, replicas %v; want the node started as primary and 2 replicas", first, topo.Replicas())
	}
	c := topo.Client(t)
	const key, key2 = "redistest:sentinel:k", "redistest:sentinel:k2"
	writeReplicated(t, c, key, "v1", 2)

	topo.Failover(t)
	second := topo.Primary()
	if second == nil || second == first {
		t.Fatalf("primary after Failover is %v, want a replica of %d", second, first.Port)
	}
	if err := replicaLinked(first, second); err != nil {
		t.Fatalf("old primary after Failover: %v", err)
	}
	if !slices.Contains(topo.Replicas(), first) {
		t.Fatalf("Replicas() = %v does not hold the old primary %d", ports(topo.Replicas()), first.Port)
	}
	// A replica answers reads too: only the write proves that the client follows the primary.
	followed := readWrite(t, c, key, "v1", key2, "w1", 5*time.Second)
	t.Logf("the sentinel client wrote to the new primary %v after Failover returned", followed)
	if v, err := call(second.Addr(), probeLimit, "GET", key2); err != nil || v != "w1" {
		t.Fatalf("GET %s on the new primary %d = %v, %v; want w1", key2, second.Port, v, err)
	}

	writeReplicated(t, c, key, "v2", 2)
	began := time.Now()
	killed := topo.KillPrimary(t)
	if killed != second || killed.cmd.ProcessState == nil {
		t.Fatalf("KillPrimary killed %v (state %v), want %d dead", killed, killed.cmd.ProcessState, second.Port)
	}
	topo.WaitSettled(t, 20*time.Second)
	t.Logf("sentinel failover after SIGKILL settled %v after the kill", time.Since(began).Round(time.Millisecond))
	third := topo.Primary()
	if third == nil || third == killed || !slices.Contains(topo.data, third) {
		t.Fatalf("primary after the kill is %v, want a replica of %d", third, killed.Port)
	}
	if slices.Contains(topo.Replicas(), killed) {
		t.Fatalf("Replicas() = %v holds the killed node %d", ports(topo.Replicas()), killed.Port)
	}
	followed = readWrite(t, c, key, "v2", key2, "w2", 10*time.Second)
	t.Logf("the sentinel client wrote to the new primary %v after WaitSettled returned", followed)
}

// A paused primary is failed over; once resumed, it replicates from the new primary.
func TestSentinelPauseResume(t *testing.T) {
	Long(t, "a replicated topology of its own, failed over")
	t.Parallel()
	var topo *Sentinel
	t.Cleanup(func() {
		if topo != nil {
			assertGone(t, append(slices.Clone(topo.data), topo.sentinels...))
		}
	})
	topo = StartSentinel(t, 1)
	paused := topo.PausePrimary(t)
	began := time.Now()
	topo.WaitSettled(t, 20*time.Second)
	t.Logf("sentinel failover of a paused primary settled in %v", time.Since(began).Round(time.Millisecond))
	p := topo.Primary()
	if p == nil || p == paused {
		t.Fatalf("primary while %d is paused: %v", paused.Port, p)
	}
	topo.ResumePrimary(t)
	began = time.Now()
	topo.WaitSettled(t, 20*time.Second)
	t.Logf("the resumed primary replicated from the new one after %v", time.Since(began).Round(time.Millisecond))
	if err := replicaLinked(paused, p); err != nil {
		t.Fatalf("resumed old primary: %v", err)
	}
}

// The replicated cluster fails a slot over gracefully and after a kill: the key's primary
// changes to its replica, the cluster client reads the key back and writes it, and every
// process is gone when the test ends.
func TestClusterReplicasFailoverAndKill(t *testing.T) {
	Long(t, "a replicated topology of its own, failed over")
	t.Parallel()
	var topo *ReplicatedCluster
	t.Cleanup(func() {
		if topo != nil {
			assertGone(t, topo.nodes)
		}
	})
	topo = StartClusterReplicas(t)
	if len(topo.Addrs()) != 6 {
		t.Fatalf("Addrs() = %v, want 6", topo.Addrs())
	}
	// The probe keys hash where the cluster says.
	for _, slot := range []int{0, 1, 5460, 5461, 12345, 16383} {
		if got, err := call(topo.nodes[0].Addr(), probeLimit, "CLUSTER", "KEYSLOT", probeKey(slot)); err != nil || got != int64(slot) {
			t.Fatalf("CLUSTER KEYSLOT %s = %v, %v; want %d", probeKey(slot), got, err, slot)
		}
	}
	c := topo.Client(t)
	const key, key2 = "redistest:{cr}:k", "redistest:{cr}:k2"
	writeReplicated(t, c, key, "v1", 1)
	first := topo.PrimaryOf(key)
	replica := topo.ReplicaOf(first)
	if first == nil || replica == nil || first == replica {
		t.Fatalf("PrimaryOf %v, ReplicaOf %v", first, replica)
	}

	topo.Failover(t, key)
	if p := topo.PrimaryOf(key); p != replica {
		t.Fatalf("PrimaryOf after Failover = %v, want the replica %d", p, replica.Port)
	}
	if r := topo.ReplicaOf(replica); r != first {
		t.Fatalf("ReplicaOf the new primary = %v, want the old primary %d", r, first.Port)
	}
	followed := readWrite(t, c, key, "v1", key2, "w1", 5*time.Second)
	t.Logf("the cluster client wrote to the new primary %v after Failover returned", followed)

	writeReplicated(t, c, key, "v2", 1)
	killed := topo.KillPrimaryOf(t, key)
	if killed != replica || killed.cmd.ProcessState == nil {
		t.Fatalf("KillPrimaryOf killed %v (state %v), want %d dead", killed, killed.cmd.ProcessState, replica.Port)
	}
	if p := topo.PrimaryOf(key); p != first {
		t.Fatalf("PrimaryOf after the kill = %v, want its replica %d", p, first.Port)
	}
	if r := topo.ReplicaOf(first); r != nil {
		t.Fatalf("ReplicaOf(%d) = %d after its replica was killed", first.Port, r.Port)
	}
	if len(topo.Addrs()) != 5 {
		t.Fatalf("Addrs() after the kill = %v, want 5", topo.Addrs())
	}
	followed = readWrite(t, c, key, "v2", key2, "w2", 10*time.Second)
	t.Logf("the cluster client wrote to the new primary %v after KillPrimaryOf returned", followed)
}

// A paused cluster primary is replaced by its replica; once resumed, it replicates from it.
func TestClusterReplicasPauseResume(t *testing.T) {
	Long(t, "a replicated topology of its own, failed over")
	t.Parallel()
	var topo *ReplicatedCluster
	t.Cleanup(func() {
		if topo != nil {
			assertGone(t, topo.nodes)
		}
	})
	topo = StartClusterReplicas(t)
	const key = "redistest:{cp}:k"
	replica := topo.ReplicaOf(topo.PrimaryOf(key))
	began := time.Now()
	paused := topo.PausePrimaryOf(t, key)
	topo.WaitSettled(t, 20*time.Second)
	t.Logf("cluster failover of a paused primary settled in %v", time.Since(began).Round(time.Millisecond))
	if p := topo.PrimaryOf(key); p != replica {
		t.Fatalf("PrimaryOf while %d is paused = %v, want its replica %d", paused.Port, p, replica.Port)
	}
	topo.Resume(t, paused)
	began = time.Now()
	topo.WaitSettled(t, 20*time.Second)
	t.Logf("the resumed primary replicated from the new one after %v", time.Since(began).Round(time.Millisecond))
	if r := topo.ReplicaOf(replica); r != paused {
		t.Fatalf("ReplicaOf the new primary = %v, want the resumed node %d", r, paused.Port)
	}
}

// writeReplicated sets key to val and waits (WAIT, on the same connection) until replicas
// replicas have it, so that a failover cannot lose it. A dedicated connection of a cluster
// client does not follow MOVED and its slot map is refreshed in the background after a
// failover, so it tries again for up to 5 s.
func writeReplicated(t *testing.T, c rueidis.Client, key, val string, replicas int64) {
	t.Helper()
	err := waitFor(5*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return c.Dedicated(func(d rueidis.DedicatedClient) error {
			res := d.DoMulti(ctx,
				d.B().Set().Key(key).Value(val).Build(),
				d.B().Wait().Numreplicas(replicas).Timeout(2000).Build())
			if err := res[0].Error(); err != nil {
				return err
			}
			n, err := res[1].AsInt64()
			if err == nil && n < replicas {
				err = fmt.Errorf("WAIT: %d replicas, want %d", n, replicas)
			}
			return err
		})
	})
	if err != nil {
		t.Fatalf("SET %s and WAIT: %v", key, err)
	}
}

// readWrite waits, at most limit, until c reads want at key and can set key2 to val2, and
// returns how long that took.
func readWrite(t *testing.T, c rueidis.Client, key, want, key2, val2 string, limit time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	err := waitFor(limit, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		got, err := c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
		if err != nil {
			return fmt.Errorf("GET %s: %w", key, err)
		}
		if got != want {
			return fmt.Errorf("GET %s = %q, want %q", key, got, want)
		}
		if err := c.Do(ctx, c.B().Set().Key(key2).Value(val2).Build()).Error(); err != nil {
			return fmt.Errorf("SET %s: %w", key2, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the client did not follow the new primary within %v: %v", limit, err)
	}
	return time.Since(began).Round(time.Millisecond)
}

// assertGone fails t unless every server was waited for, its PID is gone and its directory
// removed.
func assertGone(t *testing.T, servers []*Server) {
	t.Helper()
	for _, s := range servers {
		pid := s.cmd.Process.Pid
		if s.cmd.ProcessState == nil {
			t.Errorf("process %d (port %d) was not waited for", pid, s.Port)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d (port %d) still exists: kill -0 says %v", pid, s.Port, err)
		}
		if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("directory %s of process %d is still there (%v)", s.Dir, pid, err)
		}
	}
}

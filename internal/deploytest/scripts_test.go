package deploytest

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/redistest"
)

// flushAll returns a disruption that empties the script cache of every node, as SCRIPT FLUSH
// (or a restart, a failover to a replica that never ran the scripts) does.
func flushAll(nodes []rueidis.Client) func(t *testing.T) {
	return func(t *testing.T) {
		t.Helper()
		for _, n := range nodes {
			must(t, "SCRIPT FLUSH", n.Do(context.Background(), n.B().ScriptFlush().Build()).Error())
		}
	}
}

// noScriptLogged fails t if a Handle logged NOSCRIPT: a renewal or a background clean-up
// that met it (their errors are logged, not returned) and did not fall back to EVAL.
func noScriptLogged(t *testing.T, log *redistest.Buffer) {
	t.Helper()
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "NOSCRIPT") {
			t.Errorf("logged: %s", line)
		}
	}
}

// noScripts returns how many NOSCRIPT errors the servers at addrs answered since they started
// (INFO errorstats): the misses the library recovered from.
func noScripts(t *testing.T, addrs ...string) int64 {
	t.Helper()
	var n int64
	for _, addr := range addrs {
		info, err := redistest.Command(addr, 5*time.Second, "INFO", "errorstats")
		if err != nil {
			t.Fatalf("INFO errorstats: %v", err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_NOSCRIPT:count="); ok {
				c, _ := strconv.ParseInt(v, 10, 64)
				n += c
			}
		}
	}
	return n
}

// SCRIPT FLUSH while holders hold and waiters wait, in every scenario, changes nothing a user
// sees: the holders' renewals go on (their scripts sent again with EVAL), the waiters are
// served, the releases work, and no NOSCRIPT reaches a caller or the log. On standalone, on a
// Cluster, and with every grant waiting for a replica (the replica ack sends each script with
// WAIT on a dedicated connection).
func TestScriptFlush(t *testing.T) {
	for _, name := range []string{redistest.Standalone, redistest.ClusterB} {
		t.Run(name, func(t *testing.T) {
			b := redistest.Open(t, name)
			log := &redistest.Buffer{}
			before := noScripts(t, b.Addrs()...)
			pass{prefix: b.Prefix(t), client: clientOf(b.ClientOption()), disrupt: flushAll(b.Nodes(t)), log: log}.run(t)
			noScriptLogged(t, log)
			if after := noScripts(t, b.Addrs()...); after <= before {
				t.Errorf("no NOSCRIPT answered during the pass (%d before, %d after): the flushes did not reach the scripts", before, after)
			}
		})
	}
	t.Run("replicaack", func(t *testing.T) {
		primary := redistest.StartRedis(t)
		replica := redistest.StartRedis(t, "replicaof 127.0.0.1 "+port(primary.Addr()))
		waitReplicas(t, primary, 1)
		log := &redistest.Buffer{}
		pass{prefix: "flush.ack:", client: clientOf(primary.ClientOption()), acks: 1, ackAll: true, log: log,
			disrupt: flushAll([]rueidis.Client{primary.Client(t), replica.Client(t)})}.run(t)
		noScriptLogged(t, log)
		if n := noScripts(t, primary.Addr()); n == 0 {
			t.Error("no NOSCRIPT answered during the pass: the flushes did not reach the scripts")
		}
	})
}

// A server stopped and started again from its saved data, as a version upgrade does it, by
// another binary if DISTSYNC_REDIS_SWAP names one (Valkey for Redis 7.0, say; .ci/run does),
// else by its own, while holders hold and waiters wait, in every scenario: the script cache
// is empty and every connection was dropped, and nothing a user sees changes (the holders
// keep their leases across the gap, their renewals and releases work, the waiters are
// served, no NOSCRIPT escapes).
func TestServerSwapped(t *testing.T) {
	swap, err := redistest.SwapBin()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	for _, s := range (pass{}).scenarios() {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel() // a server each
			srv := redistest.StartRedis(t)
			log := &redistest.Buffer{}
			// The holders keep their leases across the gap only if it ends before their
			// deadline: a kill just before a renewal leaves two thirds of the lease for it.
			// A swap took 2.3 s beside the long tier's other packages, past a 3 s lease.
			pass{prefix: "swap:", client: clientOf(srv.ClientOption()), only: []string{s.name}, serial: true, ttl: 10 * time.Second, log: log,
				disrupt: func(t *testing.T) {
					t.Helper()
					from := serverVersion(t, srv)
					if _, err := redistest.Command(srv.Addr(), 10*time.Second, "SAVE"); err != nil {
						t.Fatalf("SAVE: %v", err)
					}
					began := time.Now()
					srv.Kill()
					if err := srv.StartWith(swap, 20*time.Second); err != nil {
						t.Fatalf("start %s: %v", filepath.Base(swap), err)
					}
					t.Logf("%s swapped for %s in %v", from, serverVersion(t, srv), time.Since(began).Round(time.Millisecond))
				}}.run(t)
			noScriptLogged(t, log)
			if n := noScripts(t, srv.Addr()); n == 0 {
				t.Error("no NOSCRIPT answered by the new server: the scripts were not sent again")
			}
		})
	}
	if swap == "" {
		t.Logf("each server restarted its own binary: set %s to swap it for another", redistest.EnvSwap)
	}
}

// serverVersion returns the server's name and version, as INFO server has them.
func serverVersion(t *testing.T, srv *redistest.Proc) string {
	t.Helper()
	info, err := redistest.Command(srv.Addr(), 5*time.Second, "INFO", "server")
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	name, version := "redis", ""
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok && version == "" {
			version = v
		}
		if v, ok := strings.CutPrefix(line, "valkey_version:"); ok {
			name, version = "valkey", v
		}
	}
	return name + " " + version
}

package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/keys"
)

// Replicated topologies: a primary with replicas watched by three Sentinels, and a Redis
// Cluster of three primaries with one replica each. Both are started from the server binary
// [ServerBin] (redis-server on PATH by default; a Sentinel is that binary run with
// --sentinel), on free loopback ports below 32768 (cluster bus ports too), for one test, and
// every process is killed by its PID when the test ends (and with the test binary if it
// dies). The fault helpers (graceful failover, SIGKILL, SIGSTOP) act on processes the
// topology started and nothing else.

const (
	// sentinelMaster is the name the Sentinels monitor the primary under.
	sentinelMaster = "distsync"
	// failoverLimit bounds the wait of Failover and KillPrimaryOf.
	failoverLimit = 20 * time.Second
	// startLimit bounds the wait for a topology to be ready.
	startLimit = 30 * time.Second
	// probeLimit bounds one probe command (dial, write, read).
	probeLimit = 2 * time.Second
	// pollEvery is the pause between two checks of a condition being waited for.
	pollEvery = 50 * time.Millisecond
	// mfRetry is how long Failover waits for a manual cluster failover before it asks again:
	// a little longer than the 5 s after which Redis gives one up.
	mfRetry = 6 * time.Second
	// probeKeyPrefix starts the keys the harness writes to prove that a primary takes writes.
	probeKeyPrefix = "redistest:probe:"
)

// dataNodeConfig is the configuration shared by every data node of a replicated topology:
// a replica that connects starts its full sync at once instead of after the default 5 s
// that Redis 7 waits for more replicas to join a diskless transfer.
var dataNodeConfig = []string{"repl-diskless-sync-delay 0"}

// stopServer kills s by its PID, resuming it first in case it is paused, and waits for it.
func stopServer(s *Server) {
	_ = s.Signal(syscall.SIGCONT)
	s.Stop()
}

// ---------------------------------------------------------------------------------------
// Sentinel

// Sentinel is a primary, its replicas and three Sentinels monitoring it under the name
// [Sentinel.MasterName], started by [StartSentinel] for one test.
//
// The Sentinels run with down-after-milliseconds 1000, parallel-syncs 1 and
// failover-timeout 4000 (an election lost to a split vote is tried again after 8 s, not
// 20 s), and, through SENTINEL DEBUG, with INFO sent every second and hello messages every
// 500 ms (10 s and 2 s by default): a demoted primary still running is turned into a
// replica about 2 s after the switch instead of about 10 s. Everything else is Sentinel's
// own behaviour.
type Sentinel struct {
	data      []*Server // data nodes; data[0] started as the primary
	sentinels []*Server

	mu     sync.Mutex
	down   map[*Server]bool // killed by KillPrimary
	paused map[*Server]bool // stopped by PausePrimary
}

// StartSentinel starts a primary, replicas (1 or 2) replicating from it and three Sentinels
// monitoring it with a quorum of 2, and returns once the topology is ready: every replica's
// link to the primary is up and every Sentinel knows the primary, every replica, the other
// two Sentinels, and reports SENTINEL CKQUORUM ok. Every process is killed by its PID when
// tb ends. A missing redis-server skips tb, or fails it when DISTSYNC_REQUIRE_REDIS=1.
//
// On a server older than Redis 7.0 it skips tb, saying so: the Sentinels' timings above are
// set with SENTINEL DEBUG, which came with 7.0, and with Sentinel's defaults (INFO every 10 s)
// the failover tests would not fit their limits. Sentinel failover is tested on Redis 7.0
// and later, and on Valkey.
func StartSentinel(tb testing.TB, replicas int) *Sentinel {
	tb.Helper()
	RequireRedis(tb)
	if replicas < 1 || replicas > 2 {
		tb.Fatalf("redistest: StartSentinel with %d replicas, want 1 or 2", replicas)
	}
	if v, err := ServerVersion(); err != nil {
		tb.Fatalf("redistest: %v", err)
	} else if !v.AtLeast(7, 0) {
		skip(tb, "Sentinel needs Redis 7.0+ here (SENTINEL DEBUG)", fmt.Sprintf("redistest: Sentinel topology SKIPPED on Redis %v: the harness tunes Sentinel with SENTINEL DEBUG (7.0+); Sentinel failover is tested on 7.0+ and Valkey", v))
	}
	noteOwn("Sentinel topologies")
	began := time.Now()
	s := &Sentinel{down: map[*Server]bool{}, paused: map[*Server]bool{}}
	primary, err := startServer(false, dataNodeConfig...)
	if err != nil {
		tb.Fatalf("start primary: %v", err)
	}
	tb.Cleanup(func() { stopServer(primary) })
	s.data = append(s.data, primary)
	for range replicas {
		r, err := startServer(false, append(slices.Clone(dataNodeConfig), "replicaof 127.0.0.1 "+strconv.Itoa(primary.Port))...)
		if err != nil {
			tb.Fatalf("start replica: %v", err)
		}
		tb.Cleanup(func() { stopServer(r) })
		s.data = append(s.data, r)
	}
	if err := waitFor(10*time.Second, func() error {
		for _, r := range s.data[1:] {
			if err := replicaLinked(r, primary); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		tb.Fatalf("replicas did not link to the primary: %v", err)
	}
	for range 3 {
		sn, err := startSentinelServer(primary.Port)
		if err != nil {
			tb.Fatalf("start sentinel: %v", err)
		}
		tb.Cleanup(func() { stopServer(sn) })
		s.sentinels = append(s.sentinels, sn)
		// Before the Sentinels meet: hello messages every 500 ms, INFO every second.
		if _, err := call(sn.Addr(), probeLimit, "SENTINEL", "DEBUG", "info-period", "1000", "publish-period", "500"); err != nil {
			tb.Fatalf("SENTINEL DEBUG on %s: %v", sn.Addr(), err)
		}
	}
	if err := waitFor(startLimit, func() error { return s.readyErr(primary, replicas) }); err != nil {
		tb.Fatalf("sentinel topology not ready after %v: %v\n%s", startLimit, err, s.logs())
	}
	tb.Logf("redistest: sentinel topology (primary %d, replicas %v, sentinels %v) ready in %v",
		primary.Port, ports(s.data[1:]), ports(s.sentinels), time.Since(began).Round(time.Millisecond))
	return s
}

// startSentinelServer starts the server binary ([ServerBin]) with --sentinel, monitoring the
// primary on primaryPort,
// on a free port, and waits until it answers PING. Its config file is in its own directory,
// writable, since Sentinel rewrites it.
func startSentinelServer(primaryPort int) (*Server, error) {
	bin, err := ServerBin()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		port, err := freePort(false)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "distsync-sentinel-")
		if err != nil {
			return nil, err
		}
		m := sentinelMaster
		conf := []string{
			"port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"dir " + dir,
			"loglevel notice",
			"logfile " + filepath.Join(dir, "redis.log"),
			"sentinel monitor " + m + " 127.0.0.1 " + strconv.Itoa(primaryPort) + " 2",
			"sentinel down-after-milliseconds " + m + " 1000",
			"sentinel failover-timeout " + m + " 4000",
			"sentinel parallel-syncs " + m + " 1",
		}
		cfgPath := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(cfgPath, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		cmd := exec.Command(bin, cfgPath, "--sentinel")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s := &Server{Port: port, Dir: dir, cmd: cmd}
		err = waitPing(s.Addr(), 10*time.Second)
		if err == nil {
			// The port was free when chosen; whoever answers must be this process.
			var pid int
			if pid, err = serverPID(s.Addr()); err == nil && pid != cmd.Process.Pid {
				err = fmt.Errorf("port answered by PID %d, not %d", pid, cmd.Process.Pid)
			}
		}
		if err != nil {
			lastErr = fmt.Errorf("sentinel on %d: %w (log: %s)", port, err, tail(filepath.Join(dir, "redis.log")))
			s.Stop()
			continue
		}
		return s, nil
	}
	return nil, lastErr
}

// readyErr tells why the topology started with primary and n replicas is not ready yet.
func (s *Sentinel) readyErr(primary *Server, n int) error {
	for _, r := range s.data[1:] {
		if err := replicaLinked(r, primary); err != nil {
			return err
		}
	}
	for _, sn := range s.sentinels {
		addr, err := sentinelMasterAddr(sn)
		if err != nil {
			return err
		}
		if addr != primary.Addr() {
			return fmt.Errorf("sentinel %d reports primary %s, not %s", sn.Port, addr, primary.Addr())
		}
		for _, q := range []struct {
			cmd   string
			flags string
			want  int
		}{{"REPLICAS", "slave", n}, {"SENTINELS", "sentinel", 2}} {
			list, err := sentinelList(sn, q.cmd)
			if err != nil {
				return err
			}
			if len(list) != q.want {
				return fmt.Errorf("sentinel %d knows %d %s, want %d", sn.Port, len(list), strings.ToLower(q.cmd), q.want)
			}
			for _, e := range list {
				if e["flags"] != q.flags {
					return fmt.Errorf("sentinel %d sees %s:%s with flags %q", sn.Port, e["ip"], e["port"], e["flags"])
				}
			}
		}
		reply, err := call(sn.Addr(), probeLimit, "SENTINEL", "CKQUORUM", sentinelMaster)
		if err != nil {
			return fmt.Errorf("sentinel %d: CKQUORUM: %w", sn.Port, err)
		}
		if str, _ := reply.(string); !strings.HasPrefix(str, "OK") {
			return fmt.Errorf("sentinel %d: CKQUORUM: %v", sn.Port, reply)
		}
	}
	return nil
}

// MasterName returns the name the Sentinels monitor the primary under: "distsync".
func (s *Sentinel) MasterName() string { return sentinelMaster }

// SentinelAddrs returns the addresses of the three Sentinels.
func (s *Sentinel) SentinelAddrs() []string { return addrs(s.sentinels) }

// ClientOption returns the options of a rueidis client that finds the primary through the
// Sentinels and follows their failovers, without client-side caching.
func (s *Sentinel) ClientOption() rueidis.ClientOption {
	return lean(rueidis.ClientOption{
		InitAddress:  s.SentinelAddrs(),
		Sentinel:     rueidis.SentinelOption{MasterSet: sentinelMaster},
		DisableCache: true,
	})
}

// Client returns a new rueidis client through the Sentinels ([Sentinel.ClientOption]),
// closed when tb ends.
func (s *Sentinel) Client(tb testing.TB) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(s.ClientOption())
	if err != nil {
		tb.Fatalf("rueidis.NewClient through sentinels: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Primary returns the data node that at least two of the three Sentinels report as the
// primary (SENTINEL GET-MASTER-ADDR-BY-NAME), or nil if no two agree on a node the harness
// started. The answer is stable only once the topology has settled ([Sentinel.WaitSettled]).
func (s *Sentinel) Primary() *Server {
	votes := map[string]int{}
	for _, sn := range s.sentinels {
		if addr, err := sentinelMasterAddr(sn); err == nil {
			votes[addr]++
		}
	}
	for addr, n := range votes {
		if n >= 2 {
			return serverAt(s.data, addr)
		}
	}
	return nil
}

// Replicas returns the data nodes that are not killed and not [Sentinel.Primary]: once
// settled, the replicas of the primary. A paused node is included.
func (s *Sentinel) Replicas() []*Server {
	p := s.Primary()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Server
	for _, d := range s.data {
		if d != p && !s.down[d] {
			out = append(out, d)
		}
	}
	return out
}

// Failover makes the Sentinels fail the primary over to a replica, gracefully (SENTINEL
// FAILOVER), and waits until the topology has settled on another primary, the old one
// replicating from it ([Sentinel.WaitSettled]). It fails tb if that takes more than 20 s.
func (s *Sentinel) Failover(tb testing.TB) {
	tb.Helper()
	began := time.Now()
	old := s.agreedPrimary(tb)
	// A Sentinel refuses (NOGOODSLAVE) while its INFO of the replicas is older than it likes,
	// as right after a previous failover: ask again until one accepts.
	err := waitFor(failoverLimit/2, func() error {
		var err error
		for _, sn := range s.sentinels {
			if _, err = call(sn.Addr(), probeLimit, "SENTINEL", "FAILOVER", sentinelMaster); err == nil {
				return nil
			}
		}
		return err
	})
	if err != nil {
		tb.Fatalf("SENTINEL FAILOVER: %v\n%s", err, s.logs())
	}
	p := s.settle(tb, failoverLimit-time.Since(began), func(p *Server) error {
		if p == old {
			return fmt.Errorf("the sentinels still report the old primary %d", old.Port)
		}
		return nil
	})
	tb.Logf("redistest: sentinel failover %d -> %d settled in %v", old.Port, p.Port, time.Since(began).Round(time.Millisecond))
}

// KillPrimary kills the primary (the node every Sentinel reports) with SIGKILL, waits until
// the process is gone, and returns it. It does not wait for the failover: call
// [Sentinel.WaitSettled]. The killed node stays dead.
func (s *Sentinel) KillPrimary(tb testing.TB) *Server {
	tb.Helper()
	p := s.agreedPrimary(tb)
	s.mu.Lock()
	s.down[p] = true
	delete(s.paused, p)
	s.mu.Unlock()
	stopServer(p)
	return p
}

// PausePrimary stops the primary (the node every Sentinel reports) with SIGSTOP and returns
// it: its connections stay open and nothing is answered. The Sentinels fail it over once
// it has not answered for a second. [Sentinel.ResumePrimary] continues it.
func (s *Sentinel) PausePrimary(tb testing.TB) *Server {
	tb.Helper()
	p := s.agreedPrimary(tb)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatalf("SIGSTOP %d: %v", p.Port, err)
	}
	s.paused[p] = true
	return p
}

// ResumePrimary continues, with SIGCONT, every node PausePrimary stopped. It does not wait:
// call [Sentinel.WaitSettled] to wait until a resumed node that lost its role replicates
// from the new primary.
func (s *Sentinel) ResumePrimary(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.paused {
		if err := p.Signal(syscall.SIGCONT); err != nil {
			tb.Fatalf("SIGCONT %d: %v", p.Port, err)
		}
		delete(s.paused, p)
	}
}

// WaitSettled waits, at most limit, until the topology is settled, and fails tb otherwise:
// the three Sentinels report the same primary, a running node the harness started, that
// answers ROLE as master and takes a write, and every other node not killed or paused
// replicates from it with master_link_status:up.
func (s *Sentinel) WaitSettled(tb testing.TB, limit time.Duration) {
	tb.Helper()
	began := time.Now()
	p := s.settle(tb, limit, nil)
	tb.Logf("redistest: sentinel topology settled on primary %d in %v", p.Port, time.Since(began).Round(time.Millisecond))
}

// settle waits, at most limit, until the topology has settled and cond accepts the primary,
// and returns the primary, or fails tb.
func (s *Sentinel) settle(tb testing.TB, limit time.Duration, cond func(p *Server) error) *Server {
	tb.Helper()
	var p *Server
	if err := waitFor(limit, func() (err error) { p, err = s.settledErr(cond); return err }); err != nil {
		tb.Fatalf("sentinel topology not settled after %v: %v\n%s", limit, err, s.logs())
	}
	return p
}

// settledErr returns the primary of the settled topology, or tells why the topology has not
// settled, or returns cond's error for the primary.
func (s *Sentinel) settledErr(cond func(p *Server) error) (*Server, error) {
	var addr string
	for i, sn := range s.sentinels {
		a, err := sentinelMasterAddr(sn)
		if err != nil {
			return nil, err
		}
		if i > 0 && a != addr {
			return nil, fmt.Errorf("sentinels disagree: %d reports primary %s, %d reports %s", s.sentinels[0].Port, addr, sn.Port, a)
		}
		addr = a
	}
	live := s.live()
	p := serverAt(live, addr)
	if p == nil {
		return nil, fmt.Errorf("the sentinels report primary %s, which is not a running data node", addr)
	}
	if err := takesWrites(p, probeKeyPrefix+"sentinel"); err != nil {
		return nil, err
	}
	for _, r := range live {
		if r != p {
			if err := replicaLinked(r, p); err != nil {
				return nil, err
			}
		}
	}
	if cond != nil {
		if err := cond(p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// agreedPrimary returns the primary every Sentinel reports, if it is running, or fails tb.
func (s *Sentinel) agreedPrimary(tb testing.TB) *Server {
	tb.Helper()
	var addr string
	for i, sn := range s.sentinels {
		a, err := sentinelMasterAddr(sn)
		if err != nil {
			tb.Fatalf("%v", err)
		}
		if i > 0 && a != addr {
			tb.Fatalf("sentinels disagree on the primary (%s, %s): call WaitSettled first", addr, a)
		}
		addr = a
	}
	p := serverAt(s.live(), addr)
	if p == nil {
		tb.Fatalf("the sentinels report primary %s, which is not a running data node: call WaitSettled first", addr)
	}
	return p
}

// live returns the data nodes neither killed nor paused.
func (s *Sentinel) live() []*Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Server
	for _, d := range s.data {
		if !s.down[d] && !s.paused[d] {
			out = append(out, d)
		}
	}
	return out
}

// logs returns the end of every Sentinel's log, for a failure message.
func (s *Sentinel) logs() string {
	var b strings.Builder
	for _, sn := range s.sentinels {
		fmt.Fprintf(&b, "--- sentinel %d log:\n%s\n", sn.Port, tail(filepath.Join(sn.Dir, "redis.log")))
	}
	return b.String()
}

// sentinelMasterAddr asks the Sentinel sn for the primary's address.
func sentinelMasterAddr(sn *Server) (string, error) {
	reply, err := call(sn.Addr(), probeLimit, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinelMaster)
	if err != nil {
		return "", fmt.Errorf("sentinel %d: GET-MASTER-ADDR-BY-NAME: %w", sn.Port, err)
	}
	a, ok := reply.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("sentinel %d: GET-MASTER-ADDR-BY-NAME: unexpected reply %v", sn.Port, reply)
	}
	host, _ := a[0].(string)
	port, _ := a[1].(string)
	return net.JoinHostPort(host, port), nil
}

// sentinelList runs SENTINEL REPLICAS or SENTINEL SENTINELS on sn and returns the entries.
func sentinelList(sn *Server, what string) ([]map[string]string, error) {
	reply, err := call(sn.Addr(), probeLimit, "SENTINEL", what, sentinelMaster)
	if err != nil {
		return nil, fmt.Errorf("sentinel %d: SENTINEL %s: %w", sn.Port, what, err)
	}
	entries, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("sentinel %d: SENTINEL %s: unexpected reply %v", sn.Port, what, reply)
	}
	out := make([]map[string]string, 0, len(entries))
	for _, e := range entries {
		fields, _ := e.([]any)
		m := map[string]string{}
		for i := 0; i+1 < len(fields); i += 2 {
			k, _ := fields[i].(string)
			v, _ := fields[i+1].(string)
			m[k] = v
		}
		out = append(out, m)
	}
	return out, nil
}

// ---------------------------------------------------------------------------------------
// Cluster with replicas

// ReplicatedCluster is a Redis Cluster of three primaries with one replica each, started by
// [StartClusterReplicas] for one test. Its nodes run with cluster-node-timeout 2000.
type ReplicatedCluster struct {
	nodes []*Server

	mu     sync.Mutex
	down   map[*Server]bool // killed by KillPrimaryOf
	paused map[*Server]bool // stopped by PausePrimaryOf
}

// StartClusterReplicas starts six cluster nodes, joins them with redis-cli --cluster create
// --cluster-replicas 1 into three primaries with one replica each, and returns once the
// cluster is ready: every node reports cluster_state:ok and the same slot owners and
// replicas, every replica's link to its primary is up, and every primary takes a write in
// its slots. Every node is killed by its PID when tb ends. A missing redis-server or
// redis-cli skips tb, or fails it when DISTSYNC_REQUIRE_REDIS=1.
func StartClusterReplicas(tb testing.TB) *ReplicatedCluster {
	tb.Helper()
	RequireRedis(tb)
	noteOwn("Clusters with replicas")
	began := time.Now()
	c := &ReplicatedCluster{down: map[*Server]bool{}, paused: map[*Server]bool{}}
	for range 6 {
		n, err := startServer(true, dataNodeConfig...)
		if err != nil {
			tb.Fatalf("start cluster node: %v", err)
		}
		tb.Cleanup(func() { stopServer(n) })
		c.nodes = append(c.nodes, n)
	}
	cli, err := CLIBin()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	args := append([]string{"--cluster", "create"}, addrs(c.nodes)...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("%s --cluster create: %v: %s", filepath.Base(cli), err, out)
	}
	// Every slot owner takes a write through a cluster client, then the replicas' part.
	if err := (&Cluster{Nodes: c.nodes}).waitOK(startLimit); err != nil {
		tb.Fatalf("%v", err)
	}
	c.settle(tb, startLimit-time.Since(began), func(v *clusterView) error {
		for _, m := range v.nodes {
			if len(m.slots) == 0 {
				continue
			}
			if r := v.replicasOf(m.id); len(r) != 1 {
				return fmt.Errorf("primary %d has %d replicas, want 1", m.port, len(r))
			}
		}
		return nil
	})
	tb.Logf("redistest: cluster with replicas (nodes %v) ready in %v", ports(c.nodes), time.Since(began).Round(time.Millisecond))
	return c
}

// Addrs returns the addresses of the nodes neither killed nor paused.
func (c *ReplicatedCluster) Addrs() []string { return addrs(c.live()) }

// ClientOption returns the options of a rueidis cluster client seeded with [Addrs], without
// client-side caching.
func (c *ReplicatedCluster) ClientOption() rueidis.ClientOption {
	return lean(rueidis.ClientOption{InitAddress: c.Addrs(), DisableCache: true})
}

// Client returns a new rueidis cluster client ([ReplicatedCluster.ClientOption]), closed
// when tb ends.
func (c *ReplicatedCluster) Client(tb testing.TB) rueidis.Client {
	tb.Helper()
	cl, err := rueidis.NewClient(c.ClientOption())
	if err != nil {
		tb.Fatalf("rueidis.NewClient for the cluster: %v", err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// PrimaryOf returns the node that owns key's slot (CLUSTER KEYSLOT) as CLUSTER NODES on the
// first running node reports it, or nil if that is not a node the harness started or no
// node answers. The answer is stable only once the cluster has settled.
func (c *ReplicatedCluster) PrimaryOf(key string) *Server {
	slot, v, err := c.slotView(key)
	if err != nil {
		return nil
	}
	m := v.owner(slot)
	if m == nil {
		return nil
	}
	return serverAt(c.nodes, portAddr(m.port))
}

// ReplicaOf returns a node not killed that CLUSTER NODES, on the first running node,
// reports as a replica of primary, or nil if there is none (a primary whose replica took
// over from a killed one has none).
func (c *ReplicatedCluster) ReplicaOf(primary *Server) *Server {
	if primary == nil {
		return nil
	}
	v, err := c.view()
	if err != nil {
		return nil
	}
	return c.replicaIn(v, primary)
}

func (c *ReplicatedCluster) replicaIn(v *clusterView, primary *Server) *Server {
	m := v.byPort(primary.Port)
	if m == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range v.replicasOf(m.id) {
		if s := serverAt(c.nodes, portAddr(r.port)); s != nil && !c.down[s] {
			return s
		}
	}
	return nil
}

// Failover fails key's primary over to its replica gracefully (CLUSTER FAILOVER sent to the
// replica) and waits until every running node reports the replica as the owner of key's
// slot, the replica takes a write in that slot, and the cluster has settled
// ([ReplicatedCluster.WaitSettled]), the old primary replicating from the new one. It fails
// tb if key's primary has no replica or that takes more than 20 s.
func (c *ReplicatedCluster) Failover(tb testing.TB, key string) {
	tb.Helper()
	began := time.Now()
	slot, p, r := c.primaryAndReplica(tb, key)
	deadline := began.Add(failoverLimit)
	for attempt := 1; ; attempt++ {
		if _, err := call(r.Addr(), probeLimit, "CLUSTER", "FAILOVER"); err != nil {
			tb.Fatalf("CLUSTER FAILOVER on %d: %v", r.Port, err)
		}
		// A manual failover the primary does not take part in is given up after 5 s
		// (CLUSTER_MF_TIMEOUT) without a word: ask again after that.
		err := waitFor(min(mfRetry, time.Until(deadline)), func() error { return c.settledErr(c.ownedBy(slot, r)) })
		if err == nil {
			tb.Logf("redistest: cluster failover of slot %d, %d -> %d, settled in %v (%d CLUSTER FAILOVER)",
				slot, p.Port, r.Port, time.Since(began).Round(time.Millisecond), attempt)
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("cluster not settled %v after CLUSTER FAILOVER (%d sent): %v", failoverLimit, attempt, err)
		}
	}
}

// KillPrimaryOf kills key's primary with SIGKILL, waits until the process is gone, then
// until the cluster has promoted its replica: every running node reports the replica as the
// owner of key's slot, it takes a write there, and the cluster has settled. It returns the
// killed node, which stays dead. It fails tb if key's primary has no replica or the
// promotion takes more than 20 s.
func (c *ReplicatedCluster) KillPrimaryOf(tb testing.TB, key string) *Server {
	tb.Helper()
	began := time.Now()
	slot, p, r := c.primaryAndReplica(tb, key)
	c.Kill(tb, p)
	c.settle(tb, failoverLimit, c.ownedBy(slot, r))
	tb.Logf("redistest: cluster primary %d killed, replica %d took slot %d over in %v", p.Port, r.Port, slot, time.Since(began).Round(time.Millisecond))
	return p
}

// Kill kills node s with SIGKILL and waits until the process is gone, without waiting for a
// failover ([ReplicatedCluster.WaitSettled] does): a test can act between the two, as
// resuming a replica it froze. The killed node stays dead.
func (c *ReplicatedCluster) Kill(tb testing.TB, s *Server) {
	tb.Helper()
	c.mu.Lock()
	c.down[s] = true
	delete(c.paused, s)
	c.mu.Unlock()
	stopServer(s)
}

// PausePrimaryOf stops key's primary with SIGSTOP and returns it: its connections stay open
// and nothing is answered. Its replica takes over once the other primaries have not heard
// from it for cluster-node-timeout (2 s). [ReplicatedCluster.Resume] continues it.
func (c *ReplicatedCluster) PausePrimaryOf(tb testing.TB, key string) *Server {
	tb.Helper()
	slot, v, err := c.slotView(key)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	m := v.owner(slot)
	if m == nil {
		tb.Fatalf("no node owns slot %d", slot)
	}
	p := serverAt(c.live(), portAddr(m.port))
	if p == nil {
		tb.Fatalf("slot %d is owned by %d, not a running node", slot, m.port)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatalf("SIGSTOP %d: %v", p.Port, err)
	}
	c.paused[p] = true
	return p
}

// Resume continues, with SIGCONT, a node PausePrimaryOf stopped. It does not wait: call
// [ReplicatedCluster.WaitSettled] to wait until a resumed node that lost its slots
// replicates from their new owner.
func (c *ReplicatedCluster) Resume(tb testing.TB, s *Server) {
	tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.paused[s] {
		tb.Fatalf("node %d is not paused", s.Port)
	}
	if err := s.Signal(syscall.SIGCONT); err != nil {
		tb.Fatalf("SIGCONT %d: %v", s.Port, err)
	}
	delete(c.paused, s)
}

// WaitSettled waits, at most limit, until the cluster has settled, and fails tb otherwise:
// every node neither killed nor paused reports cluster_state:ok, the same owner for every
// slot and the same primary for each of these nodes that is a replica, flags none of them
// as failing, every owner is such a node and takes a write in its slots, and every other
// such node replicates from an owner with master_link_status:up.
func (c *ReplicatedCluster) WaitSettled(tb testing.TB, limit time.Duration) {
	tb.Helper()
	began := time.Now()
	c.settle(tb, limit, nil)
	tb.Logf("redistest: cluster settled in %v", time.Since(began).Round(time.Millisecond))
}

func (c *ReplicatedCluster) settle(tb testing.TB, limit time.Duration, cond func(v *clusterView) error) {
	tb.Helper()
	if err := waitFor(limit, func() error { return c.settledErr(cond) }); err != nil {
		tb.Fatalf("cluster not settled after %v: %v", limit, err)
	}
}

// settledErr tells why the cluster is not settled, or returns cond's error for the view
// every running node shares.
func (c *ReplicatedCluster) settledErr(cond func(v *clusterView) error) error {
	live := c.live()
	if len(live) == 0 {
		return errors.New("no running node")
	}
	var ref *clusterView
	var refOwners string
	var refNode *Server
	for _, n := range live {
		info, err := call(n.Addr(), probeLimit, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("node %d: CLUSTER INFO: %w", n.Port, err)
		}
		if s, _ := info.(string); !strings.Contains(s, "cluster_state:ok") {
			return fmt.Errorf("node %d: cluster_state is not ok", n.Port)
		}
		v, err := readClusterView(n)
		if err != nil {
			return err
		}
		for _, other := range live {
			if e := v.byPort(other.Port); e == nil || e.hasFlag("fail") || e.hasFlag("fail?") {
				return fmt.Errorf("node %d does not see node %d running", n.Port, other.Port)
			}
		}
		// The slot owners, and who replicates from whom: a primary ignores a manual failover
		// request from a node it does not know as its replica yet.
		owners := v.describe(live)
		if ref == nil {
			ref, refOwners, refNode = v, owners, n
		} else if owners != refOwners {
			return fmt.Errorf("nodes disagree: %d sees %s, %d sees %s", refNode.Port, refOwners, n.Port, owners)
		}
	}
	for _, m := range ref.nodes {
		if len(m.slots) == 0 {
			continue
		}
		p := serverAt(live, portAddr(m.port))
		if p == nil {
			return fmt.Errorf("slots %v are owned by %d, not a running node", m.slots, m.port)
		}
		if err := takesWrites(p, probeKey(m.slots[0][0])); err != nil {
			return err
		}
	}
	for _, n := range live {
		e := ref.byPort(n.Port)
		if len(e.slots) > 0 {
			continue
		}
		m := ref.byID(e.masterID)
		if !e.hasFlag("slave") || m == nil || len(m.slots) == 0 {
			return fmt.Errorf("node %d (flags %s) is not a replica of a slot owner", n.Port, e.flags)
		}
		if err := replicaLinked(n, serverAt(c.nodes, portAddr(m.port))); err != nil {
			return err
		}
	}
	if cond != nil {
		return cond(ref)
	}
	return nil
}

// ownedBy is a settle condition: slot is owned by s, and s takes a write in it.
func (c *ReplicatedCluster) ownedBy(slot int, s *Server) func(v *clusterView) error {
	return func(v *clusterView) error {
		if m := v.owner(slot); m == nil || m.port != s.Port {
			return fmt.Errorf("slot %d is not owned by %d yet: %s", slot, s.Port, v.describe(c.live()))
		}
		return takesWrites(s, probeKey(slot))
	}
}

// primaryAndReplica returns key's slot, its running primary and that primary's running
// replica, or fails tb.
func (c *ReplicatedCluster) primaryAndReplica(tb testing.TB, key string) (int, *Server, *Server) {
	tb.Helper()
	slot, v, err := c.slotView(key)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	m := v.owner(slot)
	if m == nil {
		tb.Fatalf("no node owns slot %d", slot)
	}
	live := c.live()
	p := serverAt(live, portAddr(m.port))
	if p == nil {
		tb.Fatalf("slot %d is owned by %d, not a running node", slot, m.port)
	}
	r := c.replicaIn(v, p)
	if r == nil || serverAt(live, r.Addr()) == nil {
		tb.Fatalf("primary %d of slot %d has no running replica", p.Port, slot)
	}
	return slot, p, r
}

// slotView returns key's slot and the cluster as the first running node sees it.
func (c *ReplicatedCluster) slotView(key string) (int, *clusterView, error) {
	var lastErr error = errors.New("no running node")
	for _, n := range c.live() {
		reply, err := call(n.Addr(), probeLimit, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			lastErr = fmt.Errorf("node %d: CLUSTER KEYSLOT: %w", n.Port, err)
			continue
		}
		slot, ok := reply.(int64)
		if !ok {
			return 0, nil, fmt.Errorf("node %d: CLUSTER KEYSLOT: unexpected reply %v", n.Port, reply)
		}
		v, err := readClusterView(n)
		if err != nil {
			lastErr = err
			continue
		}
		return int(slot), v, nil
	}
	return 0, nil, lastErr
}

// view returns the cluster as the first running node that answers sees it.
func (c *ReplicatedCluster) view() (*clusterView, error) {
	var lastErr error = errors.New("no running node")
	for _, n := range c.live() {
		v, err := readClusterView(n)
		if err == nil {
			return v, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// live returns the nodes neither killed nor paused.
func (c *ReplicatedCluster) live() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Server
	for _, n := range c.nodes {
		if !c.down[n] && !c.paused[n] {
			out = append(out, n)
		}
	}
	return out
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id       string
	port     int
	flags    string
	masterID string // "-" for a primary
	slots    [][2]int
}

func (n *clusterNode) hasFlag(f string) bool {
	return slices.Contains(strings.Split(n.flags, ","), f)
}

// clusterView is the cluster as one node reports it (CLUSTER NODES).
type clusterView struct{ nodes []*clusterNode }

func readClusterView(n *Server) (*clusterView, error) {
	reply, err := call(n.Addr(), probeLimit, "CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("node %d: CLUSTER NODES: %w", n.Port, err)
	}
	text, _ := reply.(string)
	v := &clusterView{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("node %d: CLUSTER NODES line %q", n.Port, line)
		}
		hostPort, _, _ := strings.Cut(f[1], "@")
		_, portStr, _ := net.SplitHostPort(hostPort)
		port, _ := strconv.Atoi(portStr)
		cn := &clusterNode{id: f[0], port: port, flags: f[2], masterID: f[3]}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // a slot being imported or migrated
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("node %d: CLUSTER NODES slots %q", n.Port, s)
			}
			cn.slots = append(cn.slots, [2]int{a, b})
		}
		v.nodes = append(v.nodes, cn)
	}
	return v, nil
}

func (v *clusterView) byPort(port int) *clusterNode {
	for _, n := range v.nodes {
		if n.port == port {
			return n
		}
	}
	return nil
}

func (v *clusterView) byID(id string) *clusterNode {
	for _, n := range v.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// owner returns the primary that serves slot, or nil.
func (v *clusterView) owner(slot int) *clusterNode {
	for _, n := range v.nodes {
		for _, r := range n.slots {
			if r[0] <= slot && slot <= r[1] {
				return n
			}
		}
	}
	return nil
}

func (v *clusterView) replicasOf(id string) []*clusterNode {
	var out []*clusterNode
	for _, n := range v.nodes {
		if n.masterID == id && n.hasFlag("slave") {
			out = append(out, n)
		}
	}
	return out
}

// describe tells which port owns which slots and which of the nodes live replicates from
// which port, the same text for the same topology.
func (v *clusterView) describe(live []*Server) string {
	var parts []string
	for _, n := range v.nodes {
		for _, r := range n.slots {
			parts = append(parts, fmt.Sprintf("%05d-%05d@%d", r[0], r[1], n.port))
		}
	}
	for _, s := range live {
		if n := v.byPort(s.Port); n != nil && n.hasFlag("slave") {
			m := v.byID(n.masterID)
			if m == nil {
				m = &clusterNode{}
			}
			parts = append(parts, fmt.Sprintf("%d<-%d", m.port, n.port))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// probeKey returns a key whose hash slot is slot, for a probe write to the slot's owner.
func probeKey(slot int) string {
	probeOnce.Do(func() {
		left := len(probeKeys)
		// Every slot gets a key after about 170,000 tags; the bound is far above that.
		for i := 0; left > 0 && i < 1<<24; i++ {
			tag := strconv.Itoa(i)
			if s := keys.Slot("{" + tag + "}"); probeKeys[s] == "" {
				probeKeys[s] = probeKeyPrefix + "{" + tag + "}"
				left--
			}
		}
	})
	return probeKeys[slot]
}

var (
	probeOnce sync.Once
	probeKeys [16384]string
)

// ---------------------------------------------------------------------------------------
// Shared helpers

// waitFor calls check every pollEvery until it returns nil or limit passes, and returns its
// last error then.
func waitFor(limit time.Duration, check func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(pollEvery)
	}
}

// replicaLinked tells why r is not a replica of primary with its link up, or returns nil.
func replicaLinked(r, primary *Server) error {
	reply, err := call(r.Addr(), probeLimit, "INFO", "replication")
	if err != nil {
		return fmt.Errorf("node %d: INFO replication: %w", r.Port, err)
	}
	info, _ := reply.(string)
	role, port, link := infoField(info, "role"), infoField(info, "master_port"), infoField(info, "master_link_status")
	if role != "slave" || port != strconv.Itoa(primary.Port) || link != "up" {
		return fmt.Errorf("node %d: role %s, master_port %q, master_link_status %q; want a replica of %d, link up",
			r.Port, role, port, link, primary.Port)
	}
	return nil
}

// takesWrites tells why the node p does not answer ROLE as master and take a write of key
// (sent to it alone, with a 1 s expiry), or returns nil.
func takesWrites(p *Server, key string) error {
	reply, err := call(p.Addr(), probeLimit, "ROLE")
	if err != nil {
		return fmt.Errorf("node %d: ROLE: %w", p.Port, err)
	}
	if a, _ := reply.([]any); len(a) == 0 || a[0] != "master" {
		return fmt.Errorf("node %d: ROLE %v, not master", p.Port, reply)
	}
	if _, err := call(p.Addr(), probeLimit, "SET", key, "1", "PX", "1000"); err != nil {
		return fmt.Errorf("node %d: SET %s: %w", p.Port, key, err)
	}
	return nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// serverAt returns the server of list at addr, or nil.
func serverAt(list []*Server, addr string) *Server {
	for _, s := range list {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

func portAddr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func addrs(list []*Server) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.Addr()
	}
	return out
}

func ports(list []*Server) []int {
	out := make([]int, len(list))
	for i, s := range list {
		out[i] = s.Port
	}
	return out
}

// call sends one command to addr on a fresh connection and returns the decoded reply: a
// string (simple or bulk), an int64, a []any, nil, or an error for an error reply. Unlike
// [Command], it reads arrays, for the replies of SENTINEL and ROLE.
func call(addr string, limit time.Duration, args ...string) (any, error) {
	c, err := net.DialTimeout("tcp", addr, limit)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(limit))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(c), 0)
}

func readReply(r *bufio.Reader, depth int) (any, error) {
	if depth > 8 {
		return nil, errors.New("reply nested too deep")
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, errors.New(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply line %q", line)
}

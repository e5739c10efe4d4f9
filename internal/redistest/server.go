package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// Server is one server process (redis-server, or the binary [ServerBin] names) started by
// the harness.
type Server struct {
	Port int
	Dir  string
	cmd  *exec.Cmd
	once sync.Once
}

// Addr returns the server's address.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Stop kills the server by its PID and removes its directory.
func (s *Server) Stop() {
	s.once.Do(func() {
		defer tlsServers.Delete(s.Addr())
		if s.cmd != nil && s.cmd.Process != nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
		if s.Dir != "" {
			_ = os.RemoveAll(s.Dir)
		}
	})
}

// diagnose describes the server process and the end of its log (see Proc.Diagnose).
func (s *Server) diagnose() string {
	pid := s.cmd.Process.Pid
	state := "running"
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil {
		state = "gone"
	} else if f := strings.Fields(string(b)); len(f) > 2 {
		state = "state " + f[2] // R, S, T (stopped), Z (exited, not yet waited for)
	}
	if s.cmd.ProcessState != nil {
		state += ", " + s.cmd.ProcessState.String()
	}
	return fmt.Sprintf("redis-server PID %d on port %d: %s; its log ends:\n%s", pid, s.Port, state, tail(filepath.Join(s.Dir, "redis.log")))
}

// Signal sends sig to the server process (SIGSTOP / SIGCONT for pauses).
func (s *Server) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Port range for test servers: below the kernel's ephemeral range (32768+ here), with the
// Cluster bus port (port + 10000) below it too, so that an outgoing connection can never hold
// a port a node needs.
const (
	portLow  = 10000
	portHigh = 22000
)

// freePort returns a port p in [portLow, portHigh) such that p and, if bus, p+10000 can be
// bound on 127.0.0.1 right now.
func freePort(bus bool) (int, error) {
	for range 200 {
		p := portLow + rand.IntN(portHigh-portLow)
		if !canBind(p) || (bus && !canBind(p+10000)) {
			continue
		}
		return p, nil
	}
	return 0, errors.New("redistest: no free port found")
}

func canBind(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// launch starts the server binary ([ServerBin]) with extra config lines, on a free port, and
// waits until it answers PING. It retries on another port if the chosen one was taken in the
// meantime. With t, the server speaks TLS only, on that port, with t's certificates.
func launch(cluster bool, t *TLS, extra ...string) (*Server, error) {
	bin, err := ServerBin()
	if err != nil {
		return nil, err
	}
	version, err := binVersion(bin)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		port, err := freePort(cluster)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "distsync-redis-")
		if err != nil {
			return nil, err
		}
		conf := []string{
			"port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"save \"\"",
			"appendonly no",
			"dir " + dir,
			"loglevel warning",
			"logfile " + filepath.Join(dir, "redis.log"),
		}
		if cluster {
			conf = append(conf,
				"cluster-enabled yes",
				"cluster-config-file "+filepath.Join(dir, "nodes.conf"),
				"cluster-node-timeout 2000",
			)
		}
		conf = append(conf, serverConfig(version, port, cluster)...)
		conf = append(conf, extra...)
		conf = append(conf, t.config(port, cluster)...)
		cfgPath := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(cfgPath, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, cfgPath)
		// If the test binary dies (a timeout panic), the server dies with it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s := &Server{Port: port, Dir: dir, cmd: cmd}
		t.register(s.Addr())
		err = waitPing(s.Addr(), 10*time.Second)
		if err == nil {
			// Whoever answered must be the process just started: another test's server can
			// take the port between the check that it was free and this server's bind (one
			// restarting on the port it had, say), and a test run against it would see that
			// test's faults, and lose its server when that test ends.
			var pid int
			if pid, err = serverPID(s.Addr()); err == nil && pid != cmd.Process.Pid {
				err = fmt.Errorf("port %d answered by PID %d, not %d", port, pid, cmd.Process.Pid)
			}
		}
		if err != nil {
			lastErr = fmt.Errorf("%s on %d: %w (log: %s)", filepath.Base(bin), port, err, tail(filepath.Join(dir, "redis.log")))
			s.Stop()
			continue
		}
		return s, nil
	}
	return nil, lastErr
}

func waitPing(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := dialServer(addr, 200*time.Millisecond)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, err = c.Write([]byte("PING\r\n"))
			if err == nil {
				var line string
				line, err = bufio.NewReader(c).ReadString('\n')
				if err == nil && !strings.HasPrefix(line, "+PONG") {
					err = fmt.Errorf("unexpected reply %q", line)
				}
			}
			_ = c.Close()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Cluster is a Redis Cluster of three masters started by the harness.
type Cluster struct {
	Nodes []*Server
}

// Addrs returns the node addresses.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr()
	}
	return a
}

// Stop kills every node.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		if n != nil {
			n.Stop()
		}
	}
}

// startCluster starts a Cluster of three masters; with t, one that speaks only TLS, on the
// bus too.
func startCluster(t *TLS) (*Cluster, error) {
	cli, err := CLIBin()
	if err != nil {
		return nil, err
	}
	// The three nodes start at once: each one's start is mostly waiting for it to answer.
	c := &Cluster{Nodes: make([]*Server, 3)}
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i := range c.Nodes {
		wg.Go(func() { c.Nodes[i], errs[i] = launch(true, t) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Stop()
		return nil, err
	}
	args := append(t.cliArgs(), append([]string{"--cluster", "create"}, c.Addrs()...)...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("%s --cluster create: %w: %s", filepath.Base(cli), err, out)
	}
	if err := c.waitOK(30 * time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// waitOK waits until every node reports cluster_state:ok and a client can write to every
// node's slots.
func (c *Cluster) waitOK(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, n := range c.Nodes {
		cl, err := rueidis.NewClient(lean(rueidis.ClientOption{InitAddress: []string{n.Addr()}, ForceSingleClient: true, DisableCache: true, TLSConfig: clientTLS(n.Addr())}))
		if err != nil {
			return err
		}
		for {
			info, err := cl.Do(context.Background(), cl.B().ClusterInfo().Build()).ToString()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				cl.Close()
				return fmt.Errorf("cluster node %s not ready: %v %q", n.Addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
	cl, err := rueidis.NewClient(lean(rueidis.ClientOption{InitAddress: c.Addrs(), DisableCache: true, TLSConfig: clientTLS(c.Addrs()[0])}))
	if err != nil {
		return err
	}
	defer cl.Close()
	for i := 0; ; i++ {
		err := writeEverySlotOwner(cl)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not writable: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeEverySlotOwner writes one key to each node (keys chosen by hash tag across the slot
// range) to prove the cluster takes writes.
func writeEverySlotOwner(cl rueidis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, tag := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		k := "{" + tag + "}:distsync-ready"
		if err := cl.Do(ctx, cl.B().Set().Key(k).Value("1").Px(time.Second).Build()).Error(); err != nil {
			return err
		}
	}
	return nil
}

package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Proc is a redis-server that belongs to one test, for faults that would disturb every other
// test sharing a server: it can be paused, resumed, restarted empty and have its clients'
// connections killed. It is stopped by its PID when the test ends.
type Proc struct {
	mu sync.Mutex
	s  *Server
}

// StartRedis starts a standalone redis-server on a free loopback port for tb alone, with extra
// config lines, and stops it (by its PID) when tb ends. A missing redis-server skips tb, or
// fails it when DISTSYNC_REQUIRE_REDIS=1.
func StartRedis(tb testing.TB, extra ...string) *Proc {
	tb.Helper()
	requireBinaries(tb)
	p, err := StartProc(extra...)
	if err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	noteOwn("servers of a test's own")
	tb.Cleanup(p.Stop)
	return p
}

// StartProc is StartRedis without a test: the caller stops the server. Call RequireRedis
// first in a test, so that a missing binary is a skip or a failure as configured.
func StartProc(extra ...string) (*Proc, error) {
	s, err := startServer(false, extra...)
	if err != nil {
		return nil, err
	}
	return &Proc{s: s}, nil
}

// RequireRedis skips tb if the server binary or the CLI ([ServerBin], [CLIBin]; by default
// redis-server and redis-cli on PATH) cannot be found, or fails it when
// DISTSYNC_REQUIRE_REDIS=1 or when the missing one was named by its environment variable.
func RequireRedis(tb testing.TB) {
	tb.Helper()
	requireBinaries(tb)
}

// Addr returns the server's address (the same across Restart).
func (p *Proc) Addr() string { return p.s.Addr() }

// Client returns a new rueidis client of the server, without client-side caching, closed
// when tb ends.
func (p *Proc) Client(tb testing.TB) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(lean(rueidis.ClientOption{InitAddress: []string{p.Addr()}, DisableCache: true, TLSConfig: clientTLS(p.Addr())}))
	if err != nil {
		tb.Fatalf("rueidis.NewClient(%s): %v", p.Addr(), err)
	}
	tb.Cleanup(c.Close)
	return c
}

// PID returns the PID of the running redis-server.
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.s.cmd.Process.Pid
}

// Stop kills the server by its PID (resuming it first if paused) and removes its directory.
func (p *Proc) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.s.Signal(syscall.SIGCONT)
	p.s.Stop()
}

// Pause stops the server with SIGSTOP: its connections stay open and nothing is answered,
// as on a frozen machine. Its clock keeps running, so keys expire at Resume.
func (p *Proc) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.s.Signal(syscall.SIGSTOP)
}

// Resume continues a paused server with SIGCONT.
func (p *Proc) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.s.Signal(syscall.SIGCONT)
}

// Restart kills the server with SIGKILL and starts a new one, empty (no persistence), on the
// same port and with the same configuration, and waits until it answers. If the port is
// taken meanwhile it retries for up to limit.
func (p *Proc) Restart(limit time.Duration) error {
	p.Kill()
	return p.Start(limit)
}

// Kill kills the server with SIGKILL (continuing it first if it was paused) and waits until
// it is gone. It stays down, its port free, until Start.
func (p *Proc) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.s.cmd
	_ = old.Process.Signal(syscall.SIGCONT)
	_ = old.Process.Kill()
	_ = old.Wait()
}

// Start starts a server that Kill stopped again, empty (no persistence), on the same port and
// with the same configuration, and waits until it answers. If the port is taken meanwhile it
// retries for up to limit.
func (p *Proc) Start(limit time.Duration) error { return p.StartWith("", limit) }

// StartWith is Start with the server binary bin, another build or version; "" is the binary
// the server was started from. A server that saved its data (SAVE) loads it again.
func (p *Proc) StartWith(bin string, limit time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if bin == "" {
		// The binary the server was started from ([ServerBin]), whatever the environment says now.
		bin = p.s.cmd.Path
	}
	cfg := filepath.Join(p.s.Dir, "redis.conf")
	deadline := time.Now().Add(limit)
	var lastErr error
	for attempt := 0; ; attempt++ {
		cmd := exec.Command(bin, cfg)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return err
		}
		err := waitPing(p.s.Addr(), 2*time.Second)
		if err == nil {
			// Whoever answered must be the process just started, not another server that
			// took the port while it was free.
			var pid int
			if pid, err = serverPID(p.s.Addr()); err == nil && pid != cmd.Process.Pid {
				err = fmt.Errorf("port %d answered by PID %d, not %d", p.s.Port, pid, cmd.Process.Pid)
			}
		}
		if err == nil {
			p.s.cmd = cmd
			return nil
		}
		lastErr = err
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if time.Now().After(deadline) {
			// Keep a dead command in place so that Stop and Signal stay safe.
			p.s.cmd = cmd
			return fmt.Errorf("restart redis-server on %d after %d attempts: %w (log: %s)",
				p.s.Port, attempt+1, lastErr, tail(filepath.Join(p.s.Dir, "redis.log")))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Diagnose describes the server's process as the kernel has it (running, stopped, a zombie,
// or gone, with its wait status if it exited) and the end of its log: what a test reports when
// the server stopped answering.
func (p *Proc) Diagnose() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.s.diagnose()
}

// ClientKill runs CLIENT KILL TYPE typ SKIPME yes ("normal", "pubsub", ...) on a connection of
// its own and returns how many connections were killed.
func (p *Proc) ClientKill(typ string) (int64, error) {
	reply, err := Command(p.Addr(), 2*time.Second, "CLIENT", "KILL", "TYPE", typ, "SKIPME", "yes")
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(reply, ":") {
		return 0, fmt.Errorf("CLIENT KILL: unexpected reply %q", reply)
	}
	return strconv.ParseInt(reply[1:], 10, 64)
}

// Command sends one command to addr on a fresh connection and returns the first line of
// the reply (":3", "+OK", "-ERR ..."), or, for a bulk string, its contents. It is for a
// test's faults and probes, not for work a client library should do.
func Command(addr string, limit time.Duration, args ...string) (string, error) {
	c, err := dialServer(addr, limit)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(limit))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if strings.HasPrefix(line, "-") {
		return line, errors.New(line[1:])
	}
	if !strings.HasPrefix(line, "$") {
		return line, nil
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return line, err
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// serverPID asks the server at addr for its process_id.
func serverPID(addr string) (int, error) {
	info, err := Command(addr, 2*time.Second, "INFO", "server")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no process_id in INFO server")
}

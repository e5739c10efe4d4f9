//go:build unix

package main

import (
	"context"
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

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/keys"
	"github.com/distsync/distsync/internal/redistest"
)

// What an operator who knows flock(1), etcdctl lock and consul lock tried (issue 23), each
// test driving the built binary against a redis-server of the harness.

// inspect NAME finds what "once NAME" ran, and ls lists it under that name.
func TestInspectFindsOnceByItsName(t *testing.T) {
	t.Parallel()
	bin, common, _, _, _ := cliSetup(t)
	if status, _, stderr := runCLI(t, bin, args(common, "once", "nightly-report", "--keep", "1m", "--", "echo", "report")...); status != 0 {
		t.Fatalf("once: status %d\n%s", status, stderr)
	}
	status, stdout, stderr := runCLI(t, bin, args(common, "inspect", "nightly-report")...)
	if status != 0 || !strings.Contains(stdout, "once nightly-report") || !strings.Contains(stdout, "1 kept") {
		t.Errorf("inspect nightly-report: status %d, stdout:\n%s\nstderr: %s\nwant the once and its kept result", status, stdout, stderr)
	}
	status, stdout, _ = runCLI(t, bin, args(common, "ls")...)
	if status != 0 || !slices.Contains(strings.Fields(stdout), "nightly-report") || strings.Contains(stdout, "command") {
		t.Errorf("ls: status %d, stdout:\n%s\nwant once nightly-report, and no group the user did not name", status, stdout)
	}
}

// once --forget drops a kept result: the next caller within --keep runs the command again.
func TestOnceForgetRunsTheCommandAgain(t *testing.T) {
	t.Parallel()
	bin, common, _, _, dir := cliSetup(t)
	runs := filepath.Join(dir, "runs")
	run := func() {
		t.Helper()
		status, stdout, stderr := runCLI(t, bin, args(common, "once", "nightly", "--keep", "1h", "-c", `echo run >> "`+runs+`"; echo out`)...)
		if status != 0 || stdout != "out\n" {
			t.Fatalf("once: status %d, stdout %q\n%s", status, stdout, stderr)
		}
	}
	run()
	run()
	if n := len(readLines(t, runs)); n != 1 {
		t.Fatalf("the command ran %d times within --keep, want 1", n)
	}
	if status, _, stderr := runCLI(t, bin, args(common, "once", "--forget", "nightly")...); status != 0 {
		t.Fatalf("once --forget: status %d\n%s", status, stderr)
	}
	run()
	if n := len(readLines(t, runs)); n != 2 {
		t.Errorf("the command ran %d times, want 2: once after --forget", n)
	}
	if status, _, stderr := runCLI(t, bin, args(common, "once", "--forget", "nightly", "--", "true")...); status != 64 {
		t.Errorf("once --forget with a CMD: status %d, want 64\n%s", status, stderr)
	}
}

// hungServer is a TCP server that accepts connections and never answers, as a Redis that
// hangs does. It listens on a loopback port below 32768 and stops when t ends. first returns
// when it accepted its first connection (the zero time before).
func hungServer(t *testing.T) (addr string, first func() time.Time) {
	t.Helper()
	var ln net.Listener
	for port := 20000 + os.Getpid()%5000; ln == nil; port++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			ln = l
		} else if port > 30000 {
			t.Fatalf("no free port for the hung server: %v", err)
		}
	}
	var (
		mu       sync.Mutex
		accepted time.Time
		conns    []net.Conn
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if accepted.IsZero() {
				accepted = time.Now()
			}
			mu.Unlock()
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return accepted
	}
}

// --timeout bounds the whole wait, connecting included, and a Redis that goes away or
// hangs does not keep distsync past it by more than the stated margin (closeTimeout, and
// a process's end on a busy machine: the bound asserted is a second above it, plus what
// this process was stalled meanwhile). Before, a Redis that never answered kept it 5 s past
// --timeout 1, and one stopped while distsync waited about 1.8 s past it.
//
// The wait is timed from a moment after distsync started its --timeout, not from the start
// of the process, which a loaded machine can delay by a second: from the hung server's
// accepting distsync's connection, or from seeing distsync queued.
func TestTimeoutBoundsTheWholeWait(t *testing.T) {
	t.Parallel()
	bin := cliBin(t, redistest.Open(t, redistest.Standalone))
	// timed waits for p, whose --timeout timeout started before from, and fails t unless p
	// exits with want; it returns an error, for Retry, if p took longer than the bound.
	timed := func(t *testing.T, p *proc, from time.Time, timeout time.Duration, want int) error {
		t.Helper()
		status := p.wait(t)
		end := time.Now()
		if status != want {
			t.Errorf("distsync %q: status %d, want %d\n%s", p.cmd.Args[1:], status, want, p.stderr.String())
		}
		return redistest.Late(fmt.Sprintf("distsync %q exited", p.cmd.Args[1:]), end.Sub(from)-timeout-closeTimeout, time.Second, from, end)
	}
	t.Run("a Redis that never answers", func(t *testing.T) {
		redistest.Retry(t, 3, func() error {
			addr, first := hungServer(t)
			p := start(t, bin, "lock", "--redis", "redis://"+addr, "--timeout", "1", "n", "--", "true")
			if !redistest.Eventually(cliLimit, func() bool { return !first().IsZero() || p.exited() }) {
				t.Fatalf("distsync did not connect within %v\n%s", cliLimit, p.stderr.String())
			}
			if first().IsZero() {
				return fmt.Errorf("distsync exited (status %d) before the server saw it connect\n%s", p.status, p.stderr.String())
			}
			return timed(t, p, first(), time.Second, 69)
		})
	})
	t.Run("Redis stopped while distsync waits", func(t *testing.T) {
		// Long enough to start and queue on a loaded machine: Redis must stop within it. 4 s
		// at first, twice as long at each next attempt.
		q, err := keys.New(distsync.DefaultKeyPrefix, "mutex", "n")
		if err != nil {
			t.Fatal(err)
		}
		redistest.RetryScaled(t, 3, 4*time.Second, func(timeout time.Duration) error {
			p := redistest.StartRedis(t)
			c := p.Client(t)
			url := "redis://" + p.Addr()
			h, _ := holder(t, bin, []string{"--redis", url}, t.TempDir(), "n")
			defer h.kill()
			begin := time.Now()
			w := start(t, bin, "lock", "--redis", url, "--timeout", timeout.String(), "n", "--", "true")
			// Stop Redis once distsync waits, queued behind the holder.
			if !redistest.Eventually(cliLimit, func() bool {
				n, err := c.Do(context.Background(), c.B().Zcard().Key(q.Part("q")).Build()).AsInt64()
				return err == nil && n > 0 || w.exited()
			}) {
				t.Fatalf("distsync did not queue for the lock within %v\n%s", cliLimit, w.stderr.String())
			}
			queued := time.Now()
			p.Kill()
			if w.exited() {
				return fmt.Errorf("distsync exited (status %d) before Redis was stopped\n%s", w.status, w.stderr.String())
			}
			if killed := time.Since(begin); killed >= timeout {
				// distsync started after begin: its --timeout may have passed only if this did.
				w.kill()
				return fmt.Errorf("Redis was stopped %v after distsync started, not within its --timeout", killed.Round(time.Millisecond))
			}
			return timed(t, w, queued, timeout, 75)
		})
	})
}

// A release that fails is told once, in words that say what failed and what becomes of the
// claim; before, a second message followed ("unlock ... failed err=context canceled").
// The cause is the refused connection of a retry or, when every try met a connection that
// the dying Redis accepted and closed (a busy machine, where a killed process takes a while
// to go), a reset or that Redis closed it: before, that last case printed the library's
// whole chain ("unlock: release not confirmed (finishing in the background): EOF"), which
// speaks of a background the command does not have.
func TestFailedReleaseIsOneMessage(t *testing.T) {
	t.Parallel()
	bin := cliBin(t, redistest.Open(t, redistest.Standalone))
	p := redistest.StartRedis(t)
	dir := t.TempDir()
	started, killed := filepath.Join(dir, "started"), filepath.Join(dir, "killed")
	// The command ends once Redis is gone (a fixed sleep, outlived by a slow Kill, would let the
	// release succeed), or after 30 s at most.
	proc := start(t, bin, "lock", "--redis", "redis://"+p.Addr(), "n", "--", "sh", "-c",
		`touch "$1"; i=0; while [ ! -e "$2" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done`, "sh", started, killed)
	waitFile(t, started)
	p.Kill()
	if err := os.WriteFile(killed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if status := proc.wait(t); status != 0 {
		t.Errorf("status %d, want the command's 0", status)
	}
	lines := strings.Split(strings.TrimSpace(proc.stderr.String()), "\n")
	_, cause, _ := strings.Cut(lines[0], "--ttl 10s: ")
	network := false // the transport's own words: "dial tcp ...: connection refused", a reset
	for _, op := range []string{"dial tcp ", "read tcp ", "write tcp "} {
		network = network || strings.HasPrefix(cause, op)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `could not release mutex "n", which expires by itself`) ||
		!network && cause != errClosedByRedis.Error() {
		t.Errorf("stderr:\n%s\nwant one line that says the release failed, why (a refused or reset connection, or Redis closing it), and that the lock expires", proc.stderr.String())
	}
}

// rootCause names a transport error in its own words, whatever the library wrapped it in.
func TestRootCause(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("mutex \"n\": unlock: release not confirmed (finishing in the background): %w", io.EOF), errClosedByRedis},
		{fmt.Errorf("x: %w", io.ErrUnexpectedEOF), errClosedByRedis},
		{fmt.Errorf("x: %w", refused), refused},
		{distsync.ErrLost, distsync.ErrLost},
	} {
		if got := rootCause(tc.err); got != tc.want {
			t.Errorf("rootCause(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// The demo follows the exit table: 64 for a bad flag (one line on stderr, nothing on
// stdout), 130 for SIGINT, after which it has left no key.
func TestDemoExitStatuses(t *testing.T) {
	t.Parallel()
	bin := cliBin(t, redistest.Open(t, redistest.Standalone))
	status, stdout, stderr := runCLI(t, bin, "demo", "--bogus")
	if status != 64 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "--bogus") {
		t.Errorf("demo --bogus: status %d, stdout %q, stderr %q; want 64, nothing, one line naming --bogus", status, stdout, stderr)
	}
	s := ownDemoServer(t) // its keys are the demo's only (see demoServer)
	redistest.Retry(t, 3, func() error {
		p := start(t, bin, "demo", "--redis", s.url, "--rounds", "1000000")
		// A key written means the demo catches signals: it does before it connects.
		if !redistest.Eventually(cliLimit, func() bool { return p.exited() || len(s.keys()) > 0 }) {
			t.Fatal("the demo wrote no key")
		}
		if p.exited() || p.cmd.Process.Signal(syscall.SIGINT) != nil {
			status := p.wait(t)
			s.noKeysLeft(t, fmt.Sprintf("exited %d", status))
			if status == exitDemoFailed && strings.Contains(p.stderr.String(), distsync.ErrLost.Error()) {
				// A loaded machine can stall a hand-off past its window (TestDemoLeavesNoKeys).
				return fmt.Errorf("the demo ended before SIGINT: status %d: %s", status, p.stderr.String())
			}
			t.Fatalf("the demo ended before SIGINT: status %d\n%s", status, p.stderr.String())
		}
		if status := p.wait(t); status != 130 {
			t.Errorf("demo interrupted: status %d, want 130\n%s", status, p.stderr.String())
		}
		s.noKeysLeft(t, "interrupted by SIGINT")
		return nil
	})
}

// The flock spellings behave as flock's, and a command line given as one argument is
// pointed to -c.
func TestFlockSpellings(t *testing.T) {
	t.Parallel()
	bin, common, _, _, dir := cliSetup(t)
	h, release := holder(t, bin, common, dir, "busy")
	// In parallel, in a group that ends before the release.
	t.Run("held", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want int
		}{
			{[]string{"-n", "busy", "true"}, 75},
			{[]string{"--nonblock", "busy", "true"}, 75},
			{[]string{"-w", "2.5", "busy", "true"}, 75}, // plain seconds, a fraction: long enough to connect on a loaded machine
			{[]string{"-n", "-E", "3", "busy", "true"}, 3},
			{[]string{"-nE3", "busy", "true"}, 3},
			{[]string{"-s", "-n", "busy", "true"}, 0}, // the read-write lock "busy" is another lock
		} {
			t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
				t.Parallel()
				if status, _, stderr := runWithin(t, bin, args(common, "lock", tc.args...)...); status != tc.want {
					t.Errorf("lock %q while the mutex is held: status %d, want %d\n%s", tc.args, status, tc.want, stderr)
				}
			})
		}
	})
	release()
	h.wait(t)
	status, stdout, stderr := runCLI(t, bin, args(common, "lock", "free", "-c", `echo "a $DISTSYNC_NAME" && echo b`)...)
	if status != 0 || stdout != "a free\nb\n" {
		t.Errorf("lock -c: status %d, stdout %q, want 0 and the shell's output\n%s", status, stdout, stderr)
	}
	status, _, stderr = runCLI(t, bin, args(common, "lock", "free", "./deploy.sh && echo done")...)
	if status != 127 || !strings.Contains(stderr, "-c") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("a command line as one argument: status %d, stderr %q; want 127 and one line that points to -c", status, stderr)
	}
}

// A signal to distsync ends a command that is stopped (SIGSTOP to its group): it is followed
// by SIGCONT. Before, the command stayed stopped and distsync kept the lock.
func TestSignalEndsAStoppedCommand(t *testing.T) {
	t.Parallel()
	bin, common, prefix, b, dir := cliSetup(t)
	pidFile := filepath.Join(dir, "pid")
	p := start(t, bin, args(common, "lock", "--ttl", "30s", "stopped", "--", "sh", "-c", `echo $$ > "$1"; while :; do sleep 0.05; done`, "sh", pidFile)...)
	pid := waitPID(t, pidFile)
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil { // the command's own group
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if status := p.wait(t); status != 128+int(syscall.SIGTERM) {
		t.Errorf("status %d, want %d\n%s", status, 128+int(syscall.SIGTERM), p.stderr.String())
	}
	if keyExists(t, b, prefix+"{stopped}:mutex") {
		t.Error("the lock is held after distsync exited")
	}
}

// inspect --watch prints the view again when the name changes (a holder takes it, and
// releases it), and sends nothing while nothing changes. On a server of its own, whose
// command counts no other test adds to.
func TestInspectWatch(t *testing.T) {
	t.Parallel()
	redistest.RequireRedis(t)
	bin := cliBin(t, redistest.Open(t, redistest.Standalone))
	srv := redistest.StartRedis(t)
	obs := srv.Client(t)
	common := []string{"--redis", "redis://" + srv.Addr()}
	dir := t.TempDir()
	w := start(t, bin, args(common, "inspect", "--watch", "watched")...)
	seen := func(want string, n int) {
		t.Helper()
		if !redistest.Eventually(cliLimit, func() bool { return strings.Count(w.stdout.String(), want) >= n }) {
			t.Fatalf("inspect --watch did not show %q (%d times) within %v:\n%s\n%s", want, n, cliLimit, w.stdout.String(), w.stderr.String())
		}
	}
	seen("watched: nothing held or queued", 1)
	pttl := func() int64 {
		info, err := obs.Do(context.Background(), obs.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_pttl:calls="); ok {
				n, _ := strconv.ParseInt(strings.Split(rest, ",")[0], 10, 64)
				return n
			}
		}
		return 0
	}
	before := pttl()
	time.Sleep(1500 * time.Millisecond)
	if after := pttl(); after != before {
		t.Errorf("inspect --watch sent %d PTTLs in 1.5 s while nothing changed: it polls", after-before)
	}
	h, release := holder(t, bin, common, dir, "watched")
	seen("mutex watched: ", 1)
	release()
	h.wait(t)
	seen("mutex watched: free", 1)
	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if status := w.wait(t); status != 0 {
		t.Errorf("inspect --watch interrupted: status %d, want 0\n%s", status, w.stderr.String())
	}
}

// Every malformed flag, value and name of every subcommand is refused with exit status 64
// and one line on stderr that names what was wrong, and nothing is written to Redis: no key
// under the test's prefix nor the default one, listed after each (other tests' keys expire
// meanwhile, so the whole keyspace is not compared).
func TestBadInputIsOneLineAndWritesNothing(t *testing.T) {
	t.Parallel()
	bin, common, prefix, b, _ := cliSetup(t)
	long := strings.Repeat("x", 65)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsURL := []string{"--redis", "rediss://127.0.0.1:1"}
	for _, tc := range []struct {
		args  []string
		names string // what the error must name
	}{
		{args(common, "lock", "--bogus", "n", "true"), "--bogus"},
		{args(common, "lock", "-timeout", "3", "n", "true"), "--timeout"},
		{args(common, "lock", "-Z", "n", "true"), "-Z"},
		{args(common, "lock", "--ttl", "soon", "n", "true"), "--ttl"},
		{args(common, "lock", "--ttl", "0", "n", "true"), "--ttl"},
		{args(common, "lock", "--ttl=-1s", "n", "true"), "--ttl"},
		{args(common, "lock", "--timeout", "NaN", "n", "true"), "--timeout"},
		{args(common, "lock", "-w", "Inf", "n", "true"), "-w"},
		{args(common, "lock", "--timeout", "1e300", "n", "true"), "--timeout"},
		{args(common, "lock", "--timeout"), "--timeout"},
		{args(common, "lock", "-E", "256", "n", "true"), "-E"},
		{args(common, "lock", "--conflict-exit-code", "x", "n", "true"), "--conflict-exit-code"},
		{args(common, "lock", "--kill-grace", "-1", "n", "true"), "--kill-grace"},
		{args(common, "lock", "--prefix", "a{b", "n", "true"), "--prefix"},
		{args(common, "lock", "--identity", "", "n", "true"), "--identity"},
		{args(common, "lock", "--identity", long, "n", "true"), "--identity"},
		{args(common, "lock", "--quiet=1", "n", "true"), "--quiet"},
		{args(common, "lock", "--fair", "--shared", "n", "true"), "--fair"},
		{args(common, "lock", "-s", "-x", "n", "true"), "-x"},
		{args(common, "lock", "", "true"), "NAME"},
		{args(common, "lock"), "NAME"},
		{args(common, "lock", "n"), "CMD"},
		{args(common, "lock", "n", "-c", "true", "--", "false"), "-c"},
		{args(common, "lock", "--hold", "n", "true"), "--hold"},
		// --hold and --forget run no CMD, and are checked as the rest.
		{args(common, "lock", "--hold", "--ttl", "25h", "n"), "--ttl"},
		{args(common, "lock", "--hold", "--prefix", "", "n"), "--prefix"},
		{args(common, "lock", "--hold", "-s", "-x", "n"), "exclude"},
		{args(common, "sem", "--hold", "n"), "--size"},
		{args(common, "lock", "--hold", "--cacert", notPEM, "n"), "rediss://"},
		{args(common, "once", "--forget", "--prefix", "", "k"), "--prefix"},
		{args(common, "inspect", "--deadlocks", "--cacert", notPEM), "rediss://"},
		{[]string{"demo", "--cacert", notPEM}, "--redis"},
		{[]string{"demo", "--redis", "redis://127.0.0.1:1", "--cert", notPEM}, "rediss://"},
		{args(common, "lock", "--quiet", "-v", "n", "true"), "--verbose"},
		{args(common, "sem", "--size", "2", "--hold", "n", "-c", "true"), "--hold"},
		{args(common, "once", "--hold", "k", "true"), "--hold"},
		{args(common, "rate", "--limit", "1/s", "--hold", "n", "true"), "--hold"},
		// Unsafe values: a name in every key and message, a claim kept for years after a
		// SIGKILL, keys that cannot be told from others'.
		{args(common, "lock", strings.Repeat("n", 1025), "true"), "NAME"},
		{args(common, "lock", "--also", strings.Repeat("m", 1025), "n", "true"), "NAME"},
		{args(common, "once", strings.Repeat("k", 1025), "true"), "KEY"},
		{args(common, "lock", "--ttl", "25h", "n", "true"), "--ttl"},
		{args(common, "sem", "--size", "2", "--ttl", "100000h", "n", "true"), "--ttl"},
		{args(common, "lock", "--prefix", "", "n", "true"), "--prefix"},
		{args(common, "lock", "--redis", "redis://u:secret@[bad", "n", "true"), "--redis"},
		{args(common, "lock", "--redis", "http://127.0.0.1:1", "n", "true"), "--redis"},
		// What rueidis would dial as localhost:6379 or the URL's host, ignore, or find only
		// when it dials: a lock on another Redis than the one meant excludes nobody.
		{args(common, "lock", "--redis", "redis://u:secret@127.0.0.1:1?addr=foo", "n", "true"), "addr=foo"},
		{args(common, "lock", "--redis", "redis://127.0.0.1:1?addr=:7000", "n", "true"), "addr=:7000"},
		{args(common, "lock", "--redis", "redis://127.0.0.1:1?adr=127.0.0.1:7000", "n", "true"), "adr"},
		{args(common, "lock", "--redis", "redis://127.0.0.1:70000", "n", "true"), "70000"},
		{args(common, "lock", "--redis", "redis://127.0.0.1:0", "n", "true"), "port"},
		{args(common, "lock", "--redis", "redis://127.0.0.1:1?addr=127.0.0.1:99999", "n", "true"), "99999"},
		{args(common, "lock", "--redis", "127.0.0.1:http", "n", "true"), "port"},
		{[]string{"lock", "n", "true"}, "--redis"},
		// TLS files: ignored by a plain connection, so refused with one; each must be usable.
		{args(common, "lock", "--cacert", notPEM, "n", "true"), "rediss://"},
		{args(common, "inspect", "--cert", notPEM, "--key", notPEM, "n"), "rediss://"},
		{args(tlsURL, "lock", "--cert", notPEM, "n", "true"), "--key"},
		{args(tlsURL, "lock", "--key", notPEM, "n", "true"), "--cert"},
		{args(tlsURL, "lock", "--cacert", notPEM+".missing", "n", "true"), "--cacert"},
		{args(tlsURL, "sem", "--size", "2", "--cacert", notPEM, "n", "true"), "--cacert"},
		{args(tlsURL, "ls", "--cert", notPEM, "--key", notPEM), "--cert"},
		{args(common, "sem", "n", "true"), "--size"},
		{args(common, "sem", "--size", "0", "n", "true"), "--size"},
		{args(common, "sem", "--size", "x", "n", "true"), "--size"},
		{args(common, "sem", "--size", "2", "--weight", "3", "n", "true"), "--weight"},
		{args(common, "sem", "--size", "2", "-s", "n", "true"), "-s"},
		{args(common, "once", "--timeout", "0", "k", "true"), "--timeout"},
		{args(common, "once", "-n", "k", "true"), "-n"},
		{args(common, "once", "--keep", "soon", "k", "true"), "--keep"},
		{args(common, "once", "--forget", "k", "--", "true"), "--forget"},
		{args(common, "once", "", "true"), "KEY"},
		{args(common, "inspect"), "NAME"},
		{args(common, "inspect", ""), "NAME"},
		{args(common, "inspect", "--kind", "lock", "n"), "--kind"},
		{args(common, "inspect", "--bogus", "n"), "--bogus"},
		{args(common, "inspect", "--prefix", "a}b", "n"), "--prefix"},
		{args(common, "ls", "a", "b"), "PATTERN"},
		{args(common, "inspect", "--deadlocks", "a", "b"), "PATTERN"},
		{args(common, "inspect", "--deadlocks", "--watch"), "--watch"},
		{args(common, "inspect", "--deadlocks", "--kind", "mutex"), "--kind"},
		{args(common, "inspect", "--deadlocks", "[a"), "pattern"},
		{args(common, "ls", "--watch"), "--watch"},
		{[]string{"demo", "--pods", "0"}, "--pods"},
		{[]string{"demo", "--hold", "x"}, "--hold"},
		{[]string{"demo", "extra"}, "extra"},
		{[]string{"help", "nope"}, "nope"},
		{[]string{"nope"}, "nope"},
	} {
		stderr := wantUsageError(t, bin, b, prefix, tc.args, tc.names)
		if strings.Contains(stderr, "secret") {
			t.Errorf("distsync %q: stderr shows the URL's password: %q", tc.args, stderr)
		}
	}
}

// wantUsageError runs distsync with args and checks it exits 64 with nothing on stdout, one line
// on stderr that names names, and no key written under prefix or the default prefix. It
// returns stderr. It runs the command's code in this process ([cli], what main runs): a
// refusal is decided before anything else, and the tests of the binary itself show that
// main exits with what cli returns. With DISTSYNC_REDIS_URL set in the test's environment,
// which the binary is run without, it runs the binary.
func wantUsageError(t *testing.T, bin string, b *redistest.Backend, prefix string, args []string, names string) string {
	t.Helper()
	var status int
	var stdout, stderr string
	if envRedis() == "" {
		var out, errs strings.Builder
		status = cli(args, &out, &errs)
		stdout, stderr = out.String(), errs.String()
	} else {
		status, stdout, stderr = runCLI(t, bin, args...)
	}
	if status != 64 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, names) {
		t.Errorf("distsync %q: status %d, stdout %q, stderr %q; want 64, nothing, and one line that names %s",
			args, status, stdout, stderr, names)
	}
	if keys := append(b.Keys(t, prefix), b.Keys(t, distsync.DefaultKeyPrefix)...); len(keys) > 0 {
		t.Fatalf("distsync %q wrote to Redis: %q", args, keys)
	}
	return stderr
}

// Help goes to stdout with exit 0 for every command, and is that command's only: before,
// "inspect -h" and "ls -h" printed to stderr, and "lock --help" the whole manual.
func TestHelpOfTheBinary(t *testing.T) {
	t.Parallel()
	bin := cliBin(t, redistest.Open(t, redistest.Standalone))
	for _, cmd := range []string{"lock", "sem", "once", "inspect", "ls", "demo"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			for _, flag := range []string{"-h", "--help"} {
				status, stdout, stderr := runCLI(t, bin, cmd, flag)
				if status != 0 || stderr != "" || !strings.HasPrefix(stdout, "Usage: distsync "+cmd) {
					t.Errorf("distsync %s %s: status %d, stderr %q, stdout %.40q; want 0, nothing, its usage", cmd, flag, status, stderr, stdout)
				}
				for _, other := range []string{"lock", "sem", "once", "inspect", "ls", "demo"} {
					if other != cmd && strings.Contains(stdout, "Usage: distsync "+other) {
						t.Errorf("distsync %s %s prints %s's usage too", cmd, flag, other)
					}
				}
			}
		})
	}
}

// distsync version names the module version ("(devel)" for a build from a checkout, the tag
// for go install ...@vX.Y.Z) and the commit the binary was built from.
func TestVersionNamesTheCommit(t *testing.T) {
	t.Parallel()
	bin := cliBin(t, redistest.Open(t, redistest.Standalone))
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	status, stdout, stderr := runCLI(t, bin, "version")
	if strings.HasPrefix(stdout, "distsync (devel) go") {
		t.Skip("the binary was built without version control information (no git?)")
	}
	if status != 0 || !strings.HasPrefix(stdout, "distsync ") || !strings.Contains(stdout, string(head[:12])) {
		t.Errorf("distsync version: status %d, %q (stderr %q); want the module version and commit %.12s", status, stdout, stderr, head)
	}
}

// Ctrl-C ends the script that runs distsync, as it ends one that runs sleep or flock: a shell
// goes on after a command that exited, even with 130, and stops after one that died of SIGINT,
// so distsync dies of the SIGINT that ended its wait or killed CMD, once it has let go of the
// claim. The SIGINT goes to the script's whole process group, as a terminal sends it.
func TestCtrlCEndsTheScript(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	bin, common, prefix, b, dir := cliSetup(t)
	h, release := holder(t, bin, common, dir, "held")
	t.Cleanup(func() { // after the parallel subtests
		release()
		h.wait(t)
	})
	flags := strings.Join(common, " ")
	for _, tc := range []struct{ name, line string }{
		{"while CMD runs", `"$BIN" lock ` + flags + ` free -- sh -c 'echo $$ > "$PIDF"; exec sleep 30'`},
		{"while it waits", `"$BIN" lock ` + flags + ` held -- true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pidFile := filepath.Join(t.TempDir(), "pid")
			script := `echo $$ > "$SCRIPT_PID"; ` + tc.line + `; echo AFTER`
			cmd := exec.Command("bash", "-c", script)
			cmd.Env = append(cliEnv(), "BIN="+bin, "PIDF="+pidFile, "SCRIPT_PID="+pidFile+".script")
			var out syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			defer func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
			}()
			if strings.Contains(tc.line, "PIDF") {
				waitPID(t, pidFile) // CMD runs
			} else if !redistest.Eventually(cliLimit, func() bool {
				// distsync waits: it subscribes to its channel once it waits, after it began to
				// catch signals.
				return len(b.Channels(t, prefix+"{held}:mutex:ch:*")) > 0
			}) {
				t.Fatalf("distsync did not wait within %v\n%s", cliLimit, out.String())
			}
			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(cliLimit):
				t.Fatalf("the script did not end within %v of Ctrl-C\n%s", cliLimit, out.String())
			}
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != syscall.SIGINT || strings.Contains(out.String(), "AFTER") {
				t.Errorf("the script ended with %v (killed by SIGINT: %v), output %q; want it killed by SIGINT, AFTER never printed",
					cmd.ProcessState, ws.Signaled(), out.String())
			}
		})
	}
}

// A server that accepts the connection and never answers, with no --timeout: distsync gives up
// after the 5 s it gives a PING and says so in one line (it said "context deadline exceeded").
func TestSilentServerIsNamedAfterFiveSeconds(t *testing.T) {
	t.Parallel()
	bin := cliBin(t, redistest.Open(t, redistest.Standalone))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	status, _, stderr := runCLI(t, bin, "lock", "--redis", "redis://"+ln.Addr().String(), "n", "--", "true")
	if status != exitUnavailable || !strings.Contains(stderr, "did not answer within 5s") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("status %d, stderr %q; want %d and one line that says Redis did not answer within 5s", status, stderr, exitUnavailable)
	}
}

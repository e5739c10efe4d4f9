//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/testrun"
)

// The tests below run the distsync binary, built once per test binary, against the
// harness's redis-server, each under a key prefix of its own. Every process they start is
// in a process group of its own and is killed with it when the test ends; every wait is
// bounded by cliLimit.

const cliLimit = 30 * time.Second

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// cliBin returns the path of the distsync binary. It is built into the directory of the
// harness's standalone redis-server, which Main removes with the server when the tests end.
func cliBin(t *testing.T, b *redistest.Backend) string {
	t.Helper()
	buildOnce.Do(func() {
		binPath = filepath.Join(b.Server.Dir, "distsync")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		// -buildvcs=auto: "version" names the commit (GOFLAGS may say -buildvcs=false). With
		// -race if this test binary has it: then every package the command imports is in
		// the build cache already, compiled for the test, and only the command's own is
		// compiled (without, go build compiles everything again, the standard library
		// too, on a cold cache: a minute on two cores).
		args := []string{"build", "-buildvcs=auto", "-o", binPath}
		if raceBuild {
			args = append(args, "-race")
		}
		out, err := exec.CommandContext(ctx, "go", append(args, ".")...).CombinedOutput()
		if err != nil {
			buildErr = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// cliEnv is the test's environment without DISTSYNC_REDIS_URL, so that only --redis counts,
// and with testrun.ChildEnv: a command built with -race would otherwise take a second more
// to exit, each of its nearly two hundred runs.
func cliEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DISTSYNC_REDIS_URL=") {
			env = append(env, kv)
		}
	}
	return append(env, testrun.ChildEnv()...)
}

// syncBuffer is a bytes.Buffer that a test may read while the process writes to it.
type syncBuffer = redistest.Buffer

// proc is one distsync process.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	status         int            // after done: the exit status, 128+N if killed by signal N (as a shell says)
	signal         syscall.Signal // after done: the signal that killed it, 0 if it exited
}

// start starts distsync with args; the process and its group are killed when the test ends.
// Its life is not bounded otherwise: a holder lives through the steps of its test, which on
// a loaded machine may take longer together than cliLimit. What bounds a hang is each wait.
func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, bin, args...)
}

// startEnv is start with env added to the process's environment.
func startEnv(t *testing.T, env []string, bin string, args ...string) *proc {
	t.Helper()
	return startIn(t, env, nil, bin, args...)
}

// startIn is startEnv with stdin as the process's standard input (nil: /dev/null).
func startIn(t *testing.T, env []string, stdin *os.File, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(cliEnv(), env...)
	if stdin != nil {
		p.cmd.Stdin = stdin
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start distsync: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.status = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.status, p.signal = 128+int(ws.Signal()), ws.Signal()
		}
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// exited reports whether p has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill kills p's process group, unless p has exited, and waits for p.
func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// wait waits for p to exit and returns its status. A p that does not exit within cliLimit
// is killed, and fails t.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.status
	case <-time.After(cliLimit):
		p.kill()
		t.Fatalf("distsync %q did not exit within %v; killed\n%s", p.cmd.Args[1:], cliLimit, p.stderr.String())
		return 0
	}
}

// runCLI runs distsync with args to the end and returns its status, stdout and stderr.
func runCLI(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	return runCLIEnv(t, nil, bin, args...)
}

// runCLIEnv is runCLI with env added to the process's environment.
func runCLIEnv(t *testing.T, env []string, bin string, args ...string) (int, string, string) {
	t.Helper()
	p := startEnv(t, env, bin, args...)
	status := p.wait(t)
	return status, p.stdout.String(), p.stderr.String()
}

// runWithin is runCLI for a run with a short --timeout (-w), which bounds connecting to Redis
// too: on a loaded machine the connection may take longer, and distsync exits 69 saying Redis
// did not answer within it. Such a run is made again, 5 times at most.
func runWithin(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	for i := 1; ; i++ {
		status, stdout, stderr := runCLI(t, bin, args...)
		if i == 5 || status != exitUnavailable || !strings.Contains(stderr, "did not answer within --timeout") {
			return status, stdout, stderr
		}
		t.Logf("distsync %q, run %d: %s (run again)", args, i, strings.TrimSpace(stderr))
	}
}

// cliSetup returns the binary, the flags that point distsync at a Redis of the harness under
// a prefix of the test's own, the prefix, the backend and a scratch directory.
func cliSetup(t *testing.T) (bin string, common []string, prefix string, b *redistest.Backend, dir string) {
	t.Helper()
	b = redistest.Open(t, redistest.Standalone)
	bin = cliBin(t, b)
	prefix = b.Prefix(t)
	return bin, []string{"--redis", "redis://" + b.Addrs()[0], "--prefix", prefix}, prefix, b, t.TempDir()
}

// args returns the arguments of "distsync sub", common flags first.
func args(common []string, sub string, a ...string) []string {
	return append(append([]string{sub}, common...), a...)
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	if !redistest.Eventually(cliLimit, func() bool { _, err := os.Stat(path); return err == nil }) {
		t.Fatalf("%s did not appear within %v", path, cliLimit)
	}
}

// waitPID waits until path holds a line, as `echo $$ > path` writes it, and returns the number
// on it. (The shell makes the file, empty, before it writes the line.)
func waitPID(t *testing.T, path string) int {
	t.Helper()
	var line string
	if !redistest.Eventually(cliLimit, func() bool {
		b, err := os.ReadFile(path)
		line = string(b)
		return err == nil && strings.HasSuffix(line, "\n")
	}) {
		t.Fatalf("%s held no line within %v: %q", path, cliLimit, line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func keyExists(t *testing.T, b *redistest.Backend, key string) bool {
	t.Helper()
	n, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Exists().Key(key).Build() }).AsInt64()
	if err != nil {
		t.Fatalf("EXISTS %s: %v", key, err)
	}
	return n == 1
}

// holder starts "distsync lock NAME" (with extra flags) whose command waits until the
// returned release function is called; it returns once the command runs.
func holder(t *testing.T, bin string, common []string, dir, name string, flags ...string) (p *proc, release func()) {
	t.Helper()
	held, rel := filepath.Join(dir, name+".held"), filepath.Join(dir, name+".release")
	script := `touch "$1"; while [ ! -e "$2" ]; do sleep 0.02; done`
	a := args(common, "lock", flags...)
	p = start(t, bin, append(a, name, "--", "sh", "-c", script, "sh", held, rel)...)
	waitFile(t, held)
	return p, func() {
		if err := os.WriteFile(rel, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLockNeverRunsTwoCommandsAtOnce(t *testing.T) {
	t.Parallel()
	redistest.Retry(t, 3, func() error {
		bin, common, _, _, dir := cliSetup(t)
		// Each command makes a directory that must not exist: a second command inside at the
		// same time fails its mkdir and exits 99.
		script := `mkdir "$1/in" || exit 99; echo "$DISTSYNC_TOKEN" >> "$1/runs"; sleep 0.05; rmdir "$1/in"`
		const procs, rounds = 3, 5
		var (
			wg           sync.WaitGroup
			mu           sync.Mutex
			failed, lost []string
		)
		for i := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					status, _, stderr := runCLI(t, bin, args(common, "lock", "shared-name", "--", "sh", "-c", script, "sh", dir)...)
					mu.Lock()
					switch {
					case status == exitLost:
						lost = append(lost, fmt.Sprintf("process %d, round %d: %s", i, r, strings.TrimSpace(stderr)))
					case status != 0:
						failed = append(failed, fmt.Sprintf("process %d, round %d: status %d, want 0 (99: two commands ran at once)\n%s", i, r, status, stderr))
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(lost) > 0 {
			return lostClaims(lost)
		}
		for _, f := range failed {
			t.Error(f)
		}
		runs := readLines(t, filepath.Join(dir, "runs"))
		if len(runs) != procs*rounds {
			t.Errorf("%d commands ran, want %d", len(runs), procs*rounds)
		}
		seen := map[string]bool{}
		for _, tok := range runs {
			if seen[tok] {
				t.Errorf("fencing token %s given twice", tok)
			}
			seen[tok] = true
		}
		return nil
	})
}

// lostClaims is the error, for Retry, of a run in which claims were lost: on a loaded machine a
// hand-off's grant can lapse before its taker confirms it (distsync.DefaultHandoffWindow), and
// distsync then ends the command (exit 76). That voids the run: a command killed inside its
// critical section leaves its marks behind, for the next one to take as an overlap.
func lostClaims(how []string) error {
	return fmt.Errorf("%d claims lost (a loaded machine?): %s", len(how), strings.Join(how, "; "))
}

func TestLockTimeoutZeroWhileHeld(t *testing.T) {
	t.Parallel()
	bin, common, _, _, dir := cliSetup(t)
	h, release := holder(t, bin, common, dir, "busy")
	ran := filepath.Join(dir, "ran")
	try := func(flags ...string) (int, string) {
		t.Helper()
		a := append(args(common, "lock", flags...), "busy", "--", "touch", ran)
		status, _, stderr := runWithin(t, bin, a...)
		return status, stderr
	}
	if status, stderr := try("--timeout", "0"); status != 75 {
		t.Errorf("--timeout 0 while held: status %d, want 75\n%s", status, stderr)
	} else if !strings.Contains(stderr, "held") {
		t.Errorf("--timeout 0 while held: stderr %q does not say the lock is held", stderr)
	}
	if status, stderr := try("--timeout", "0", "--conflict-exit-code", "3"); status != 3 {
		t.Errorf("--timeout 0 --conflict-exit-code 3 while held: status %d, want 3\n%s", status, stderr)
	}
	// A timeout that leaves a loaded machine time to connect: it bounds the connection too.
	if status, stderr := try("--timeout", "2s", "--quiet"); status != 75 || stderr != "" {
		t.Errorf("--timeout 2s --quiet while held: status %d, stderr %q; want 75 and nothing", status, stderr)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran although the lock was held")
	}
	// The FIFO lock and the read-write lock of the same name are other locks.
	for _, kind := range []string{"--fair", "--exclusive", "--shared"} {
		if status, stderr := try("--timeout", "0", kind); status != 0 {
			t.Errorf("%s --timeout 0 while the mutex is held: status %d, want 0 (another lock)\n%s", kind, status, stderr)
		}
	}
	release()
	if status := h.wait(t); status != 0 {
		t.Fatalf("holder: status %d\n%s", status, h.stderr.String())
	}
	if status, stderr := try("--timeout", "0"); status != 0 {
		t.Errorf("--timeout 0 once released: status %d, want 0\n%s", status, stderr)
	}
}

func TestTokenAndNameInEnvironment(t *testing.T) {
	t.Parallel()
	bin, common, _, _, _ := cliSetup(t)
	var last int64
	for i := range 3 {
		status, stdout, stderr := runCLI(t, bin, args(common, "lock", "tok:en", "--", "sh", "-c", `echo "$DISTSYNC_NAME $DISTSYNC_TOKEN"`)...)
		if status != 0 {
			t.Fatalf("run %d: status %d\n%s", i, status, stderr)
		}
		name, tok, _ := strings.Cut(strings.TrimSpace(stdout), " ")
		if name != "tok:en" {
			t.Errorf("DISTSYNC_NAME = %q, want tok:en", name)
		}
		n, err := strconv.ParseInt(tok, 10, 64)
		if err != nil || n <= last {
			t.Errorf("run %d: DISTSYNC_TOKEN = %q, want an integer above %d", i, tok, last)
		}
		last = n
	}
}

func TestLossKillsTheCommand(t *testing.T) {
	t.Parallel()
	// Run again when the command was too slow to record SIGTERM before the SIGKILL --kill-grace
	// later (a loaded machine), or the lease was lost before the test took it away.
	redistest.Retry(t, 3, func() error {
		bin, common, prefix, b, dir := cliSetup(t)
		key := prefix + "{doomed}:mutex"
		// The command ignores SIGTERM (it records it and goes on), so only SIGKILL ends it.
		script := `trap 'echo term >> "$1/trapped"' TERM; echo $$ > "$1/pid"; while :; do sleep 0.05; done`
		p := start(t, bin, args(common, "lock", "--ttl", "3s", "--kill-grace", "1s", "doomed", "--", "sh", "-c", script, "sh", dir)...)
		waitFile(t, filepath.Join(dir, "pid"))
		if !keyExists(t, b, key) {
			p.kill()
			return fmt.Errorf("the lock's key %s is not in Redis: keys %q\n%s", key, b.Keys(t, prefix), p.stderr.String())
		}
		if err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(key).Build() }).Error(); err != nil {
			t.Fatal(err)
		}
		if status := p.wait(t); status != 76 {
			t.Errorf("status %d, want 76\n%s", status, p.stderr.String())
		}
		stderr := p.stderr.String()
		for _, want := range []string{`lost mutex "doomed"`, "SIGTERM", "SIGKILL"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q: %s", want, stderr)
			}
		}
		pid, err := strconv.Atoi(strings.TrimSpace(strings.Join(readLines(t, filepath.Join(dir, "pid")), "")))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("the command (pid %d) still exists after distsync exited: kill -0 = %v", pid, err)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if got := readLines(t, filepath.Join(dir, "trapped")); len(got) == 0 {
			return errors.New("the command never got SIGTERM, or did not record it within --kill-grace 1s")
		}
		return nil
	})
}

func TestSignalIsForwardedAndTheLockFreedAtOnce(t *testing.T) {
	t.Parallel()
	bin, common, prefix, b, dir := cliSetup(t)
	key := prefix + "{sig}:mutex"
	script := `trap 'echo got-term > "$1/trapped"; exit 3' TERM; touch "$1/started"; while :; do sleep 0.02; done`
	// A long lease: only a release, not an expiry, can free the lock within the test.
	p := start(t, bin, args(common, "lock", "--ttl", "30s", "sig", "--", "sh", "-c", script, "sh", dir)...)
	waitFile(t, filepath.Join(dir, "started"))
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if status := p.wait(t); status != 3 {
		t.Errorf("status %d, want the command's 3\n%s", status, p.stderr.String())
	}
	if got := readLines(t, filepath.Join(dir, "trapped")); len(got) != 1 || got[0] != "got-term" {
		t.Errorf("the command did not get SIGTERM: %q", got)
	}
	if keyExists(t, b, key) {
		t.Errorf("the lock's key %s is still in Redis after distsync exited", key)
	}
	if status, _, stderr := runCLI(t, bin, args(common, "lock", "--timeout", "0", "sig", "--", "true")...); status != 0 {
		t.Errorf("--timeout 0 right after: status %d, want 0\n%s", status, stderr)
	}
}

func TestSignalWhileWaitingEndsTheWait(t *testing.T) {
	t.Parallel()
	bin, common, prefix, b, dir := cliSetup(t)
	h, release := holder(t, bin, common, dir, "queue")
	defer func() {
		release()
		h.wait(t)
	}()
	ran := filepath.Join(dir, "ran")
	p := start(t, bin, args(common, "lock", "queue", "--", "touch", ran)...)
	// The waiter subscribes to its channel once it waits, which is after it began to catch
	// signals (a signal before that would kill it, as it would any program).
	if !redistest.Eventually(cliLimit, func() bool { return len(b.Channels(t, prefix+"{queue}:mutex:ch:*")) > 0 }) {
		t.Fatalf("the second distsync did not wait for the lock within %v\n%s", cliLimit, p.stderr.String())
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if status := p.wait(t); status != 128+int(syscall.SIGINT) || p.signal != syscall.SIGINT {
		t.Errorf("status %d, signal %v; want it killed by SIGINT, as a shell sees it (%d)\n%s",
			status, p.signal, 128+int(syscall.SIGINT), p.stderr.String())
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the command ran")
	}
}

func TestSemaphoreLimitsConcurrency(t *testing.T) {
	t.Parallel()
	redistest.Retry(t, 3, func() error {
		bin, common, _, _, dir := cliSetup(t)
		// Two slots: a third command inside at the same time finds both taken and exits 99.
		script := `if mkdir "$1/s1" 2>/dev/null; then s=s1; elif mkdir "$1/s2" 2>/dev/null; then s=s2; else exit 99; fi
echo "$DISTSYNC_TOKEN" >> "$1/runs"; sleep 0.2; rmdir "$1/$s"`
		var ps []*proc
		for range 5 {
			ps = append(ps, start(t, bin, args(common, "sem", "pool", "--size", "2", "--", "sh", "-c", script, "sh", dir)...))
		}
		var failed, lost []string
		for i, p := range ps {
			switch status := p.wait(t); {
			case status == exitLost:
				lost = append(lost, fmt.Sprintf("process %d: %s", i, strings.TrimSpace(p.stderr.String())))
			case status != 0:
				failed = append(failed, fmt.Sprintf("process %d: status %d, want 0 (99: three commands at once)\n%s", i, status, p.stderr.String()))
			}
		}
		if len(lost) > 0 {
			return lostClaims(lost)
		}
		for _, f := range failed {
			t.Error(f)
		}
		runs := readLines(t, filepath.Join(dir, "runs"))
		if len(runs) != 5 {
			t.Errorf("%d commands ran, want 5", len(runs))
		}
		for _, tok := range runs {
			if tok != "0" {
				t.Errorf("DISTSYNC_TOKEN = %q for a semaphore permit, want 0", tok)
			}
		}
		return nil
	})
}

func TestOnceRunsTheCommandOnce(t *testing.T) {
	t.Parallel()
	bin, common, _, _, dir := cliSetup(t)
	script := `echo run >> "$1/runs"; echo "shared output"; sleep 0.3; exit 7`
	var ps []*proc
	for range 5 {
		ps = append(ps, start(t, bin, args(common, "once", "nightly", "--keep", "10m", "--", "sh", "-c", script, "sh", dir)...))
	}
	for i, p := range ps {
		if status := p.wait(t); status != 7 {
			t.Errorf("caller %d: status %d, want the command's 7\n%s", i, status, p.stderr.String())
		}
		if got := p.stdout.String(); got != "shared output\n" {
			t.Errorf("caller %d: stdout %q, want the command's", i, got)
		}
	}
	if runs := readLines(t, filepath.Join(dir, "runs")); len(runs) != 1 {
		t.Errorf("the command ran %d times, want once", len(runs))
	}
	// Kept for 10 minutes: a later caller gets the result without running the command.
	status, stdout, stderr := runCLI(t, bin, args(common, "once", "nightly", "--keep", "10m", "--", "sh", "-c", script, "sh", dir)...)
	if status != 7 || stdout != "shared output\n" {
		t.Errorf("later caller: status %d, stdout %q; want 7 and the kept output\n%s", status, stdout, stderr)
	}
	if runs := readLines(t, filepath.Join(dir, "runs")); len(runs) != 1 {
		t.Errorf("the command ran %d times, want once", len(runs))
	}
}

func TestExitStatuses(t *testing.T) {
	t.Parallel()
	bin, common, _, _, dir := cliSetup(t)
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"no command", nil, 64},
		{"unknown command", []string{"unlock"}, 64},
		{"no NAME", args(common, "lock"), 64},
		{"no CMD", args(common, "lock", "n"), 64},
		{"no --redis", []string{"lock", "n", "--", "true"}, 64},
		{"bad flag", args(common, "lock", "--bogus", "n", "--", "true"), 64},
		{"bad duration", args(common, "lock", "--ttl", "soon", "n", "--", "true"), 64},
		{"fair and shared", args(common, "lock", "--fair", "--shared", "n", "--", "true"), 64},
		{"no --size", args(common, "sem", "n", "--", "true"), 64},
		{"weight above size", args(common, "sem", "n", "--size", "2", "--weight", "3", "--", "true"), 64},
		{"once --timeout 0", args(common, "once", "--timeout", "0", "n", "--", "true"), 64},
		{"Redis unreachable", []string{"lock", "--redis", "redis://127.0.0.1:1", "n", "--", "true"}, 69},
		{"CMD not found", args(common, "lock", "n", "--", "distsync-no-such-command"), 127},
		{"CMD not executable", args(common, "lock", "n", "--", notExec), 126},
		{"CMD a directory", args(common, "lock", "n", "--", dir), 126}, // as bash: "Is a directory"
		{"--timeout NaN", args(common, "lock", "--timeout", "NaN", "n", "--", "true"), 64},
		{"--timeout Inf", args(common, "lock", "--timeout", "Inf", "n", "--", "true"), 64},
		{"--timeout 1e300", args(common, "lock", "--timeout", "1e300", "n", "--", "true"), 64},
		{"CMD's status", args(common, "lock", "n", "--", "sh", "-c", "exit 5"), 5},
		{"CMD killed by a signal", args(common, "lock", "n", "--", "sh", "-c", "kill -USR1 $$"), 128 + int(syscall.SIGUSR1)},
		{"help", []string{"help"}, 0},
		{"version", []string{"version"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // those that take the lock "n" take turns
			status, _, stderr := runCLI(t, bin, tc.args...)
			if status != tc.want {
				t.Errorf("distsync %q: status %d, want %d\n%s", tc.args, status, tc.want, stderr)
			}
			if tc.want >= 64 && tc.want != 128+int(syscall.SIGUSR1) && stderr == "" {
				t.Errorf("distsync %q: status %d with nothing on stderr", tc.args, status)
			}
		})
	}
}

// A duration in seconds that is not a finite number, or is beyond a time.Duration, is told as
// such (it was "negative duration": the float's conversion wrapped).
func TestTimeoutThatIsNotAFiniteDuration(t *testing.T) {
	t.Parallel()
	bin, common, _, _, _ := cliSetup(t)
	for v, want := range map[string]string{
		"NaN": "not a number of seconds", "Inf": "longer than the longest duration",
		"1e300": "longer than the longest duration", "-1e300": "negative duration",
	} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			status, _, stderr := runCLI(t, bin, args(common, "lock", "--timeout", v, "n", "--", "true")...)
			if status != 64 || !strings.Contains(stderr, want) {
				t.Errorf("--timeout %s: status %d, %q; want 64 and %q", v, status, stderr, want)
			}
		})
	}
}

// "distsync help CMD", "distsync CMD --help" and "distsync CMD -h" print CMD's help and
// nothing else, on stdout, with exit status 0; it lists every flag CMD takes, long and short,
// and no flag CMD does not take.
func TestHelpOfEachCommand(t *testing.T) {
	t.Parallel()
	var all []*flagSet
	sets := map[string]*flagSet{}
	for _, cmd := range []string{"lock", "sem", "once", "inspect", "ls", "demo"} {
		switch cmd {
		case "lock", "sem", "once":
			sets[cmd] = runFlags(cmd, &config{})
		case "inspect", "ls":
			sets[cmd] = inspectFlagSet(cmd, &inspectFlags{})
		default:
			sets[cmd] = demoFlags(&demoConfig{})
		}
		all = append(all, sets[cmd])
	}
	for cmd, fs := range sets {
		var first string
		for _, args := range [][]string{{"help", cmd}, {cmd, "--help"}, {cmd, "-h"}, {cmd, "--redis", "x", "--help"}} {
			var out, errOut bytes.Buffer
			if status := cli(args, &out, &errOut); status != 0 || errOut.Len() > 0 {
				t.Errorf("distsync %q: status %d, stderr %q; want 0 and nothing", args, status, errOut.String())
			}
			if first == "" {
				first = out.String()
			} else if out.String() != first {
				t.Errorf("distsync %q prints another help than distsync help %s", args, cmd)
			}
		}
		if !strings.HasPrefix(first, "Usage: distsync "+cmd) {
			t.Errorf("help %s does not start with its usage: %.60q", cmd, first)
		}
		for _, d := range fs.defs {
			if !strings.Contains(first, "--"+d.long) {
				t.Errorf("help %s lacks --%s", cmd, d.long)
			}
			if d.short != 0 && !strings.Contains(first, "-"+string(d.short)+", --"+d.long) {
				t.Errorf("help %s lacks -%c", cmd, d.short)
			}
		}
		for _, other := range all {
			for _, d := range other.defs {
				if fs.lookupLong(d.long) == nil && strings.Contains(first, "--"+d.long+" ") {
					t.Errorf("help %s lists --%s, which it does not take", cmd, d.long)
				}
			}
		}
	}
	var out, errOut bytes.Buffer
	if status := cli([]string{"help"}, &out, &errOut); status != 0 {
		t.Fatalf("help: status %d", status)
	}
	for _, want := range []string{"lock", "sem", "once", "inspect", "ls", "demo", "version",
		"--forget", "DISTSYNC_REDIS_URL", "64", "69", "75", "76", "126", "127", "docs/command.md"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
	for _, args := range [][]string{{"help", "unlock"}, {"help", "lock", "sem"}} {
		out.Reset()
		errOut.Reset()
		if status := cli(args, &out, &errOut); status != 64 || out.Len() > 0 || strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("distsync %q: status %d, stdout %q, stderr %q; want 64 and one line on stderr", args, status, out.String(), errOut.String())
		}
	}
}

//go:build unix

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/redistest"
)

// The recipe of docs/command.md, run by bash: a coprocess holds the mutex across the lines of
// the script, which reads its token; meanwhile another lock of the name is refused, and
// inspect shows the token; closing the coprocess's input releases the mutex (exit 0), and the
// name is free for the next lock.
func TestHoldAcrossScriptLines(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	bin, common, _, _, dir := cliSetup(t)
	script := `
coproc HOLD { "$BIN" lock --hold $COMMON deploy; }
pid=$HOLD_PID in=${HOLD[1]}
read -t 30 -r token <&"${HOLD[0]}" || exit 90
echo "$token" > "$DIR/token"
"$BIN" lock -n $COMMON deploy -- true; echo $? > "$DIR/second"
"$BIN" inspect $COMMON deploy > "$DIR/inspect"
exec {in}>&-
wait "$pid"; echo $? > "$DIR/hold"
"$BIN" lock -n $COMMON deploy -- true; echo $? > "$DIR/after"
`
	ctx, cancel := context.WithTimeout(context.Background(), 2*cliLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Env = append(cliEnv(), "BIN="+bin, "COMMON="+strings.Join(common, " "), "DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the script: %v\n%s", err, out)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("the script wrote no %s: %v", name, err)
		}
		return strings.TrimSpace(string(b))
	}
	token := read("token")
	if n, err := strconv.ParseInt(token, 10, 64); err != nil || n <= 0 {
		t.Errorf("the token line: %q; want a fencing token", token)
	}
	if !strings.Contains(read("inspect"), token) {
		t.Errorf("inspect while held does not show the token %s:\n%s", token, read("inspect"))
	}
	for name, want := range map[string]string{"second": "75", "hold": "0", "after": "0"} {
		if got := read(name); got != want {
			t.Errorf("%s: exit status %s; want %s", name, got, want)
		}
	}
}

// A hold ends with what ends its script: the script killed with SIGKILL (its end of the pipe
// closes: released, exit 0), a signal to distsync (released, dies of it), a loss (said,
// exit 76). An input that would end at once (/dev/null) is refused before Redis is dialled.
func TestHoldEnds(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	bin, common, prefix, b, dir := cliSetup(t)
	free := func(t *testing.T, name string) {
		t.Helper()
		if status, _, stderr := runCLI(t, bin, args(common, "lock", "-n", name, "--", "true")...); status != 0 {
			t.Errorf("lock -n %s after the hold: status %d; want 0 (free)\n%s", name, status, stderr)
		}
	}

	t.Run("script killed", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(dir, "hold.pid")
		script := `coproc HOLD { "$BIN" lock --hold $COMMON killed; }
pid=$HOLD_PID
read -t 30 -r token <&"${HOLD[0]}" || exit 90
echo "$pid" > "$PIDF"
kill -KILL $$`
		ctx, cancel := context.WithTimeout(context.Background(), cliLimit)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Env = append(cliEnv(), "BIN="+bin, "COMMON="+strings.Join(common, " "), "PIDF="+pidFile)
		_ = cmd.Run() // killed
		pid := waitPID(t, pidFile)
		if !redistest.Eventually(cliLimit, func() bool { return syscall.Kill(pid, 0) != nil }) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("distsync --hold (pid %d) still runs %v after its script was killed", pid, cliLimit)
		}
		free(t, "killed")
	})

	// hold starts distsync --hold on name with a pipe as its input, and waits for its token.
	hold := func(t *testing.T, name string, extra ...string) (*proc, *os.File) {
		t.Helper()
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
		p := startIn(t, nil, r, bin, args(common, "lock", append(extra, "--hold", name)...)...)
		_ = r.Close()
		if !redistest.Eventually(cliLimit, func() bool { return strings.HasSuffix(p.stdout.String(), "\n") || p.exited() }) || p.exited() {
			t.Fatalf("distsync --hold %s printed no token: %q\n%s", name, p.stdout.String(), p.stderr.String())
		}
		return p, w
	}

	t.Run("signal", func(t *testing.T) {
		t.Parallel()
		p, _ := hold(t, "signalled")
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if status := p.wait(t); p.signal != syscall.SIGTERM {
			t.Errorf("after SIGTERM: status %d, signal %v; want death by SIGTERM\n%s", status, p.signal, p.stderr.String())
		}
		free(t, "signalled")
	})

	t.Run("loss", func(t *testing.T) {
		t.Parallel()
		p, _ := hold(t, "lost", "--ttl", "1s")
		keys := b.Keys(t, prefix+"{lost}")
		for _, k := range keys {
			b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(k).Build() })
		}
		if status := p.wait(t); status != exitLost || !strings.Contains(p.stderr.String(), "lost") {
			t.Errorf("after its keys were deleted (%q): status %d, stderr %q; want %d and the loss said", keys, status, p.stderr.String(), exitLost)
		}
	})

	t.Run("no input", func(t *testing.T) {
		t.Parallel()
		status, _, stderr := runCLI(t, bin, args(common, "lock", "--hold", "nothing")...) // stdin: /dev/null
		if status != exitUsage || !strings.Contains(stderr, "coproc") {
			t.Errorf("--hold with /dev/null as input: status %d, stderr %q; want %d and how to run it", status, stderr, exitUsage)
		}
		if keys := b.Keys(t, prefix+"{nothing}"); len(keys) > 0 {
			t.Errorf("--hold refused wrote %q", keys)
		}
	})
}

//go:build unix

package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/keys"
	"github.com/distsync/distsync/internal/redistest"
)

// Tests of lock's several names (--also, --all): the mutexes of them all, locked together.

// The forms that name several mutexes leave every earlier form as it was: without --all, CMD
// starts at the first argument after NAME that is not a flag, "--" or not after it.
func TestSeveralNamesParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, names, cmd string
	}{
		{"a b -- c", "a", "b -- c"}, // the earlier form: CMD b, with its arguments
		{"a -- b c", "a", "b c"},
		{"--all a b -- c d", "a b", "c d"},
		{"a --all b -- c", "a b", "c"},
		{"a b --all -- c", "a", "b --all -- c"}, // --all after CMD is CMD's
		{"a --also b c d", "a b", "c d"},
		{"--also b a -- c", "a b", "c"},
		{"--all a b --also c -- d", "a b c", "d"},
		{"a c --also b", "a", "c --also b"},
	} {
		var c config
		fs := runFlags("lock", &c)
		pos, argv, _, err := fs.parse(strings.Fields(tc.in), 1)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if names := strings.Join(append(pos, c.also...), " "); names != tc.names || strings.Join(argv, " ") != tc.cmd {
			t.Errorf("%q: names %q, CMD %q; want %q, %q", tc.in, names, argv, tc.names, tc.cmd)
		}
	}
}

// fenceOf returns the fencing token Redis keeps for the mutex name.
func fenceOf(t *testing.T, b *redistest.Backend, prefix, name string) int64 {
	t.Helper()
	s, err := keys.New(prefix, "mutex", name)
	if err != nil {
		t.Fatal(err)
	}
	n, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Get().Key(s.Part("fence")).Build() }).AsInt64()
	if err != nil {
		t.Fatalf("GET %s: %v", s.Part("fence"), err)
	}
	return n
}

// Two names locked by one distsync exclude a lock of either; a set that finds one of its
// names held takes none of them.
func TestSeveralNamesExcludeEachName(t *testing.T) {
	t.Parallel()
	bin, common, prefix, b, dir := cliSetup(t)
	h, release := holder(t, bin, common, dir, "set:a", "--also", "set:b")
	try := func(a ...string) (int, string) {
		status, _, stderr := runCLI(t, bin, args(common, "lock", append([]string{"-n"}, append(a, "--", "true")...)...)...)
		return status, stderr
	}
	for _, name := range []string{"set:a", "set:b"} {
		if status, stderr := try(name); status != 75 {
			t.Errorf("lock -n %s while the set holds it: status %d, want 75\n%s", name, status, stderr)
		}
	}
	if status, stderr := try("--all", "set:c", "set:b"); status != 75 {
		t.Errorf("lock -n --all set:c set:b: status %d, want 75\n%s", status, stderr)
	}
	if lock, _ := keys.New(prefix, "mutex", "set:c"); keyExists(t, b, lock.Key()) {
		t.Error("a set that found one of its names held kept another")
	}
	// inspect and ls show the set.
	url := common[1]
	status, out, errOut := runInspectCmd(runInspect, "--redis", url, "--prefix", prefix, "set:b")
	if status != 0 || !strings.Contains(out, "held with set:a") {
		t.Errorf("inspect set:b: status %d, want 0 and %q in\n%s%s", status, "held with set:a", out, errOut)
	}
	status, out, errOut = runInspectCmd(runLs, "--redis", url, "--prefix", prefix)
	if status != 0 || !strings.Contains(out, "(with set:b)") || !strings.Contains(out, "(with set:a)") {
		t.Errorf("ls: status %d, want 0 and each member with the other in\n%s%s", status, out, errOut)
	}
	release()
	if status := h.wait(t); status != 0 {
		t.Fatalf("holder: status %d\n%s", status, h.stderr.String())
	}
	if status, stderr := try("set:a", "--also", "set:b", "--also", "set:c"); status != 0 {
		t.Errorf("lock -n of the three once released: status %d, want 0\n%s", status, stderr)
	}
	// An ordinary hold is shown as before: no "held with".
	status, out, _ = runInspectCmd(runInspect, "--redis", url, "--prefix", prefix, "set:a")
	if status != 0 || strings.Contains(out, "held with") {
		t.Errorf("inspect of a released set member: status %d, %s", status, out)
	}
}

// Two distsync processes that lock the same two names in opposite orders both finish, one
// at a time: no deadlock, and the commands never overlap.
func TestSeveralNamesInOppositeOrders(t *testing.T) {
	t.Parallel()
	redistest.Retry(t, 3, func() error {
		bin, common, _, _, dir := cliSetup(t)
		script := `mkdir "$1/in" || echo overlap >> "$1/bad"; echo run >> "$1/runs"; sleep 0.05; rmdir "$1/in"`
		const rounds = 3
		var lost []string
		for range rounds {
			p1 := start(t, bin, args(common, "lock", "--all", "x", "y", "--", "sh", "-c", script, "sh", dir)...)
			p2 := start(t, bin, args(common, "lock", "y", "--also", "x", "sh", "-c", script, "sh", dir)...)
			for _, p := range []*proc{p1, p2} {
				switch status := p.wait(t); {
				case status == exitLost:
					lost = append(lost, strings.TrimSpace(p.stderr.String()))
				case status != 0:
					t.Fatalf("distsync %q: status %d\n%s", p.cmd.Args[1:], status, p.stderr.String())
				}
			}
		}
		if len(lost) > 0 {
			return lostClaims(lost) // see TestLockNeverRunsTwoCommandsAtOnce
		}
		if bad := readLines(t, filepath.Join(dir, "bad")); len(bad) > 0 {
			t.Errorf("the commands overlapped %d times", len(bad))
		}
		if runs := readLines(t, filepath.Join(dir, "runs")); len(runs) != 2*rounds {
			t.Errorf("%d runs, want %d", len(runs), 2*rounds)
		}
		return nil
	})
}

// CMD gets every name, one a line, in DISTSYNC_NAMES, and each name's token in
// DISTSYNC_TOKEN_1.., in that order: the tokens Redis keeps as the names' fences. One name
// gets the same variables.
func TestSeveralNamesInEnvironment(t *testing.T) {
	t.Parallel()
	bin, common, prefix, b, _ := cliSetup(t)
	names := []string{"env:a", "env: b", "env:c"}
	script := `printf '%s\n' "$DISTSYNC_NAME" "$DISTSYNC_TOKEN" "$DISTSYNC_TOKEN_1" "$DISTSYNC_TOKEN_2" "$DISTSYNC_TOKEN_3" "${DISTSYNC_TOKEN_4-none}"; printf '%s' "$DISTSYNC_NAMES"`
	status, stdout, stderr := runCLI(t, bin, args(common, "lock", "--all", names[0], names[1], "--also", names[2], "--", "sh", "-c", script)...)
	if status != 0 {
		t.Fatalf("status %d\n%s", status, stderr)
	}
	lines := strings.Split(stdout, "\n")
	if len(lines) != 6+len(names) {
		t.Fatalf("output %q: want %d lines", stdout, 6+len(names))
	}
	if lines[0] != names[0] || lines[1] != lines[2] || lines[5] != "none" {
		t.Errorf("DISTSYNC_NAME %q, DISTSYNC_TOKEN %q, DISTSYNC_TOKEN_1 %q, DISTSYNC_TOKEN_4 %q; want %q, the first token twice, none",
			lines[0], lines[1], lines[2], lines[5], names[0])
	}
	if got := lines[6:]; !slices.Equal(got, names) {
		t.Errorf("DISTSYNC_NAMES lines %q, want %q", got, names)
	}
	for i, name := range names {
		tok, err := strconv.ParseInt(lines[2+i], 10, 64)
		if want := fenceOf(t, b, prefix, name); err != nil || tok != want {
			t.Errorf("DISTSYNC_TOKEN_%d = %q, want %s's fence %d", i+1, lines[2+i], name, want)
		}
	}
	status, stdout, stderr = runCLI(t, bin, args(common, "lock", "one", "--", "sh", "-c", `printf '%s|%s|%s' "$DISTSYNC_NAMES" "$DISTSYNC_TOKEN_1" "$DISTSYNC_TOKEN"`)...)
	if want := fmt.Sprintf("one|%d|%d", fenceOf(t, b, prefix, "one"), fenceOf(t, b, prefix, "one")); status != 0 || stdout != want {
		t.Errorf("one name: status %d, %q; want 0, %q\n%s", status, stdout, want, stderr)
	}
}

// The loss of any one of the names kills CMD, as for one name.
func TestSeveralNamesLossOfOneKillsTheCommand(t *testing.T) {
	t.Parallel()
	bin, common, prefix, b, dir := cliSetup(t)
	s, _ := keys.New(prefix, "mutex", "loss:b")
	// A lease long enough that a loaded machine does not lose it by itself before the test
	// takes one name away; its renewal, a second later at most, finds the name gone.
	p := start(t, bin, args(common, "lock", "--ttl", "3s", "--kill-grace", "300ms", "loss:a", "--also", "loss:b", "--",
		"sh", "-c", `echo $$ > "$1/pid"; while :; do sleep 0.05; done`, "sh", dir)...)
	waitFile(t, filepath.Join(dir, "pid"))
	if err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(s.Key()).Build() }).Error(); err != nil {
		t.Fatal(err)
	}
	if status := p.wait(t); status != 76 {
		t.Errorf("status %d, want 76\n%s", status, p.stderr.String())
	}
	if stderr := p.stderr.String(); !strings.Contains(stderr, `lost mutexes "loss:a", "loss:b"`) {
		t.Errorf("stderr does not name the set: %s", stderr)
	}
}

// Several names where they do not apply, or a name given twice, are a usage error of one
// line, and nothing is written to Redis.
func TestSeveralNamesBadInput(t *testing.T) {
	t.Parallel()
	bin, common, prefix, b, _ := cliSetup(t)
	for _, tc := range []struct {
		args  []string
		names string // what the error must name
	}{
		{args(common, "lock", "a", "--also", "a", "--", "true"), "twice"},
		{args(common, "lock", "--all", "a", "b", "a", "--", "true"), "twice"},
		{args(common, "lock", "--fair", "a", "--also", "b", "--", "true"), "--fair"},
		{args(common, "lock", "--fair", "--all", "a", "b", "--", "true"), "--fair"},
		{args(common, "lock", "-s", "--all", "a", "b", "--", "true"), "--shared"},
		{args(common, "lock", "-x", "a", "--also", "b", "--", "true"), "--exclusive"},
		{args(common, "sem", "--size", "2", "a", "--also", "b", "--", "true"), "--also"},
		{args(common, "sem", "--size", "2", "--all", "a", "b", "--", "true"), "--all"},
		{args(common, "once", "k", "--also", "b", "--", "true"), "--also"},
		{args(common, "once", "--all", "k", "b", "--", "true"), "--all"},
		{args(common, "lock", "--all", "a", "b"), "CMD"},
		{args(common, "lock", "a", "--also", "", "--", "true"), "NAME"},
		{args(common, "lock", "a", "--also", "b\nc", "--", "true"), "newline"},
		{args(common, "lock", "a", "--also"), "--also"},
	} {
		wantUsageError(t, bin, b, prefix, tc.args, tc.names)
	}
}

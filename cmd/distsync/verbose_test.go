//go:build unix

package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// --verbose says, in order, each step distsync takes, with the time since it began: the Redis
// reached, the claim and who holds it, the token, CMD's PID and status, the release.
func TestVerboseSaysWhatItDoes(t *testing.T) {
	t.Parallel()
	bin, common, _, _, dir := cliSetup(t)
	holder := start(t, bin, args(common, "lock", "held", "--", "sh", "-c",
		`touch "$1"; i=0; while [ ! -e "$2" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done`, "sh", dir+"/in", dir+"/out")...)
	waitFile(t, dir+"/in")
	for _, tc := range []struct {
		name string
		args []string
		want []string // each line's pattern, after "distsync: <seconds>s "
	}{
		{"free", args(common, "lock", "-v", "free", "--", "true"), []string{
			`connected to Redis at redis://127\.0\.0\.1:\d+`, `taking mutex "free" \(free\)`,
			`took mutex "free", fencing token \d+`, `started true \(pid \d+\)`,
			`the command exited with status 0`, `released mutex "free"`}},
		{"held", args(common, "lock", "--verbose", "-n", "held", "--", "true"), []string{
			`connected to Redis at .*`, `taking mutex "held" \(held by [^)]+:\d+\)`, `mutex "held" is held \(--timeout 0\)`}},
	} {
		status, _, stderr := runCLI(t, bin, tc.args...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		ok := len(lines) == len(tc.want)
		for i := 0; ok && i < len(lines); i++ {
			prefix := `^distsync: \d+\.\d{3}s `
			if i == len(lines)-1 && tc.name == "held" {
				prefix = `^distsync: ` // not a step: the conflict, said without --verbose too
			}
			ok = regexp.MustCompile(prefix + tc.want[i] + `$`).MatchString(lines[i])
		}
		if !ok || (tc.name == "free") != (status == 0) {
			t.Errorf("%s: distsync %s: status %d, stderr:\n%s\nwant lines:\n%s", tc.name, strings.Join(tc.args, " "), status, stderr, strings.Join(tc.want, "\n"))
		}
	}
	if err := os.WriteFile(dir+"/out", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if status := holder.wait(t); status != 0 {
		t.Errorf("the holder: status %d\n%s", status, holder.stderr.String())
	}
}

//go:build unix

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/distsync/distsync/internal/redistest"
)

// The command reaches a Redis that speaks TLS only through a rediss:// URL, trusting the CA
// that SSL_CERT_FILE names (Go reads it in place of the system's roots on Linux); without it,
// the server's certificate is refused and the command exits 69, saying why.
func TestCommandOverTLS(t *testing.T) {
	t.Parallel()
	bin := cliBin(t, redistest.Open(t, redistest.Standalone))
	certs := redistest.NewTLS(t, false) // the command presents no client certificate
	srv := redistest.StartTLSRedis(t, certs)
	url := "rediss://" + srv.Addr()
	prefix := "tls.cmd:"
	common := []string{"--redis", url, "--prefix", prefix}

	// The command gives Redis 5 s to answer: on a machine busy with other work the handshake
	// can take longer, and the command then says so (a deadline) before the certificate is
	// refused. That is tried again, a few times.
	for i := 0; ; i++ {
		status, _, stderr := runCLI(t, bin, args(common, "lock", "deploy", "--", "true")...)
		if status == exitUnavailable && (strings.Contains(stderr, "deadline exceeded") || strings.Contains(stderr, "did not answer within")) && i < 4 {
			t.Logf("without SSL_CERT_FILE, attempt %d: %s", i+1, strings.TrimSpace(stderr))
			continue
		}
		if status != exitUnavailable || !strings.Contains(stderr, "certificate") {
			t.Errorf("without SSL_CERT_FILE: status %d, stderr %q; want %d and the certificate refused", status, stderr, exitUnavailable)
		}
		break
	}

	// Each line in parallel with the others (a TLS handshake of a race-built command takes a
	// while); once's run comes before the inspection of its name.
	trust := []string{"SSL_CERT_FILE=" + certs.CA}
	for _, lines := range [][][]string{
		{args(common, "lock", "deploy", "--", "sh", "-c", `test -n "$DISTSYNC_TOKEN"`)},
		{args(common, "sem", "partner", "--size", "2", "--", "true")},
		{args(common, "once", "nightly", "--keep", "1m", "--", "true"), args(common, "inspect", "nightly")},
		{args(common, "ls")},
	} {
		t.Run(lines[0][0], func(t *testing.T) {
			t.Parallel()
			for _, a := range lines {
				if status, stdout, stderr := runCLIEnv(t, trust, bin, a...); status != 0 {
					t.Errorf("distsync %s over TLS: status %d\n%s%s", strings.Join(a, " "), status, stdout, stderr)
				}
			}
		})
	}
}

// A Redis that wants a client certificate (tls-auth-clients yes) serves the command that gives
// --cacert, --cert and --key, without SSL_CERT_FILE. A command that does not is refused with
// a hint of what is missing: without --cert, a client certificate; without --cacert, the CA;
// with redis:// to the TLS port, TLS.
func TestCommandWithTLSFiles(t *testing.T) {
	t.Parallel()
	bin := cliBin(t, redistest.Open(t, redistest.Standalone))
	certs := redistest.NewTLS(t, true)
	srv := redistest.StartTLSRedis(t, certs)
	common := []string{"--redis", "rediss://" + srv.Addr(), "--prefix", "tls.files:"}
	ca := []string{"--cacert", certs.CA}
	cert := []string{"--cert", certs.ClientCert, "--key", certs.ClientKey}
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		hint   string // what stderr must say
	}{
		{"every file", args(slices.Concat(common, ca, cert), "lock", "deploy", "--", "sh", "-c", `test -n "$DISTSYNC_TOKEN"`), 0, ""},
		{"inspect with every file", args(slices.Concat(common, ca, cert), "inspect", "deploy"), 0, ""},
		{"no --cert", args(slices.Concat(common, ca), "lock", "deploy", "--", "true"), exitUnavailable, "give --cert and --key"},
		{"no --cacert", args(slices.Concat(common, cert), "lock", "deploy", "--", "true"), exitUnavailable, "give --cacert"},
		{"redis://", args([]string{"--redis", "redis://" + srv.Addr()}, "lock", "deploy", "--", "true"), exitUnavailable, "use rediss://"},
	} {
		// The command gives Redis 5 s to answer the handshake, which a busy machine can take:
		// then it says so, and the line is tried again, a few times.
		for i := 0; ; i++ {
			status, stdout, stderr := runCLI(t, bin, tc.args...)
			if status == exitUnavailable && strings.Contains(stderr, "did not answer within") && i < 4 {
				t.Logf("%s, attempt %d: %s", tc.name, i+1, strings.TrimSpace(stderr))
				continue
			}
			if status != tc.status || !strings.Contains(stderr, tc.hint) {
				t.Errorf("%s: distsync %s: status %d, stdout %q, stderr %q; want %d and %q said", tc.name,
					strings.Join(tc.args, " "), status, stdout, stderr, tc.status, tc.hint)
			}
			break
		}
	}
}

// The command runs as the user of docs/acl.md's library, inspect and --watch lines, and the
// server refuses it nothing: lock, sem and once, ls, inspect and inspect --watch.
func TestCommandAsACLUser(t *testing.T) {
	t.Parallel()
	redistest.Retry(t, 3, func() error {
		bin, _, prefix, b, dir := cliSetup(t)
		var rules []string
		for _, line := range []string{"library", "inspect", "watch"} {
			rules = append(rules, redistest.ACLRules(t, line, prefix)...)
		}
		u := redistest.CreateUser(t, b.Nodes(t), rules...)
		common := []string{"--redis", "redis://" + u.Name + ":" + u.Password + "@" + b.Addrs()[0], "--prefix", prefix}

		w := start(t, bin, args(common, "inspect", "--watch", "deploy")...)
		seen := func(want string) {
			t.Helper()
			if !redistest.Eventually(cliLimit, func() bool { return strings.Contains(w.stdout.String(), want) }) {
				t.Fatalf("inspect --watch did not show %q within %v:\n%s\n%s", want, cliLimit, w.stdout.String(), w.stderr.String())
			}
		}
		seen("deploy: nothing held or queued")
		h, release := holder(t, bin, common, dir, "deploy")
		seen("mutex deploy: ")
		waiter := start(t, bin, args(common, "lock", "deploy", "--", "true")...)
		for _, a := range [][]string{
			args(common, "sem", "partner", "--size", "2", "--", "true"),
			args(common, "once", "nightly", "--keep", "1m", "--", "true"),
			args(common, "ls"),
			args(common, "inspect", "deploy"),
		} {
			if status, stdout, stderr := runCLI(t, bin, a...); status != 0 {
				t.Errorf("distsync %s as %s: status %d\n%s%s", strings.Join(a, " "), u.Name, status, stdout, stderr)
			}
		}
		release()
		if status := h.wait(t); status != 0 {
			t.Errorf("holder: status %d\n%s", status, h.stderr.String())
		}
		var waited error
		switch status := waiter.wait(t); {
		case status == exitLost:
			// Load's doing (lostClaims), unless the server refused the user something: that
			// is checked below, and fails the test.
			waited = lostClaims([]string{strings.TrimSpace(waiter.stderr.String())})
		case status != 0:
			t.Errorf("waiter: status %d\n%s", status, waiter.stderr.String())
		}
		seen("mutex deploy: free")
		if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if status := w.wait(t); status != 0 {
			t.Errorf("inspect --watch: status %d\n%s", status, w.stderr.String())
		}
		var refused []string
		for _, d := range u.Denials(t) {
			if !d.SetInfo(t) { // sent by rueidis at connect, its refusal ignored (docs/acl.md)
				refused = append(refused, d.String())
			}
		}
		if len(refused) > 0 {
			t.Errorf("the server refused the command's user: %v", refused)
		}
		return waited
	})
}

// inspect --watch as a user without the transaction its tracked reads are wrapped in says
// which permissions it needs, where rueidis's error names none.
func TestWatchWithoutMultiNamesIt(t *testing.T) {
	t.Parallel()
	bin, _, prefix, b, _ := cliSetup(t)
	var rules []string
	for _, line := range []string{"library", "inspect", "watch"} {
		rules = append(rules, redistest.ACLRules(t, line, prefix)...)
	}
	rules = slices.DeleteFunc(rules, func(r string) bool { return r == "+multi" })
	u := redistest.CreateUser(t, b.Nodes(t), rules...)
	common := []string{"--redis", "redis://" + u.Name + ":" + u.Password + "@" + b.Addrs()[0], "--prefix", prefix}
	status, _, stderr := runCLI(t, bin, args(common, "inspect", "--watch", "deploy")...)
	if status != exitUnavailable || !strings.Contains(stderr, "MULTI") || !strings.Contains(stderr, "docs/acl.md") {
		t.Errorf("inspect --watch without +multi: status %d, stderr %q; want %d and the commands named", status, stderr, exitUnavailable)
	}
}

// The password can be given apart from the URL, in DISTSYNC_REDIS_PASSWORD (a URL given with
// --redis shows in ps), and CMD never gets distsync's Redis password: not that variable, not
// the password of DISTSYNC_REDIS_URL, which it gets without it.
func TestPasswordStaysOutOfCMD(t *testing.T) {
	t.Parallel()
	bin, _, prefix, b, dir := cliSetup(t)
	u := redistest.CreateUser(t, b.Nodes(t), redistest.ACLRules(t, "library", prefix)...)
	envFile := filepath.Join(dir, "env")
	dump := []string{"--", "sh", "-c", `env > "$0"`, envFile}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
	}{
		{"DISTSYNC_REDIS_PASSWORD", append([]string{"lock", "--redis", "redis://" + u.Name + "@" + b.Addrs()[0], "--prefix", prefix, "a"}, dump...),
			[]string{"DISTSYNC_REDIS_PASSWORD=" + u.Password}},
		{"DISTSYNC_REDIS_URL", append([]string{"lock", "--prefix", prefix, "b"}, dump...),
			[]string{"DISTSYNC_REDIS_URL=redis://" + u.Name + ":" + u.Password + "@" + b.Addrs()[0]}},
	} {
		_ = os.Remove(envFile)
		status, stdout, stderr := runCLIEnv(t, tc.env, bin, tc.args...)
		if status != 0 {
			t.Fatalf("%s: status %d\n%s%s", tc.name, status, stdout, stderr)
		}
		env, err := os.ReadFile(envFile)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(env), u.Password) || strings.Contains(string(env), "DISTSYNC_REDIS_PASSWORD") {
			t.Errorf("%s: CMD's environment has the password:\n%s", tc.name, env)
		}
		if tc.name == "DISTSYNC_REDIS_URL" && !strings.Contains(string(env), "DISTSYNC_REDIS_URL=redis://"+u.Name+"@"+b.Addrs()[0]) {
			t.Errorf("%s: CMD's environment lacks the URL without its password:\n%s", tc.name, env)
		}
	}
	// Without the variable, the user cannot log in: the password came from it.
	status, _, stderr := runCLI(t, bin, append([]string{"lock", "--redis", "redis://" + u.Name + "@" + b.Addrs()[0], "--prefix", prefix, "c"}, "--", "true")...)
	if status != exitUnavailable {
		t.Errorf("without DISTSYNC_REDIS_PASSWORD: status %d, want %d\n%s", status, exitUnavailable, stderr)
	}
}

//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/rate"
)

// distsync rate (issue 26), driving the built binary against the harness's redis-server.

// --limit's spellings, and what they are per second.
func TestParseRateLimit(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{
		"10/s": 10, "100/m": 100.0 / 60, "5/h": 5.0 / 3600, "3/500ms": 6, "1/10s": 0.1, "20/ms": 20000,
		"2.5": 2.5, "10": 10, "7/sec": 7, "60/min": 1, "1/hour": 1.0 / 3600, "1/1m30s": 1.0 / 90,
	} {
		got, err := parseRateLimit(in)
		if err != nil || math.Abs(float64(got)-want) > 1e-9*want {
			t.Errorf("--limit %s: %v, %v; want %v per second", in, float64(got), err, want)
		}
	}
	for _, in := range []string{"inf", "Inf", "INF"} {
		if got, err := parseRateLimit(in); err != nil || got != rate.Inf {
			t.Errorf("--limit %s: %v, %v; want inf", in, got, err)
		}
	}
	for _, in := range []string{"", "x", "NaN", "-1", "0", "0/s", "-3/s", "10/", "10/x", "10/0s", "10/-1s", "/s",
		"inf/s", "1e400", " 1", "10/s/s", "1e308/ns"} {
		if got, err := parseRateLimit(in); err == nil {
			t.Errorf("--limit %q: %v, want an error", in, float64(got))
		}
	}
}

// startTimes returns the times, in seconds, that the commands appended to path, sorted.
func startTimes(t *testing.T, path string) []float64 {
	t.Helper()
	var times []float64
	for _, s := range readLines(t, path) {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("%s: %q is not a time", path, s)
		}
		times = append(times, f)
	}
	slices.Sort(times)
	return times
}

// Commands started by rate from several processes at once start no faster than the rate: in
// every window of the recorded start times, at most limit × its length + burst, give or take
// the margin for the time between a turn and its command's first instruction (a process
// start on a loaded machine; plus what this process was stalled meanwhile, and the run is
// made again when that is exceeded).
func TestRateSpacesStarts(t *testing.T) {
	t.Parallel()
	const (
		limit, burst  = 5.0, 1
		procs, rounds = 4, 4
		margin        = 250 * time.Millisecond
	)
	redistest.Retry(t, 3, func() error {
		bin, common, _, _, dir := cliSetup(t) // a limiter of the attempt's own
		starts := filepath.Join(dir, "starts")
		from := time.Now()
		var wg sync.WaitGroup
		for i := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					status, _, stderr := runCLI(t, bin, args(common, "rate", "spaced", "--limit", "5/s", "--burst", "1", "--",
						"sh", "-c", `date +%s.%N >> "$1"`, "sh", starts)...)
					if status != 0 {
						t.Errorf("process %d, round %d: status %d, want 0\n%s", i, r, status, stderr)
					}
				}
			}()
		}
		wg.Wait()
		to := time.Now()
		times := startTimes(t, starts)
		if len(times) != procs*rounds {
			t.Fatalf("%d commands ran, want %d", len(times), procs*rounds)
		}
		// Within span, n starts are at most limit × span + burst: each but the burst's waits
		// 1/limit after the one before. (With the whole run as the window, this bounds how
		// soon the last command starts.)
		stalled := redistest.Stalled(from, to)
		var errs []string
		for i := range times {
			for j := i + 1; j < len(times); j++ {
				allowed := margin + stalled
				if n, span := float64(j-i+1), times[j]-times[i]; n > limit*(span+allowed.Seconds())+burst {
					errs = append(errs, fmt.Sprintf("%v commands started within %.3fs: more than %v/s × (%.3fs + %v + %v stalled) + %d",
						n, span, limit, span, margin, stalled.Round(time.Millisecond), burst))
				}
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%d windows too full; %s", len(errs), strings.Join(errs[:min(3, len(errs))], "; "))
		}
		return nil
	})
}

// -n runs CMD only if the limiter allows it now, else exits with the conflict status;
// --timeout does not wait for a turn that would come after it, and waits for one before.
func TestRateNonblockAndTimeout(t *testing.T) {
	t.Parallel()
	bin, common, _, _, dir := cliSetup(t)
	// rateRun runs "distsync rate NAME FLAGS -- touch FILE" and reports whether FILE was made.
	rateRun := func(t *testing.T, file, name string, flags ...string) (status int, stderr string, took time.Duration, ran bool) {
		t.Helper()
		path := filepath.Join(dir, file)
		_ = os.Remove(path)
		begin := time.Now()
		a := append(args(common, "rate", name), flags...)
		status, _, stderr = runWithin(t, bin, append(a, "--", "touch", path)...)
		took = time.Since(begin)
		_, err := os.Stat(path)
		return status, stderr, took, err == nil
	}

	// An hour to the next token: the runs below, however slow, see none. Each case runs in
	// parallel with the others (they only look at the empty bucket), on a file of its own.
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		if status, stderr, _, ran := rateRun(t, "slow", "slow", "--limit", "1/h", "-n"); status != 0 || !ran {
			t.Fatalf("-n with a full bucket: status %d, ran %v; want 0 and the command run\n%s", status, ran, stderr)
		}
		for i, tc := range []struct {
			flags []string
			want  int
		}{
			{[]string{"--limit", "1/h", "-n"}, 75},
			{[]string{"--limit", "1/h", "--nonblock"}, 75},
			{[]string{"--limit", "1/h", "--timeout", "0"}, 75},
			{[]string{"--limit", "1/h", "-nE", "3"}, 3},
			{[]string{"--limit", "1/h", "-w", "2"}, 75},
			{[]string{"--every", "1h", "--timeout", "30s", "-E", "4"}, 4},
		} {
			t.Run(strings.ReplaceAll(strings.Join(tc.flags, " "), "/", " per "), func(t *testing.T) {
				t.Parallel()
				status, stderr, took, ran := rateRun(t, "slow"+strconv.Itoa(i), "slow", tc.flags...)
				if status != tc.want || ran {
					t.Errorf("rate %q with no token for an hour: status %d, ran %v; want %d and nothing run\n%s", tc.flags, status, ran, tc.want, stderr)
				}
				// A bound on a hang, well above a process's run on a loaded machine, and below
				// the wait for --timeout 30s that a turn beyond it must not cause.
				if took > 20*time.Second {
					t.Errorf("rate %q took %v: a turn beyond --timeout is refused at once", tc.flags, took)
				}
			})
		}
		t.Run("quiet", func(t *testing.T) {
			t.Parallel()
			if status, stderr, _, _ := rateRun(t, "slowq", "slow", "--limit", "1/h", "-n", "--quiet"); status != 75 || stderr != "" {
				t.Errorf("-n --quiet: status %d, stderr %q; want 75 and nothing", status, stderr)
			}
		})
	})

	// A turn 4 s away, within --timeout: rate waits for it, then runs CMD. The first took its
	// token after first began, so CMD runs 4 s after that at the earliest, however long the
	// processes took to start (less 50 ms: a file's time is kept on a coarser clock).
	t.Run("waits", func(t *testing.T) {
		t.Parallel()
		first := time.Now()
		if status, stderr, _, _ := rateRun(t, "soon1", "soon", "--limit", "1/4s"); status != 0 {
			t.Fatalf("first: status %d\n%s", status, stderr)
		}
		status, stderr, _, ran := rateRun(t, "soon2", "soon", "--limit", "1/4s", "-w", "25")
		if status != 0 || !ran {
			t.Errorf("a turn 4s away with -w 25: status %d, ran %v; want 0, run after about 4s\n%s", status, ran, stderr)
		} else if fi, err := os.Stat(filepath.Join(dir, "soon2")); err != nil {
			t.Fatal(err)
		} else if at := fi.ModTime().Sub(first); at < 4*time.Second-50*time.Millisecond {
			t.Errorf("a turn 4s away with -w 25: CMD ran %v after the first rate began, want 4s at least", at.Round(time.Millisecond))
		}
	})

	// --limit inf lets every call run at once.
	t.Run("unlimited", func(t *testing.T) {
		t.Parallel()
		for i := range 5 {
			if status, stderr, _, _ := rateRun(t, "inf"+strconv.Itoa(i), "unlimited", "--limit", "inf", "-n"); status != 0 {
				t.Errorf("--limit inf -n: status %d, want 0\n%s", status, stderr)
			}
		}
	})
}

// A signal while rate waits ends the wait (128+N) and gives the turn back before distsync
// exits: the bucket has its token again.
func TestRateSignalGivesTheTurnBack(t *testing.T) {
	t.Parallel()
	bin, common, prefix, b, dir := cliSetup(t)
	ran := filepath.Join(dir, "ran")
	// A turn every 10 minutes: the second's turn does not come before the signal, however
	// slowly the processes start.
	lim, err := rate.NewLimiter(b.Pod(t, prefix).H, "sig", rate.Every(10*time.Minute), 1)
	if err != nil {
		t.Fatal(err)
	}
	tokens := func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), cliLimit)
		defer cancel()
		tok, err := lim.Tokens(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	if status, _, stderr := runCLI(t, bin, args(common, "rate", "sig", "--limit", "1/10m", "--", "true")...); status != 0 {
		t.Fatalf("first: status %d\n%s", status, stderr)
	}
	p := start(t, bin, args(common, "rate", "sig", "--limit", "1/10m", "--", "touch", ran)...)
	// The second reserved its turn: the bucket owes a token (the first alone leaves >= 0).
	if !redistest.Eventually(cliLimit, func() bool { return tokens() < 0 }) {
		t.Fatalf("the second rate did not reserve its turn\n%s", p.stderr.String())
	}
	// Redis has made the reservation; let distsync read the reply and go to sleep. Nothing
	// outside shows that it has: a signal that comes before (a loaded machine) is answered
	// once the reply is read, which rate's own tests check, and the checks below hold the same.
	time.Sleep(time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if status := p.wait(t); status != 128+int(syscall.SIGTERM) {
		t.Errorf("SIGTERM while waiting: status %d, want %d\n%s", status, 128+int(syscall.SIGTERM), p.stderr.String())
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the command ran although distsync was ended before its turn")
	}
	// Without the give-back, the bucket would owe a token until 10 minutes after the first.
	if tok := tokens(); tok < 0 {
		t.Errorf("tokens %v after the waiter was ended: its turn was not given back", tok)
	}
}

// CMD gets DISTSYNC_NAME and no DISTSYNC_TOKEN (not even an outer distsync's), runs with -c,
// and its status is distsync's.
func TestRateCommandEnvironmentAndStatus(t *testing.T) {
	t.Parallel()
	bin, common, _, _, _ := cliSetup(t)
	p := start(t, "/usr/bin/env", append([]string{"DISTSYNC_TOKEN=7", bin}, args(common, "rate", "env", "--limit", "inf", "--",
		"sh", "-c", `echo "$DISTSYNC_NAME ${DISTSYNC_TOKEN-none}"; exit 5`)...)...)
	if status := p.wait(t); status != 5 || p.stdout.String() != "env none\n" {
		t.Errorf("status %d, stdout %q; want 5 and \"env none\"\n%s", status, p.stdout.String(), p.stderr.String())
	}
	status, stdout, stderr := runCLI(t, bin, args(common, "rate", "env", "--every", "1ms", "-c", `echo "a $DISTSYNC_NAME"`)...)
	if status != 0 || stdout != "a env\n" {
		t.Errorf("rate -c: status %d, stdout %q\n%s", status, stdout, stderr)
	}
	if status, _, stderr := runCLI(t, bin, args(common, "rate", "env", "--limit", "inf", "--", "distsync-no-such-command")...); status != 127 {
		t.Errorf("CMD not found: status %d, want 127\n%s", status, stderr)
	}
}

// Every malformed rate flag, value and name is refused with exit status 64 and one line on
// stderr that names it, and nothing is written to Redis (as TestBadInputIsOneLineAndWritesNothing).
func TestRateBadInputIsOneLineAndWritesNothing(t *testing.T) {
	t.Parallel()
	bin, common, prefix, b, _ := cliSetup(t)
	for _, tc := range []struct {
		args  []string
		names string
	}{
		{args(common, "rate", "n", "true"), "--limit"},
		{args(common, "rate", "n", "--burst", "2", "true"), "--limit"},
		{args(common, "rate", "--limit", "-1", "n", "true"), "--limit"},
		{args(common, "rate", "--limit=-5/s", "n", "true"), "--limit"},
		{args(common, "rate", "--limit", "NaN", "n", "true"), "--limit"},
		{args(common, "rate", "--limit", "often", "n", "true"), "--limit"},
		{args(common, "rate", "--limit", "10/fortnight", "n", "true"), "--limit"},
		{args(common, "rate", "--limit", "10/0s", "n", "true"), "--limit"},
		{args(common, "rate", "--limit", "0", "n", "true"), "--limit"},
		{args(common, "rate", "--limit", "", "n", "true"), "--limit"},
		{args(common, "rate", "n", "true", "--limit", "1/s"), "--limit"}, // CMD starts at "true": --limit is its argument
		{args(common, "rate", "n", "--limit"), "--limit"},
		{args(common, "rate", "--limit", "1/s", "--burst", "-1", "n", "true"), "--burst"},
		{args(common, "rate", "--limit", "1/s", "--burst", "0", "n", "true"), "--burst"},
		{args(common, "rate", "--limit", "1/s", "--burst", "many", "n", "true"), "--burst"},
		{args(common, "rate", "--limit", "1/s", "--burst", "1.5", "n", "true"), "--burst"},
		{args(common, "rate", "--limit", "1/s", "--tokens", "2", "n", "true"), "--tokens"},
		{args(common, "rate", "--limit", "1/s", "--tokens", "0", "n", "true"), "--tokens"},
		{args(common, "rate", "--every", "0", "n", "true"), "--every"},
		{args(common, "rate", "--every", "soon", "n", "true"), "--every"},
		{args(common, "rate", "--every", "1s", "--limit", "1/s", "n", "true"), "--every"},
		{args(common, "rate", "--limit", "1/s", "", "true"), "NAME"},
		{args(common, "rate", "--limit", "1/s"), "NAME"},
		{args(common, "rate", "--limit", "1/s", "n"), "CMD"},
		{args(common, "rate", "--limit", "1/s", "--ttl", "5s", "n", "true"), "--ttl"},
		{args(common, "rate", "--limit", "1/s", "--identity", "pod", "n", "true"), "--identity"},
		{args(common, "rate", "--limit", "1/s", "-s", "n", "true"), "-s"},
		{args(common, "rate", "--limit", "1/s", "--also", "m", "n", "true"), "--also"},
		{args(common, "rate", "--limit", "1/s", "-w", "NaN", "n", "true"), "-w"},
		{args(common, "rate", "--limit", "1/s", "-E", "256", "n", "true"), "-E"},
		{args(common, "rate", "--limit", "1/s", "--prefix", "a{b", "n", "true"), "--prefix"},
		{[]string{"rate", "--limit", "1/s", "n", "true"}, "--redis"},
	} {
		wantUsageError(t, bin, b, prefix, tc.args, tc.names)
	}
}

// "distsync help rate", "distsync rate --help" and "-h" print rate's help on stdout with exit
// status 0: every flag rate takes, and none of those of a claim that it does not take.
func TestRateHelp(t *testing.T) {
	t.Parallel()
	bin := cliBin(t, redistest.Open(t, redistest.Standalone))
	var first string
	for _, a := range [][]string{{"help", "rate"}, {"rate", "--help"}, {"rate", "-h"}, {"rate", "--limit", "1/s", "--help"}} {
		status, stdout, stderr := runCLI(t, bin, a...)
		if status != 0 || stderr != "" || !strings.HasPrefix(stdout, "Usage: distsync rate") {
			t.Errorf("distsync %q: status %d, stderr %q, stdout %.40q; want 0, nothing, rate's usage", a, status, stderr, stdout)
		}
		if first == "" {
			first = stdout
		} else if stdout != first {
			t.Errorf("distsync %q prints another help than distsync help rate", a)
		}
	}
	fs := runFlags("rate", &config{})
	for _, d := range fs.defs {
		if !strings.Contains(first, "--"+d.long) {
			t.Errorf("help rate lacks --%s", d.long)
		}
		if d.short != 0 && !strings.Contains(first, "-"+string(d.short)+", --"+d.long) {
			t.Errorf("help rate lacks -%c", d.short)
		}
	}
	for _, cmd := range []string{"lock", "sem", "once"} {
		for _, d := range runFlags(cmd, &config{}).defs {
			if fs.lookupLong(d.long) == nil && strings.Contains(first, "--"+d.long+" ") {
				t.Errorf("help rate lists --%s, which it does not take", d.long)
			}
		}
	}
	for _, want := range []string{"holds nothing", "DISTSYNC_NAME", "75"} {
		if !strings.Contains(first, want) {
			t.Errorf("help rate does not say %q", want)
		}
	}
	var out, errOut bytes.Buffer
	if status := cli([]string{"help"}, &out, &errOut); status != 0 || !strings.Contains(out.String(), "distsync rate") {
		t.Errorf("help: status %d; the overview does not list rate", status)
	}
}

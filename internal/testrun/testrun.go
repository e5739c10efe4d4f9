// Package testrun is what every test binary of distsync shares about its own run: which tier
// it belongs to, how many of its tests run at once, and the one line it prints at its end to
// say what it ran on and what it skipped.
//
// # Tiers
//
// The README's command, go test -race ./..., runs the short tier: every behaviour test of every
// primitive, on the embedded miniredis, a real redis-server and a Cluster. The long tier (fault
// injection with real processes, failover under Sentinel and Cluster, deployments: ACLs, TLS,
// script flushes) runs when the environment variable DISTSYNC_LONG is 1:
//
//	DISTSYNC_LONG=1 go test -race ./...
//
// A package or test of the long tier reads the variable, so go test's cache keys on it there
// and only there: the second command reruns the long tier and takes the short tier's results
// from the cache.
//
// # The line a package prints
//
// go test hides a passing package's output unless -v is given. So that go test ./... says what
// each package ran on, [Main] writes its line to the go command's own standard error when that
// is a terminal or a pipe (never a regular file, whose offset the go command owns), and to the
// test binary's standard output otherwise, where -v and a failure show it.
package testrun

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// EnvLong names the environment variable that, set to 1, runs the long tier.
const EnvLong = "DISTSYNC_LONG"

// LongCommand is the command that runs the long tier, as the summaries name it.
const LongCommand = EnvLong + "=1 go test -race ./..."

// DefaultParallel is how many tests of one binary run at once when -test.parallel is not given
// (go test's default is GOMAXPROCS, 2 on the machines CI uses). distsync's tests spend their
// time waiting for leases, timers and Redis, not computing, and each isolates itself by key
// prefix, so more of them than cores fit; a test that needs the process or a shared server to
// itself does not call t.Parallel and then runs alone, before the parallel ones.
const DefaultParallel = 16

// Long reports whether the long tier is to run (DISTSYNC_LONG=1).
func Long() bool { return os.Getenv(EnvLong) == "1" }

// Main runs the tests of m and exits. It first sets -test.parallel to [DefaultParallel] unless
// the command line gave it; after the run it prints the package's line: the import path,
// then what describe returns (nil: "unit tests, no Redis").
func Main(m *testing.M, describe func() string) {
	Exit(Run(m, describe))
}

// Run is [Main] without the exit: it returns m.Run's code, for a TestMain that has more to
// stop before it exits.
func Run(m *testing.M, describe func() string) int {
	SetParallel(DefaultParallel)
	code := m.Run()
	if flagValue("test.fuzzworker") == "true" || flagValue("test.list") != "" {
		return code // a fuzzing worker, or a listing: the coordinator's line is the one
	}
	what := "unit tests, no Redis"
	if describe != nil {
		what = describe()
	}
	Report(fmt.Sprintf("%s: %s", PackagePath(), what))
	return code
}

// SetParallel sets -test.parallel to n unless the command line gave it, or asked for fuzzing
// (where -parallel counts fuzzing processes, GOMAXPROCS by default). Call it from TestMain,
// before m.Run.
func SetParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && flagValue("test.fuzz") == "" && flagValue("test.fuzzworker") != "true" {
		_ = flag.Set("test.parallel", fmt.Sprint(n))
	}
}

// flagValue returns the value of the flag called name, or "" if there is none.
func flagValue(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// MainLong is [Main] for a package of the long tier: unless DISTSYNC_LONG=1 it runs no test
// and its line says so; what names the suite. With DISTSYNC_LONG=1 it calls run, the
// package's own main (which exits).
//
// Without DISTSYNC_LONG=1 it does not call m.Run, so that go test keeps no result of the run:
// go test's cache sees the environment a test binary reads only from m.Run on, and this
// read comes before it, so a cached run with every test skipped would be taken for the long
// tier's too, which then ran none of the package's tests (as CI did until this was found).
func MainLong(m *testing.M, what string, run func(m *testing.M)) {
	if Long() {
		run(m)
		return
	}
	if !flag.Parsed() {
		flag.Parse()
	}
	if flagValue("test.list") == "" {
		Report(fmt.Sprintf("%s: long tier (%s): NOT RUN; %s runs it", PackagePath(), what, LongCommand))
	}
	Exit(0)
}

// Report prints one line where go test ./... shows it (see the package documentation).
func Report(line string) {
	if testing.Verbose() {
		fmt.Println(line)
		return
	}
	if f := goStderr(); f != nil {
		fmt.Fprintln(f, line)
		_ = f.Close()
		return
	}
	fmt.Println(line)
}

// goStderr opens the standard error of the go command that started this binary, if that is
// the parent and its standard error is a terminal or a pipe.
func goStderr() *os.File {
	ppid := os.Getppid()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", ppid))
	if err != nil || filepath.Base(exe) != "go" {
		return nil
	}
	path := fmt.Sprintf("/proc/%d/fd/2", ppid)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&(os.ModeCharDevice|os.ModeNamedPipe) == 0 {
		return nil
	}
	own, err := os.Stderr.Stat()
	if err == nil && os.SameFile(own, fi) {
		return nil // the go command's stderr is ours: plain printing shows
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil
	}
	return f
}

// PackagePath returns the import path of the package under test, read from the binary's build
// information (the path of its main package is that of the package, with ".test" appended).
func PackagePath() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path != "" {
		return strings.TrimSuffix(bi.Path, ".test")
	}
	return strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
}

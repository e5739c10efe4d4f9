package redistest

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/distsync/distsync/internal/testrun"
)

// What a test binary ran on, counted while it runs and printed by [Main] as its one line
// (internal/testrun). A backend counts the tests that opened it and were not skipped; what a
// test started for itself (a server of its own, a Sentinel topology, a Cluster with replicas)
// is counted by kind; a skip the harness decided is counted by its reason.

var seen = struct {
	sync.Mutex
	ran     map[string]int // backend name -> tests run on it
	skipped map[string]int // backend name -> tests on it that skipped themselves
	own     map[string]int // kind of topology a test started for itself -> how many
	reasons map[string]int // a skip the harness decided -> how many tests
	order   []string       // reasons, in the order first seen
}{ran: map[string]int{}, skipped: map[string]int{}, own: map[string]int{}, reasons: map[string]int{}}

// noteBackend counts tb on backend name when tb ends.
func noteBackend(tb testing.TB, name string) {
	tb.Cleanup(func() {
		seen.Lock()
		defer seen.Unlock()
		if tb.Skipped() {
			seen.skipped[name]++
		} else {
			seen.ran[name]++
		}
	})
}

// noteOwn counts a topology of kind that a test started for itself.
func noteOwn(kind string) {
	seen.Lock()
	defer seen.Unlock()
	seen.own[kind]++
}

// skip skips tb for reason, counting it under reason; msg is what tb logs.
func skip(tb testing.TB, reason, msg string) {
	tb.Helper()
	seen.Lock()
	if seen.reasons[reason] == 0 {
		seen.order = append(seen.order, reason)
	}
	seen.reasons[reason]++
	seen.Unlock()
	tb.Skip(msg)
}

// Long skips tb unless the long tier runs (DISTSYNC_LONG=1; internal/testrun): a test that
// starts topologies of its own or injects faults for long, which the README's go test -race
// ./... leaves to the second command. why says what makes it long.
func Long(tb testing.TB, why string) {
	tb.Helper()
	if testrun.Long() {
		return
	}
	skip(tb, "long tier: "+testrun.LongCommand+" runs them",
		fmt.Sprintf("redistest: long tier (%s): %s runs it", why, testrun.LongCommand))
}

// describe returns what this binary ran on, for its line.
func describe() string {
	seen.Lock()
	defer seen.Unlock()
	var on []string
	for _, name := range All {
		n := seen.ran[name]
		if n == 0 {
			continue
		}
		switch name {
		case Mini:
			on = append(on, fmt.Sprintf("miniredis (%d)", n))
		case Standalone:
			on = append(on, fmt.Sprintf("%s standalone (%d)", ServerName(), n))
		case ClusterB:
			on = append(on, fmt.Sprintf("%s Cluster of 3 masters (%d)", ServerName(), n))
		}
	}
	kinds := make([]string, 0, len(seen.own))
	for k := range seen.own {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		on = append(on, fmt.Sprintf("%s (%d)", k, seen.own[k]))
	}
	var b strings.Builder
	if len(on) == 0 {
		b.WriteString("ran on no Redis")
	} else {
		b.WriteString("ran on " + strings.Join(on, ", "))
	}
	if seen.ran[Mini] > 0 && seen.ran[Standalone] == 0 && seen.ran[ClusterB] == 0 && seen.reasons[reasonNoRedis] > 0 {
		b.WriteString(" ONLY")
	}
	var skips []string
	for _, r := range seen.order {
		skips = append(skips, fmt.Sprintf("%d: %s", seen.reasons[r], r))
	}
	for _, name := range All {
		if n := seen.skipped[name]; n > 0 {
			skips = append(skips, fmt.Sprintf("%d on %s by the test's own reason (go test -v shows it)", n, name))
		}
	}
	if len(skips) > 0 {
		b.WriteString("; skipped " + strings.Join(skips, "; "))
	}
	return b.String()
}

// reasonNoRedis is the skip of a test that needs a server binary that is not there.
const reasonNoRedis = "no redis-server/redis-cli on PATH: install them (Debian: apt-get install redis-server) to run the tests on a real Redis and a Cluster"

// ServerName names the server binary the harness runs, and its version ("redis-server
// 7.0.15").
func ServerName() string {
	bin, err := ServerBin()
	if err != nil {
		return "redis-server"
	}
	name := filepath.Base(bin)
	if v, err := binVersion(bin); err == nil {
		return name + " " + v.String()
	}
	return name
}

// haveBinaries reports whether the server binary and the CLI can be run.
func haveBinaries() bool {
	_, err1 := ServerBin()
	_, err2 := CLIBin()
	return err1 == nil && err2 == nil
}

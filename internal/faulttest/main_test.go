// Package faulttest drives real worker processes (this test binary, re-executed) against real
// redis-server processes, injects faults — a holder killed or stopped, connections killed,
// Redis restarted empty or paused, one primary of a quorum down, a waiter killed in the
// queue, random cancellation — and checks the recorded history afterwards: mutual exclusion
// or capacity up to told losses, fencing, liveness within a stated bound, the order in which
// waiters are served, what election observers saw, what waitgroup Waits reported, what the
// once primitives ran and returned, and what is left in Redis and in the process table at
// the end. In every fault some worker begins its first call while the fault is in effect.
//
// It is of the long tier (internal/testrun): DISTSYNC_LONG=1 go test -race ./... runs it
// (DISTSYNC_REQUIRE_REDIS=1 makes a missing redis-server a failure). FAULTTEST_FIGURES=<file>
// appends the measured figures there as JSON lines. FAULTTEST_KEEP=<dir> keeps the histories
// of the scenarios that failed there (FAULTTEST_KEEP_ALL=1: of every scenario);
// FAULTTEST_VERBOSE=1 makes every worker log its Handle's messages and observer events to its
// stderr, which is kept with them.
package faulttest

import (
	"os"
	"testing"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/testrun"
)

// scenarioParallel is how many scenarios run at once when -test.parallel is not given. They
// mostly wait for leases to run out, so more of them than cores fit; each one's bounds are
// far above what that load costs.
const scenarioParallel = 6

func TestMain(m *testing.M) {
	if raw := os.Getenv(envWorker); raw != "" {
		testrun.Exit(workerMain(raw))
	}
	testrun.SetParallel(scenarioParallel)
	code := testrun.Run(m, func() string {
		if !testrun.Long() {
			return "the checker's unit tests; the fault scenarios are the long tier: " + testrun.LongCommand + " runs them"
		}
		return "the checker's unit tests, and the fault scenarios (long tier) on " + redistest.ServerName()
	})
	redistest.StopMini()
	if storeProc != nil {
		storeProc.Stop()
	}
	if clusterB != nil {
		clusterB.Cluster.Stop()
	}
	testrun.Exit(code)
}

// long skips t, a fault scenario, unless the long tier runs: every scenario starts real
// worker processes and servers, and waits out leases.
func long(t *testing.T) {
	t.Helper()
	redistest.Long(t, "fault injection with real processes")
}

package redistest_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/distsync/distsync/internal/redistest"
)

// A stall of the process that serves miniredis is a stall of the tests that use it: Stalled
// reports a SIGSTOP of that process, as it reports one of the test's own.
func TestStalledCountsTheMiniredisProcess(t *testing.T) {
	b := redistest.Open(t, redistest.Mini) // starts the process
	_ = b.Addrs()
	pid := redistest.MiniPID()
	if pid == 0 {
		t.Fatal("no miniredis process")
	}
	const pause = 300 * time.Millisecond
	for attempt := 0; ; attempt++ {
		from := time.Now()
		time.Sleep(50 * time.Millisecond) // its watcher ticks
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // its watcher wakes and notes the stall
		to := time.Now()
		got := redistest.Stalled(from, to)
		if got >= pause*2/3 {
			return
		}
		if attempt == 4 {
			t.Fatalf("Stalled = %v around a %v SIGSTOP of the miniredis process, want about that", got, pause)
		}
	}
}

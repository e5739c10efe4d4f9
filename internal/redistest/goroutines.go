package redistest

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// libraryGoroutines counts the goroutines running distsync code (its internal packages and
// primitives), not the test's own, not rueidis' connection goroutines.
func libraryGoroutines() (int, string) { return goroutines(false) }

func goroutines(withTests bool) (int, string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	var dump strings.Builder
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "github.com/distsync/distsync/") {
			continue
		}
		if !withTests && (strings.Contains(g, "_test.") || strings.Contains(g, "distsync/internal/redistest.")) {
			continue
		}
		count++
		dump.WriteString(g)
		dump.WriteString("\n\n")
	}
	return count, dump.String()
}

// LibraryStacks returns the stacks of the goroutines running distsync code, for a test that
// reports a hang.
func LibraryStacks() string {
	_, dump := goroutines(true)
	return dump
}

// LibraryGoroutines returns the number of goroutines running distsync code.
func LibraryGoroutines() int {
	n, _ := libraryGoroutines()
	return n
}

// WaitGoroutines waits (at most limit) until no more than want goroutines run distsync code,
// and fails the test with their stacks if they do not go away.
func WaitGoroutines(tb testing.TB, want int, limit time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for {
		n, dump := libraryGoroutines()
		if n <= want {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d distsync goroutines still running, want at most %d:\n%s", n, want, dump)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Eventually polls cond every 10ms until it is true or limit passes, and reports whether it
// became true. Tests use it to wait for an asynchronous effect, never to assert timing.
func Eventually(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Returns fails the test unless ch yields a nil error within limit.
func Returns(tb testing.TB, what string, ch <-chan error, limit time.Duration) {
	tb.Helper()
	select {
	case err := <-ch:
		if err != nil {
			tb.Fatalf("%s: %v", what, err)
		}
	case <-time.After(limit):
		tb.Fatalf("%s did not return within %v", what, limit)
	}
}

// Blocks fails the test if ch yields anything within d.
func Blocks(tb testing.TB, what string, ch <-chan error, d time.Duration) {
	tb.Helper()
	select {
	case err := <-ch:
		tb.Fatalf("%s returned (%v) while it should wait", what, err)
	case <-time.After(d):
	}
}

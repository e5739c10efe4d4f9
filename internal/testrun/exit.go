package testrun

import (
	"os"
	"syscall"
	"testing"
)

// Exit ends the test binary with code, as os.Exit does, less a second: a binary built with
// -race that exits with 0 runs ThreadSanitizer's finaliser, which first sleeps for GORACE's
// atexit_sleep_ms, 1000 by default, whenever other threads live (a Go program's runtime
// goroutines always do). Each of the thirty test binaries of go test -race ./... would hold
// one of go test's slots that second longer.
//
// Exit keeps what the finaliser decides: a binary in which a race was reported, during its
// tests or after them, exits with 66 (the finaliser's default exit code). It leaves the exit
// to os.Exit when GORACE is set (its settings are the user's) and when coverage is on (which
// is written at exit).
func Exit(code int) {
	if code == 0 && raceEnabled && os.Getenv("GORACE") == "" && testing.CoverMode() == "" {
		if raceErrors() > 0 {
			os.Exit(66)
		}
		syscall.Exit(0)
	}
	os.Exit(code)
}

// ChildEnv is what to add to the environment of a child process built with -race that does
// not end through Exit (the distsync command) so that it, too, exits without the finaliser's
// second; nothing if GORACE is set.
func ChildEnv() []string {
	if os.Getenv("GORACE") != "" {
		return nil
	}
	return []string{"GORACE=atexit_sleep_ms=0"}
}

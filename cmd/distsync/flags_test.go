//go:build unix

package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The parser of lock, sem and once: flags anywhere before CMD, GNU long flags and flock's
// short ones, CMD after "--" or at the first argument after NAME that is not a flag.
func TestParseRunArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd, in     string
		names, argv string
		check       func(c config) bool
	}{
		{"lock", "--ttl 5s n -- ls -l", "n", "ls -l", func(c config) bool { return c.ttl == 5*time.Second }},
		{"sem", "n --size 2 --weight=1 -- cmd", "n", "cmd", func(c config) bool { return c.size == 2 && c.weight == 1 }},
		{"lock", "--quiet n ls -l --ttl 1s", "n", "ls -l --ttl 1s", func(c config) bool { return c.quiet && c.ttl == 0 }},
		{"lock", "n --quiet -- -x", "n", "-x", func(c config) bool { return c.quiet && !c.exclusive }},
		{"lock", "-- cmd", "", "cmd", nil},
		{"lock", "-n n true", "n", "true", func(c config) bool { return c.timeout == 0 }},
		{"lock", "--nonblock n true", "n", "true", func(c config) bool { return c.timeout == 0 }},
		{"lock", "-w 3 n true", "n", "true", func(c config) bool { return c.timeout == 3*time.Second }},
		{"lock", "-w2.5 n true", "n", "true", func(c config) bool { return c.timeout == 2500*time.Millisecond }},
		{"lock", "-nE 3 n true", "n", "true", func(c config) bool { return c.timeout == 0 && c.conflictExit == 3 }},
		{"lock", "-E3 -sx n true", "n", "true", func(c config) bool { return c.conflictExit == 3 && c.shared && c.exclusive }},
		{"lock", "n -c echo", "n", "", func(c config) bool { return c.shellCmd == "echo" }},
		{"lock", "--conflict-exit-code 0 n true", "n", "true", func(c config) bool { return c.conflictExit == 0 }},
		{"once", "k --keep 1m --forget", "k", "", func(c config) bool { return c.keep == time.Minute && c.forget }},
		{"lock", "n - x", "n", "- x", nil},
	} {
		c := config{ttl: 0, timeout: -1, conflictExit: 75}
		names, argv, _, err := runFlags(tc.cmd, &c).parse(strings.Fields(tc.in), 1)
		if err != nil {
			t.Errorf("%s %q: %v", tc.cmd, tc.in, err)
			continue
		}
		if got := [2]string{strings.Join(names, " "), strings.Join(argv, " ")}; got != [2]string{tc.names, tc.argv} {
			t.Errorf("%s %q: names, CMD = %q, want %q", tc.cmd, tc.in, got, [2]string{tc.names, tc.argv})
		}
		if tc.check != nil && !tc.check(c) {
			t.Errorf("%s %q: config %+v", tc.cmd, tc.in, c)
		}
	}
}

// Every malformed flag or value is one line that names the flag as the user spelled it.
func TestParseErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"--bogus n true":                 "unknown flag --bogus",
		"-bogus n true":                  "unknown flag -b",
		"-timeout 3 n true":              "unknown flag -timeout (long flags take two dashes: --timeout)",
		"-quiet n true":                  "unknown flag -quiet (long flags take two dashes: --quiet)",
		"-nZ n true":                     "unknown flag -Z in -nZ",
		"--timeout":                      "--timeout needs a value (D)",
		"-w":                             "-w needs a value (D)",
		"--timeout soon n true":          "--timeout soon: not a duration (300ms, 1m30s) nor seconds (2.5)",
		"-w NaN n true":                  "-w NaN: not a number of seconds",
		"--quiet=yes n true":             "--quiet takes no value",
		"-E 256 n true":                  "-E 256: not an integer from 0 to 255",
		"--conflict-exit-code -1 n true": "--conflict-exit-code -1: not an integer from 0 to 255",
		"--size 0 n true":                "unknown flag --size", // lock has no --size
		"--kill-grace=-1s n true":        "--kill-grace -1s: negative duration",
		"--prefix":                       "--prefix needs a value (P)",
	} {
		c := config{}
		_, _, _, err := runFlags("lock", &c).parse(strings.Fields(in), 1)
		var ue usageError
		if !errors.As(err, &ue) || err.Error() != want {
			t.Errorf("lock %q: error %v, want %q", in, err, want)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("lock %q: error of more than one line: %q", in, err)
		}
	}
	for _, in := range []string{"-h", "--help", "n -h", "-nh"} {
		if _, _, _, err := runFlags("lock", &config{}).parse(strings.Fields(in), 1); !errors.Is(err, errHelp) {
			t.Errorf("lock %q: %v, want help", in, err)
		}
	}
}

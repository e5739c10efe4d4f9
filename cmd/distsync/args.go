//go:build unix

package main

// This file: the flags and arguments of lock, sem, once and rate.

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/rate"
)

// config is what the flags and arguments of lock, sem, once and rate say.
type config struct {
	command string   // lock, sem, once or rate
	name    string   // NAME, or KEY for once
	names   []string // lock: every NAME, name first (several with --also or --all)
	argv    []string // CMD and its arguments (sh -c CMDLINE for -c)

	redis        redisTarget
	prefix       string
	ttl          time.Duration
	timeout      time.Duration // < 0: wait until acquired; 0: try once
	conflictExit int64
	shellCmd     string // -c
	killGrace    time.Duration
	foreground   bool
	quiet        bool
	verbose      bool   // say what distsync does, on stderr
	identity     string // "": the library's default, host:PID

	fair, shared, exclusive bool     // lock
	also                    []string // lock --also, in order
	all                     bool     // lock --all: every argument before "--" is a NAME
	size, weight            int64    // sem
	keep                    time.Duration
	forget                  bool
	hold                    bool // lock, sem --hold: no CMD; hold until stdin ends

	// rate: the limit (--limit or --every), the burst and the tokens CMD takes.
	limit      rate.Limit
	limitFlag  string // the flag that gave the limit ("--limit" or "--every"), "" if none
	limitTwice bool   // both --limit and --every were given
	burst      int64
	tokens     int64
}

// shellPath is the shell that runs -c's command line (flock -c runs $SHELL, or /bin/sh: a
// login shell of the user's choice may not read a command line as sh does).
const shellPath = "/bin/sh"

// parseArgs reads the flags and arguments of command. It returns ok false, with the status
// to exit with, when distsync should not go on (a usage error, or help printed). Nothing has
// been sent to Redis then.
func parseArgs(command string, args []string, stdout, stderr io.Writer) (cfg config, status int, ok bool) {
	cfg = config{command: command, redis: redisTarget{url: envRedis()}, prefix: distsync.DefaultKeyPrefix, ttl: distsync.DefaultLeaseTTL,
		timeout: -1, conflictExit: defaultConflictExit, killGrace: defaultKillGrace, weight: 1, burst: 1, tokens: 1}
	fs := runFlags(command, &cfg)
	bad := func(format string, a ...any) (config, int, bool) {
		return cfg, badUsage(stderr, command, fmt.Errorf(format, a...)), false
	}
	names, argv, _, err := fs.parse(args, 1)
	switch {
	case errors.Is(err, errHelp):
		fmt.Fprint(stdout, helpOf(command))
		return cfg, exitOK, false
	case err != nil && command != "lock" && (err.Error() == "unknown flag --also" || err.Error() == "unknown flag --all"):
		return bad("%v: several names are for the mutex lock only (distsync lock)", err)
	case err != nil:
		return cfg, badUsage(stderr, command, err), false
	}
	noun := "NAME"
	if command == "once" {
		noun = "KEY"
	}
	cmdless := cfg.forget || cfg.hold
	switch {
	case len(names) == 0:
		return bad("missing %s", noun)
	case names[0] == "":
		return bad("empty %s", noun)
	case len(names[0]) > maxName:
		return bad("%s of %d bytes: at most %d (every key and message of the claim carries it)", noun, len(names[0]), maxName)
	case cfg.forget && (len(argv) > 0 || cfg.shellCmd != ""):
		return bad("--forget takes no CMD: distsync once --forget %s", names[0])
	case cfg.hold && (len(argv) > 0 || cfg.shellCmd != ""):
		return bad("--hold takes no CMD: it holds %s until its standard input ends (see \"Holding across lines\" in docs/command.md)", shownValue(names[0]))
	case cmdless:
		// --forget and --hold run no CMD: the checks below the CMD's are theirs too.
	case cfg.shellCmd != "" && len(argv) > 0:
		return bad("both -c and CMD: -c %s runs instead of %s", shownValue(cfg.shellCmd), shownValue(argv[0]))
	case cfg.shellCmd == "" && len(argv) == 0 && cfg.all:
		return bad("missing CMD: with --all, every argument before -- is a NAME: distsync lock --all %s -- CMD [ARGS...]", strings.Join(shownAll(names), " "))
	case cfg.shellCmd == "" && len(argv) == 0:
		return bad("missing CMD: distsync %s [flags] %s [--] CMD [ARGS...], or -c 'COMMAND LINE'", command, names[0])
	}
	switch {
	case cfg.redis.url == "":
		return bad("no Redis: give --redis URL or set DISTSYNC_REDIS_URL (every machine must use the same Redis, so there is no default)")
	case cfg.redis.check() != nil: // --redis was checked, not DISTSYNC_REDIS_URL, nor the TLS files
		return bad("%v", redisProblem(cfg.redis))
	case strings.ContainsAny(cfg.prefix, "{}"):
		return bad("--prefix %s: must not contain '{' or '}'", shownValue(cfg.prefix))
	case cfg.prefix == "":
		return bad("--prefix '': give a prefix, so that distsync's keys can be told from the others' (default %q)", distsync.DefaultKeyPrefix)
	case cfg.ttl < distsync.MinLeaseTTL:
		return bad("--ttl %v: must be at least %v", cfg.ttl, distsync.MinLeaseTTL)
	case cfg.ttl > maxTTL:
		return bad("--ttl %v: at most %v (a distsync killed with SIGKILL keeps the claim that long)", cfg.ttl, maxTTL)
	case cfg.quiet && cfg.verbose:
		return bad("--quiet and --verbose (-v) exclude one another")
	case command == "lock" && btoi(cfg.fair)+btoi(cfg.shared)+btoi(cfg.exclusive) > 1:
		return bad("--fair, --shared (-s) and --exclusive (-x) exclude one another")
	case command == "once" && cfg.timeout == 0 && !cfg.forget:
		return bad("--timeout 0 does not apply to once, which has no try-once form: give the longest wait for the result")
	case command == "sem" && cfg.size < 1:
		return bad("--size N is required")
	case command == "sem" && cfg.weight > cfg.size:
		return bad("--weight %d: must be 1 to --size (%d)", cfg.weight, cfg.size)
	case command == "rate" && cfg.limitTwice:
		return bad("--limit and --every exclude one another: give one rate")
	case command == "rate" && cfg.limitFlag == "":
		return bad("--limit R is required (10/s, 100/m, 5/h, 3/500ms, or inf), or --every D")
	case command == "rate" && cfg.tokens > cfg.burst && cfg.limit != rate.Inf:
		return bad("--tokens %d: more than --burst (%d), so CMD could never run", cfg.tokens, cfg.burst)
	}
	if command == "lock" {
		cfg.names = append(names, cfg.also...)
		if err := checkNames(cfg); err != nil {
			return bad("%v", err)
		}
	}
	cfg.name, cfg.argv = names[0], argv
	if cfg.hold {
		return cfg, exitOK, true
	}
	if cfg.shellCmd != "" {
		cfg.argv = []string{shellPath, "-c", cfg.shellCmd}
	}
	return cfg, exitOK, true
}

// Bounds of what a run command takes: a NAME is in every key and message of its claim, and a
// claim whose distsync was killed with SIGKILL is kept for the lease (Consul's sessions have
// the same bound on their TTL).
const (
	maxName = 1024
	maxTTL  = 24 * time.Hour
)

// checkNames checks lock's names: several (--also, --all) only for the mutex lock, none given
// twice, none empty, and none with a newline, which DISTSYNC_NAMES separates them with.
func checkNames(cfg config) error {
	if len(cfg.names) < 2 {
		return nil
	}
	switch {
	case cfg.fair:
		return errors.New("--fair takes one NAME: several names (--also, --all) are for the mutex lock only")
	case cfg.shared || cfg.exclusive:
		return errors.New("--shared and --exclusive take one NAME: several names (--also, --all) are for the mutex lock only")
	}
	seen := make(map[string]bool, len(cfg.names))
	for _, n := range cfg.names {
		switch {
		case n == "":
			return errors.New("empty NAME")
		case len(n) > maxName:
			return fmt.Errorf("NAME of %d bytes: at most %d", len(n), maxName)
		case seen[n]:
			return fmt.Errorf("NAME %s given twice", shownValue(n))
		case strings.Contains(n, "\n"):
			return fmt.Errorf("NAME %s: a name locked with others has no newline (DISTSYNC_NAMES is one name a line)", shownValue(n))
		}
		seen[n] = true
	}
	return nil
}

// shownAll returns names as shownValue shows each.
func shownAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = shownValue(n)
	}
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

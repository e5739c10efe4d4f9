//go:build unix

package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/inspect"
)

// The help: "distsync help" gives the overview; "distsync help CMD", "distsync CMD --help"
// and "distsync CMD -h" give the help of one subcommand, on stdout, with exit status 0. The
// flags' part of each is made from the flags themselves (flagSet.help), so that the help
// lists every flag a subcommand takes, and no other. docs/command.md is the whole manual.

const overview = `distsync runs a command under a distributed lock, semaphore, once or rate limit,
on Redis, the way flock(1) does on one machine.

Usage:
  distsync lock [flags] NAME [--] CMD [ARGS...]     hold the lock NAME while CMD runs
  distsync sem  [flags] NAME --size N [--] CMD ...  hold permits of the semaphore NAME
  distsync once [flags] KEY [--] CMD [ARGS...]      run CMD once among every caller of KEY
  distsync once --forget KEY                        drop the result kept for KEY
  distsync rate [flags] NAME --limit R CMD ...      run CMD at its turn under the rate limit R
  distsync inspect [flags] NAME...                  who holds and who waits for NAME
  distsync ls [flags] [PATTERN]                     the names under the key prefix
  distsync demo [flags]                             simulated pods contend on one mutex
  distsync version                                  distsync's version and commit
  distsync help [COMMAND]                           this text, or COMMAND's help

Every machine gives the same Redis: --redis URL or $DISTSYNC_REDIS_URL. A password
kept out of the URL (and so out of ps) goes in $DISTSYNC_REDIS_PASSWORD. CMD gets
neither password.
Run 'distsync help COMMAND' (or 'distsync COMMAND --help') for a command's flags.
The manual: docs/command.md.

Exit status:
  CMD's   CMD ran (128+N if it died of signal N); once's followers exit with the leader's
  0       help, version, inspect, ls, demo succeeded; once --forget done
  1       the demo failed
  64      usage error: a bad flag, value or name; nothing was sent to Redis
  69      Redis unreachable, or an error of Redis, before CMD started
  75      not acquired within --timeout, or held with -n (--conflict-exit-code);
          rate: the turn would come after --timeout, or no token now with -n
  76      the claim was lost while CMD ran (CMD was killed), or found lost at release
  126     CMD cannot be executed
  127     CMD not found
  128+N   distsync got signal N before CMD started
          (after SIGINT, SIGTERM or SIGHUP, distsync dies of the signal, so that
          Ctrl-C ends the script that ran it; the shell reports 128+N)
`

// commandHelp is what each subcommand's help says before and after its flags.
var commandHelp = map[string][2]string{
	"lock": {`Usage: distsync lock [flags] NAME [--] CMD [ARGS...]
       distsync lock [flags] NAME -c 'COMMAND LINE'
       distsync lock [flags] NAME --also NAME2 [--also NAME3...] [--] CMD [ARGS...]
       distsync lock [flags] --all NAME NAME2... -- CMD [ARGS...]

Runs CMD while holding the lock NAME, across every machine that uses the same Redis and
--prefix, as flock(1) does on one machine. The lock is the mutex NAME of package mutex (a
Go program's mutex.New(h, NAME) excludes it and is excluded by it); --fair takes the FIFO
lock NAME (package fair), -s and -x the read-write lock NAME (package rwmutex). These are
three different locks: use one kind for a name.

With --also (or --all), it holds the mutexes of several names together while CMD runs, all
of them or none (package mutex's All): in any order on any machine without deadlock; the
claim is lost, and CMD killed, as soon as one of them is lost. CMD gets DISTSYNC_NAMES,
every name one a line (NAME, then --all's, then --also's), and DISTSYNC_TOKEN_1,
DISTSYNC_TOKEN_2, ..., their tokens in that order (DISTSYNC_NAME and DISTSYNC_TOKEN are
the first's); under one mutex, DISTSYNC_NAMES is NAME. Several names are for the mutex
only, not --fair, -s or -x; a name given twice, or one with a newline, is refused.

Flags (anywhere before CMD; CMD starts after "--", or at the first argument after NAME
that is not a flag; with --all, only after "--"):
`, runNotes},
	"sem": {`Usage: distsync sem [flags] NAME --size N [--weight W] [--] CMD [ARGS...]

Runs CMD while holding W of the N permits of the semaphore NAME (package semaphore), so
that at most N of weight run at once across machines, like consul lock -n N. Permits are
served in arrival order, a large request is not starved by small ones.

Flags (anywhere before CMD; CMD starts after "--", or at the first argument after NAME
that is not a flag):
`, runNotes},
	"once": {`Usage: distsync once [flags] KEY [--] CMD [ARGS...]
       distsync once [flags] --forget KEY

Runs CMD once among every caller of KEY on any machine while it runs (and within D after
it ended, with --keep D): the first caller leads and runs CMD, copying its stdout; the
others wait, print the first 1 MiB of that stdout and exit with CMD's status. A non-zero
status is a result like 0: shared, and kept with --keep. CMD's stderr is not shared. If
the leader loses its claim it kills CMD and exits 76, and a waiting caller runs CMD; if the
leader's distsync dies, a waiting caller runs CMD once the lead's lease lapsed (--ttl); if
CMD dies of a signal sent to its distsync, nothing is kept and a waiting caller runs CMD.
--forget drops the result kept for KEY, so that the next caller runs CMD again.
The once group is called KEY (its one key is ""): "distsync inspect KEY" shows it.

Flags (anywhere before CMD; CMD starts after "--", or at the first argument after KEY
that is not a flag):
`, runNotes},
	"rate": {`Usage: distsync rate [flags] NAME --limit R [--burst N] [--] CMD [ARGS...]
       distsync rate [flags] NAME --every D [--burst N] -c 'COMMAND LINE'

Waits for CMD's turn under the rate limiter NAME (package rate: x/time/rate's Limiter
across processes, a token bucket on Redis's clock), then runs CMD and exits with its
status: across every machine that uses the same Redis and --prefix, at most R commands
start per second, in bursts of at most --burst, so that in any interval of length T at
most R*T + burst start. A rate limit admits a start and holds nothing while CMD runs:
there is no lease, no fencing token, and CMDs may overlap (to bound how many run at once,
use distsync sem). Each caller reserves its turn in Redis and sleeps until it, so that
waiting callers start one by one at their moments, without polling. A Go program's
rate.NewLimiter(h, NAME, ...) is the same limiter; a limit or burst it stored for NAME
(SetLimit, SetBurst) overrides --limit and --burst.

Flags (anywhere before CMD; CMD starts after "--", or at the first argument after NAME
that is not a flag):
`, rateNotes},
	"inspect": {`Usage: distsync inspect [flags] NAME...
       distsync inspect [flags] --deadlocks [PATTERN]

Prints what Redis has of each NAME, for every kind of primitive that has keys under it
(` + strings.Join(inspect.Kinds(), ", ") + `):
who holds it (owner, identity: host and PID unless the process named itself, Handle id,
fencing token, lease left), who waits in which order, a semaphore's size and permits in
use, a once group's keys in flight and kept, an election's leader and term, a waitgroup's
counter and rounds. It is a snapshot and writes nothing to Redis. A NAME with nothing
prints "NAME: nothing held or queued". With --watch it prints the view again at every
change of NAME in Redis (client tracking: Redis 6 or later; no polling) until interrupted.

With --json it prints one JSON array, an object per NAME:
  {"name": NAME, "primitives": [{"kind", "name", "idle", "fence", "holders": [{"owner",
  "identity", "handle", "token", "remaining_ms", "count", "shared"}], "queue": [{"id",
  "identity", "handle", "remaining_ms", "waited_ms", "weight", "shared", "admitted",
  "value"}], mutex: "with" (a set's other names, while held as one of a set);
  semaphore: "size", "in_use"; election: "leader": {"value", "term", "rev"}; once:
  "keys": [{"key", "leader": {holder}, "kept", "kept_ms"}]; waitgroup: "counter":
  {"pending", "units", "round", "open", "lost", "err", "ended": [{"round", "lost",
  "err"}]}; rate: "bucket": {"tokens", "exact", "updated_ms", "limit", "burst",
  "next_ms"} (limit and burst null unless stored)}]}
(with --watch, one such array per line, at every change). Durations are in ms; -1 means
no expiry. Field names are lower snake case and stable.

With --deadlocks it reads every primitive whose name matches PATTERN (default: every name)
and reports, for each group of processes that wait on one another, a cycle in which each
waits for a name the next one holds, as nested locks taken in different orders leave them
("no deadlock" if none); a cycle is read twice, and reported only if its holds and waiters
are still there. With --json:
  [{"processes": [{"identity", "handle", "waits_for": {"kind", "name", "holder",
  "token"}}]}]

Flags:
`, `
Exit status: 0 done (also for a NAME with nothing; --watch: interrupted); 64 bad flags or
arguments, or no Redis given; 69 Redis could not be reached or answered with an error.
`},
	"ls": {`Usage: distsync ls [flags] [PATTERN]

Lists every primitive in use (held, waited for, a once result kept, pending wait group
work, a rate limiter's bucket not full; with --all, idle ones too) under the prefix and
whose name matches PATTERN, a glob as Redis's SCAN takes it ('*', '?', '[a-z]', '[^a]',
'\' quotes; default: every name), sorted by name: its kind, its name, who holds it (the
identity of each holder's process, host:PID unless it named itself; a once group's
leaders; "(with b, c)" after a mutex held as one of a set, with the set's other names) and
how many wait, as lslocks(8) lists the locks of one machine. It SCANs every node (every
master of a Redis Cluster), reads each primitive in one round trip, and writes nothing.
With --json it prints [{"kind": KIND, "name": NAME, "held_by": [IDENTITY...], "waiting":
N}, ...], "with": [NAME...] for a mutex held as one of a set, and "idle": true for an idle
one (--all).

Flags:
`, `
Exit status: 0 done (also when nothing matches); 64 bad flags or arguments, or no Redis
given; 69 Redis could not be reached or answered with an error.
`},
	"demo": {`Usage: distsync demo [flags]

Runs simulated pods, each with its own Redis client, contending on one distributed mutex,
and reports acquisitions, hand-off latency, overlaps (there are none) and fencing tokens.
It uses an embedded Redis unless --redis (or $DISTSYNC_REDIS_URL) names one; there it
writes under a prefix of its own and deletes every key it wrote when it ends.

Flags:
`, `
Exit status: 0 the demo ran; 1 it failed; 64 bad flags; 128+N interrupted by signal N.
`},
}

// runNotes ends the help of lock, sem and once.
const runNotes = `
CMD runs with distsync's stdin, stdout, stderr and environment, plus DISTSYNC_NAME (NAME,
or KEY) and DISTSYNC_TOKEN, the claim's fencing token: larger than every earlier token of
NAME, for what CMD writes to, so that a holder that lost the claim can be refused (a
semaphore's permits carry 0, a shared hold the last exclusive hold's token). A single
argument that holds a command line ('./deploy.sh && echo done') is not a command: give it
with -c, which runs it with /bin/sh -c.

CMD runs in a process group of its own, which distsync signals as a whole. When distsync
runs in the foreground of a terminal, it gives the terminal to CMD's group while CMD runs,
as a shell gives it to a job: CMD can read it (a prompt works), and Ctrl-C and Ctrl-\ reach
CMD. Ctrl-Z stops CMD and then distsync, so that the shell can resume both (fg, bg); a
stopped distsync renews nothing, so its claim is lost after --ttl, and CMD is killed when
it is resumed. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP and SIGCONT sent
to distsync are forwarded to CMD's group; SIGINT, SIGTERM, SIGHUP and SIGQUIT are followed
by SIGCONT, so that a stopped CMD ends too. When CMD exits, the claim is released at once.
While distsync still waits for the claim, SIGINT, SIGTERM, SIGHUP and SIGQUIT end the wait
(distsync leaves the queue) and it exits 128+N.

If the claim is lost while CMD runs (its key expired, was deleted or taken, or Redis did
not answer the renewals for about 2/3 of --ttl), distsync sends SIGTERM to CMD's group,
SIGKILL --kill-grace later, says so and exits 76.

Exit status: CMD's (128+N if it died of signal N); 64 usage error; 69 Redis unreachable or
an error of Redis before CMD started; 75 not acquired within --timeout or held with -n
(--conflict-exit-code); 76 the claim was lost; 126 CMD cannot be executed; 127 CMD not
found; 128+N distsync got signal N before CMD started.
`

// rateNotes ends the help of rate.
const rateNotes = `
--limit 10/s with the default --burst 1 starts one CMD every 100ms at most; --burst 10
lets 10 start at once after a quiet second, then one every 100ms. With --timeout D, a
turn that would come after D is not waited for: distsync exits at once, taking nothing.
If distsync ends while it waits (--timeout, a signal), it gives its turn back.

CMD runs with distsync's stdin, stdout, stderr and environment, plus DISTSYNC_NAME (NAME);
there is no DISTSYNC_TOKEN (one from an outer distsync is removed). A single argument that
holds a command line is not a command: give it with -c, which runs it with /bin/sh -c.
CMD runs in a process group of its own and gets the terminal as under distsync lock;
SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP and SIGCONT are forwarded to
it. While distsync waits for the turn, SIGINT, SIGTERM, SIGHUP and SIGQUIT end the wait
and it exits 128+N.

Exit status: CMD's (128+N if it died of signal N); 64 usage error; 69 Redis unreachable or
an error of Redis before CMD started; 75 CMD's turn would come after --timeout, or no
token now with -n (--conflict-exit-code); 126 CMD cannot be executed; 127 CMD not found;
128+N distsync got signal N before CMD started.
`

// helpOf returns the help of command, "" if there is no such command.
func helpOf(command string) string {
	parts, ok := commandHelp[command]
	if !ok {
		return ""
	}
	var fs *flagSet
	switch command {
	case "lock", "sem", "once", "rate":
		fs = runFlags(command, &config{})
	case "inspect", "ls":
		fs = inspectFlagSet(command, &inspectFlags{})
	case "demo":
		fs = demoFlags(&demoConfig{})
	}
	var b strings.Builder
	b.WriteString(parts[0])
	fs.help(&b)
	b.WriteString(parts[1])
	return b.String()
}

// runHelp serves "distsync help [COMMAND]".
func runHelp(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		fmt.Fprint(stdout, overview)
		return exitOK
	case len(args) > 1:
		fmt.Fprintf(stderr, "distsync help: one COMMAND at most, got %d\n", len(args))
		return exitUsage
	case args[0] == "help":
		fmt.Fprint(stdout, overview)
		return exitOK
	case args[0] == "version":
		fmt.Fprint(stdout, "Usage: distsync version\n\nPrints distsync's module version, the commit it was built from and the Go toolchain.\n")
		return exitOK
	}
	h := helpOf(args[0])
	if h == "" {
		fmt.Fprintf(stderr, "distsync help: unknown command %q (see 'distsync help')\n", args[0])
		return exitUsage
	}
	fmt.Fprint(stdout, h)
	return exitOK
}

// badUsage prints a usage error of command, one line, and returns exitUsage.
func badUsage(stderr io.Writer, command string, err error) int {
	fmt.Fprintf(stderr, "distsync %s: %v (see 'distsync help %s')\n", command, err, command)
	return exitUsage
}

// redisFlag adds --redis, whose value must be a URL that rueidis reads (checked before
// anything is sent), and the TLS flags.
func redisFlag(fs *flagSet, r *redisTarget, help string) {
	fs.add("redis", 0, "URL", help, func(v string) error {
		if err := checkRedisURL(v); err != nil {
			return err
		}
		r.url = v
		return nil
	})
	fs.defs[len(fs.defs)-1].shown = redacted
	tlsFlags(fs, &r.tls)
}

// The flags of lock, sem and once.
func runFlags(command string, cfg *config) *flagSet {
	fs := &flagSet{command: command}
	redisFlag(fs, &cfg.redis,
		"the Redis every machine shares: redis://[user:pass@]host:port,\n"+
			"rediss://... for TLS, unix://path, or host:port; Cluster nodes\n"+
			"with ?addr=host:port&addr=... (default $DISTSYNC_REDIS_URL;\n"+
			"one of the two is required)")
	fs.str(&cfg.prefix, "prefix", 0, "P",
		"key prefix, as the library's WithKeyPrefix; every user of a\n"+
			"name must use the same (default \""+distsync.DefaultKeyPrefix+"\")")
	if command != "rate" { // a rate limit holds nothing while CMD runs
		fs.duration(&cfg.ttl, "ttl", 0, "D",
			"the claim's lease, renewed every D/3 while CMD runs: a claim\n"+
				"whose distsync died is free D after its last renewal\n(default "+distsync.DefaultLeaseTTL.String()+", at most 24h)")
	}
	switch command {
	case "rate":
		fs.duration(&cfg.timeout, "timeout", 'w', "D",
			"wait at most D for CMD's turn, connecting to Redis included; if\n"+
				"the turn would come later, exit at once, taking nothing (plain\n"+
				"seconds, as flock -w, or 300ms, 1m30s; default: no limit)")
		fs.add("nonblock", 'n', "", "do not wait: run CMD only if the limiter allows it now, else\nexit with --conflict-exit-code (the same as --timeout 0;\nconnecting to Redis waits at most 5s)",
			func(string) error { cfg.timeout = 0; return nil })
	case "once":
		fs.duration(&cfg.timeout, "timeout", 'w', "D",
			"wait at most D for the result, connecting to Redis included\n"+
				"(plain seconds, as flock -w, or 300ms, 1m30s; default: no limit)")
	default:
		fs.duration(&cfg.timeout, "timeout", 'w', "D",
			"wait at most D for the claim, connecting to Redis included\n"+
				"(plain seconds, as flock -w, or 300ms, 1m30s; default: no limit)")
		fs.add("nonblock", 'n', "", "do not wait: exit with --conflict-exit-code if the claim is\nheld (as flock -n; the same as --timeout 0; connecting to Redis\nwaits at most 5s)",
			func(string) error { cfg.timeout = 0; return nil })
	}
	conflict := "exit status when --timeout runs out or -n finds the claim held\n(as flock -E; default %d)"
	if command == "rate" {
		conflict = "exit status when CMD's turn would come after --timeout, or -n\nfinds no token now (as flock -E; default %d)"
	}
	fs.integer(&cfg.conflictExit, "conflict-exit-code", 'E', "N", fmt.Sprintf(conflict, defaultConflictExit), 0, 255)
	fs.str(&cfg.shellCmd, "command", 'c', "CMDLINE", "run CMDLINE with /bin/sh -c, instead of CMD (as flock -c)")
	if command != "rate" {
		fs.duration(&cfg.killGrace, "kill-grace", 0, "D",
			"when the claim is lost, time between SIGTERM and SIGKILL to\nCMD (default "+defaultKillGrace.String()+")")
	}
	fs.boolean(&cfg.foreground, "foreground", 0,
		"run CMD in distsync's process group, not one of its own (as\nGNU timeout --foreground): only CMD is signalled, not what it\nstarted, and the terminal is not given to it")
	if command != "rate" {
		fs.add("identity", 0, "ID", "how inspect and ls name this process's hold: a pod or job name\n(default host:PID)",
			func(v string) error {
				if v == "" || len(v) > distsync.MaxIdentityLen {
					return fmt.Errorf("must be 1 to %d bytes", distsync.MaxIdentityLen)
				}
				cfg.identity = v
				return nil
			})
	}
	fs.boolean(&cfg.quiet, "quiet", 0, "print no message of distsync's own, except errors that end\nit")
	fs.boolean(&cfg.verbose, "verbose", 'v', "say on stderr what distsync does, each line with the time since\nit started: the Redis reached; for lock and sem, who holds the\nclaim, the token, CMD's PID and status, the release; and the\nlibrary's retries")
	if command == "lock" || command == "sem" {
		fs.boolean(&cfg.hold, "hold", 0, "run no CMD: once held, print the fencing token (a line per\nNAME), and hold until standard input ends (the script that\nreads the token closes it, or dies) or SIGINT, SIGTERM or SIGHUP;\nfor a claim across several lines of a script (coproc)")
	}
	switch command {
	case "lock":
		fs.add("also", 0, "NAME", "lock the mutex NAME too, with NAME and every other --also:\nall of them or none (package mutex's All); repeatable",
			func(v string) error { cfg.also = append(cfg.also, v); return nil })
		fs.boolean(&cfg.all, "all", 0, "every argument before \"--\" is a NAME, and CMD follows \"--\":\nlock the mutexes of them all, all or none (give --all before the\nsecond NAME)")
		fs.moreNames = func() bool { return cfg.all }
		fs.boolean(&cfg.fair, "fair", 0, "take the FIFO lock NAME (package fair): strict arrival order")
		fs.boolean(&cfg.shared, "shared", 's', "take the read-write lock NAME for reading (as flock -s): any\nnumber of -s at once, or one -x")
		fs.boolean(&cfg.exclusive, "exclusive", 'x', "take the read-write lock NAME for writing (as flock -x)")
	case "sem":
		fs.integer(&cfg.size, "size", 0, "N", "the semaphore's size, required; every user of NAME gives the same", 1, 1<<53)
		fs.integer(&cfg.weight, "weight", 0, "W", "permits CMD holds, 1 to N (default 1)", 1, 1<<53)
	case "once":
		fs.duration(&cfg.keep, "keep", 0, "D", "keep the result for D after CMD ends: callers of KEY within D\nget it without running CMD (default: only the waiting callers get it)")
		fs.boolean(&cfg.forget, "forget", 0, "drop the result kept for KEY and exit; give no CMD")
	case "rate":
		rateFlags(fs, cfg)
	}
	return fs
}

// The flags of inspect and ls.
func inspectFlagSet(command string, f *inspectFlags) *flagSet {
	fs := &flagSet{command: command}
	redisFlag(fs, &f.redis, "Redis URL or host:port, as lock's (default $DISTSYNC_REDIS_URL)")
	fs.str(&f.prefix, "prefix", 0, "P", "key prefix of the Handles whose primitives to read\n(default \""+distsync.DefaultKeyPrefix+"\")")
	what := "read only this kind"
	if command == "ls" {
		what = "list only this kind"
	}
	fs.add("kind", 0, "KIND", what+": "+strings.Join(inspect.Kinds(), ", "), func(v string) error {
		for _, k := range inspect.Kinds() {
			if v == k {
				f.kind = v
				return nil
			}
		}
		return fmt.Errorf("not a kind (want one of %s)", strings.Join(inspect.Kinds(), ", "))
	})
	fs.boolean(&f.json, "json", 0, "print JSON, for scripts")
	if command == "ls" {
		fs.boolean(&f.all, "all", 'a', "list idle primitives too: nobody holds or waits, as a name that\nkeeps only its last fencing token (for a week after its last hold)")
	}
	if command == "inspect" {
		fs.boolean(&f.watch, "watch", 0, "print the view again at every change of NAME, until interrupted")
		fs.boolean(&f.deadlocks, "deadlocks", 0, "give no NAME, but an optional PATTERN (as ls's): report a cycle\nof processes each waiting for a name the next one holds (mutex,\nreentrant, rwmutex, fair, election) per group of processes that\nwait on one another")
	}
	return fs
}

// The flags of demo.
func demoFlags(cfg *demoConfig) *flagSet {
	fs := &flagSet{command: "demo"}
	redisFlag(fs, &cfg.redis, "a Redis URL or host:port (default $DISTSYNC_REDIS_URL, else an\nembedded Redis)")
	fs.count(&cfg.pods, "pods", "simulated pods, each with its own Redis client (default 4)")
	fs.count(&cfg.goroutines, "goroutines", "goroutines per pod (default 4)")
	fs.count(&cfg.rounds, "rounds", "Lock/Unlock rounds per goroutine (default 25)")
	fs.duration(&cfg.hold, "hold", 0, "D", "time spent inside the critical section (default 1ms)")
	return fs
}

// envRedis is the default of --redis.
func envRedis() string { return os.Getenv("DISTSYNC_REDIS_URL") }

// defaultHold is the demo's default --hold.
const defaultHold = time.Millisecond

//go:build unix

// Command distsync runs a shell command under a distributed lock, semaphore or once, on
// Redis, as flock(1) does on one machine (and etcdctl lock, consul lock across machines), and
// shows the library at work.
//
//	distsync lock [flags] NAME [--] CMD [ARGS...]
//	distsync sem  [flags] NAME --size N [--weight W] [--] CMD [ARGS...]
//	distsync once [flags] KEY [--keep D] [--] CMD [ARGS...]
//	distsync inspect [flags] NAME...
//	distsync ls [flags] [PATTERN]
//	distsync demo [flags]
//	distsync version
//
// lock holds the mutex NAME (package mutex; --fair: package fair; --shared/--exclusive:
// package rwmutex) while CMD runs; sem holds permits of the semaphore NAME (package
// semaphore); once runs CMD once among every caller of KEY while it runs, or within --keep
// (package once), and the other callers print its stdout and exit with its status. The
// command is an ordinary user of the public API: a Go program that uses mutex.New(h,
// "deploy") on the same Redis with the same key prefix excludes, and is excluded by,
// "distsync lock deploy". "distsync help" prints the flags, what CMD is given
// (DISTSYNC_TOKEN, DISTSYNC_NAME), how signals and a lost claim are handled, and the exit
// statuses (the exit* constants of run.go).
//
// inspect and ls (inspect.go) print what Redis has of a name, and list the names under a
// prefix, without writing anything.
//
// once shares a run's result through the once.Group called "command" (onceGroupName), keyed
// by KEY, whose value is an onceResult encoded as JSON.
//
// demo runs several simulated pods, each with its own rueidis client, contending on one
// distributed mutex, and reports acquisitions, hand-off latency, overlaps (there are none) and
// fencing tokens. It uses an embedded Redis unless --redis (or DISTSYNC_REDIS_URL) names one.
// Its keys live under a prefix of its own (distsync-demo:<random>:), and it deletes them all
// when it ends, also on an error or an interrupt, so it leaves nothing on a Redis of yours.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"time"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// cli runs the command that args name and returns distsync's exit status.
func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, version())
		return exitOK
	case "lock", "sem", "once":
		return runCommand(args[0], args[1:], stdout, stderr)
	case "inspect", "ls":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if args[0] == "ls" {
			return runLs(ctx, args[1:], stdout, stderr)
		}
		return runInspect(ctx, args[1:], stdout, stderr)
	case "demo":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if err := run(ctx, args, stdout); err != nil {
			fmt.Fprintln(stderr, "distsync:", err)
			return exitDemoFailed
		}
		return exitOK
	default:
		fmt.Fprintf(stderr, "distsync: unknown command %q\nRun 'distsync help' for usage.\n", args[0])
		return exitUsage
	}
}

// version returns the module's version ("(devel)" for a build from a checkout), the VCS
// revision when the build recorded one, and the Go toolchain.
func version() string {
	v, goVersion, rev := "(devel)", runtime.Version(), ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		goVersion = bi.GoVersion
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" && modified {
			rev += "+dirty"
		}
	}
	s := "distsync " + v
	if rev != "" {
		s += " (" + rev + ")"
	}
	return fmt.Sprintf("%s %s %s/%s", s, goVersion, runtime.GOOS, runtime.GOARCH)
}

const usage = `distsync runs a command under a distributed lock, semaphore or once, on Redis.

Usage:
  distsync lock [flags] NAME [--] CMD [ARGS...]
  distsync sem  [flags] NAME --size N [--weight W] [--] CMD [ARGS...]
  distsync once [flags] KEY [--keep D] [--] CMD [ARGS...]
  distsync inspect [flags] NAME...
  distsync ls [flags] [PATTERN]
  distsync demo [flags]
  distsync version
  distsync help

Commands:
  lock     hold the lock NAME while CMD runs (like flock(1), etcdctl lock, consul lock)
  sem      hold W of the N permits of the semaphore NAME while CMD runs, so that
           at most N of weight run at once across machines (consul lock -n N)
  once     run CMD once among every caller of KEY, on any machine, while it runs
           (and within D after, with --keep D); the other callers wait, print its
           stdout and exit with its status
  inspect  print who holds and who waits for NAME, of every kind, as Redis has it
           ("distsync inspect -h" for its flags)
  ls       list the primitives under the key prefix ("distsync ls -h")
  demo     simulated pods contend on one mutex, on an embedded Redis unless given
           one ("distsync demo -h" for its flags)
  version  print distsync's version
  help     print this text

Flags may come before or after NAME. CMD starts after "--", or else at the first
argument after NAME that is not a flag. Durations are Go durations (300ms, 1m30s)
or plain seconds (2.5).

Flags of lock, sem and once:
  --redis URL       the Redis every machine shares: redis://[user:pass@]host:port[/db],
                    rediss://... for TLS, unix://path, or host:port; add Cluster nodes
                    with ?addr=host:port&addr=... (default: $DISTSYNC_REDIS_URL; one of the
                    two is required: the embedded Redis of the demo cannot coordinate
                    machines)
  --prefix P        key prefix, as the library's WithKeyPrefix; every user of a name must
                    use the same (default "distsync:", the library's)
  --ttl D           the lease of the claim, renewed every D/3 while CMD runs: a claim
                    whose distsync died is free D after its last renewal, and one whose
                    renewals fail for about 2/3 of D is lost (default 10s)
  --timeout D       wait at most D for the claim (once: for the result); 0 tries once
                    without waiting, like flock -n (not for once) (default: wait until
                    acquired)
  --conflict-exit-code N
                    exit status when --timeout runs out, or the claim is held with
                    --timeout 0, like flock -E (default 75)
  --kill-grace D    when the claim is lost, time between SIGTERM and SIGKILL to CMD
                    (default 1s; see "Loss" below)
  --foreground      run CMD in distsync's process group, not one of its own (see "CMD")
  --quiet           print no message of distsync's own, except errors that end it
  -h, --help        print this text

Flags of lock:
  --fair            take the FIFO lock NAME (package fair): strict arrival order across
                    machines
  --shared          take the read-write lock NAME for reading (package rwmutex), like
                    flock -s: any number of --shared at once, or one --exclusive
  --exclusive       take the read-write lock NAME for writing, like flock -x
  Without them, lock takes the mutex NAME (package mutex). The mutex, the FIFO lock and
  the read-write lock called NAME are three different locks, as in the library: on the
  same Redis and --prefix, "distsync lock deploy" and a Go program holding
  mutex.New(h, "deploy") exclude each other, but "distsync lock --fair deploy" and
  "distsync lock --exclusive deploy" exclude neither. Use one kind for a name.

Flags of sem:
  --size N          the semaphore's size, required; every user of NAME must give the same
  --weight W        permits CMD holds, 1 to N (default 1)

Flags of once:
  --keep D          keep the result for D after CMD ends: callers of KEY within D get it
                    without running CMD (five machines run the same cron line: one runs
                    CMD, the others print its output and status). Without it, the result
                    goes only to the callers that waited for it.

CMD:
  CMD runs with distsync's stdin, stdout and stderr and environment, plus:
    DISTSYNC_NAME   NAME (KEY for once)
    DISTSYNC_TOKEN  the claim's fencing token, larger than every earlier token of NAME:
                    give it to what CMD writes to, so that a holder that lost the claim
                    can be refused. Semaphore permits are not exclusive and carry 0;
                    --shared holds carry the last --exclusive hold's token; once's
                    leader gets its lead's token.
  CMD runs in a process group of its own, and every signal distsync sends goes to the
  whole group, so that what CMD started (sh -c '...') is stopped with it. With
  --foreground, CMD stays in distsync's group, like GNU timeout --foreground: it can read
  the terminal and gets the terminal's signals (Ctrl-C) itself, besides the copy distsync
  forwards, and only CMD is signalled, not what it started. Without it, a CMD that reads
  the terminal is stopped (SIGTTIN).
  SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to distsync are forwarded to
  CMD. When CMD exits, for whatever reason, distsync releases the claim at once (it is not
  left to expire) and exits with CMD's status. While distsync still waits for the claim,
  SIGINT, SIGTERM, SIGHUP and SIGQUIT end the wait (distsync leaves the queue) and it exits
  with 128+N; SIGUSR1 and SIGUSR2 are ignored then. A distsync killed with SIGKILL
  releases nothing: the kernel kills CMD (not what CMD started) and the claim expires
  after --ttl. distsync holds the claim until CMD exits, not until what CMD left running
  in the background does (a once leader waits up to 1 s more for CMD's stdout to close).
  Ctrl-Z stops distsync, but not a CMD in its own group: its renewals stop, and the claim
  lapses after --ttl while CMD runs on, to be killed when distsync is resumed. Do not
  suspend it; with --foreground, Ctrl-Z stops both.

Loss:
  If the claim is lost while CMD runs (its key expired, was deleted or taken, or Redis did
  not answer the renewals for about 2/3 of --ttl), distsync sends SIGTERM to CMD, SIGKILL
  --kill-grace later if it still runs (and, in CMD's own group, to what CMD left), says so
  on stderr and exits 76. A loss is noticed when the claim may already be another's, so
  every moment of grace is a moment in which two commands may run at once; one second lets
  a CMD that handles SIGTERM stop and flush. --kill-grace 0 sends SIGKILL right after
  SIGTERM. If CMD ends by itself but the release finds the claim gone, it may not have
  been protected all along: distsync says so and exits 76.

once:
  The first caller of KEY leads: it runs CMD, copies CMD's stdout to its own as it comes,
  and shares the first 1 MiB of it with CMD's exit status; beyond 1 MiB the shared output
  is cut, and the other callers say so on stderr. CMD's stderr is not shared. The other
  callers of KEY, on every machine, wait for the result, then print the shared stdout and
  exit with the status. A non-zero status is a result like 0: it is shared, and kept with
  --keep. If the leader loses its claim, it kills CMD and exits 76, and a waiting caller
  runs CMD itself; if the leader's distsync dies, a waiting caller runs CMD once the lease
  has lapsed (--ttl); if the leader is signalled and CMD dies of the signal, the run
  counts as not done: no result is kept, and a waiting caller runs CMD at once.

Exit status:
  CMD's     when CMD ran (128+N if it died of signal N), and once's shared status
  0         help, version; demo, inspect and ls succeeded
  1         demo failed
  64        usage error: bad flags, missing NAME, CMD or --redis, a bad --redis URL, a
            bad --size or --weight (or a --size other than the semaphore's in Redis)
  69        Redis unreachable when distsync starts, or a Redis error before CMD started
            (while distsync waits, connection errors are retried until --timeout)
  75        not acquired within --timeout, or held with --timeout 0 (--conflict-exit-code)
  76        the claim was lost while CMD ran (CMD was killed), or found lost at release
  126       CMD found but could not be executed
  127       CMD not found
  128+N     distsync got signal N while it waited
`

// run runs the demo: args are "demo" and its flags.
func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(out, usage)
		return nil
	}
	switch args[0] {
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		fs.SetOutput(out)
		cfg := demoConfig{}
		fs.StringVar(&cfg.redisURL, "redis", os.Getenv("DISTSYNC_REDIS_URL"),
			"Redis URL or host:port, e.g. redis://127.0.0.1:6379 (default: $DISTSYNC_REDIS_URL, else an embedded Redis)")
		fs.IntVar(&cfg.pods, "pods", 4, "simulated pods, each with its own Redis client")
		fs.IntVar(&cfg.goroutines, "goroutines", 4, "goroutines per pod")
		fs.IntVar(&cfg.rounds, "rounds", 25, "Lock/Unlock rounds per goroutine")
		fs.DurationVar(&cfg.hold, "hold", time.Millisecond, "time spent inside the critical section")
		if err := fs.Parse(args[1:]); err != nil {
			if err == flag.ErrHelp {
				return nil
			}
			return err
		}
		if cfg.pods < 1 || cfg.goroutines < 1 || cfg.rounds < 1 || cfg.hold < 0 {
			return fmt.Errorf("demo: --pods, --goroutines and --rounds must be positive, --hold not negative")
		}
		return demo(ctx, cfg, out)
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

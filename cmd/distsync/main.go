//go:build unix

// Command distsync runs a shell command under a distributed lock, semaphore or once, on
// Redis, as flock(1) does on one machine (and etcdctl lock, consul lock across machines), and
// shows the library at work.
//
//	distsync lock [flags] NAME [--] CMD [ARGS...]
//	distsync sem  [flags] NAME --size N [--weight W] [--] CMD [ARGS...]
//	distsync once [flags] KEY [--keep D] [--] CMD [ARGS...]
//	distsync once --forget KEY
//	distsync rate [flags] NAME --limit R [--burst N] [--] CMD [ARGS...]
//	distsync inspect [flags] NAME...
//	distsync ls [flags] [PATTERN]
//	distsync demo [flags]
//	distsync version
//	distsync help [COMMAND]
//
// lock holds the mutex NAME (package mutex; --fair: package fair; -s/-x: package rwmutex)
// while CMD runs; sem holds permits of the semaphore NAME (package semaphore); once runs CMD
// once among every caller of KEY while it runs, or within --keep (package once), and the
// other callers print its stdout and exit with its status; rate waits for CMD's turn under
// the rate limiter NAME (package rate; rate.go) and then runs CMD, holding nothing. The
// command is an ordinary user of the public API: a Go program that uses mutex.New(h,
// "deploy") on the same Redis with the same key prefix excludes, and is excluded by,
// "distsync lock deploy". docs/command.md is the manual; "distsync help COMMAND" prints a command's flags (flags.go parses them, one
// style for every command; help.go holds the texts and the flag sets). The exit statuses are
// the exit* constants of run.go.
//
// CMD runs in a process group of its own, which is given the terminal when distsync is a job
// of its own in the foreground (tty.go), and follows CMD's job-control stops (child_linux.go).
//
// inspect and ls (inspect.go) print what Redis has of a name, and list the names under a
// prefix with their holders, without writing anything; inspect --watch (watch.go) prints the
// view again at every change, which Redis's client tracking reports.
//
// once shares a run's result through the once.Group called KEY, whose one key is ""
// (onceKey), and whose value is an onceResult encoded as JSON.
//
// demo runs several simulated pods, each with its own rueidis client, contending on one
// distributed mutex, and reports acquisitions, hand-off latency, overlaps (there are none) and
// fencing tokens. It uses an embedded Redis unless --redis (or DISTSYNC_REDIS_URL) names one.
// Its keys live under a prefix of its own (distsync-demo:<random>:), and it deletes them all
// when it ends, also on an error or an interrupt, so it leaves nothing on a Redis of yours.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"
)

func main() {
	status := cli(os.Args[1:], os.Stdout, os.Stderr)
	if diedOf != 0 && status == 128+int(diedOf) {
		dieOf(diedOf)
	}
	os.Exit(status)
}

// diedOf is the signal that ended distsync's wait or run, or killed CMD (0 if none): when the
// status is the one bySignal gave for it (not, say, 76 for a CMD that distsync killed itself
// when the claim was lost), distsync dies of it too, once it has released what it held, so
// that the shell that ran it knows (see dieOf).
var diedOf syscall.Signal

// bySignal notes that signal sig ended the run, and returns the status the shell reports
// for a process that sig killed: 128+sig.
func bySignal(sig syscall.Signal) int {
	diedOf = sig
	return 128 + int(sig)
}

// dieOf ends distsync by sig, as a process that does not handle it dies of it: a shell running
// a script waits for its command and ends the script when the command died of SIGINT (a
// Ctrl-C), but goes on after one that exited, with 130 or any status, as if it had handled
// the signal ("wait and cooperative exit"). SIGINT, SIGTERM and SIGHUP are raised again with
// their default action; for the others (SIGQUIT, whose default in Go dumps the goroutines;
// SIGUSR1, ...) and for a signal the parent had distsync ignore, it returns and distsync exits
// with 128+sig.
func dieOf(sig syscall.Signal) {
	switch sig {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP:
	default:
		return
	}
	signal.Reset(sig)
	if err := syscall.Kill(os.Getpid(), sig); err != nil {
		return
	}
	time.Sleep(100 * time.Millisecond) // delivered by now, unless it is ignored
}

// cli runs the command that args name and returns distsync's exit status.
func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, overview)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "--help":
		return runHelp(args[1:], stdout, stderr)
	case "version", "--version":
		if len(args) > 1 && (args[1] == "-h" || args[1] == "--help") {
			return runHelp(args[:1], stdout, stderr)
		}
		fmt.Fprintln(stdout, version())
		return exitOK
	case "lock", "sem", "once", "rate":
		return runCommand(args[0], args[1:], stdout, stderr)
	case "inspect", "ls":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if args[0] == "ls" {
			return runLs(ctx, args[1:], stdout, stderr)
		}
		return runInspect(ctx, args[1:], stdout, stderr)
	case "demo":
		return runDemo(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "distsync: unknown command %q (see 'distsync help')\n", args[0])
		return exitUsage
	}
}

// runDemo runs "distsync demo [flags]" and returns its exit status: 128+N if signal N ended
// it (the demo deletes its keys first).
func runDemo(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseDemo(args)
	switch {
	case errors.Is(err, errHelp):
		fmt.Fprint(stdout, helpOf("demo"))
		return exitOK
	case err != nil:
		return badUsage(stderr, "demo", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		select {
		case sig := <-sigs:
			cancel(signalError{sig.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	err = demo(ctx, cfg, stdout)
	var sig signalError
	if errors.As(context.Cause(ctx), &sig) {
		fmt.Fprintf(stderr, "distsync demo: %v\n", sig)
		if errors.Is(err, errKeysLeft) {
			fmt.Fprintln(stderr, "distsync demo:", leftKeys(err))
		}
		return bySignal(sig.sig)
	}
	if err != nil {
		fmt.Fprintln(stderr, "distsync demo:", err)
		return exitDemoFailed
	}
	return exitOK
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

// parseDemo reads the demo's flags.
func parseDemo(args []string) (demoConfig, error) {
	cfg := demoConfig{redis: redisTarget{url: envRedis()}, pods: 4, goroutines: 4, rounds: 25, hold: defaultHold}
	pos, rest, _, err := demoFlags(&cfg).parse(args, -1)
	pos = append(pos, rest...)
	switch {
	case err != nil:
	case len(pos) > 0:
		err = usagef("unexpected argument %s", shownValue(pos[0]))
	case cfg.redis.url == "" && cfg.redis.tls.given():
		err = usagef("%s: give --redis rediss://…, whose server they are for (the embedded Redis speaks no TLS)", cfg.redis.tls.flags())
	case cfg.redis.url != "" && cfg.redis.check() != nil:
		err = redisProblem(cfg.redis)
	}
	return cfg, err
}

//go:build unix

package main

// This file: the exit statuses, and the runner of lock and sem: dial, acquire, run CMD under
// the claim, release.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
)

// The exit statuses of distsync, besides CMD's own (which lock, sem and once exit with when
// CMD ran, 128+N if it died of signal N) and 128+N when distsync got signal N while it waited.
// They follow sysexits.h and the shells, as flock(1) does.
const (
	// exitOK: help and version printed; a demo that succeeded.
	exitOK = 0
	// exitDemoFailed: the demo failed (its error is on stderr).
	exitDemoFailed = 1
	// exitUsage (EX_USAGE): bad flags or arguments — missing NAME, CMD or --redis, a bad
	// --redis URL, a bad --size or --weight, a --size other than the semaphore's in Redis.
	// Nothing ran.
	exitUsage = 64
	// exitUnavailable (EX_UNAVAILABLE): Redis could not be reached, or answered with an
	// error, before CMD started. CMD did not run.
	exitUnavailable = 69
	// defaultConflictExit (EX_TEMPFAIL) is the default of --conflict-exit-code: the claim was
	// not acquired within --timeout, or was held with --timeout 0 (or once's result did not
	// come within --timeout). CMD did not run.
	defaultConflictExit = 75
	// exitLost: the claim was lost while CMD ran, and CMD was killed; or CMD ended by itself
	// but the release found the claim lost, so it may not have been protected all along.
	exitLost = 76
	// exitCannotExec: CMD was found but could not be executed (permission, format).
	exitCannotExec = 126
	// exitNotFound: CMD was not found.
	exitNotFound = 127
)

const (
	// releaseTimeout bounds the release of a claim after CMD exited: it is released at once,
	// never left to expire, unless Redis does not answer within this.
	releaseTimeout = 5 * time.Second

	// defaultKillGrace is the default of --kill-grace: the time between SIGTERM and SIGKILL
	// to CMD after its claim was lost. The loss is noticed when the claim may already be
	// another's, so every moment of grace is a moment in which two commands may run at
	// once; one second lets a command that handles SIGTERM stop and flush its output.
	defaultKillGrace = time.Second

	// onceOutputLimit is how much of a once leader's stdout is shared with the other
	// callers: 1 MiB (base64 in JSON makes it about 1.4 MB, under once.DefaultMaxValueSize).
	// The leader copies all of it to its own stdout; the followers get the first 1 MiB and a
	// note on stderr that the rest was cut.
	onceOutputLimit = 1 << 20

	// closeTimeout bounds the Handle's Close when distsync ends: the clean-up of a wait that
	// was ended (leaving a queue), which takes a round trip when Redis answers. If Redis
	// does not, what was left behind expires with the waiter's lease.
	closeTimeout = 250 * time.Millisecond
)

// runCommand runs lock, sem, once or rate with args and returns distsync's exit status.
func runCommand(command string, args []string, stdout, stderr io.Writer) int {
	cfg, status, ok := parseArgs(command, args, stdout, stderr)
	if !ok {
		return status
	}
	r := &runner{cfg: cfg, stdout: stdout, stderr: stderr, began: time.Now()}
	return r.run()
}

// runner runs one lock, sem or once.
type runner struct {
	cfg            config
	stdout, stderr io.Writer
	path           string // CMD, resolved
	sigs           *router
	tty            *terminal // distsync's controlling terminal, nil if none
	deadline       time.Time // when --timeout runs out, if it is > 0
	began          time.Time // when distsync started, for --verbose
}

// errorf reports an error that ends distsync: printed even with --quiet.
func (r *runner) errorf(format string, a ...any) {
	fmt.Fprintf(r.stderr, "distsync: "+format+"\n", a...)
}

// verbosef reports what --verbose adds, with the time since distsync began.
func (r *runner) verbosef(format string, a ...any) {
	if r.cfg.verbose {
		r.errorf("%.3fs "+format, append([]any{time.Since(r.began).Seconds()}, a...)...)
	}
}

// notef reports what --quiet silences.
func (r *runner) notef(format string, a ...any) {
	if !r.cfg.quiet {
		r.errorf(format, a...)
	}
}

func (r *runner) run() int {
	if r.cfg.hold {
		if err := holdableInput(); err != nil {
			r.errorf("--hold: %v", err)
			return exitUsage
		}
	} else if !r.cfg.forget {
		path, status, err := lookCommand(r.cfg.argv[0])
		if err != nil {
			r.errorf("%v%s", err, commandLineHint(r.cfg.argv))
			return status
		}
		r.path = path
	}

	r.sigs = newRouter()
	defer r.sigs.close()
	if r.tty = openTerminal(); r.tty != nil {
		defer r.tty.close()
	}
	// --timeout bounds the whole wait, connecting to Redis included.
	if r.cfg.timeout > 0 {
		r.deadline = time.Now().Add(r.cfg.timeout)
		r.sigs.startTimer(r.cfg.timeout)
	}
	client, status := r.dial()
	if client == nil {
		return status
	}
	defer client.Close()
	r.verbosef("connected to Redis at %s", redacted(r.cfg.redis.url))
	opts := []distsync.Option{distsync.WithKeyPrefix(r.cfg.prefix), distsync.WithLeaseTTL(r.cfg.ttl)}
	if r.cfg.identity != "" {
		opts = append(opts, distsync.WithIdentity(r.cfg.identity))
	}
	if !r.cfg.quiet {
		opts = append(opts, distsync.WithLogger(slog.New(&logHandler{w: r.stderr, mu: new(sync.Mutex), verbose: r.cfg.verbose})))
	}
	h, err := distsync.New(client, opts...)
	if err != nil {
		r.errorf("%v", err)
		if errors.Is(err, distsync.ErrInvalid) {
			return exitUsage
		}
		return exitUnavailable // Redis went away, or is too old (ErrUnsupported)
	}
	defer func() {
		// Close releases nothing here (every claim was released or given up), but ends what
		// is still being cleaned up: a wait that --timeout or a signal ended leaves its queue
		// within it. If Redis does not answer, that is left to the waiter's lease.
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = h.Close(ctx)
	}()
	switch {
	case r.cfg.forget:
		return r.forget(h)
	case r.cfg.command == "once":
		return r.runOnce(h)
	case r.cfg.command == "rate":
		return r.runRate(h)
	}
	c, err := r.newClaim(h)
	if err != nil {
		r.errorf("%v", err)
		return exitUsage
	}
	return r.runClaim(c)
}

// commandLineHint returns, for a CMD that was not found and is one argument that reads as a
// command line ("./deploy.sh && echo done"), a hint to give it with -c.
func commandLineHint(argv []string) string {
	if len(argv) == 1 && strings.ContainsAny(argv[0], " \t;&|<>()$`\"'*?") {
		return fmt.Sprintf("; a command line is run with -c: distsync ... -c %s", shownValue(argv[0]))
	}
	return ""
}

// dial connects to Redis (dialRedis PINGs it). dialRedis returns as soon as waitCtx ends: a
// signal while it dials ends distsync at once, and so does --timeout, which counts the dial.
func (r *runner) dial() (rueidis.Client, int) {
	c, err := dialRedis(r.sigs.waitCtx, r.cfg.redis)
	switch {
	case err == nil:
		return c, exitOK
	case r.sigs.waitCtx.Err() == nil:
		r.errorf("%v", err)
		return nil, dialStatus(err)
	case errors.Is(context.Cause(r.sigs.waitCtx), errTimedOut):
		r.errorf("Redis at %s did not answer within --timeout %v", redacted(r.cfg.redis.url), r.cfg.timeout)
		return nil, exitUnavailable
	}
	return nil, r.notAcquired("Redis", r.sigs.waitCtx.Err())
}

// claim is what lock and sem hold while CMD runs: one primitive's acquire and release.
type claim struct {
	what    string // for messages: `mutex "deploy"`
	acquire func(ctx context.Context) (*distsync.Lease, error)
	try     func(ctx context.Context) (*distsync.Lease, bool, error)
	release func(ctx context.Context) error
	// tokens, if not nil, returns the token of each of several names held (lock --also),
	// in the order of config.names; else the lease's token is the one name's.
	tokens func() []int64
	// holders, if not nil, reads who holds the claim now, for --verbose.
	holders func(ctx context.Context) ([]distsync.Holder, error)
}

// heldBy returns, for --verbose (if verbose), who holds c now: " (held by host:PID, ...)",
// " (free)", or "" if that cannot be read (for several names, or an error).
func (c claim) heldBy(ctx context.Context, verbose bool) string {
	if !verbose || c.holders == nil {
		return ""
	}
	hs, err := c.holders(ctx)
	if err != nil {
		return ""
	}
	if len(hs) == 0 {
		return " (free)"
	}
	var by []string
	for _, hd := range hs {
		by = append(by, holderName(hd))
	}
	return " (held by " + strings.Join(by, ", ") + ")"
}

func (r *runner) newClaim(h *distsync.Handle) (claim, error) {
	name := r.cfg.name
	switch {
	case r.cfg.command == "sem":
		s, err := semaphore.New(h, name, r.cfg.size)
		n := r.cfg.weight
		return claim{what: fmt.Sprintf("semaphore %q", name),
			acquire: func(ctx context.Context) (*distsync.Lease, error) { return s.AcquireLease(ctx, n) },
			try:     func(ctx context.Context) (*distsync.Lease, bool, error) { return s.TryAcquireLease(ctx, n) },
			release: func(ctx context.Context) error { return s.Release(ctx, n) }, holders: s.Holders}, err
	case r.cfg.fair:
		m, err := fair.New(h, name)
		return claim{what: fmt.Sprintf("fair lock %q", name),
			acquire: m.LockLease, try: m.TryLockLease, release: m.Unlock, holders: m.Holders}, err
	case r.cfg.shared:
		m, err := rwmutex.New(h, name)
		return claim{what: fmt.Sprintf("read-write lock %q (shared)", name),
			acquire: m.RLockLease, try: m.TryRLockLease, release: m.RUnlock, holders: m.Holders}, err
	case r.cfg.exclusive:
		m, err := rwmutex.New(h, name)
		return claim{what: fmt.Sprintf("read-write lock %q (exclusive)", name),
			acquire: m.LockLease, try: m.TryLockLease, release: m.Unlock, holders: m.Holders}, err
	case len(r.cfg.names) > 1:
		return r.newAll(h)
	default:
		m, err := mutex.New(h, name)
		return claim{what: fmt.Sprintf("mutex %q", name),
			acquire: m.LockLease, try: m.TryLockLease, release: m.Unlock, holders: m.Holders}, err
	}
}

// newAll returns the claim of lock's several names: the mutexes of them all, locked together
// (mutex.All), all or none.
func (r *runner) newAll(h *distsync.Handle) (claim, error) {
	ms := make([]*mutex.Mutex, len(r.cfg.names))
	for i, n := range r.cfg.names {
		m, err := mutex.New(h, n)
		if err != nil {
			return claim{}, err
		}
		ms[i] = m
	}
	a, err := mutex.NewAll(ms...)
	if err != nil {
		return claim{}, err
	}
	return claim{what: "mutexes " + strings.Join(quotedAll(r.cfg.names), ", "),
		acquire: a.LockLease, try: a.TryLockLease, release: a.Unlock, tokens: a.Tokens}, nil
}

// quotedAll returns names, each quoted (Go syntax).
func quotedAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strconv.Quote(n)
	}
	return out
}

// runClaim acquires c, runs CMD while holding it, and releases it.
func (r *runner) runClaim(c claim) int {
	var (
		lease *distsync.Lease
		err   error
	)
	r.verbosef("taking %s%s", c.what, c.heldBy(r.sigs.waitCtx, r.cfg.verbose))
	if r.cfg.timeout == 0 {
		var ok bool
		lease, ok, err = c.try(r.sigs.waitCtx)
		if err == nil && !ok {
			r.notef("%s is held (--timeout 0)", c.what)
			return int(r.cfg.conflictExit)
		}
	} else {
		lease, err = c.acquire(r.sigs.waitCtx)
	}
	if err != nil {
		return r.notAcquired(c.what, err)
	}
	tokens := []int64{lease.Token()}
	if c.tokens != nil {
		tokens = c.tokens()
	}
	r.verbosef("took %s, fencing token %s", c.what, joinInts(tokens))
	if r.cfg.hold {
		return r.hold(c, lease, tokens)
	}
	ch, err := r.sigs.begin(func() (*child, error) { return startChild(r.spec(tokens, r.stdout)) }, false)
	if err != nil {
		_ = r.release(c) // at once: nothing ran
		var aborted abortError
		if errors.As(err, &aborted) {
			return aborted.status()
		}
		r.errorf("%s: %v", r.cfg.argv[0], err)
		return startStatus(err)
	}
	r.verbosef("started %s (pid %d)", r.cfg.argv[0], ch.pid())
	status, lost, _ := r.supervise(ch, lease, c.what)
	r.verbosef("the command exited with %s", describeStatus(status))
	if lost != nil {
		// supervise said why. A lease lost at its deadline (Redis unreachable) may still be
		// this process's in Redis: the release gives it back if so, and reports the loss.
		_ = r.release(c)
		return exitLost
	}
	if err := r.release(c); err != nil {
		if errors.Is(err, distsync.ErrLost) {
			r.errorf("%s was lost before the command ended, which may not have been protected all along (%v); the command exited with %s",
				c.what, err, describeStatus(status))
			return exitLost
		}
		r.notef("could not release %s, which expires by itself within --ttl %v: %v", c.what, r.cfg.ttl, rootCause(err))
	}
	return status
}

// rootCause returns the network error in err's chain if there is one ("dial tcp ...:
// connection refused"), or says that Redis closed the connection if err is an EOF (a
// Redis that went away while a command was on its connection), else err: for a message
// that says in its own words what failed.
func rootCause(err error) error {
	var ne *net.OpError
	if errors.As(err, &ne) {
		return ne
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errClosedByRedis
	}
	return err
}

var errClosedByRedis = errors.New("the Redis server closed the connection")

func (r *runner) release(c claim) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	err := c.release(ctx)
	if err == nil {
		r.verbosef("released %s", c.what)
	}
	return err
}

// joinInts prints ns separated by ", ".
func joinInts(ns []int64) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(s, ", ")
}

// spec is how to start CMD under a claim whose fencing tokens are tokens: one, or, for lock's
// mutexes, one per name, in the order of config.names.
//
// CMD's environment has DISTSYNC_NAME and DISTSYNC_TOKEN, the (first) name and its token;
// and, under lock's mutexes (one name or several), DISTSYNC_NAMES, every name, one a line
// (no name of several has a newline: checkNames), and DISTSYNC_TOKEN_1, DISTSYNC_TOKEN_2,
// ..., their tokens in that order.
//
// Under rate, which holds nothing, there is no token: CMD has DISTSYNC_NAME, and not the
// DISTSYNC_TOKEN of an outer distsync, which is another name's.
func (r *runner) spec(tokens []int64, stdout io.Writer) childSpec {
	var env []string
	if r.cfg.command == "rate" {
		env = []string{"DISTSYNC_NAME=" + r.cfg.name, "DISTSYNC_TOKEN"}
	} else {
		env = []string{"DISTSYNC_NAME=" + r.cfg.name, "DISTSYNC_TOKEN=" + strconv.FormatInt(tokens[0], 10)}
	}
	if r.cfg.command == "lock" && !r.cfg.fair && !r.cfg.shared && !r.cfg.exclusive && len(tokens) == len(r.cfg.names) {
		env = append(env, "DISTSYNC_NAMES="+strings.Join(r.cfg.names, "\n"))
		for i, t := range tokens {
			env = append(env, fmt.Sprintf("DISTSYNC_TOKEN_%d=%d", i+1, t))
		}
	}
	return childSpec{path: r.path, argv: r.cfg.argv, stdout: stdout, stderr: r.stderr, foreground: r.cfg.foreground, tty: r.tty, env: env}
}

// supervise waits for ch, which runs under lease, to exit, and kills it if the lease is lost
// first (and says so). It returns ch's exit status, the loss (nil if the lease was held
// until ch exited), and whether ch died of a signal that distsync sent it.
func (r *runner) supervise(ch *child, lease *distsync.Lease, what string) (status int, lost error, bySentSignal bool) {
	killed := false
	select {
	case <-ch.exited:
	case <-lease.Done():
		lost = lease.Err()
		if lost == nil {
			lost = distsync.ErrLost // Done is closed: Err is set; this is a safeguard
		}
		killed = ch.stop(r.cfg.killGrace)
	}
	r.sigs.childGone()
	status, bySentSignal = ch.reap()
	if lost != nil {
		target := fmt.Sprintf("the command (pid %d)", ch.pid())
		if !r.cfg.foreground {
			target = fmt.Sprintf("the command's process group (%d)", ch.pid())
		}
		how := "it stopped on SIGTERM"
		if killed {
			how = fmt.Sprintf("it still ran %v later and was killed with SIGKILL", r.cfg.killGrace)
		}
		r.errorf("lost %s while the command ran (%v): sent SIGTERM to %s; %s", what, lost, target, how)
	}
	return status, lost, bySentSignal
}

// notAcquired returns the exit status for an acquire (or a wait for once's result) that
// ended with err before CMD could start.
func (r *runner) notAcquired(what string, err error) int {
	if r.sigs.waitCtx.Err() != nil {
		cause := context.Cause(r.sigs.waitCtx)
		var sig signalError
		if errors.As(cause, &sig) {
			return bySignal(sig.sig)
		}
		if errors.Is(cause, errTimedOut) {
			if r.cfg.command == "once" {
				r.notef("%s: no result within --timeout %v", what, r.cfg.timeout)
			} else {
				r.notef("%s: not acquired within --timeout %v", what, r.cfg.timeout)
			}
			return int(r.cfg.conflictExit)
		}
	}
	r.errorf("%v", err)
	if errors.Is(err, distsync.ErrInvalid) || errors.Is(err, semaphore.ErrSizeMismatch) {
		return exitUsage
	}
	return exitUnavailable
}

// The signals forwarded to CMD while it runs; the first four end a wait for the claim. SIGTSTP
// is caught (and forwarded) only while CMD runs in a group of its own: before, and with
// --foreground, it stops distsync, as it stops any program.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
	syscall.SIGCONT}

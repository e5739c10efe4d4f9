//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/once"
	"github.com/distsync/distsync/rate"
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

// config is what the flags and arguments of lock, sem, once and rate say.
type config struct {
	command string   // lock, sem, once or rate
	name    string   // NAME, or KEY for once
	names   []string // lock: every NAME, name first (several with --also or --all)
	argv    []string // CMD and its arguments (sh -c CMDLINE for -c)

	redisURL     string
	prefix       string
	ttl          time.Duration
	timeout      time.Duration // < 0: wait until acquired; 0: try once
	conflictExit int64
	shellCmd     string // -c
	killGrace    time.Duration
	foreground   bool
	quiet        bool
	identity     string // "": the library's default, host:PID

	fair, shared, exclusive bool     // lock
	also                    []string // lock --also, in order
	all                     bool     // lock --all: every argument before "--" is a NAME
	size, weight            int64    // sem
	keep                    time.Duration
	forget                  bool

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
	cfg = config{command: command, redisURL: envRedis(), prefix: distsync.DefaultKeyPrefix, ttl: distsync.DefaultLeaseTTL,
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
	switch {
	case len(names) == 0:
		return bad("missing %s", noun)
	case names[0] == "":
		return bad("empty %s", noun)
	case cfg.forget && (len(argv) > 0 || cfg.shellCmd != ""):
		return bad("--forget takes no CMD: distsync once --forget %s", names[0])
	case cfg.forget:
	case cfg.shellCmd != "" && len(argv) > 0:
		return bad("both -c and CMD: -c %s runs instead of %s", shownValue(cfg.shellCmd), shownValue(argv[0]))
	case cfg.shellCmd == "" && len(argv) == 0 && cfg.all:
		return bad("missing CMD: with --all, every argument before -- is a NAME: distsync lock --all %s -- CMD [ARGS...]", strings.Join(shownAll(names), " "))
	case cfg.shellCmd == "" && len(argv) == 0:
		return bad("missing CMD: distsync %s [flags] %s [--] CMD [ARGS...], or -c 'COMMAND LINE'", command, names[0])
	case cfg.redisURL == "":
		return bad("no Redis: give --redis URL or set DISTSYNC_REDIS_URL (every machine must use the same Redis, so there is no default)")
	case checkRedisURL(cfg.redisURL) != nil: // from DISTSYNC_REDIS_URL: --redis was checked
		return bad("DISTSYNC_REDIS_URL: %v", checkRedisURL(cfg.redisURL))
	case strings.ContainsAny(cfg.prefix, "{}"):
		return bad("--prefix %s: must not contain '{' or '}'", shownValue(cfg.prefix))
	case cfg.ttl < distsync.MinLeaseTTL:
		return bad("--ttl %v: must be at least %v", cfg.ttl, distsync.MinLeaseTTL)
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
	if cfg.shellCmd != "" {
		cfg.argv = []string{shellPath, "-c", cfg.shellCmd}
	}
	return cfg, exitOK, true
}

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

// runCommand runs lock, sem, once or rate with args and returns distsync's exit status.
func runCommand(command string, args []string, stdout, stderr io.Writer) int {
	cfg, status, ok := parseArgs(command, args, stdout, stderr)
	if !ok {
		return status
	}
	r := &runner{cfg: cfg, stdout: stdout, stderr: stderr}
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
}

// errorf reports an error that ends distsync: printed even with --quiet.
func (r *runner) errorf(format string, a ...any) {
	fmt.Fprintf(r.stderr, "distsync: "+format+"\n", a...)
}

// notef reports what --quiet silences.
func (r *runner) notef(format string, a ...any) {
	if !r.cfg.quiet {
		r.errorf(format, a...)
	}
}

func (r *runner) run() int {
	if !r.cfg.forget {
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
	opts := []distsync.Option{distsync.WithKeyPrefix(r.cfg.prefix), distsync.WithLeaseTTL(r.cfg.ttl)}
	if r.cfg.identity != "" {
		opts = append(opts, distsync.WithIdentity(r.cfg.identity))
	}
	if !r.cfg.quiet {
		opts = append(opts, distsync.WithLogger(slog.New(&logHandler{w: r.stderr, mu: new(sync.Mutex)})))
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

// dial connects to Redis (dialRedis PINGs it). A signal while it dials ends distsync at
// once, and so does --timeout, which counts the dial: a Redis that does not answer does not
// keep distsync past it.
func (r *runner) dial() (rueidis.Client, int) {
	type dialed struct {
		c   rueidis.Client
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := dialRedis(r.sigs.waitCtx, r.cfg.redisURL)
		ch <- dialed{c, err}
	}()
	abandon := func() {
		go func() {
			if d := <-ch; d.c != nil {
				d.c.Close()
			}
		}()
	}
	select {
	case d := <-ch:
		if d.err == nil {
			return d.c, exitOK
		}
		if r.sigs.waitCtx.Err() == nil {
			r.errorf("%v", d.err)
			return nil, dialStatus(d.err)
		}
		abandon()
	case <-r.sigs.waitCtx.Done():
		abandon()
	}
	if errors.Is(context.Cause(r.sigs.waitCtx), errTimedOut) {
		r.errorf("Redis at %s did not answer within --timeout %v", redacted(r.cfg.redisURL), r.cfg.timeout)
		return nil, exitUnavailable
	}
	return nil, r.notAcquired("Redis", r.sigs.waitCtx.Err())
}

// onceGroup returns the once.Group through which callers of KEY share a run's result: the
// group called KEY, whose one key is "" (as a once.Once's), so that "distsync inspect KEY"
// and "distsync ls" show it by the name the user gave.
func (r *runner) onceGroup(h *distsync.Handle) (*once.Group[onceResult], error) {
	var opts []distsync.Option
	if r.cfg.keep > 0 {
		// A non-zero status is a result, returned by fn with a nil error, so WithKeep keeps
		// it like a zero; WithKeepErrors is not needed (fn never fails).
		opts = append(opts, once.WithKeep(r.cfg.keep))
	}
	return once.NewGroup[onceResult](h, r.cfg.name, opts...)
}

// onceKey is the key of the command's once group (see onceGroup).
const onceKey = ""

// forget drops the result kept for KEY (once --forget).
func (r *runner) forget(h *distsync.Handle) int {
	g, err := r.onceGroup(h)
	if err != nil {
		r.errorf("%v", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(r.sigs.waitCtx, releaseTimeout)
	defer cancel()
	if err := g.Forget(ctx, onceKey); err != nil {
		r.errorf("%v", err)
		if r.sigs.waitCtx.Err() != nil {
			return r.notAcquired(fmt.Sprintf("once %q", r.cfg.name), err)
		}
		return exitUnavailable
	}
	r.notef("once %q: the kept result, if any, is dropped: the next caller runs the command", r.cfg.name)
	return exitOK
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
			release: func(ctx context.Context) error { return s.Release(ctx, n) }}, err
	case r.cfg.fair:
		m, err := fair.New(h, name)
		return claim{what: fmt.Sprintf("fair lock %q", name),
			acquire: m.LockLease, try: m.TryLockLease, release: m.Unlock}, err
	case r.cfg.shared:
		m, err := rwmutex.New(h, name)
		return claim{what: fmt.Sprintf("read-write lock %q (shared)", name),
			acquire: m.RLockLease, try: m.TryRLockLease, release: m.RUnlock}, err
	case r.cfg.exclusive:
		m, err := rwmutex.New(h, name)
		return claim{what: fmt.Sprintf("read-write lock %q (exclusive)", name),
			acquire: m.LockLease, try: m.TryLockLease, release: m.Unlock}, err
	case len(r.cfg.names) > 1:
		return r.newAll(h)
	default:
		m, err := mutex.New(h, name)
		return claim{what: fmt.Sprintf("mutex %q", name),
			acquire: m.LockLease, try: m.TryLockLease, release: m.Unlock}, err
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
	status, lost, _ := r.supervise(ch, lease, c.what)
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
	return c.release(ctx)
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

// onceResult is what a once leader shares: CMD's exit status and the start of its stdout.
type onceResult struct {
	Status  int    `json:"status"`            // as a shell reports it: 128+N for signal N
	Stdout  []byte `json:"stdout,omitempty"`  // the first onceOutputLimit bytes
	Dropped int64  `json:"dropped,omitempty"` // bytes of stdout beyond them, not shared
}

// leadRecord is what this process's lead of a once did, if it led.
type leadRecord struct {
	mu        sync.Mutex
	ran       bool  // CMD was started, or failed to start
	status    int   // its status
	lost      error // the lead was lost while it ran (CMD was killed)
	abandoned bool  // CMD died of a signal distsync forwarded: not a result
}

func (l *leadRecord) set(status int, lost error, abandoned bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ran, l.status, l.lost, l.abandoned = true, status, lost, abandoned
}

func (l *leadRecord) get() (ran bool, status int, lost error, abandoned bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ran, l.status, l.lost, l.abandoned
}

// runOnce runs CMD once among every caller of KEY, or prints the result of the run that
// another caller led.
func (r *runner) runOnce(h *distsync.Handle) int {
	g, err := r.onceGroup(h)
	if err != nil {
		r.errorf("%v", err)
		return exitUsage
	}
	what := fmt.Sprintf("once %q", r.cfg.name)
	var lead leadRecord
	fn := func(ctx context.Context) (onceResult, error) {
		lease, ok := distsync.LeaseFromContext(ctx)
		if !ok {
			// Not reached: once gives its function the lead's lease, without which the
			// command would run unprotected.
			lead.set(exitUnavailable, nil, false)
			r.errorf("%s: the lead came without a lease", what)
			return onceResult{}, errors.New("distsync: the lead came without a lease")
		}
		out := &capture{out: r.stdout, limit: onceOutputLimit}
		ch, err := r.sigs.begin(func() (*child, error) { return startChild(r.spec([]int64{lease.Token()}, out)) }, true)
		var aborted abortError
		switch {
		case errors.As(err, &aborted):
			// The wait ended (a signal, --timeout) as the lead came: this process is on
			// its way out and runs nothing. Goexit gives the lead up with no result kept;
			// the callers waiting elsewhere look again and one of them leads.
			runtime.Goexit()
		case err != nil:
			r.errorf("%s: %v", r.cfg.argv[0], err)
			status := startStatus(err)
			lead.set(status, nil, false)
			return onceResult{Status: status}, nil
		}
		status, lost, bySignal := r.supervise(ch, lease, "the lead of "+what)
		abandoned := bySignal && lost == nil
		lead.set(status, lost, abandoned)
		if abandoned {
			// CMD died of a signal sent to this distsync: the run was interrupted, not
			// done. Give the lead up without a result (none is kept); a waiting caller
			// runs CMD.
			runtime.Goexit()
		}
		return onceResult{Status: status, Stdout: out.buf, Dropped: out.dropped}, nil
	}
	for {
		res, err, _ := g.Do(r.sigs.waitCtx, onceKey, fn)
		if ran, status, lost, abandoned := lead.get(); ran {
			switch {
			case lost != nil:
				return exitLost // supervise said why
			case abandoned:
				return status
			case errors.Is(err, distsync.ErrLost):
				r.errorf("%s: the lead was gone from Redis when the command ended, so its result was not shared and another caller may run the command too (%v)", what, err)
				return exitLost
			case err != nil:
				r.notef("%s: %v", what, err)
			}
			return status
		}
		switch {
		case err == nil:
			_, _ = r.stdout.Write(res.Stdout)
			if res.Dropped > 0 {
				r.notef("%s: the command wrote %d bytes to stdout; only the first %d were shared", what,
					int64(len(res.Stdout))+res.Dropped, len(res.Stdout))
			}
			return res.Status
		case errors.Is(err, once.ErrGoexit) && r.sigs.waitCtx.Err() == nil:
			continue // the leader gave up without a result: look again, and maybe lead
		}
		return r.notAcquired(what, err)
	}
}

// notAcquired returns the exit status for an acquire (or a wait for once's result) that
// ended with err before CMD could start.
func (r *runner) notAcquired(what string, err error) int {
	if r.sigs.waitCtx.Err() != nil {
		cause := context.Cause(r.sigs.waitCtx)
		var sig signalError
		if errors.As(cause, &sig) {
			return 128 + int(sig.sig)
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

// signalError is the cause of a wait that a signal ended.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return "interrupted by " + signalName(e.sig) }

// errTimedOut is the cause of a wait that --timeout ended.
var errTimedOut = errors.New("--timeout ran out")

// abortError is returned by router.begin when the wait ended before CMD could start.
type abortError struct{ cause error }

func (e abortError) Error() string { return "not started: " + e.cause.Error() }

// status is distsync's exit status for a run aborted by a signal.
func (e abortError) status() int {
	var sig signalError
	if errors.As(e.cause, &sig) {
		return 128 + int(sig.sig)
	}
	return exitUsage // not reached: only a signal aborts a lock or sem
}

// router receives the signals sent to distsync from its start and routes each: while
// distsync waits for the claim, SIGINT, SIGTERM, SIGHUP and SIGQUIT cancel waitCtx (the
// others are ignored); while CMD runs, every one is forwarded to it; after CMD exited, they
// are ignored while the claim is released (within releaseTimeout). --timeout cancels
// waitCtx too, while distsync waits. The switch from waiting to running is made under one
// lock (begin), so a signal is either a cancelled wait or a forwarded signal, never lost.
type router struct {
	ch        chan os.Signal
	done      chan struct{}
	waitCtx   context.Context
	signalled chan struct{} // closed when a signal cancels waitCtx

	mu      sync.Mutex
	cancel  context.CancelCauseFunc
	waiting bool
	cause   error // why waitCtx was cancelled
	timer   *time.Timer
	child   *child
	started bool // CMD was started (and may have exited since)
}

func newRouter() *router {
	r := &router{ch: make(chan os.Signal, 16), done: make(chan struct{}), signalled: make(chan struct{}), waiting: true}
	r.waitCtx, r.cancel = context.WithCancelCause(context.Background())
	// SIGPIPE too, so that a write to a closed stdout returns EPIPE instead of killing
	// distsync, which must release its claim; it is not forwarded.
	signal.Notify(r.ch, append(forwardedSignals, syscall.SIGPIPE)...)
	go func() {
		for {
			select {
			case sig := <-r.ch:
				r.deliver(sig.(syscall.Signal))
			case <-r.done:
				return
			}
		}
	}()
	return r
}

func (r *router) deliver(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case sig == syscall.SIGPIPE:
	case r.child != nil:
		r.child.signal(sig)
	case r.started || sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2 || sig == syscall.SIGCONT || sig == syscall.SIGTSTP:
		// CMD has exited (the claim is being released), or a signal that ends no wait.
	default:
		// Not started yet: waiting, or acquired (or timed out) and about to start. Either
		// way CMD must not start now; begin sees the cause.
		if _, signalled := r.cause.(signalError); !signalled {
			r.endWait(signalError{sig})
			close(r.signalled)
		}
	}
}

// endWait cancels the wait with cause. r.mu is held.
func (r *router) endWait(cause error) {
	r.waiting = false
	r.cause = cause
	r.cancel(cause)
}

// startTimer makes the wait end after d.
func (r *router) startTimer(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = time.AfterFunc(d, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.waiting {
			r.endWait(errTimedOut)
		}
	})
}

// begin ends the wait and starts CMD with start, unless the wait was cancelled already by a
// signal (or, if abortOnTimeout, by --timeout): then it returns an abortError. From then on,
// signals are forwarded to the child until childGone.
func (r *router) begin(start func() (*child, error), abortOnTimeout bool) (*child, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
	if r.cause != nil && (abortOnTimeout || !errors.Is(r.cause, errTimedOut)) {
		return nil, abortError{r.cause}
	}
	r.waiting = false
	c, err := start()
	if err != nil {
		return nil, err
	}
	r.child, r.started = c, true
	if c.group {
		signal.Notify(r.ch, syscall.SIGTSTP) // forwarded from now on: see forwardedSignals
	}
	return c, nil
}

// childGone stops forwarding signals to the child, which has exited.
func (r *router) childGone() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.child = nil
}

func (r *router) close() {
	signal.Stop(r.ch)
	close(r.done)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.cancel(context.Canceled)
}

// logHandler prints those of the Handle's warnings that the command does not report itself,
// as "distsync: ..." lines on stderr: a once result that could not be shared (the waiting
// callers take over when the lead lapses). The others say again what distsync has said in
// its own words (a lost claim, a release that failed, a wait that was given up and whose
// queue entry expires by itself) or are the library's own retries (a subscription made
// again), and are dropped: one event, one message.
type logHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	attrs []slog.Attr
}

// shownLogPrefix starts the messages of the Handle's logger that logHandler prints.
const shownLogPrefix = "distsync: once: "

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *logHandler) Handle(_ context.Context, rec slog.Record) error {
	if !strings.HasPrefix(rec.Message, shownLogPrefix) {
		return nil
	}
	var b strings.Builder
	b.WriteString(rec.Message)
	add := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	rec.Attrs(add)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{w: h.w, mu: h.mu, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

func (h *logHandler) WithGroup(string) slog.Handler { return h }

//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// What differs between platforms is behind three functions, in child_linux.go and, for
// other Unix systems, child_other.go, child_freebsd.go and child_nopdeathsig.go:
//
//   - sysProcAttr(group) is how the child is started: in a process group of its own or
//     not, and, on Linux and FreeBSD, with a parent-death signal.
//   - awaitExit(cmd) returns once the child has exited. On Linux it does not reap the child
//     (waitid with WNOWAIT), so the child's pid and process group id stay its own until
//     reap; elsewhere it reaps it with cmd.Wait and says so, and signal stops signalling.
//   - signalGroup(p, sig) signals the child's process group; elsewhere than on Linux, only
//     if the child has not been reaped.

// childSpec is how to start the command that runs under a claim.
type childSpec struct {
	path       string   // the executable, resolved by lookCommand
	argv       []string // as given: argv[0] is the name the user typed
	env        []string // added to distsync's environment, replacing variables of the same name (childEnv)
	stdout     io.Writer
	stderr     io.Writer
	foreground bool // stay in distsync's process group; signal the child only
	// tty is distsync's controlling terminal, nil if none: in a group of its own, the
	// child is given it while it runs if distsync has it (see terminal).
	tty *terminal
}

// child is a running command. Signals reach it through signal, which never signals after
// the child was reaped: in a process group of its own (the default), a signal goes to the
// whole group, and the group's id is the child's pid, which the kernel may give to another
// process once the child is reaped and its group is empty.
type child struct {
	cmd   *exec.Cmd
	group bool      // signals go to the process group -pid
	tty   *terminal // the terminal handed to the child's group, nil if none
	// exited is closed when the child has exited: on Linux a zombie, not reaped yet; on
	// other systems already reaped by awaitExit's cmd.Wait, which also waited for a copied
	// stdout (so up to WaitDelay after the exit if something the child started holds it).
	exited chan struct{}

	mu        sync.Mutex
	reaped    bool                    // set before the child is reaped (after, by awaitExit)
	forwarded map[syscall.Signal]bool // the signals sent to the child
}

// lookCommand resolves name as the shell would (a name without a slash is looked up in
// PATH) and returns the exit status for a name that cannot be run: exitNotFound or
// exitCannotExec. It runs before distsync contacts Redis, so a typo takes no lock.
func lookCommand(name string) (path string, status int, err error) {
	path, err = exec.LookPath(name)
	switch {
	case err == nil:
		return path, 0, nil
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EISDIR): // as a shell: 126
		return "", exitCannotExec, err
	default: // exec.ErrNotFound, fs.ErrNotExist, exec.ErrDot
		return "", exitNotFound, err
	}
}

// startChild starts the command. The thread that starts it stays locked to its goroutine
// until the child exits: on Linux the child is made to get SIGKILL when that thread ends
// (PR_SET_PDEATHSIG), so that a distsync killed with SIGKILL, which can release nothing,
// does not leave the command running unprotected once the claim expires. (Only the child
// gets it, not what the child started.) FreeBSD has one too; other systems have none: a
// distsync killed with SIGKILL leaves the command running (see child_nopdeathsig.go).
func startChild(spec childSpec) (*child, error) {
	group, tty := !spec.foreground, spec.tty
	if tty != nil && tty.inForeground() && !tty.leader() {
		// distsync is part of a larger job in the foreground (a script, a pipeline after
		// its first command): the terminal is that job's, and its Ctrl-C must reach the
		// whole job as it would without distsync. The child stays in distsync's group, as
		// with --foreground.
		group = false
	}
	if !group {
		tty = nil // the child shares distsync's group, and job control, as it is
	}
	attr := sysProcAttr(group)
	if tty != nil && tty.inForeground() {
		// distsync is a job of its own in the foreground: the child makes its new group
		// the terminal's foreground group before it runs its program (with signals
		// blocked, so it gets no SIGTTOU), as a shell does for a job.
		attr.Foreground, attr.Ctty = true, tty.fd()
	}
	cmd := &exec.Cmd{
		Path:        spec.path,
		Args:        spec.argv,
		Env:         childEnv(os.Environ(), append(childCredentials(), spec.env...)),
		Stdin:       os.Stdin,
		Stdout:      spec.stdout,
		Stderr:      spec.stderr,
		SysProcAttr: attr,
		// A copied stdout (a once leader's) is read until the child and everything that
		// inherited the pipe closed it; a background process of the child's must not keep
		// distsync, and the claim, waiting for it.
		WaitDelay: time.Second,
	}
	c := &child{cmd: cmd, group: group, tty: tty, exited: make(chan struct{}), forwarded: map[syscall.Signal]bool{}}
	started := make(chan error, 1)
	go func() {
		// For the parent-death signal on Linux; elsewhere harmless, as the goroutine spends
		// the child's life in a system call (awaitExit), which holds a thread anyway.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		var onStop func(syscall.Signal)
		if tty != nil {
			ignoreTTOU() // after the start: the child is not to inherit it
			onStop = c.stopped
		}
		started <- nil
		reaped := awaitExit(cmd, onStop)
		if tty != nil {
			tty.reclaim(cmd.Process.Pid) // before the reaping: the group id is still the child's
		}
		if reaped {
			c.mu.Lock()
			c.reaped = true
			c.mu.Unlock()
		}
		close(c.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// startStatus is the exit status for a command that could not be started.
func startStatus(err error) int {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
		return exitNotFound
	}
	return exitCannotExec
}

// childEnv returns base with the variables of add set, replacing any of the same name; an
// entry of add without "=" (a bare NAME) removes the variable NAME.
func childEnv(base, add []string) []string {
	env := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		replaced := false
		for _, a := range add {
			if n, _, _ := strings.Cut(a, "="); n == name {
				replaced = true
				break
			}
		}
		if !replaced {
			env = append(env, kv)
		}
	}
	for _, a := range add {
		if strings.Contains(a, "=") {
			env = append(env, a)
		}
	}
	return env
}

// signal sends sig to the child's process group (or, with --foreground, to the child only).
// It does nothing once the child has been reaped. A signal that ends a process by default is
// followed by SIGCONT, as GNU timeout does, so that a stopped child gets it too. SIGCONT
// gives the child the terminal first, if distsync has it (see terminal.resume).
func (c *child) signal(sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reaped {
		return
	}
	c.forwarded[sig] = true
	if sig == syscall.SIGCONT && c.tty != nil && c.group {
		c.tty.resume(c.cmd.Process.Pid)
		return
	}
	c.send(sig)
	switch sig {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
		c.send(syscall.SIGCONT)
	}
}

// send sends sig as signal does. c.mu is held.
func (c *child) send(sig syscall.Signal) {
	if c.group {
		signalGroup(c.cmd.Process, sig)
		return
	}
	select {
	case <-c.exited:
		return // a zombie: nothing left to signal
	default:
	}
	_ = c.cmd.Process.Signal(sig)
}

// stopped is called when the child was stopped by sig. A stop by job control (Ctrl-Z, a
// read or write of the terminal from the background) is the terminal's to handle (see
// terminal.jobStopped); a SIGSTOP is someone's pause, and distsync goes on renewing.
func (c *child) stopped(sig syscall.Signal) {
	switch sig {
	case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
		c.tty.jobStopped(c.cmd.Process.Pid)
	}
}

// stop ends the child after its claim was lost: SIGTERM, then SIGKILL if it has not exited
// after grace. In a process group, SIGKILL goes to the group even when the child has
// exited, for what it started and left behind. It reports whether SIGKILL was needed for
// the child itself, and returns once the child has exited.
func (c *child) stop(grace time.Duration) (killed bool) {
	c.signal(syscall.SIGTERM)
	if grace > 0 {
		t := time.NewTimer(grace)
		select {
		case <-c.exited:
		case <-t.C:
		}
		t.Stop()
	}
	select {
	case <-c.exited:
	default:
		killed = true
	}
	if killed || c.group {
		c.signal(syscall.SIGKILL)
	}
	<-c.exited
	return killed
}

// reap collects the child, which has exited, and returns its exit status as a shell reports
// it (128+N for a death by signal N) and whether it died of a signal that was sent to it.
func (c *child) reap() (status int, bySentSignal bool) {
	<-c.exited
	c.mu.Lock()
	waited := c.reaped // by awaitExit, which left the status in ProcessState
	c.reaped = true
	c.mu.Unlock()
	if !waited {
		_ = c.cmd.Wait() // the status is in ProcessState; an I/O error of a copied stdout is not the command's
	}
	ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		return c.cmd.ProcessState.ExitCode(), false
	}
	if ws.Signaled() {
		return bySignal(ws.Signal()), c.forwarded[ws.Signal()]
	}
	return ws.ExitStatus(), false
}

// pid returns the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// capture copies a once leader's stdout to distsync's own and keeps its first limit bytes
// for the followers.
type capture struct {
	out     io.Writer
	outErr  error // the first error writing to out: nothing more is copied there
	limit   int
	buf     []byte
	dropped int64 // bytes beyond limit, copied to out but not kept
}

func (c *capture) Write(p []byte) (int, error) {
	if c.outErr == nil {
		_, c.outErr = c.out.Write(p)
	}
	keep := min(len(p), c.limit-len(c.buf))
	c.buf = append(c.buf, p[:keep]...)
	c.dropped += int64(len(p) - keep)
	return len(p), nil // the child's output is never refused, or it would get EPIPE
}

// signalName returns "SIGTERM" for syscall.SIGTERM.
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return "signal " + strconv.Itoa(int(sig))
}

// describeStatus says what an exit status means, for messages.
func describeStatus(status int) string {
	if status > 128 && status < 128+65 {
		return fmt.Sprintf("status %d (%s)", status, signalName(syscall.Signal(status-128)))
	}
	return fmt.Sprintf("status %d", status)
}

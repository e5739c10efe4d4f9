//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// terminal is distsync's controlling terminal, through which it hands the terminal to CMD's
// process group and takes it back, as a shell does with a job.
//
// CMD runs in a process group of its own, so that distsync can signal everything CMD
// started. A process group that is not the terminal's foreground group is stopped when it
// reads the terminal (SIGTTIN), and does not get the terminal's Ctrl-C. So when distsync is
// in the foreground, CMD's group is made the foreground group while CMD runs (startChild),
// and distsync's again when CMD exits (reclaim). When CMD is stopped by job control (Ctrl-Z,
// or a read from the background), distsync stops too, so that the shell sees its job stopped
// and can resume it; when distsync is resumed, it resumes CMD, with the terminal if distsync
// has it (resume).
type terminal struct {
	f    *os.File
	pgrp int // distsync's process group
}

// openTerminal returns distsync's controlling terminal, or nil if it has none (cron, a
// service, setsid).
func openTerminal() *terminal {
	f, err := os.OpenFile("/dev/tty", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return &terminal{f: f, pgrp: syscall.Getpgrp()}
}

func (t *terminal) fd() int { return int(t.f.Fd()) }

// foregroundGroup returns the terminal's foreground process group (-1 if it cannot be read).
func (t *terminal) foregroundGroup() int {
	pg, err := unix.IoctlGetInt(t.fd(), unix.TIOCGPGRP)
	if err != nil {
		return -1
	}
	return pg
}

// leader reports whether distsync leads its process group: a shell with job control started
// it as a job (or as the first command of a pipeline), not as part of a script's job.
func (t *terminal) leader() bool { return t.pgrp == os.Getpid() }

// inForeground reports whether distsync's process group is the terminal's foreground group:
// a shell runs it in the foreground, or gave it the terminal back (fg).
func (t *terminal) inForeground() bool { return t.foregroundGroup() == t.pgrp }

// give makes pgid the terminal's foreground group. distsync ignores SIGTTOU while CMD runs
// (ignoreTTOU), so it may do so from the background, as a shell does.
func (t *terminal) give(pgid int) {
	_ = unix.IoctlSetPointerInt(t.fd(), unix.TIOCSPGRP, pgid)
}

// ignoreTTOU makes distsync ignore SIGTTOU, once CMD is started (CMD is not to inherit it):
// so that distsync can take the terminal back from the background, and print its messages
// there even if the terminal stops background writers (stty tostop).
func ignoreTTOU() { signal.Ignore(syscall.SIGTTOU) }

// reclaim takes the terminal back for distsync's group if CMD's group (pgid) has it: CMD has
// exited, and what runs after distsync in its shell or script needs the terminal.
func (t *terminal) reclaim(pgid int) {
	if t.foregroundGroup() == pgid {
		t.give(t.pgrp)
	}
}

// orphaned reports whether distsync's process group is orphaned: no process outside it in
// the same session is its parent, so no shell would resume it once stopped. distsync's
// parent is such a shell unless it is in distsync's own group or another session (distsync
// started by setsid, or by a process that died).
func (t *terminal) orphaned() bool {
	ppid := os.Getppid()
	ppgrp, err1 := unix.Getpgid(ppid)
	psid, err2 := unix.Getsid(ppid)
	sid, err3 := unix.Getsid(0)
	return ppid == 1 || err1 != nil || err2 != nil || err3 != nil || ppgrp == t.pgrp || psid != sid
}

// jobStopped is what distsync does when CMD, in its own group (pgid), was stopped by job
// control (sig: SIGTSTP, SIGTTIN or SIGTTOU). If a shell can resume distsync, distsync takes
// the terminal back and stops itself, so that the shell sees its job stopped (the shell
// then resumes it with fg or bg: see resume). If none can, it resumes CMD at once, as the
// kernel does not stop an orphaned job: with the terminal if distsync or CMD has it, so that
// a CMD that stopped to read it can.
func (t *terminal) jobStopped(pgid int) {
	if !t.orphaned() {
		t.reclaim(pgid)
		// SIGSTOP: distsync catches SIGTSTP (to forward it), and Go's handler would swallow
		// a SIGTSTP sent to itself.
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		return
	}
	if fg := t.foregroundGroup(); fg == t.pgrp || fg == pgid {
		t.give(pgid)
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
	}
}

// resume is what distsync does when it gets SIGCONT while CMD runs in its own group (pgid):
// it gives CMD the terminal if distsync has it (fg), and resumes CMD.
func (t *terminal) resume(pgid int) {
	if t.inForeground() {
		t.give(pgid)
	}
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
}

func (t *terminal) close() { _ = t.f.Close() }

// foregroundOf reports, if fd is a terminal (ok), whether distsync's process group is its
// foreground group.
func foregroundOf(fd int) (fg, ok bool) {
	pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil {
		return false, false
	}
	return pg == unix.Getpgrp(), true
}

//go:build unix && !linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// On Unix systems other than Linux, the guarantees are weaker:
//
//   - Except on FreeBSD (child_freebsd.go), there is no parent-death signal: if distsync
//     is killed with SIGKILL, which can release nothing, the command keeps running, and
//     runs unprotected once the claim expires (child_nopdeathsig.go). A distsync that ends
//     on SIGTERM, SIGINT, ... still forwards the signal and waits for the command.
//   - The exit is not awaited without reaping: golang.org/x/sys/unix has waitid, and
//     WNOWAIT, only on Linux (and z/OS). awaitExit reaps the child with cmd.Wait, so once
//     the child has exited, its pid and process group id may be given to another process;
//     signal then no longer signals the group, not even the SIGKILL with which stop ends
//     what the child started and left behind in its group.
//   - The child's stops are not seen (waitid with WSTOPPED is Linux's): when job control
//     stops CMD (Ctrl-Z), distsync does not stop with it, so the shell does not get the
//     terminal back until CMD is resumed or ended (kill -CONT, or a signal to distsync,
//     which forwards it with SIGCONT).
//   - exited is closed only when cmd.Wait returns, which is also after a copied stdout (a
//     once leader's) is closed: at most WaitDelay later if something the child started
//     keeps it open.

// awaitExit reaps cmd's process with cmd.Wait, which leaves its status in
// cmd.ProcessState, and reports that it reaped it. It does not see the child stop, so
// onStop is never called: a CMD stopped by job control (Ctrl-Z) leaves distsync running.
func awaitExit(cmd *exec.Cmd, onStop func(sig syscall.Signal)) (reaped bool) {
	_ = cmd.Wait() // as in reap: an I/O error of a copied stdout is not the command's
	return true
}

// signalGroup sends sig to p's process group, whose id is p's pid, unless p was reaped.
// awaitExit's cmd.Wait reaps the child without holding the child's mutex, and reaped is
// set only after a copied stdout is closed too; p.Signal knows sooner: it reports
// os.ErrProcessDone, without signalling, once os.Process.Wait has reaped p (on some
// systems already while p is a zombie). What is left are instants, as in os.Process.Signal itself: between this
// check and the kill, and (where os.Process cannot wait without reaping, as on macOS and
// OpenBSD) between the reaping and os.Process.Wait noting it. A pid is reused within
// one only if the system's pids wrapped around meanwhile.
func signalGroup(p *os.Process, sig syscall.Signal) {
	if errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone) {
		return
	}
	_ = syscall.Kill(-p.Pid, sig) // ESRCH: the group is gone
}

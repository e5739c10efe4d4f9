package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr puts the child in a process group of its own if group, and has it get
// SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG; see startChild).
func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:   group,
		Pdeathsig: syscall.SIGKILL,
	}
}

// awaitExit returns once cmd's process has exited, without reaping it (WNOWAIT): until
// reap calls cmd.Wait, the child's pid, and so its process group's id, cannot be reused,
// so signal stays safe. It reports that it did not reap the child.
func awaitExit(cmd *exec.Cmd) (reaped bool) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	return false
}

// signalGroup sends sig to p's process group, whose id is p's pid. The child is not reaped
// while signal may call this (its reaped is set first), so the group's id is still its own.
func signalGroup(p *os.Process, sig syscall.Signal) {
	_ = syscall.Kill(-p.Pid, sig) // ESRCH: the group is gone
}

package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"unsafe"

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
// so signal stays safe. It reports that it did not reap the child. If onStop is not nil, it
// calls it with the signal each time the child is stopped.
func awaitExit(cmd *exec.Cmd, onStop func(sig syscall.Signal)) (reaped bool) {
	pid := cmd.Process.Pid
	flags := unix.WEXITED | unix.WNOWAIT
	if onStop != nil {
		flags |= unix.WSTOPPED
	}
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, flags, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil || info.Code != cldStopped:
			return false
		}
		// WNOWAIT left the stop to be reported again: take it (WSTOPPED alone never reaps).
		var taken unix.Siginfo
		_ = unix.Waitid(unix.P_PID, pid, &taken, unix.WSTOPPED|unix.WNOHANG, nil)
		onStop(syscall.Signal(childStatus(&info)))
	}
}

// cldStopped is si_code CLD_STOPPED, which golang.org/x/sys/unix does not name.
const cldStopped = 5

// childStatus returns the si_status of a SIGCHLD siginfo: the signal that stopped the child
// for CLD_STOPPED. It is the third int of the union that follows si_signo, si_errno and
// si_code, which a 64-bit kernel aligns to 8 bytes.
func childStatus(info *unix.Siginfo) int32 {
	union := uintptr(12)
	if unsafe.Sizeof(uintptr(0)) == 8 {
		union = 16
	}
	return *(*int32)(unsafe.Add(unsafe.Pointer(info), union+8))
}

// signalGroup sends sig to p's process group, whose id is p's pid. The child is not reaped
// while signal may call this (its reaped is set first), so the group's id is still its own.
func signalGroup(p *os.Process, sig syscall.Signal) {
	_ = syscall.Kill(-p.Pid, sig) // ESRCH: the group is gone
}

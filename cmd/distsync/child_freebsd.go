package main

import "syscall"

// sysProcAttr puts the child in a process group of its own if group, and has it get
// SIGKILL when distsync exits (procctl PROC_PDEATHSIG_CTL; see startChild). The exit is
// still awaited by reaping (child_other.go).
func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:   group,
		Pdeathsig: syscall.SIGKILL,
	}
}

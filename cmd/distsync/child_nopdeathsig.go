//go:build unix && !linux && !freebsd

package main

import "syscall"

// sysProcAttr puts the child in a process group of its own if group. These systems have no
// parent-death signal (syscall.SysProcAttr has Pdeathsig on Linux and FreeBSD only): if
// distsync is killed with SIGKILL, which can release nothing, the command keeps running,
// unprotected once the claim expires.
func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}

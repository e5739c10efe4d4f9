//go:build unix && !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

// terminal is the controlling terminal where distsync can hand it to CMD (tty.go); on these
// systems it does not: CMD in its own group is stopped if it reads the terminal (use
// --foreground for a CMD that does).
type terminal struct{}

func openTerminal() *terminal           { return nil }
func (t *terminal) fd() int             { return -1 }
func (t *terminal) inForeground() bool  { return false }
func (t *terminal) leader() bool        { return false }
func (t *terminal) reclaim(pgid int)    {}
func (t *terminal) jobStopped(pgid int) {}
func (t *terminal) resume(pgid int)     {}
func (t *terminal) close()              {}
func ignoreTTOU()                       {}

// foregroundOf reports, if fd is a terminal (ok), whether distsync is in its foreground: on
// these systems, distsync cannot tell (ok is false).
func foregroundOf(fd int) (fg, ok bool) { return false, false }

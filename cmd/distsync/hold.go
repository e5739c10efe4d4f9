//go:build unix

package main

// This file: lock and sem --hold, a claim held across several lines of a script.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/distsync/distsync"
)

// holdableInput returns why distsync's standard input would end a --hold at once, or would
// never be read, or nil. The hold lasts until the input ends: the script that reads the token
// closes the pipe, or dies. An input that ends at once, /dev/null (a background job's in a
// shell without job control) or a regular file, would release the claim as soon as it is
// taken; a terminal that distsync is not in the foreground of would stop it when it reads
// (SIGTTIN), and a stopped distsync renews nothing.
func holdableInput() error {
	var st unix.Stat_t
	if err := unix.Fstat(0, &st); err != nil {
		return fmt.Errorf("standard input: %w (it must be a pipe that stays open while the claim is held)", err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFSOCK:
		return nil
	case unix.S_IFCHR:
		switch fg, ok := foregroundOf(0); {
		case ok && fg:
			return nil // a terminal: Ctrl-D releases
		case ok:
			return errors.New("standard input is a terminal that distsync is not in the foreground of (a background job): reading it would stop distsync, and its claim with it; run it as a coprocess (bash: coproc)")
		}
	}
	return errors.New("standard input is not a pipe or a terminal, so it would end at once and release the claim: run distsync as a coprocess (bash: coproc), whose input the script keeps open while it needs the claim")
}

// hold keeps c, acquired under lease with tokens, while distsync's standard input is open,
// and releases it when the input ends or a signal comes. It writes the tokens to stdout once
// held, one line each. A loss while held is said on stderr and is exit status exitLost; the
// script learns of it when it waits for distsync.
func (r *runner) hold(c claim, lease *distsync.Lease, tokens []int64) int {
	signalled, caught := r.sigs.holding()
	select {
	case <-signalled: // since the claim was taken: no token for the script, which is being ended
		_ = r.release(c)
		return bySignal(caught())
	default:
	}
	var lines strings.Builder
	for _, t := range tokens {
		fmt.Fprintf(&lines, "%d\n", t)
	}
	// The router gets SIGPIPE: a reader gone makes the write fail, and the claim is released.
	if _, err := io.WriteString(r.stdout, lines.String()); err != nil {
		_ = r.release(c)
		r.errorf("released %s at once: the token could not be written (%v)", c.what, err)
		return exitUnavailable
	}
	ended := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(ended)
	}()
	select {
	case <-ended:
		select {
		case <-signalled: // both: the signal says more of what ended the script
			_ = r.release(c)
			return bySignal(caught())
		default:
		}
	case <-signalled:
		_ = r.release(c)
		return bySignal(caught())
	case <-lease.Done():
		lost := lease.Err()
		if lost == nil {
			lost = distsync.ErrLost
		}
		r.errorf("lost %s while it was held (%v)", c.what, lost)
		_ = r.release(c)
		return exitLost
	}
	if err := r.release(c); err != nil {
		if errors.Is(err, distsync.ErrLost) {
			r.errorf("%s was lost before its input ended, so it may not have been held all along (%v)", c.what, err)
			return exitLost
		}
		r.notef("could not release %s, which expires by itself within --ttl %v: %v", c.what, r.cfg.ttl, rootCause(err))
	}
	return exitOK
}

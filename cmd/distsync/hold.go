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

// holdableInput returns why distsync's standard input cannot end a --hold, or nil. The hold
// lasts until the input ends: the script that reads the token closes the pipe, or dies. An
// input that ends at once, /dev/null (a background job's in a shell without job control) or
// a regular file, would release the claim as soon as it is taken.
func holdableInput() error {
	var st unix.Stat_t
	if err := unix.Fstat(0, &st); err != nil {
		return fmt.Errorf("standard input: %w (it must be a pipe that stays open while the claim is held)", err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFSOCK:
		return nil
	case unix.S_IFCHR:
		if isTerminal(0) {
			return nil // a terminal: Ctrl-D releases
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

//go:build unix

package main

// This file: the signals distsync gets while it waits and while CMD runs.

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// signalError is the cause of a wait that a signal ended.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return "interrupted by " + signalName(e.sig) }

// errTimedOut is the cause of a wait that --timeout ended.
var errTimedOut = errors.New("--timeout ran out")

// abortError is returned by router.begin when the wait ended before CMD could start.
type abortError struct{ cause error }

func (e abortError) Error() string { return "not started: " + e.cause.Error() }

// status is distsync's exit status for a run aborted by a signal.
func (e abortError) status() int {
	var sig signalError
	if errors.As(e.cause, &sig) {
		return bySignal(sig.sig)
	}
	return exitUsage // not reached: only a signal aborts a lock or sem
}

// router receives the signals sent to distsync from its start and routes each: while
// distsync waits for the claim, SIGINT, SIGTERM, SIGHUP and SIGQUIT cancel waitCtx (the
// others are ignored); while CMD runs, every one is forwarded to it; after CMD exited, they
// are ignored while the claim is released (within releaseTimeout). --timeout cancels
// waitCtx too, while distsync waits. The switch from waiting to running is made under one
// lock (begin), so a signal is either a cancelled wait or a forwarded signal, never lost.
type router struct {
	ch        chan os.Signal
	done      chan struct{}
	waitCtx   context.Context
	signalled chan struct{} // closed when a signal cancels waitCtx

	mu      sync.Mutex
	cancel  context.CancelCauseFunc
	waiting bool
	cause   error // why waitCtx was cancelled
	timer   *time.Timer
	child   *child
	started bool // CMD was started (and may have exited since)
}

func newRouter() *router {
	r := &router{ch: make(chan os.Signal, 16), done: make(chan struct{}), signalled: make(chan struct{}), waiting: true}
	r.waitCtx, r.cancel = context.WithCancelCause(context.Background())
	// SIGPIPE too, so that a write to a closed stdout returns EPIPE instead of killing
	// distsync, which must release its claim; it is not forwarded.
	signal.Notify(r.ch, append(forwardedSignals, syscall.SIGPIPE)...)
	go func() {
		for {
			select {
			case sig := <-r.ch:
				r.deliver(sig.(syscall.Signal))
			case <-r.done:
				return
			}
		}
	}()
	return r
}

func (r *router) deliver(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case sig == syscall.SIGPIPE:
	case r.child != nil:
		r.child.signal(sig)
	case r.started || sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2 || sig == syscall.SIGCONT || sig == syscall.SIGTSTP:
		// CMD has exited (the claim is being released), or a signal that ends no wait.
	default:
		// Not started yet: waiting, or acquired (or timed out) and about to start. Either
		// way CMD must not start now; begin sees the cause.
		if _, signalled := r.cause.(signalError); !signalled {
			r.endWait(signalError{sig})
			close(r.signalled)
		}
	}
}

// endWait cancels the wait with cause. r.mu is held.
func (r *router) endWait(cause error) {
	r.waiting = false
	r.cause = cause
	r.cancel(cause)
}

// startTimer makes the wait end after d.
func (r *router) startTimer(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = time.AfterFunc(d, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.waiting {
			r.endWait(errTimedOut)
		}
	})
}

// begin ends the wait and starts CMD with start, unless the wait was cancelled already by a
// signal (or, if abortOnTimeout, by --timeout): then it returns an abortError. From then on,
// signals are forwarded to the child until childGone.
func (r *router) begin(start func() (*child, error), abortOnTimeout bool) (*child, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
	if r.cause != nil && (abortOnTimeout || !errors.Is(r.cause, errTimedOut)) {
		return nil, abortError{r.cause}
	}
	r.waiting = false
	c, err := start()
	if err != nil {
		return nil, err
	}
	r.child, r.started = c, true
	if c.group {
		signal.Notify(r.ch, syscall.SIGTSTP) // forwarded from now on: see forwardedSignals
	}
	return c, nil
}

// holding ends the wait for --hold, which has the claim: --timeout no longer applies, and a
// signal that would have ended the wait ends the hold. It returns a channel closed when such
// a signal comes (or came already), and a function that returns the signal then.
func (r *router) holding() (<-chan struct{}, func() syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.waiting = false // a timer that fired already ends nothing now
	return r.signalled, func() syscall.Signal {
		r.mu.Lock()
		defer r.mu.Unlock()
		sig, _ := r.cause.(signalError)
		return sig.sig
	}
}

// childGone stops forwarding signals to the child, which has exited.
func (r *router) childGone() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.child = nil
}

func (r *router) close() {
	signal.Stop(r.ch)
	close(r.done)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.cancel(context.Canceled)
}

//go:build unix

package main

// This file: once: CMD run once among every caller of KEY, its result shared.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/once"
)

// onceGroup returns the once.Group through which callers of KEY share a run's result: the
// group called KEY, whose one key is "" (as a once.Once's), so that "distsync inspect KEY"
// and "distsync ls" show it by the name the user gave.
func (r *runner) onceGroup(h *distsync.Handle) (*once.Group[onceResult], error) {
	var opts []distsync.Option
	if r.cfg.keep > 0 {
		// A non-zero status is a result, returned by fn with a nil error, so WithKeep keeps
		// it like a zero; WithKeepErrors is not needed (fn never fails).
		opts = append(opts, once.WithKeep(r.cfg.keep))
	}
	return once.NewGroup[onceResult](h, r.cfg.name, opts...)
}

// onceKey is the key of the command's once group (see onceGroup).
const onceKey = ""

// forget drops the result kept for KEY (once --forget).
func (r *runner) forget(h *distsync.Handle) int {
	g, err := r.onceGroup(h)
	if err != nil {
		r.errorf("%v", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(r.sigs.waitCtx, releaseTimeout)
	defer cancel()
	if err := g.Forget(ctx, onceKey); err != nil {
		r.errorf("%v", err)
		if r.sigs.waitCtx.Err() != nil {
			return r.notAcquired(fmt.Sprintf("once %q", r.cfg.name), err)
		}
		return exitUnavailable
	}
	r.notef("once %q: the kept result, if any, is dropped: the next caller runs the command", r.cfg.name)
	return exitOK
}

// onceResult is what a once leader shares: CMD's exit status and the start of its stdout.
type onceResult struct {
	Status  int    `json:"status"`            // as a shell reports it: 128+N for signal N
	Stdout  []byte `json:"stdout,omitempty"`  // the first onceOutputLimit bytes
	Dropped int64  `json:"dropped,omitempty"` // bytes of stdout beyond them, not shared
}

// leadRecord is what this process's lead of a once did, if it led.
type leadRecord struct {
	mu        sync.Mutex
	ran       bool  // CMD was started, or failed to start
	status    int   // its status
	lost      error // the lead was lost while it ran (CMD was killed)
	abandoned bool  // CMD died of a signal distsync forwarded: not a result
}

func (l *leadRecord) set(status int, lost error, abandoned bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ran, l.status, l.lost, l.abandoned = true, status, lost, abandoned
}

func (l *leadRecord) get() (ran bool, status int, lost error, abandoned bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ran, l.status, l.lost, l.abandoned
}

// runOnce runs CMD once among every caller of KEY, or prints the result of the run that
// another caller led.
func (r *runner) runOnce(h *distsync.Handle) int {
	g, err := r.onceGroup(h)
	if err != nil {
		r.errorf("%v", err)
		return exitUsage
	}
	what := fmt.Sprintf("once %q", r.cfg.name)
	var lead leadRecord
	fn := func(ctx context.Context) (onceResult, error) {
		lease, ok := distsync.LeaseFromContext(ctx)
		if !ok {
			// Not reached: once gives its function the lead's lease, without which the
			// command would run unprotected.
			lead.set(exitUnavailable, nil, false)
			r.errorf("%s: the lead came without a lease", what)
			return onceResult{}, errors.New("distsync: the lead came without a lease")
		}
		out := &capture{out: r.stdout, limit: onceOutputLimit}
		ch, err := r.sigs.begin(func() (*child, error) { return startChild(r.spec([]int64{lease.Token()}, out)) }, true)
		var aborted abortError
		switch {
		case errors.As(err, &aborted):
			// The wait ended (a signal, --timeout) as the lead came: this process is on
			// its way out and runs nothing. Goexit gives the lead up with no result kept;
			// the callers waiting elsewhere look again and one of them leads.
			runtime.Goexit()
		case err != nil:
			r.errorf("%s: %v", r.cfg.argv[0], err)
			status := startStatus(err)
			lead.set(status, nil, false)
			return onceResult{Status: status}, nil
		}
		status, lost, bySignal := r.supervise(ch, lease, "the lead of "+what)
		abandoned := bySignal && lost == nil
		lead.set(status, lost, abandoned)
		if abandoned {
			// CMD died of a signal sent to this distsync: the run was interrupted, not
			// done. Give the lead up without a result (none is kept); a waiting caller
			// runs CMD.
			runtime.Goexit()
		}
		return onceResult{Status: status, Stdout: out.buf, Dropped: out.dropped}, nil
	}
	for {
		res, err, _ := g.Do(r.sigs.waitCtx, onceKey, fn)
		if ran, status, lost, abandoned := lead.get(); ran {
			switch {
			case lost != nil:
				return exitLost // supervise said why
			case abandoned:
				return status
			case errors.Is(err, distsync.ErrLost):
				r.errorf("%s: the lead was gone from Redis when the command ended, so its result was not shared and another caller may run the command too (%v)", what, err)
				return exitLost
			case err != nil:
				r.notef("%s: %v", what, err)
			}
			return status
		}
		switch {
		case err == nil:
			_, _ = r.stdout.Write(res.Stdout)
			if res.Dropped > 0 {
				r.notef("%s: the command wrote %d bytes to stdout; only the first %d were shared", what,
					int64(len(res.Stdout))+res.Dropped, len(res.Stdout))
			}
			return res.Status
		case errors.Is(err, once.ErrGoexit) && r.sigs.waitCtx.Err() == nil:
			continue // the leader gave up without a result: look again, and maybe lead
		}
		return r.notAcquired(what, err)
	}
}

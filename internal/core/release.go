package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// Release stops l and gives back its claim with release, which reports whether the claim was
// still l's (see GiveBack). It returns nil once released; an error matching ErrNotHeld and
// ErrLost if the claim was not l's any more, or l had already ended (lost, or the handle
// closed); and otherwise the error, while the handle goes on trying in the background for up
// to the lease's TTL. l ends either way: at once; or, after an error, as released when a
// background try reaches Redis before l's local deadline and finds the claim released by l,
// as lost when a try finds it gone or taken, and as lost at that deadline if no try reached
// Redis by then. p and verb name the release in the log, if it goes on in the background.
//
// A lease that was lost is still given back if Redis has it under l's owner (release is a
// compare-and-delete): a holder whose deadline passed while a renewal's reply was late, or
// whose process was paused, may still own the key, which would otherwise hold everyone else
// up until its TTL. That changes nothing for the caller, who is told of the loss.
//
// The release that reaches Redis at the first try, the common case, allocates nothing here:
// release takes l, so that a primitive passes a func made once, not a closure per hold.
func (h *Handle) Release(ctx context.Context, p Prim, verb string, l *Lease, release func(ctx context.Context, l *Lease) (bool, error)) error {
	if err := l.Stop(); err != nil {
		if errors.Is(err, ErrLost) {
			_, _ = release(ctx, l)
		}
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	held, err := release(ctx, l)
	if err != nil {
		held, err = h.releaseRetried(ctx, p, verb, l, release, err)
	}
	switch {
	case err != nil:
		return err
	case !held:
		lost := lost("the claim had expired or been taken when it was released")
		l.End(lost)
		return fmt.Errorf("%w: %w", ErrNotHeld, lost)
	}
	l.End(ErrReleased)
	return nil
}

// releaseRetried is Release after its first try failed with err: GiveBack's retries, then
// the background's.
func (h *Handle) releaseRetried(ctx context.Context, p Prim, verb string, l *Lease, release func(ctx context.Context, l *Lease) (bool, error), err error) (bool, error) {
	// If no attempt is confirmed now, the background goes on trying. The lease ends as
	// released once one reaches Redis before the lease's local deadline and finds the claim
	// released by this hold (now, or by an earlier attempt whose reply was lost: release tells
	// them apart by a record of the hold's release, or reports the loss when it cannot); as
	// lost when an attempt finds the claim gone or taken, or at the deadline if none reached
	// Redis by then: the holder must not believe in it past the moment Redis may have expired
	// it, whatever the background does later. A loss is never reported as a release.
	deadline := l.Deadline()
	var confirmed atomic.Bool
	ended := func() {
		if confirmed.Load() {
			l.End(ErrReleased)
		} else {
			l.End(lost("its release could not be confirmed before its lease ran out, or found the claim gone"))
		}
	}
	what := verb + " of " + p.Kind + " " + strconv.Quote(p.Name)
	held, err := h.GiveBackAfter(ctx, what, l.TTL(), ended, err, func(ctx context.Context) (bool, error) {
		held, err := release(ctx, l)
		if err == nil && held && time.Now().Before(deadline) {
			confirmed.Store(true)
		}
		return held, err
	})
	if err != nil && l.Err() == nil {
		time.AfterFunc(time.Until(deadline), func() {
			if !confirmed.Load() {
				ended()
			}
		})
	}
	return held, err
}

// GiveBack runs release, which gives back a claim and reports whether it was still held; it
// must be safe to repeat, and tell an earlier attempt of the same release that went through
// (its reply lost) from a claim that was lost meanwhile: a request id Redis applies once
// (reentrant, semaphore), or the owner of the last release kept beside the claim (mutex, fair,
// rwmutex). A connection error is retried a few times at once, and a retry's answer is the
// answer; where the two cannot be told apart, the release reports the loss. If no
// attempt is confirmed (ctx ended, Redis unreachable or failing), GiveBack returns the error
// and goes on trying in the background for up to within (the claim expires by then anyway),
// then runs finally (if not nil). An error that is not Transient (Redis refused the release:
// an ACL without a command the script calls, say) is returned as it is, after finally, with
// nothing left to try in the background.
func (h *Handle) GiveBack(ctx context.Context, what string, within time.Duration, finally func(), release func(ctx context.Context) (bool, error)) (bool, error) {
	held, err := release(ctx)
	if err == nil {
		return held, nil // the common case, without a closure or a timer
	}
	return h.GiveBackAfter(ctx, what, within, finally, err, release)
}

// GiveBackAfter is GiveBack after a first try, made by the caller, failed with err: a caller
// that makes its first try itself makes the closures GiveBack takes only when it failed.
func (h *Handle) GiveBackAfter(ctx context.Context, what string, within time.Duration, finally func(), err error, release func(ctx context.Context) (bool, error)) (bool, error) {
	var held bool
	err = retryFrom(ctx, err, func() (err error) {
		held, err = release(ctx)
		return err
	})
	if err == nil {
		return held, nil
	}
	if !Transient(err) {
		// Redis refused it (an ACL, a script's error): every retry would be refused alike.
		if finally != nil {
			finally()
		}
		return false, err
	}
	started := h.Background(what+" (the claim expires with its lease)", within, func(bctx context.Context) error {
		if finally != nil {
			defer finally()
		}
		for backoff := 20 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
			if _, err := release(bctx); err == nil {
				return nil
			}
			select {
			case <-time.After(backoff):
			case <-bctx.Done():
				return bctx.Err()
			}
		}
	})
	if !started && finally != nil {
		finally()
	}
	return false, fmt.Errorf("release not confirmed (finishing in the background): %w", err)
}

package waitq

// This file: the contention of a Room's head, the one waiter of the process that talks to
// Redis (attempt, queue, subscribe, sleep until a message or the re-check).

import (
	"context"
	"time"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/pubsub"
)

// contend is the head's loop. It returns the owner value of an attempt whose reply it did
// not get, with the error that ended the loop.
func (r *Room) contend(ctx context.Context, w *waiter) (string, error) {
	// Attach outside r.mu: the notifier calls Message with its own lock held, so the lock
	// order is notifier, then Room.
	r.mu.Lock()
	attached := r.sub != nil
	r.mu.Unlock()
	if !attached {
		if sub := r.h.Notifier.Attach(r.channel, r); sub != nil {
			if dup := r.keep(sub); dup != nil {
				defer dup.Close() // cannot happen: only the head subscribes
			}
		}
	}
	r.mu.Lock()
	must := !r.queued || r.now || r.sub == nil
	leaving := r.leaving
	r.mu.Unlock()
	if leaving != nil {
		select {
		case <-leaving:
		case <-ctx.Done():
			return "", ctx.Err()
		case <-r.h.Done():
			return "", core.ErrClosed
		}
	}

	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	backoff := minBackoff
	for {
		if must {
			next, owner, err := r.step(ctx, &backoff)
			switch next {
			case stepDone:
				return owner, err
			case stepAgain:
				continue
			}
		}
		var err error
		if must, err = r.sleep(ctx, w, &timer, must); err != nil {
			return "", err
		}
	}
}

// What contend does after a step.
const (
	stepDone  = iota // return: acquired, or an error
	stepAgain        // attempt again at once
	stepWait         // queued: wait for a message or the re-check
)

// step makes one attempt for the Room's head (after its gate, if it has one) and keeps what it
// learnt. On stepDone it returns contend's result: "", nil once acquired; or an error, and the
// owner value of an attempt whose reply was lost, which the caller must undo. A connection
// error is retried after *backoff (stepAgain); a first queued attempt subscribes, then looks
// again (stepAgain).
func (r *Room) step(ctx context.Context, backoff *time.Duration) (next int, owner string, err error) {
	if r.hooks.Gate != nil {
		select {
		case <-r.hooks.Gate():
		case <-ctx.Done():
			return stepDone, "", ctx.Err()
		case <-r.h.Done():
			return stepDone, "", core.ErrClosed
		}
	}
	r.mu.Lock()
	if r.grant != nil && r.grant.Token <= r.lastToken {
		r.grant = nil // taken already, by an attempt that found it in Redis
	}
	t := Try{More: r.n > 1, Queued: r.queued, Grant: r.grant, QueuedAt: r.queuedAt, Floor: r.floor, LastToken: r.lastToken}
	r.grant, r.now = nil, false
	subscribed := r.sub != nil
	r.mu.Unlock()
	if t.Grant != nil {
		r.h.Note(ctx, core.EventGranted)
	}

	sent := time.Now()
	res, owner, err := r.hooks.Attempt(ctx, t)
	if err != nil {
		return r.failed(ctx, backoff, owner, err)
	}
	*backoff = minBackoff
	r.took(res, sent)
	if res.Acquired {
		return stepDone, "", nil
	}
	r.h.Note(ctx, core.EventQueued)
	if subscribed {
		return stepWait, "", nil
	}
	// Subscribe, then check again: a release published between the failed attempt and the
	// confirmed subscription reached nobody.
	sub, err := r.h.Notifier.Subscribe(ctx, r.channel, r)
	if err != nil {
		if err == pubsub.ErrClosed {
			err = core.ErrClosed
		}
		return stepDone, "", err
	}
	if dup := r.keep(sub); dup != nil {
		dup.Close() // cannot happen: only the head subscribes
	}
	return stepAgain, "", nil
}

// failed is step after an attempt that failed with err (owner: the attempt's owner value).
func (r *Room) failed(ctx context.Context, backoff *time.Duration, owner string, err error) (int, string, error) {
	// The attempt may have queued this Room: count it as queued, so that the entry is removed
	// by the next success or the last waiter to leave.
	r.mu.Lock()
	r.queued = true
	r.mu.Unlock()
	if ctx.Err() != nil {
		return stepDone, owner, ctx.Err()
	}
	if !core.Transient(err) {
		if isRedisErr(err) {
			return stepDone, "", err // the script failed in Redis: nothing pending
		}
		return stepDone, owner, err
	}
	// A connection error, or a failover in progress: the wait goes on (only ctx bounds it).
	// The attempt may have run, so undo it before trying again.
	r.h.Log().Debug("distsync: attempt failed, retrying", "channel", r.channel, "err", err, "in", *backoff)
	if owner != "" {
		r.h.Undo("undoing an attempt whose reply was lost", cleanupTimeout,
			func(ctx context.Context) error { return r.abandon(ctx, Leave{Owner: owner}) })
	}
	select {
	case <-time.After(*backoff):
	case <-ctx.Done():
		return stepDone, "", ctx.Err()
	case <-r.h.Done():
		return stepDone, "", core.ErrClosed
	}
	*backoff = min(2**backoff, maxBackoff)
	return stepAgain, "", nil
}

// took keeps what an attempt sent at sent learnt: whether the Room is queued, since when and
// behind which token, when to check again, and when to renew its entry.
func (r *Room) took(res Result, sent time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queued = res.Queued
	if res.Queued {
		r.queuedAt, r.floor = sent, res.Floor
	}
	r.checkAt = time.Now().Add(res.Wait)
	r.keepUntil = time.Time{}
	if res.Queued && res.Keep > 0 {
		// Before the entry lapses, with room for the clock drift and the re-check.
		r.keepUntil = sent.Add(res.Keep - core.Drift(res.Keep) - min(max(keepMargin, res.Keep/8), res.Keep/4))
	}
	if res.Acquired && res.Token > r.lastToken {
		r.lastToken = res.Token
	}
}

// sleep waits, for the Room's head, for a message (w.wake), the re-check or the end, and
// returns whether to attempt now (a message may only ask to re-read the flags). must is
// whether this loop's own step asked for the attempt: a message met here is noted as a wake-up.
func (r *Room) sleep(ctx context.Context, w *waiter, timer **time.Timer, must bool) (bool, error) {
	r.mu.Lock()
	if r.now {
		r.mu.Unlock()
		if !must {
			r.h.Note(ctx, core.EventWoken) // a message, not this loop's own retry
		}
		return true, nil
	}
	at := r.checkAt
	r.mu.Unlock()
	if *timer == nil {
		*timer = time.NewTimer(time.Until(at))
	} else {
		(*timer).Reset(time.Until(at))
	}
	select {
	case <-w.wake:
		return false, nil // re-read the flags
	case <-(*timer).C:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-r.h.Done():
		return false, core.ErrClosed
	}
}

package core

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/scripts"
)

// renewer is the handle's renewal loop: one goroutine and one timer for every lease, renewals
// batched per tick into one pipeline per node, and local deadlines enforced even when Redis
// cannot be reached.
//
// A hold costs the loop nothing until its first renewal is due: add moves the loop's timer
// earlier if the new lease is due before it fires, and never wakes the goroutine. (It used to
// kick the goroutine for a lease due before the planned wake-up, and the loop, run after a
// quick Unlock had removed that lease, planned its next look an hour away: the next Lock kicked
// it again. That was a goroutine wake-up, on the other core, for most uncontended pairs.)
type renewer struct {
	h      *Handle
	mu     sync.Mutex
	leases map[*Lease]struct{}
	closed bool
	kick   chan struct{}
	timer  *time.Timer // the loop's; reset under mu, by add and by the loop
	wakeAt time.Time   // when timer fires (zero: the loop is looking at the leases now)
}

func newRenewer(h *Handle) *renewer {
	return &renewer{h: h, leases: make(map[*Lease]struct{}), kick: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
}

func (r *renewer) add(l *Lease) bool {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	r.leases[l] = struct{}{}
	// Move the timer earlier only if the loop would look too late: a new lease renewed at the
	// usual period mostly falls after the wake-up already planned, and then costs nothing.
	// While the loop is looking (wakeAt zero), it sees the lease itself.
	due := l.deadline
	if (l.spec.Renew || l.first != nil) && l.next.Before(due) {
		due = l.next
	}
	if !r.wakeAt.IsZero() && due.Before(r.wakeAt) {
		r.wakeAt = due
		r.timer.Reset(time.Until(due))
	}
	r.mu.Unlock()
	return true
}

func (r *renewer) remove(l *Lease) {
	r.mu.Lock()
	delete(r.leases, l)
	r.mu.Unlock()
}

func (r *renewer) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Count returns the number of leases the loop tracks.
func (h *Handle) Leases() int {
	h.ren.mu.Lock()
	defer h.ren.mu.Unlock()
	return len(h.ren.leases)
}

func (r *renewer) run(ctx context.Context) {
	defer r.timer.Stop()
	for {
		now := time.Now()
		wake := now.Add(time.Hour)
		var batch []*Lease

		var ended []*Lease
		r.mu.Lock()
		r.wakeAt = time.Time{}
		for l := range r.leases {
			if !now.Before(l.deadline) {
				// Ended under the lock: a lease off the loop and not yet ended would read as
				// held to Err (expire skips leases the loop no longer tracks).
				delete(r.leases, l)
				if l.finish(l.errDeadline()) {
					ended = append(ended, l)
				}
				continue
			}
			at := l.deadline
			if (l.spec.Renew || l.first != nil) && !l.inflight {
				period := l.spec.TTL / RenewDivisor
				// Renew everything due within the next eighth of its period now, so that
				// leases taken at nearly the same time share one pipeline.
				if !now.Before(l.next.Add(-period / 8)) {
					l.inflight = true
					batch = append(batch, l)
				} else if l.next.Before(at) {
					at = l.next
				}
			}
			if at.Before(wake) {
				wake = at
			}
		}
		r.wakeAt = wake
		r.timer.Reset(time.Until(wake))
		r.mu.Unlock()

		if len(batch) > 0 {
			r.h.bg.Add(1)
			go func() {
				defer r.h.bg.Done()
				r.renew(ctx, batch)
			}()
		}
		// After the batch is on its way: an observer or a log that is slow delays the loop's
		// next look, never the renewals due now.
		for _, l := range ended {
			l.report(l.ended())
		}

		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-r.timer.C:
		}
	}
}

// renew extends every lease of batch in one DoMulti (rueidis sends one pipeline per node).
func (r *renewer) renew(ctx context.Context, batch []*Lease) {
	calls := make([]scripts.Call, len(batch))
	r.mu.Lock()
	limit := batch[0].deadline
	for i, l := range batch {
		switch {
		case l.first != nil:
			calls[i] = *l.first
		default:
			calls[i] = l.spec.renewal()
		}
		if l.deadline.Before(limit) {
			limit = l.deadline
		}
	}
	r.mu.Unlock()
	sent := time.Now()
	// No renewal reply is worth waiting for past the first deadline of the batch: the loop
	// ends that lease then anyway, and the others are retried.
	cctx, cancel := context.WithDeadline(ctx, limit)
	res := scripts.DoMulti(cctx, r.h.Client, calls)
	cancel()

	now := time.Now()
	var ended []*Lease
	var renewed []*Lease
	var failed []error
	r.mu.Lock()
	for i, l := range batch {
		l.inflight = false
		if _, ok := r.leases[l]; !ok {
			continue // released or ended while the renewal was in flight: not ours to judge
		}
		ok, err := res[i].AsInt64()
		period := l.spec.TTL / RenewDivisor
		switch {
		case err == nil && ok == 1:
			l.refused, l.failed = nil, nil
			l.next = sent.Add(period)
			l.deadline = sent.Add(l.spec.TTL - Drift(l.spec.TTL))
			l.first = nil
			if r.h.Observed() {
				renewed, failed = append(renewed, l), append(failed, nil)
			}
		case err == nil || isWrongType(err):
			delete(r.leases, l) // and ended under the lock, as in run
			if l.finish(lost("the claim was gone or held by another owner when it was renewed")) {
				ended = append(ended, l)
			}
		default:
			// Unreachable, or a transient Redis error (LOADING, READONLY during a failover):
			// try again soon; the deadline ends the lease if nothing gets through. A refusal
			// (an ACL, a script's error) is tried again too (an OOM can pass), but logged
			// at Warn the first time in a row, and named by the loss if it lasts.
			l.next = now.Add(min(max(period/6, 10*time.Millisecond), time.Second))
			if Transient(err) {
				l.refused, l.failed = nil, err
				r.h.Log().Debug("distsync: renewal failed, will retry", "key", l.spec.Key, "err", err)
			} else {
				if l.refused == nil {
					r.h.Log().Warn("distsync: renewal refused by Redis, will retry until the lease's deadline", "key", l.spec.Key, "err", err)
				}
				l.refused, l.failed = err, nil
			}
			if r.h.Observed() {
				renewed, failed = append(renewed, l), append(failed, err)
			}
		}
	}
	r.mu.Unlock()
	r.wake() // the loop reschedules these leases at once, whatever the reports below cost
	// Reported outside the lock: the observer and the log may be slow.
	for i, l := range renewed {
		l.renewed(failed[i])
	}
	for _, l := range ended {
		l.report(l.ended())
	}
}

func isWrongType(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

// closeAll ends every lease with ErrClosed, then releases each claim in Redis.
func (r *renewer) closeAll(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	held := make([]*Lease, 0, len(r.leases))
	var ended []*Lease
	for l := range r.leases {
		held = append(held, l)
		if l.finish(ErrClosed) { // first, and under the lock: the release below must not record the end as a release
			ended = append(ended, l)
		}
	}
	r.leases = map[*Lease]struct{}{}
	r.mu.Unlock()
	for _, l := range ended {
		l.report(ErrClosed)
	}

	var errs []error
	for _, l := range held {
		r.mu.Lock()
		l.inflight = false // the loop is stopping: whatever it did not send, the release sends
		r.mu.Unlock()
		// A waiter's place is left by its waiting call, which Close ends next (it returns
		// ErrClosed after leaving the queue); leaving it here would void the waiter under it.
		if l.spec.Release != nil && !l.spec.Place {
			if err := l.spec.Release(ctx, l); err != nil && !errors.Is(err, ErrLost) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

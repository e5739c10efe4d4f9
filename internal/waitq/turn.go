package waitq

import (
	"context"
	"errors"
	"time"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/scripts"
)

// Turn describes one waiter of a queue kept in Redis, one entry per call (fair, semaphore),
// for WaitTurn.
type Turn struct {
	// ID is the waiter id, '<process>/<call>'; Slot is its place in the process's Mailbox
	// (registered; WaitTurn subscribes it if it is not Ready and the first attempt fails).
	ID   string
	Slot *Slot
	// Attempt runs the primitive's acquire script once for ID: it must be idempotent for one
	// waiter id (a retry after a lost reply finds the claim taken or the place kept). backup
	// is the waiter that watches a grant to this one, if a grant message named it. On
	// success the attempt records the hold itself.
	Attempt func(ctx context.Context, backup string) (TurnResult, error)
	// Take holds a claim granted inside Redis without a round trip; deadline is how long the
	// grant is surely there.
	Take func(g Grant, deadline time.Time) error
	// Place is the key of the waiters' lease entries (waiter id -> expiry, renewed with kind
	// "z"), PlaceKeep the keys that must live as long as a waiter, and Leave takes ID out of
	// the queue (it is also what Handle.Close runs for a waiter still queued).
	Place     string
	PlaceKeep []string
	Leave     func(ctx context.Context) error
	// PlaceRenewal, if set, renews the place instead of extend.lua (see core.LeaseSpec.Renewal).
	PlaceRenewal *scripts.Call
}

// TurnResult is the outcome of one Turn.Attempt.
type TurnResult struct {
	Acquired bool
	// Wait is how long to wait, if no message comes, before re-checking: until the claim
	// waited behind would lapse, plus slack.
	Wait time.Duration
}

// WaitTurn is the waiting protocol of a queued waiter: attempt (which queues it), keep a lease
// on its place renewed with the handle's leases, then wait for a grant on its Slot, a watched
// grant that lapsed, a message to re-check, its place lapsing, the backstop, or ctx. It
// returns nil once an attempt or a grant acquired; ctx's error; core.ErrClosed; or the error
// of an attempt that is not transient. The caller leaves the queue on error.
func WaitTurn(ctx context.Context, h *core.Handle, waiterLease time.Duration, t Turn) error {
	var (
		place   *core.Lease // the lease on the waiter's place
		backup  string
		timer   *time.Timer // made when the first attempt fails: an uncontended call starts none
		watch   *time.Timer
		watchC  <-chan time.Time
		backoff = minBackoff
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if watch != nil {
			watch.Stop()
		}
		if place != nil {
			place.Stop()
		}
	}()
	for {
		// A grant announced before this attempt is found (and adopted) by the attempt itself;
		// taken from its message later, it could be stale: the waiter may have queued again
		// since, and its place's deadline would no longer bound the grant.
		drain(t.Slot.C)
		sent := time.Now()
		res, err := t.Attempt(ctx, backup)
		switch {
		case err != nil && ctx.Err() == nil && core.Transient(err):
			h.Log().Debug("distsync: queued attempt failed, retrying", "waiter", t.ID, "err", err, "in", backoff)
			if err := givenBack(ctx, h, err); err != nil {
				return err
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return ctx.Err()
			case <-h.Done():
				return core.ErrClosed
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		case err != nil:
			return err
		case res.Acquired:
			return nil
		}
		backoff = minBackoff
		h.Note(ctx, core.EventQueued)
		if place == nil || place.Err() != nil {
			// If a renewal finds the place gone (Redis unreachable for a waiter lease, or
			// pruned), the loop re-checks, which queues the waiter again.
			var err error
			place, err = h.Hold(core.LeaseSpec{Key: t.Place, Keep: t.PlaceKeep, Owner: t.ID, Kind: "z", TTL: waiterLease,
				Renew: true, Sent: sent, Place: true, Renewal: t.PlaceRenewal,
				Release: func(ctx context.Context, _ *core.Lease) error { return t.Leave(ctx) }})
			if err != nil {
				return err // the handle closed
			}
		}
		if !t.Slot.Ready() {
			// Subscribe, then check again: a release published between the failed attempt
			// and the confirmed subscription reached nobody. (The attempt is idempotent.)
			if err := t.Slot.Subscribe(ctx); err != nil {
				return err
			}
			continue
		}
		if timer == nil {
			timer = time.NewTimer(res.Wait)
		} else {
			timer.Reset(res.Wait)
		}

	listen:
		for {
			select {
			case sig := <-t.Slot.C:
				switch sig.Kind {
				case Granted:
					h.Note(ctx, core.EventGranted)
					// Redis keeps a grant for its window (the releaser's) after it was made, and
					// it was made after the last renewal of the place that found the place there
					// (a grant takes the waiter out of the queue). That renewal was sent at
					// place.Deadline() - (waiterLease - drift): counted from then with the
					// grant's window, the grant is surely this waiter's, without asking Redis.
					w := sig.Grant.Window
					deadline := place.Deadline().Add(-waiterLease + core.Drift(waiterLease) - core.Drift(w) + w)
					if time.Until(deadline) > w/4 && !h.WaitsForReplicas() {
						err := t.Take(sig.Grant, deadline)
						if !errors.Is(err, core.ErrLate) || ctx.Err() != nil {
							return err
						}
						// Too late to use after all (this process stalled past the grant, or
						// the grant was gone when its holder was recorded): given back, as a
						// late attempt's claim is. The wait goes on, with a look in Redis.
						h.Log().Debug("distsync: a grant came too late to use, waiting on", "waiter", t.ID, "err", err)
						if err := givenBack(ctx, h, err); err != nil {
							return err
						}
						break listen
					}
					backup = sig.Grant.Backup
					break listen // too little of it is sure to be left: adopt it in Redis
				case Watch:
					if watch == nil {
						watch = time.NewTimer(sig.Window + 2*time.Millisecond)
					} else {
						watch.Reset(sig.Window + 2*time.Millisecond)
					}
					watchC = watch.C
				case Confirmed:
					if watch != nil {
						watch.Stop()
					}
					watchC = nil
				case Extended:
					// The holder renewed (the waiter heads the queue): its lease now ends in
					// Window. Re-check just after that, not before: a holder that died renews
					// no more, and its lock is taken a round trip after its expiry. (The
					// waiter's place is kept by its own lease, not by re-checking.)
					timer.Reset(sig.Window + 2*time.Millisecond)
				default:
					h.Note(ctx, core.EventWoken)
					break listen
				}
			case <-watchC:
				watchC = nil
				break listen // a grant ahead lapsed unconfirmed: its waiter is dead
			case <-place.Done():
				if errors.Is(place.Err(), core.ErrClosed) {
					return core.ErrClosed // the caller leaves the queue
				}
				break listen
			case <-timer.C:
				break listen
			case <-ctx.Done():
				return ctx.Err()
			case <-h.Done():
				return core.ErrClosed
			}
		}
	}
}

// givenBack waits, if err is a claim that came too late and is being given back under the
// waiter's id, until it has been: the next attempt, under the same id, must not be released by
// that give-back. It returns ctx's error, or ErrClosed, if either ends the wait first.
func givenBack(ctx context.Context, h *core.Handle, err error) error {
	var late *core.LateError
	if !errors.As(err, &late) {
		return nil
	}
	select {
	case <-late.GivenBack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-h.Done():
		return core.ErrClosed
	}
}

// drain empties c without blocking.
func drain(c chan Signal) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

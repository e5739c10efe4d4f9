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
	w := &turnWait{h: h, waiterLease: waiterLease, t: t, backoff: minBackoff}
	defer w.stop()
	for {
		// A grant announced before this attempt is found (and adopted) by the attempt itself;
		// taken from its message later, it could be stale: the waiter may have queued again
		// since, and its place's deadline would no longer bound the grant.
		drain(t.Slot.C)
		sent := time.Now()
		res, err := t.Attempt(ctx, w.backup)
		switch {
		case err != nil && ctx.Err() == nil && core.Transient(err):
			if err := w.retry(ctx, err); err != nil {
				return err
			}
			continue
		case err != nil:
			return err
		case res.Acquired:
			return nil
		}
		w.backoff = minBackoff
		h.Note(ctx, core.EventQueued)
		if err := w.holdPlace(sent); err != nil {
			return err // the handle closed
		}
		if !t.Slot.Ready() {
			// Subscribe, then check again: a release published between the failed attempt
			// and the confirmed subscription reached nobody. (The attempt is idempotent.)
			if err := t.Slot.Subscribe(ctx); err != nil {
				return err
			}
			continue
		}
		if w.timer == nil {
			w.timer = time.NewTimer(res.Wait)
		} else {
			w.timer.Reset(res.Wait)
		}
		if done, err := w.listen(ctx); done {
			return err
		}
	}
}

// turnWait is the state of one WaitTurn.
type turnWait struct {
	h           *core.Handle
	waiterLease time.Duration
	t           Turn

	place   *core.Lease // the lease on the waiter's place
	backup  string      // the waiters watching a grant to this one, for the next attempt
	timer   *time.Timer // the re-check; made when the first attempt fails: an uncontended call starts none
	watch   *time.Timer // a grant ahead that must be confirmed
	watchC  <-chan time.Time
	backoff time.Duration
}

// stop stops the timers and the place's lease.
func (w *turnWait) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.watch != nil {
		w.watch.Stop()
	}
	if w.place != nil {
		w.place.Stop()
	}
}

// retry waits before the attempt after one that failed with the transient err.
func (w *turnWait) retry(ctx context.Context, err error) error {
	w.h.Log().Debug("distsync: queued attempt failed, retrying", "waiter", w.t.ID, "err", err, "in", w.backoff)
	if err := givenBack(ctx, w.h, err); err != nil {
		return err
	}
	select {
	case <-time.After(w.backoff):
	case <-ctx.Done():
		return ctx.Err()
	case <-w.h.Done():
		return core.ErrClosed
	}
	w.backoff = min(2*w.backoff, maxBackoff)
	return nil
}

// holdPlace starts the lease on the waiter's place, queued by an attempt sent at sent, unless
// one lives. If a renewal finds the place gone (Redis unreachable for a waiter lease, or
// pruned), the loop re-checks, which queues the waiter again.
func (w *turnWait) holdPlace(sent time.Time) error {
	if w.place != nil && w.place.Err() == nil {
		return nil
	}
	t := w.t
	var err error
	w.place, err = w.h.Hold(core.LeaseSpec{Key: t.Place, Keep: t.PlaceKeep, Owner: t.ID, Kind: "z", TTL: w.waiterLease,
		Renew: true, Sent: sent, Place: true, Renewal: t.PlaceRenewal,
		Release: func(ctx context.Context, _ *core.Lease) error { return t.Leave(ctx) }})
	return err
}

// listen waits for what makes the waiter look again (done false): a message, a watched grant
// that lapsed, its place lapsing, the re-check. It returns true and WaitTurn's result once a
// grant was taken, or the wait ended (ctx, the handle closed).
func (w *turnWait) listen(ctx context.Context) (done bool, err error) {
	for {
		select {
		case sig := <-w.t.Slot.C:
			switch sig.Kind {
			case Granted:
				w.h.Note(ctx, core.EventGranted)
				return w.granted(ctx, sig.Grant)
			case Watch:
				if w.watch == nil {
					w.watch = time.NewTimer(sig.Window + 2*time.Millisecond)
				} else {
					w.watch.Reset(sig.Window + 2*time.Millisecond)
				}
				w.watchC = w.watch.C
			case Confirmed:
				if w.watch != nil {
					w.watch.Stop()
				}
				w.watchC = nil
			case Extended:
				// The holder renewed (the waiter heads the queue): its lease now ends in
				// Window. Re-check just after that, not before: a holder that died renews no
				// more, and its lock is taken a round trip after its expiry. (The waiter's
				// place is kept by its own lease, not by re-checking.)
				w.timer.Reset(sig.Window + 2*time.Millisecond)
			default:
				w.h.Note(ctx, core.EventWoken)
				return false, nil
			}
		case <-w.watchC:
			w.watchC = nil
			return false, nil // a grant ahead lapsed unconfirmed: its waiter is dead
		case <-w.place.Done():
			if errors.Is(w.place.Err(), core.ErrClosed) {
				return true, core.ErrClosed // the caller leaves the queue
			}
			return false, nil
		case <-w.timer.C:
			return false, nil
		case <-ctx.Done():
			return true, ctx.Err()
		case <-w.h.Done():
			return true, core.ErrClosed
		}
	}
}

// granted takes a grant announced to the waiter, if enough of it is surely left; else it
// looks in Redis (done false), where the next attempt adopts the grant.
//
// Redis keeps a grant for its window (the releaser's) after it was made, and it was made after
// the last renewal of the place that found the place there (a grant takes the waiter out of
// the queue). That renewal was sent at place.Deadline() - (waiterLease - drift): counted from
// then with the grant's window, the grant is surely this waiter's, without asking Redis.
func (w *turnWait) granted(ctx context.Context, g Grant) (done bool, err error) {
	win := g.Window
	deadline := w.place.Deadline().Add(-w.waiterLease + core.Drift(w.waiterLease) - core.Drift(win) + win)
	if time.Until(deadline) <= win/4 || w.h.WaitsForReplicas() {
		w.backup = g.Backup
		return false, nil // too little of it is sure to be left: adopt it in Redis
	}
	err = w.t.Take(g, deadline)
	if !errors.Is(err, core.ErrLate) || ctx.Err() != nil {
		return true, err
	}
	// Too late to use after all (this process stalled past the grant, or the grant was gone
	// when its holder was recorded): given back, as a late attempt's claim is. The wait goes
	// on, with a look in Redis.
	w.h.Log().Debug("distsync: a grant came too late to use, waiting on", "waiter", w.t.ID, "err", err)
	if err := givenBack(ctx, w.h, err); err != nil {
		return true, err
	}
	return false, nil
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

// Package waitq is the waiting protocol of DESIGN.md, written once for every primitive that
// waits on a pub/sub channel.
//
// The goroutines of one process that wait for the same primitive form a local FIFO (a Room).
// Only its head talks to Redis: it attempts, and on failure waits for a message on the
// primitive's channel, a re-subscription, the backstop deadline the attempt returned, or its
// context. The others wait for their turn without a timer or a command. The Room is the
// channel's listener: a release message wakes the head only.
//
// A Room has one waiter id in Redis (the primitive's queue holds one entry per waiting
// process). The attempt tells whether it left that entry queued; when the last local waiter
// goes while the entry is queued, or an attempt's reply was not awaited, the primitive's
// abandon function cleans up.
package waitq

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/pubsub"
)

// Result is the outcome of one attempt in Redis.
type Result struct {
	// Acquired reports success.
	Acquired bool
	// Queued reports that the Room's waiter id is in the Redis queue after the attempt.
	Queued bool
	// Wait is how long the head may wait, if no message comes, before re-checking: the end
	// of the lease it waits behind plus slack, or the end of someone else's reservation.
	Wait time.Duration
}

// Try describes the Room when an attempt is made.
type Try struct {
	// More says that other local goroutines wait behind the caller: an acquiring attempt
	// then keeps the Room queued.
	More bool
	// Queued says that the Room's waiter id may be in the Redis queue: an acquiring attempt
	// must take it out (unless More).
	Queued bool
	// Granted says that a Grant woke the Room: the claim is most likely reserved for it.
	Granted bool
	// Backup is the waiter to notify once a reservation for this Room is claimed: the
	// Signal.Backup of the Grant that woke the Room, or "".
	Backup string
}

// Attempt tries once. owner is the value the attempt used; the Room passes it to Abandon if
// the attempt's reply was not awaited.
type Attempt func(ctx context.Context, t Try) (res Result, owner string, err error)

// Abandon cleans up in Redis after waiters gave up. owner is the value of an attempt whose
// outcome is unknown, or ""; dequeue says that no local waiter is left and the Room's queue
// entry must go. It runs in the background with its own context.
type Abandon func(ctx context.Context, owner string, dequeue bool) error

// Kind is what a message on the Room's channel asks of it.
type Kind int

const (
	Ignore  Kind = iota // nothing
	Recheck             // attempt now
	Grant               // the claim was reserved for this Room: attempt now; it left the Redis queue
	Watch               // another waiter holds a reservation: re-check if it is not claimed in time
	Claimed             // the watched reservation was claimed
)

// Signal is a parsed message.
type Signal struct {
	Kind   Kind
	Window time.Duration // Watch: how long the reservation lasts
	Backup string        // Grant: the waiter watching this reservation
}

// Parse interprets a message published on the Room's channel.
type Parse func(payload string) Signal

// Room is the local queue of one primitive in one process.
type Room struct {
	h       *core.Handle
	channel string
	parse   Parse

	mu      sync.Mutex
	head    *waiter
	tail    *waiter
	n       int
	sub     *pubsub.Subscription
	now     bool        // re-check at once (message, re-subscription, a head that gave up)
	granted bool        // a Grant arrived since the last attempt
	backup  string      // from the last Grant, for the next attempt
	watch   *time.Timer // fires when a watched reservation lapses unclaimed
	queued  bool        // the waiter id is in the Redis queue, as far as this process knows
	checkAt time.Time   // backstop: the head re-checks by itself then
}

type waiter struct {
	next *waiter
	turn chan struct{} // closed when the waiter becomes head
	wake chan struct{} // signals to the head; capacity 1
}

// NewRoom returns the Room of a primitive; its waiters listen on channel, the Room's own.
func NewRoom(h *core.Handle, channel string, parse Parse) *Room {
	return &Room{h: h, channel: channel, parse: parse}
}

// Message implements pubsub.Listener.
//
// Watching a reservation costs the Room a timer, not a wake-up of its goroutines: the timer
// wakes the head only if the reservation lapses unclaimed, and a claim stops it.
func (r *Room) Message(payload string) {
	sig := r.parse(payload)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch sig.Kind {
	case Recheck:
		r.now = true
		r.signalLocked()
	case Grant:
		r.now, r.queued, r.granted, r.backup = true, false, true, sig.Backup
		r.signalLocked()
	case Watch:
		d := sig.Window + 2*time.Millisecond
		if r.watch == nil {
			r.watch = time.AfterFunc(d, r.lapsed)
		} else {
			r.watch.Reset(d)
		}
	case Claimed:
		if r.watch != nil {
			r.watch.Stop()
		}
	}
}

// lapsed runs when a watched reservation was not claimed in time.
func (r *Room) lapsed() {
	r.mu.Lock()
	r.now = true
	r.signalLocked()
	r.mu.Unlock()
}

// Resubscribed implements pubsub.Listener: messages may have been lost, so re-check.
func (r *Room) Resubscribed() {
	r.mu.Lock()
	r.now = true
	r.signalLocked()
	r.mu.Unlock()
}

func (r *Room) signalLocked() {
	if r.head != nil {
		select {
		case r.head.wake <- struct{}{}:
		default:
		}
	}
}

// Waiting returns the number of local goroutines in the Room.
func (r *Room) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Acquire waits its turn in the Room, then attempts until an attempt acquires, ctx ends or
// the handle closes. It returns nil on success, ctx's error, core.ErrClosed, or the error of
// an attempt that is not core.Transient (a transient error is retried with backoff).
func (r *Room) Acquire(ctx context.Context, try Attempt, abandon Abandon) error {
	w := &waiter{turn: make(chan struct{}), wake: make(chan struct{}, 1)}
	r.mu.Lock()
	if r.tail == nil {
		r.head, r.tail = w, w
		close(w.turn)
	} else {
		r.tail.next, r.tail = w, w
	}
	r.n++
	r.mu.Unlock()

	var err error
	var owner string
	select {
	case <-w.turn:
		owner, err = r.contend(ctx, w, try, abandon)
	case <-ctx.Done():
		err = ctx.Err()
	case <-r.h.Done():
		err = core.ErrClosed
	}
	r.leave(w, err != nil, owner, abandon)
	return err
}

// contend is the head's loop. It returns the owner value of an attempt whose reply it did
// not get, with the error that ended the loop.
func (r *Room) contend(ctx context.Context, w *waiter, try Attempt, abandon Abandon) (string, error) {
	r.mu.Lock()
	if r.sub == nil {
		r.sub = r.h.Notifier.Attach(r.channel, r)
	}
	must := !r.queued || r.now || r.sub == nil
	r.now = false
	r.mu.Unlock()

	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	backoff := minBackoff
	for {
		if must {
			r.mu.Lock()
			t := Try{More: r.n > 1, Queued: r.queued, Granted: r.granted, Backup: r.backup}
			r.granted, r.backup = false, ""
			subscribed := r.sub != nil
			r.mu.Unlock()

			res, owner, err := try(ctx, t)
			if err != nil {
				if ctx.Err() != nil {
					return owner, ctx.Err()
				}
				// The attempt may have queued this Room: count it as queued, so that the
				// entry is removed by the next success or the last waiter to leave.
				r.mu.Lock()
				r.queued = true
				r.mu.Unlock()
				if !core.Transient(err) {
					if isRedisErr(err) {
						return "", err // the script failed in Redis: nothing pending
					}
					return owner, err
				}
				// A connection error, or a failover in progress: the wait goes on (only ctx
				// bounds it). The attempt may have run, so undo it before trying again.
				r.h.Log().Debug("distsync: attempt failed, retrying", "channel", r.channel, "err", err, "in", backoff)
				if owner != "" && abandon != nil {
					actx, cancel := context.WithTimeout(ctx, time.Second)
					_ = abandon(actx, owner, false)
					cancel()
				}
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
					return "", ctx.Err()
				case <-r.h.Done():
					return "", core.ErrClosed
				}
				backoff = min(2*backoff, maxBackoff)
				continue
			}
			backoff = minBackoff
			r.mu.Lock()
			r.queued = res.Queued
			r.checkAt = time.Now().Add(res.Wait)
			r.mu.Unlock()
			if res.Acquired {
				return "", nil
			}
			if !subscribed {
				// Subscribe, then check again: a release published between the failed
				// attempt and the confirmed subscription reached nobody.
				sub, err := r.h.Notifier.Subscribe(ctx, r.channel, r)
				if err != nil {
					if err == pubsub.ErrClosed {
						err = core.ErrClosed
					}
					return "", err
				}
				r.mu.Lock()
				if r.sub == nil {
					r.sub = sub
				} else {
					defer sub.Close() // cannot happen: only the head subscribes
				}
				r.mu.Unlock()
				continue
			}
		}

		r.mu.Lock()
		if r.now {
			r.now = false
			r.mu.Unlock()
			must = true
			continue
		}
		at := r.checkAt
		r.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(time.Until(at))
		} else {
			timer.Reset(time.Until(at))
		}
		select {
		case <-w.wake:
			must = false // re-read the flags
		case <-timer.C:
			must = true
		case <-ctx.Done():
			return "", ctx.Err()
		case <-r.h.Done():
			return "", core.ErrClosed
		}
	}
}

// leave takes w out of the Room, hands the turn to the next waiter, and cleans up what the
// Room leaves in Redis when its last waiter goes.
func (r *Room) leave(w *waiter, failed bool, owner string, abandon Abandon) {
	r.mu.Lock()
	wasHead := r.head == w
	if wasHead {
		r.head = w.next
		if r.head == nil {
			r.tail = nil
		} else {
			close(r.head.turn)
		}
	} else {
		for p := r.head; p != nil; p = p.next {
			if p.next == w {
				p.next = w.next
				if r.tail == w {
					r.tail = p
				}
				break
			}
		}
	}
	r.n--
	last := r.n == 0
	dequeue := last && r.queued
	var sub *pubsub.Subscription
	if last {
		sub, r.sub = r.sub, nil
		r.queued, r.now, r.granted, r.backup = false, false, false, ""
		if r.watch != nil {
			r.watch.Stop()
		}
	} else if failed && wasHead {
		// A reservation may be waiting for this Room: the next head checks at once.
		r.now = true
	}
	r.mu.Unlock()

	if sub != nil {
		sub.Close()
	}
	if (owner != "" || dequeue) && abandon != nil {
		r.h.Background("cleanup after a cancelled wait (the entry expires by itself)", cleanupTimeout,
			func(ctx context.Context) error { return abandon(ctx, owner, dequeue) })
	}
}

// The head retries an attempt that failed on a transient error after minBackoff, doubling
// up to maxBackoff.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = time.Second
)

// cleanupTimeout bounds the background cleanup after a cancelled wait.
const cleanupTimeout = 10 * time.Second

func isRedisErr(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}

// String implements fmt.Stringer for debugging.
func (r *Room) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("room %s: %d waiting, queued=%v", r.channel, r.n, r.queued)
}

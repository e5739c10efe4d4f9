// Package waitq is the waiting protocol (docs/design.md, "The waiting protocol"), written once for every primitive that
// waits on a pub/sub channel.
//
// The goroutines of one process that wait for the same primitive form a local FIFO (a Room).
// Only its head talks to Redis: it attempts, and on failure waits for a message on the Room's
// own channel, a re-subscription, the backstop deadline the attempt returned, or its context.
// The others wait for their turn without a timer or a command.
//
// A Room has one waiter id in Redis (the primitive's queue holds one entry per waiting
// process). A release hands the claim to the head of that queue inside Redis and tells only
// that process (a Grant): its head then holds the claim without a round trip. The next
// process in line is told to watch the grant (Watch); its Room arms a timer, not a goroutine,
// and re-checks only if the grant is not confirmed in time.
package waitq

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/pubsub"
	"github.com/distsync/distsync/internal/rediserr"
)

// Result is the outcome of one attempt.
type Result struct {
	// Acquired reports success.
	Acquired bool
	// Token is the fencing token of a success.
	Token int64
	// Queued reports that the Room's waiter id is in the Redis queue after the attempt.
	Queued bool
	// Wait is how long the head may wait, if no message comes, before re-checking: the end
	// of the lease it waits behind plus slack, or the end of a grant to someone else.
	Wait time.Duration
	// Floor, when Queued, is a token at or above every grant made before the attempt (the
	// last token handed out, or the token just acquired): a grant up to it is older than the
	// queueing, so QueuedAt says nothing of how long it lasts (see Try.Floor).
	Floor int64
	// Keep, when Queued, is how long the Room's entry in the Redis queue lives, from when the
	// attempt was sent, unless the Room re-checks: a head that renewal notices keep waiting
	// (Extended) still re-checks in time to keep its place.
	Keep time.Duration
}

// Grant is a claim handed to this Room inside Redis.
type Grant struct {
	Owner  string        // the owner value the claim is held under
	Token  int64         // its fencing token (semaphore: the permits granted)
	Backup string        // the waiters watching the grant, comma-separated, to tell once it is confirmed ("" if none)
	Window time.Duration // how long Redis keeps the grant unless it is confirmed
}

// Try describes the Room when an attempt is made.
type Try struct {
	// More says that other local goroutines wait behind the caller: an acquiring attempt
	// then keeps the Room queued.
	More bool
	// Queued says that the Room's waiter id may be in the Redis queue: an acquiring attempt
	// must take it out (unless More).
	Queued bool
	// Grant, if not nil, is a claim granted to the Room: the attempt may take it as held
	// without a round trip, or, if it cannot (see QueuedAt), look for it in Redis.
	Grant *Grant
	// QueuedAt is when the last command that left the Room queued was sent: every grant was
	// made after it, so a grant's local deadline can safely be counted from it.
	QueuedAt time.Time
	// Floor is the Result.Floor of that command: only a grant with a larger token was surely
	// made after QueuedAt. An older grant's message can arrive late (it lapsed long ago, or was
	// passed on), and must be looked for in Redis, never taken as held.
	Floor int64
	// LastToken is the largest token the Room acquired: a grant with a token up to it was
	// taken by one of the Room's goroutines already, and must not be taken again.
	LastToken int64
}

// Hooks are what a primitive gives its Room.
type Hooks struct {
	// Parse interprets a message published on the Room's channel.
	Parse func(payload string) Signal
	// Attempt tries once. owner is the value the attempt used; the Room passes it to Abandon
	// if the attempt's reply was not awaited.
	Attempt func(ctx context.Context, t Try) (res Result, owner string, err error)
	// Abandon cleans up in Redis after waiters gave up (see Leave). It must be idempotent: it
	// is retried in the background if Redis cannot be reached. It returns the token of a grant
	// to the Room that it passed on (0 if none): the grant's message may still be on its way,
	// and the Room must not take it.
	Abandon func(ctx context.Context, l Leave) (passed int64, err error)
	// Gate, if set, returns a channel that is closed while the head may attempt. A mutex
	// closes it while no goroutine of the process holds it: as with sync.Mutex, a Lock waits
	// for the local Unlock, even if the hold was lost in Redis meanwhile.
	Gate func() <-chan struct{}
}

// Leave is what Abandon must clean up.
type Leave struct {
	// Owner is the value of an attempt whose outcome is unknown (its reply was not awaited):
	// if it took the claim, the claim must be passed on; if it has not run yet, it must be
	// voided so that it takes nothing when it arrives. "" if none.
	Owner string
	// Dequeue says that no local waiter is left: the Room's queue entry must go, and a claim
	// granted to the Room with a token above LastToken (one that none of its goroutines
	// took) must be passed on to the next waiter, inside Redis, before the call that left
	// returns.
	Dequeue   bool
	LastToken int64
	// Grant, if not 0, is the token of a grant to the Room that nobody will take (its message
	// came when no waiter was left): it must be passed on if it is still exactly that grant.
	Grant int64
}

// Kind is what a message on the Room's channel asks of it.
type Kind int

const (
	Ignore    Kind = iota // nothing
	Recheck               // attempt now
	Granted               // the claim was granted to this Room (Signal.Grant)
	Watch                 // another waiter holds an unconfirmed grant: re-check if it lapses
	Confirmed             // the watched grant was confirmed
	Extended              // the claim waited behind was renewed: it ends in Signal.Window
)

// Signal is a parsed message.
type Signal struct {
	Kind   Kind
	Window time.Duration // Watch: how long the grant lasts unless confirmed; Extended: the lease
	Grant  Grant         // Granted
}

// Room is the local queue of one primitive in one process.
type Room struct {
	h       *core.Handle
	channel string
	hooks   Hooks

	mu        sync.Mutex
	head      *waiter
	tail      *waiter
	n         int
	sub       *pubsub.Subscription
	now       bool        // re-check at once (message, re-subscription, a head that gave up)
	grant     *Grant      // a grant not yet taken
	lastToken int64       // the largest token this Room acquired: older grants are stale
	watch     *time.Timer // fires when a watched grant lapses unconfirmed
	queued    bool        // the waiter id is in the Redis queue, as far as this process knows
	queuedAt  time.Time   // see Try.QueuedAt
	floor     int64       // see Try.Floor
	checkAt   time.Time   // backstop: the head re-checks by itself then
	keepUntil time.Time   // the head re-checks by then, whatever it is told, to keep its entry (zero: no limit)
	// leaving is closed when the clean-up of the Room's last departure is done: a new head
	// waits for it, so that the clean-up cannot take out (or pass on a grant to) the queue
	// entry that the new head makes.
	leaving <-chan struct{}
}

type waiter struct {
	next *waiter
	turn chan struct{} // closed when the waiter becomes head
	wake chan struct{} // signals to the head; capacity 1
}

// waiters keeps waiters for reuse: an uncontended Lock would otherwise make one, and its wake
// channel, every time.
var waiters = sync.Pool{New: func() any { return &waiter{wake: make(chan struct{}, 1)} }}

// recycle returns w, out of its Room (leave), to waiters, emptied. Nothing refers to w once
// leave has taken it out: signals go to the Room's head, under the Room's lock.
func (w *waiter) recycle() {
	w.next, w.turn = nil, nil
	select {
	case <-w.wake:
	default:
	}
	waiters.Put(w)
}

// NewRoom returns the Room of a primitive; its waiters listen on channel, the Room's own.
func NewRoom(h *core.Handle, channel string, hooks Hooks) *Room {
	return &Room{h: h, channel: channel, hooks: hooks}
}

// Message implements pubsub.Listener.
func (r *Room) Message(payload string) {
	sig := r.hooks.Parse(payload)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch sig.Kind {
	case Recheck:
		r.now = true
		r.signalLocked()
	case Granted:
		if sig.Grant.Token <= r.lastToken {
			return // already taken, by an attempt that found it in Redis
		}
		r.queued = false // the release took the Room out of the queue
		if r.head == nil {
			// Nobody waits any more. The last waiter to leave passed on every grant newer than
			// the Room's last token before it returned; this one can only be older than that
			// leave, so this is the backstop for a leave that could not reach Redis. It passes
			// on this exact grant only: it must not touch the entry, or a grant, of a waiter
			// that came since.
			lv := Leave{Grant: sig.Grant.Token}
			r.h.Background("passing on a grant nobody waits for", cleanupTimeout,
				func(ctx context.Context) error { return r.abandon(ctx, lv) })
			return
		}
		g := sig.Grant
		r.grant, r.now = &g, true
		r.signalLocked()
	case Watch:
		// A timer, not a goroutine: the head wakes only if the grant lapses unconfirmed.
		d := sig.Window + 2*time.Millisecond
		if r.watch == nil {
			r.watch = time.AfterFunc(d, r.lapsed)
		} else {
			r.watch.Reset(d)
		}
	case Confirmed:
		if r.watch != nil {
			r.watch.Stop()
		}
	case Extended:
		// The holder renewed: the head re-checks just after the renewed lease would lapse, and
		// not before (its timer is re-armed from checkAt). A holder that died renews no more,
		// so the head is there within a round trip of the expiry.
		if r.head != nil && r.queued {
			at := time.Now().Add(sig.Window + 2*time.Millisecond)
			if !r.keepUntil.IsZero() && r.keepUntil.Before(at) {
				at = r.keepUntil
			}
			r.checkAt = at
			r.signalLocked()
		}
	}
}

// lapsed runs when a watched grant was not confirmed in time.
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

// keepMargin is the least a head keeps in hand for its re-check to reach Redis before its
// entry lapses; it keeps an eighth of the entry's life if that is more (a stall of this
// process or of Redis up to that long does not cost the head its place), and never more than
// a quarter (so that a very short lease does not make the head re-check at every renewal).
const keepMargin = 100 * time.Millisecond

// closedTurn is the turn of a waiter that is the head as it arrives.
var closedTurn = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Gate is what a primitive's Hooks.Gate returns for a local hold that one goroutine at a time
// has (a mutex's, a rwmutex's write hold): a channel closed while there is no hold, and, during
// one, closed when it ends. The channel of a hold is made only when a goroutine asks for it, so
// that an uncontended hold pays for none. Its methods are called under the primitive's lock.
type Gate struct{ ch chan struct{} }

// Wait returns the gate's channel: closed already if held is false, else closed by Open.
func (g *Gate) Wait(held bool) <-chan struct{} {
	if !held {
		return closedTurn
	}
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	return g.ch
}

// Open opens the gate: the hold it was closed for has ended.
func (g *Gate) Open() {
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
}

// Acquire waits its turn in the Room, then attempts until an attempt acquires, ctx ends or
// the handle closes. It returns nil on success, ctx's error, core.ErrClosed, or the error of
// an attempt that is not core.Transient (a transient error is retried with backoff).
func (r *Room) Acquire(ctx context.Context) error {
	w := waiters.Get().(*waiter)
	r.mu.Lock()
	if r.tail == nil {
		r.head, r.tail = w, w
		w.turn = closedTurn // the head at once: nothing to wait for, no channel to make
	} else {
		w.turn = make(chan struct{})
		r.tail.next, r.tail = w, w
	}
	r.n++
	r.mu.Unlock()

	if w.turn != closedTurn {
		r.h.Note(ctx, core.EventQueued) // behind other goroutines of this process
	}
	var err error
	var owner string
	select {
	case <-w.turn:
		if w.turn != closedTurn {
			r.h.Note(ctx, core.EventWoken) // its turn among this process's waiters
		}
		owner, err = r.contend(ctx, w)
	case <-ctx.Done():
		err = ctx.Err()
	case <-r.h.Done():
		err = core.ErrClosed
	}
	r.leave(w, err != nil, owner)
	w.recycle()
	return err
}

// keep makes sub the Room's subscription, unless it has one already: then it returns sub,
// for the caller to close.
func (r *Room) keep(sub *pubsub.Subscription) *pubsub.Subscription {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub == nil {
		r.sub = sub
		return nil
	}
	return sub
}

// leave takes w out of the Room and hands the turn to the next waiter. When its last waiter
// goes, the Room's entry leaves the Redis queue and any grant made to it meanwhile is passed on;
// an attempt whose reply was not awaited is voided or passed on. That runs before leave
// returns (in the background only if Redis cannot be reached), so that a Lock that gave up has
// finished its Redis side when it returns: a release right after it must not hand the lock to
// a waiter that is gone.
func (r *Room) leave(w *waiter, failed bool, owner string) {
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
	lv := Leave{Owner: owner, Dequeue: last && (r.queued || r.grant != nil), LastToken: r.lastToken}
	var sub *pubsub.Subscription
	var left chan struct{}
	if lv.Dequeue {
		left = make(chan struct{})
		r.leaving = left
	}
	if last {
		sub, r.sub = r.sub, nil
		r.grant = nil
		// Out of the queue: a grant that still arrives is not this Room's to take without
		// asking Redis (the leave below may be passing it on), so forget when it queued.
		r.queued, r.now, r.queuedAt = false, false, time.Time{}
		if r.watch != nil {
			r.watch.Stop()
		}
	} else if failed && wasHead {
		// A grant may be on its way to this Room: the next head checks at once.
		r.now = true
	}
	r.mu.Unlock()

	if sub != nil {
		sub.Close()
	}
	if lv.Owner != "" || lv.Dequeue {
		done := r.h.Undo("cleanup after a cancelled wait (the entry expires by itself)", cleanupTimeout,
			func(ctx context.Context) error { return r.abandon(ctx, lv) })
		if left != nil {
			select {
			case <-done:
				close(left)
			default:
				go func() { <-done; close(left) }()
			}
		}
	}
}

// abandon runs Hooks.Abandon and remembers the token of a grant it passed on as taken, so that
// a late message announcing it is dropped (Message, contend) rather than taken by a new head.
func (r *Room) abandon(ctx context.Context, lv Leave) error {
	passed, err := r.hooks.Abandon(ctx, lv)
	if passed > 0 {
		r.mu.Lock()
		if passed > r.lastToken {
			r.lastToken = passed
		}
		r.mu.Unlock()
	}
	return err
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
	_, ok := rediserr.As(err)
	return ok
}

// String implements fmt.Stringer for debugging.
func (r *Room) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("room %s: %d waiting, queued=%v", r.channel, r.n, r.queued)
}

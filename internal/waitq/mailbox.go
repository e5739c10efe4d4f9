package waitq

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/pubsub"
)

// Mailbox is one process's channel for a primitive whose waiters queue one by one in Redis
// (fair, semaphore), rather than one entry per process as a Room does. Each message names the
// waiter it is for, and the Mailbox wakes that waiter only. The channel is subscribed while any
// waiter has a Slot open; a re-subscription wakes every waiter to re-check.
type Mailbox struct {
	h       *core.Handle
	channel string
	parse   func(payload string) (to string, sig Signal)

	subMu sync.Mutex // serialises subscribing
	mu    sync.Mutex
	slots map[string]*Slot
	sub   *pubsub.Subscription
}

// Slot is one waiter's place in a Mailbox.
type Slot struct {
	b  *Mailbox
	id string
	// C receives the waiter's signals. It is buffered; when it is full, signals are
	// coalesced into one Recheck.
	C chan Signal
}

// NewMailbox returns the Mailbox on channel; parse splits a message into the waiter id it is
// for and its signal.
func NewMailbox(h *core.Handle, channel string, parse func(string) (string, Signal)) *Mailbox {
	return &Mailbox{h: h, channel: channel, parse: parse, slots: make(map[string]*Slot)}
}

// Register registers waiter id and returns its slot, without a round trip. The slot is
// Ready if the channel is subscribed already; if not, the waiter may try once first (an
// uncontended acquire needs no subscription), and must Subscribe, then check again, before it
// waits for a message.
func (b *Mailbox) Register(id string) *Slot {
	s := &Slot{b: b, id: id, C: make(chan Signal, 8)}
	b.mu.Lock()
	b.slots[id] = s
	ready := b.sub != nil
	b.mu.Unlock()
	if !ready {
		// Attach outside b.mu: the notifier calls Message with its own lock held.
		b.subMu.Lock()
		if sub := b.h.Notifier.Attach(b.channel, b); sub != nil {
			b.adopt(sub)
		}
		b.subMu.Unlock()
	}
	return s
}

// Ready reports whether the channel is subscribed: every message published from now on
// reaches the slot.
func (s *Slot) Ready() bool {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.b.sub != nil
}

// Subscribe returns once the channel is subscribed and confirmed. It returns ctx's error, or
// core.ErrClosed, if that fails.
func (s *Slot) Subscribe(ctx context.Context) error {
	b := s.b
	b.subMu.Lock()
	defer b.subMu.Unlock()
	if s.Ready() {
		return nil
	}
	sub, err := b.h.Notifier.Subscribe(ctx, b.channel, b)
	if err != nil {
		if err == pubsub.ErrClosed {
			err = core.ErrClosed
		}
		return err
	}
	b.adopt(sub)
	return nil
}

// adopt keeps sub as the Mailbox's subscription, unless every slot closed meanwhile or it has
// one already. Called with subMu.
func (b *Mailbox) adopt(sub *pubsub.Subscription) {
	b.mu.Lock()
	if len(b.slots) == 0 || b.sub != nil {
		b.mu.Unlock()
		sub.Close()
		return
	}
	b.sub = sub
	b.mu.Unlock()
}

// Close removes the slot; the last one unsubscribes (after the notifier's linger).
func (s *Slot) Close() {
	b := s.b
	b.mu.Lock()
	if b.slots[s.id] == s {
		delete(b.slots, s.id)
	}
	var sub *pubsub.Subscription
	if len(b.slots) == 0 {
		sub, b.sub = b.sub, nil
	}
	b.mu.Unlock()
	if sub != nil {
		sub.Close()
	}
}

func (s *Slot) send(sig Signal) {
	select {
	case s.C <- sig:
	default:
		// Full: drop the oldest and make sure a Recheck is there; the waiter re-reads Redis.
		select {
		case <-s.C:
		default:
		}
		select {
		case s.C <- Signal{Kind: Recheck}:
		default:
		}
	}
}

// Message implements pubsub.Listener.
func (b *Mailbox) Message(payload string) {
	to, sig := b.parse(payload)
	b.mu.Lock()
	s := b.slots[to]
	b.mu.Unlock()
	if s != nil && sig.Kind != Ignore {
		s.send(sig)
	}
}

// Resubscribed implements pubsub.Listener: messages may have been lost, so every waiter
// re-checks.
func (b *Mailbox) Resubscribed() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.slots {
		s.send(Signal{Kind: Recheck})
	}
}

// ParseQueued parses a message of a queue kept in Redis (see internal/scripts/lib/queue.lua;
// the waiter id it is for comes last): "g <n> <backup> <ms> <id>" (a grant for ms: n is its
// fencing token, or the permits granted), "w <ms> <id>" (watch a grant), "c <id>" (the
// watched grant was confirmed), "x <ms> <id>" (the lease waited behind was renewed: it ends in
// ms; lib/renew.lua), with the numbers integers >= 1 as the scripts write them.
// Anything else asks for a re-check: a malformed grant is never taken.
func ParseQueued(p string) (string, Signal) {
	f := strings.Split(p, " ")
	to := f[len(f)-1]
	if to == "" {
		return to, Signal{Kind: Recheck}
	}
	switch {
	case f[0] == "g" && len(f) == 5:
		n, ok1 := count(f[1])
		w, ok2 := millis(f[3])
		if ok1 && ok2 {
			return to, Signal{Kind: Granted, Grant: Grant{Token: n, Backup: f[2], Window: w}}
		}
	case f[0] == "w" && len(f) == 3:
		if w, ok := millis(f[1]); ok {
			return to, Signal{Kind: Watch, Window: w}
		}
	case f[0] == "c" && len(f) == 2:
		return to, Signal{Kind: Confirmed}
	case f[0] == "x" && len(f) == 3:
		if w, ok := millis(f[1]); ok {
			return to, Signal{Kind: Extended, Window: w}
		}
	}
	return to, Signal{Kind: Recheck}
}

// count parses an integer >= 1 written as the scripts write one: decimal, no sign, no leading
// zero (so that it is the same string in an owner value that Redis holds).
func count(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 1 && strconv.FormatInt(n, 10) == s
}

// millis parses a duration in whole milliseconds >= 1 that fits a time.Duration.
func millis(s string) (time.Duration, bool) {
	n, ok := count(s)
	if !ok || n > math.MaxInt64/int64(time.Millisecond) {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

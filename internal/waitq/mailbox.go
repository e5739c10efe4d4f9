package waitq

import (
	"context"
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

// Open registers waiter id and returns once the channel is subscribed and confirmed, so that
// every message published after Open returns reaches the slot. It returns ctx's error, or
// core.ErrClosed, having registered nothing, if that fails.
func (b *Mailbox) Open(ctx context.Context, id string) (*Slot, error) {
	s := &Slot{b: b, id: id, C: make(chan Signal, 8)}
	b.mu.Lock()
	b.slots[id] = s
	subscribed := b.sub != nil
	b.mu.Unlock()
	if subscribed {
		return s, nil
	}
	b.subMu.Lock()
	defer b.subMu.Unlock()
	b.mu.Lock()
	subscribed = b.sub != nil
	b.mu.Unlock()
	if subscribed {
		return s, nil
	}
	sub := b.h.Notifier.Attach(b.channel, b) // no round trip if the channel is confirmed already
	if sub == nil {
		var err error
		if sub, err = b.h.Notifier.Subscribe(ctx, b.channel, b); err != nil {
			s.Close()
			if err == pubsub.ErrClosed {
				err = core.ErrClosed
			}
			return nil, err
		}
	}
	b.mu.Lock()
	if len(b.slots) == 0 || b.sub != nil {
		b.mu.Unlock()
		sub.Close() // every slot closed meanwhile
		return s, nil
	}
	b.sub = sub
	b.mu.Unlock()
	return s, nil
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
// watched grant was confirmed). Anything else asks for a re-check.
func ParseQueued(p string) (string, Signal) {
	f := strings.Split(p, " ")
	to := f[len(f)-1]
	switch {
	case f[0] == "g" && len(f) == 5:
		n, err1 := strconv.ParseInt(f[1], 10, 64)
		w, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 == nil && err2 == nil {
			return to, Signal{Kind: Granted, Grant: Grant{Token: n, Backup: f[2], Window: time.Duration(w) * time.Millisecond}}
		}
	case f[0] == "w" && len(f) == 3:
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err == nil {
			return to, Signal{Kind: Watch, Window: time.Duration(n) * time.Millisecond}
		}
	case f[0] == "c" && len(f) == 2:
		return to, Signal{Kind: Confirmed}
	}
	return to, Signal{Kind: Recheck}
}

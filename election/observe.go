package election

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/pubsub"
)

// maxPending bounds the announcements an observer keeps for a reader that falls behind: past
// it the oldest are dropped (the newest is always kept).
const maxPending = 64

// Observe returns a channel that receives who leads now (if anyone does), then every change of
// leader or of the leader's value, in order, until ctx ends or the Handle closes, when it is
// closed. Infos arrive in increasing (Term, Rev) order; none is sent twice.
//
// Changes are announced by the script that makes them, on a channel every observing process
// subscribes to once, so an idle observer sends nothing but one read per lease (the backstop,
// for a message lost in flight). If its subscription drops, the observer reads the leader
// again once it is back: it may then skip states that came and went meanwhile, as it may if
// its reader falls more than 64 changes behind, but it always converges on the current
// leader. A term that ends with no candidate waiting is not announced (there is no new
// leader to tell of): ask [Election.Leader], or watch the leader's TTL, to learn of a vacancy.
func (e *Election) Observe(ctx context.Context) <-chan Info {
	out := make(chan Info)
	o := &observer{e: e, kick: make(chan struct{}, 1)}
	go o.run(ctx, out)
	return out
}

// observer is one Observe call's pub/sub listener and loop.
type observer struct {
	e    *Election
	kick chan struct{} // capacity 1: something to do

	mu      sync.Mutex
	pending []Info // announced, not yet sent, in arrival order
	reread  bool   // the subscription was re-established: read the leader again
}

// Message implements pubsub.Listener.
func (o *observer) Message(p string) {
	info, ok := parse(p)
	if !ok {
		return
	}
	o.mu.Lock()
	o.pending = append(o.pending, info)
	if len(o.pending) > maxPending {
		o.pending = slices.Delete(o.pending, 0, len(o.pending)-maxPending)
	}
	o.mu.Unlock()
	o.signal()
}

// Resubscribed implements pubsub.Listener: announcements may have been lost.
func (o *observer) Resubscribed() {
	o.mu.Lock()
	o.reread = true
	o.mu.Unlock()
	o.signal()
}

func (o *observer) signal() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// run subscribes, reads the leader, and then sends what is announced, reading again after a
// re-subscription or at the backstop.
func (o *observer) run(ctx context.Context, out chan<- Info) {
	defer close(out)
	c := o.e.c
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the observer ends with ctx or the Handle, whichever ends first

		select {
		case <-c.Done():
			cancel()
		case <-ctx.Done():
		}
	}()

	var sub *pubsub.Subscription
	for backoff := minBackoff; sub == nil; backoff = min(2*backoff, maxBackoff) {
		var err error
		if sub, err = c.Notifier.Subscribe(ctx, o.e.l.Observers(), o); err != nil {
			if ctx.Err() != nil || err == pubsub.ErrClosed {
				return
			}
			o.retrying("could not subscribe", err, backoff)
			if !core.Sleep(ctx, backoff) {
				return
			}
		}
	}
	defer sub.Close()

	var last Info // the last Info sent
	sent := false
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	read, backoff := true, minBackoff
	for {
		o.mu.Lock()
		read = read || o.reread
		o.reread = false
		o.mu.Unlock()
		if read {
			info, ok, err := o.e.read(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				o.retrying("could not read the leader", err, backoff)
				if !core.Sleep(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, maxBackoff)
				continue
			}
			read, backoff = false, minBackoff
			wait := o.e.l.TTL() // nobody leads: the next leader is announced; this is the backstop
			if ok {
				wait = core.Backstop(info.TTL, o.e.l.TTL())
				o.mu.Lock()
				o.pending = append(o.pending, info)
				o.mu.Unlock()
			}
			timer.Reset(wait)
		}

		o.mu.Lock()
		batch := o.pending
		o.pending = nil
		o.mu.Unlock()
		slices.SortStableFunc(batch, func(a, b Info) int {
			switch {
			case b.newer(a):
				return -1
			case a.newer(b):
				return 1
			}
			return 0
		})
		for _, info := range batch {
			if sent && !info.newer(last) {
				continue
			}
			if ctx.Err() != nil {
				return // select would pick a ready send at random
			}
			select {
			case out <- info:
				last, sent = info, true
			case <-ctx.Done():
				return
			}
		}

		select {
		case <-o.kick:
		case <-timer.C:
			read = true
		case <-ctx.Done():
			return
		}
	}
}

// retrying logs a failure the observer retries: at Debug if it may go away by itself (a
// connection error, a failover), else at Warn, the first time in a row (backoff at
// minBackoff): Redis refused it (an ACL without the subscription or the script's commands),
// and Observe, which returns no error, would otherwise retry it in silence.
func (o *observer) retrying(what string, err error, backoff time.Duration) {
	log := o.e.c.Log().Debug
	if !core.Transient(err) && backoff == minBackoff {
		log = o.e.c.Log().Warn
	}
	log("distsync: election observer "+what+", retrying", "election", o.e.Name(), "err", err, "in", backoff)
}

// The observer retries a failed subscription or read after minBackoff, doubling up to
// maxBackoff.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = time.Second
)

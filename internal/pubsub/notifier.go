// Package pubsub is the notifier of a distsync handle: one subscription connection per Redis
// node (rueidis multiplexes every Receive of a node onto it), reference-counted channels, and
// sharded pub/sub (SSUBSCRIBE) on Redis Cluster 7.0+ so that a wake-up touches one shard. A
// Redis 6.2 Cluster has no sharded pub/sub: there the notifier uses plain SUBSCRIBE, sent to the
// node that owns the channel's slot, and the scripts' PUBLISH reaches it over the Cluster bus,
// which broadcasts every PUBLISH to every node.
//
// Pub/sub is lossy: a PUBLISH sent while the subscription connection is down reaches nobody,
// and rueidis re-subscribes silently after it reconnects. The notifier therefore watches every
// subscription confirmation and, from the second one on, tells every listener of the channel
// to re-check (Listener.Resubscribed): a lost message must never mean a lost wake-up.
package pubsub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/rediserr"
)

// DefaultLinger is how long a channel stays subscribed after its last listener left. A waiter
// that comes back within it (a goroutine that locks again and again, say) needs no new
// SUBSCRIBE round trip; after it, the channel is unsubscribed, so idle names cost nothing.
const DefaultLinger = time.Second

// Listener receives the events of one channel. Its methods are called from the goroutine that
// reads the subscription and must return at once (set a flag, signal a buffered channel).
type Listener interface {
	// Message is called with the payload of each message published on the channel.
	Message(payload string)
	// Resubscribed is called when the channel's subscription was confirmed again after a
	// gap (a reconnect, or an unsubscribe that raced with a new listener): messages may have
	// been lost, so the listener must re-check the state it waits for.
	Resubscribed()
}

// Resubs is the Resubscribed half of a Listener whose waiters look at the state again after
// a re-subscription: embed it, and have each waiter take Next before it checks the state, then
// wait for that channel too. The zero value is ready to use.
type Resubs struct {
	mu   sync.Mutex
	next chan struct{}
}

// Resubscribed implements Listener: it closes the channel Next returned.
func (r *Resubs) Resubscribed() {
	r.mu.Lock()
	if r.next != nil {
		close(r.next)
	}
	r.next = make(chan struct{})
	r.mu.Unlock()
}

// Next returns a channel closed at the next re-subscription.
func (r *Resubs) Next() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next == nil {
		r.next = make(chan struct{})
	}
	return r.next
}

// Notifier multiplexes the pub/sub channels of one handle.
type Notifier struct {
	client  rueidis.Client
	sharded bool
	cluster bool
	linger  time.Duration
	log     *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	chans  map[string]*channel
	closed bool
}

type channel struct {
	name      string
	listeners map[*Subscription]Listener
	refs      int
	confirmed chan struct{} // closed while the current subscription is confirmed
	refused   chan struct{} // closed when Redis refused the subscription (err says why)
	err       error
	isConfirmed,
	everConfirmed bool
	linger *time.Timer
	// stop ends the current Receive, whose number is receive: the last resort of an
	// unsubscribe that did not end it (see unsubscribe).
	stop    context.CancelFunc
	receive int
}

// Subscription is one listener's registration on a channel.
type Subscription struct {
	n    *Notifier
	c    *channel
	once sync.Once
}

// New returns a notifier on client. With sharded (a Redis Cluster client whose nodes have
// sharded pub/sub, Redis 7.0+) it uses SSUBSCRIBE; otherwise SUBSCRIBE.
func New(client rueidis.Client, sharded bool, log *slog.Logger) *Notifier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Notifier{
		client:  client,
		sharded: sharded,
		cluster: client.Mode() == rueidis.ClientModeCluster,
		linger:  DefaultLinger,
		log:     log,
		ctx:     ctx,
		cancel:  cancel,
		chans:   make(map[string]*channel),
	}
}

// SetLinger changes how long an unused channel stays subscribed (tests use 0).
func (n *Notifier) SetLinger(d time.Duration) {
	n.mu.Lock()
	n.linger = d
	n.mu.Unlock()
}

// Sharded reports whether the notifier uses sharded pub/sub; scripts must then publish with
// SPUBLISH.
func (n *Notifier) Sharded() bool { return n.sharded }

// unsubscribeTimeout bounds how long Close tries to unsubscribe.
const unsubscribeTimeout = time.Second

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("pubsub: notifier closed")

// Subscribe registers l on channel name and returns once Redis has confirmed the channel's
// subscription, so that every message published after Subscribe returns reaches l (unless the
// connection drops, in which case l.Resubscribed follows). It returns ctx's error, having
// registered nothing, if ctx ends first, and Redis's error, wrapped after the command and the
// channel, if Redis refuses the subscription (an ACL without the command or the channel,
// NOPERM): retrying would only be refused again.
func (n *Notifier) Subscribe(ctx context.Context, name string, l Listener) (*Subscription, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	c := n.chans[name]
	if c == nil {
		c = &channel{name: name, listeners: make(map[*Subscription]Listener), confirmed: make(chan struct{}), refused: make(chan struct{})}
		n.chans[name] = c
		n.wg.Add(1)
		go n.run(c)
	}
	s := n.add(c, l)
	confirmed, refused := c.confirmed, c.refused
	n.mu.Unlock()

	select {
	case <-confirmed:
		return s, nil
	case <-refused:
		s.Close()
		return nil, c.err
	case <-ctx.Done():
		s.Close()
		return nil, ctx.Err()
	case <-n.ctx.Done():
		s.Close()
		return nil, ErrClosed
	}
}

// Attach registers l on channel name only if the channel is subscribed and confirmed right
// now, without waiting and without a round trip; it returns nil otherwise. A waiter that
// attaches before its first attempt needs no second attempt to cover the window between a
// failed check and its subscription.
func (n *Notifier) Attach(name string, l Listener) *Subscription {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.chans[name]
	if n.closed || c == nil || !c.isConfirmed {
		return nil
	}
	return n.add(c, l)
}

// add registers l on c, keeping c from lingering; n.mu is held.
func (n *Notifier) add(c *channel, l Listener) *Subscription {
	if c.linger != nil {
		c.linger.Stop()
		c.linger = nil
	}
	s := &Subscription{n: n, c: c}
	c.listeners[s] = l
	c.refs++
	return s
}

// Close removes the listener. The channel is unsubscribed once no listener is left for the
// linger period. Close is idempotent.
func (s *Subscription) Close() {
	s.once.Do(func() {
		n, c := s.n, s.c
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(c.listeners, s)
		c.refs--
		if c.refs > 0 || n.closed || c.err != nil { // a refused channel is not subscribed
			return
		}
		if n.linger <= 0 {
			n.unsubscribe(c)
			return
		}
		c.linger = time.AfterFunc(n.linger, func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.chans[c.name] == c && c.refs == 0 && !n.closed {
				c.linger = nil
				n.unsubscribe(c)
			}
		})
	})
}

// Channels returns the number of channels the notifier holds (subscribed or lingering).
func (n *Notifier) Channels() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.chans)
}

// Names returns the names of the channels the notifier holds (subscribed or lingering).
func (n *Notifier) Names() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	names := make([]string, 0, len(n.chans))
	for name := range n.chans {
		names = append(names, name)
	}
	return names
}

// unsubscribe sends (S)UNSUBSCRIBE; the channel's Receive then returns and run decides
// whether to end or, if a listener came back meanwhile, to subscribe again. Called with n.mu.
//
// Over RESP2 (the embedded miniredis), rueidis keeps a subscription on a connection of its
// own beside the one it sends commands on, and when the command connection breaks (a
// command's ctx deadline passed while it was in flight, say) it replaces that one and leaves
// the subscription's where it was: the UNSUBSCRIBE then goes to the new connection, which has
// no subscription (rueidis waits there for a reply that never comes), and the Receive goes on.
// If the Receive has not ended unsubscribeWait after the UNSUBSCRIBE was sent, the notifier
// ends it itself, so that no goroutine and no local state outlive the channel's last
// listener. (The subscription stays on rueidis's orphaned connection, which distsync cannot
// reach; over RESP3 one connection carries both, and this does not happen.)
func (n *Notifier) unsubscribe(c *channel) {
	receive := c.receive
	time.AfterFunc(unsubscribeWait, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.chans[c.name] == c && c.refs == 0 && c.receive == receive && c.stop != nil && !n.closed {
			n.log.Debug("distsync: unsubscribe did not end the subscription; ending it here", "channel", c.name)
			c.stop()
		}
	})
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		defer cancel()
		if err := n.client.Do(ctx, n.unsubscribeCmd(c.name)).Error(); err != nil && n.ctx.Err() == nil {
			// The connection is gone; with it the subscription. If rueidis re-subscribes,
			// confirm() sees no listener and tries again.
			n.log.Debug("distsync: unsubscribe failed", "channel", c.name, "err", err)
		}
	}()
}

// unsubscribeWait is how long an unsubscribe waits for the channel's Receive to end before it
// ends it (see unsubscribe): longer than Redis takes to answer an UNSUBSCRIBE on a loaded
// machine, as ending the Receive first would leave the subscription to that UNSUBSCRIBE alone.
const unsubscribeWait = 2 * time.Second

// subscribeCmd and unsubscribeCmd build the notifier's commands pinned (never returned to
// rueidis' pool of command buffers). rueidis sends a (un)subscription again on a new
// connection when the one it was written to dropped, and recycles its buffer once it is
// answered there; the dropped connection's writer read the buffer, and a buffer recycled into
// the next command races with that read (the race detector reported it under CLIENT KILL, with
// a waitgroup's next script built in the recycled buffer). A pinned buffer is left to the
// garbage collector: one allocation per (un)subscription.
//
// Plain (UN)SUBSCRIBE on a Cluster client carries the channel's slot: a keyless command goes
// to whichever node rueidis picks first, and an UNSUBSCRIBE sent to another node than its
// SUBSCRIBE would leave the channel subscribed for ever. With the slot, both go to the node
// that owns it, as sharded pub/sub's would.
func (n *Notifier) subscribeCmd(name string) rueidis.Completed {
	if n.sharded {
		return n.client.B().Ssubscribe().Channel(name).Build().Pin()
	}
	return n.onSlot(n.client.B().Subscribe().Channel(name).Build().Pin(), name)
}

func (n *Notifier) unsubscribeCmd(name string) rueidis.Completed {
	if n.sharded {
		return n.client.B().Sunsubscribe().Channel(name).Build().Pin()
	}
	return n.onSlot(n.client.B().Unsubscribe().Channel(name).Build().Pin(), name)
}

func (n *Notifier) onSlot(cmd rueidis.Completed, channel string) rueidis.Completed {
	if n.cluster {
		return cmd.SetSlot(channel)
	}
	return cmd
}

// run keeps channel c subscribed while it has listeners. rueidis' Receive returns when the
// channel is unsubscribed, the client closes, or a non-retryable error occurs; it re-subscribes
// by itself after an ordinary reconnect (the hook sees that).
func (n *Notifier) run(c *channel) {
	defer n.wg.Done()
	backoff := 10 * time.Millisecond
	for {
		rctx, stop := context.WithCancel(n.ctx)
		n.mu.Lock()
		c.receive++
		c.stop = stop
		n.mu.Unlock()
		ctx := rueidis.WithOnSubscriptionHook(rctx, func(s rueidis.PubSubSubscription) { n.confirm(c, s) })
		err := n.client.Receive(ctx, n.subscribeCmd(c.name), func(m rueidis.PubSubMessage) { n.dispatch(c, m.Message) })
		stopped := rctx.Err() != nil && n.ctx.Err() == nil
		stop()

		n.mu.Lock()
		c.stop = nil
		if stopped {
			err = nil // ended by unsubscribe's last resort: as if the UNSUBSCRIBE had ended it
		}
		if re, ok := rediserr.As(err); ok && !rediserr.Transient(re) && !n.closed {
			n.refuse(c, err)
			n.mu.Unlock()
			return
		}
		if n.closed || c.refs == 0 || errors.Is(err, rueidis.ErrClosing) {
			if n.chans[c.name] == c {
				delete(n.chans, c.name)
			}
			if c.linger != nil {
				c.linger.Stop()
			}
			if err != nil && !n.closed && c.refs > 0 {
				// The client is closing: wake the listeners so that they re-check, meet the
				// same error on their next command and return it.
				n.log.Warn("distsync: subscription ended", "channel", c.name, "err", err)
				for _, l := range c.listeners {
					l.Resubscribed()
				}
			}
			n.mu.Unlock()
			return
		}
		// Still wanted: the subscription ended under us. New listeners wait for the next
		// confirmation; current ones hear Resubscribed when it comes.
		if c.isConfirmed {
			c.isConfirmed = false
			c.confirmed = make(chan struct{})
		}
		n.mu.Unlock()

		if err == nil {
			backoff = 10 * time.Millisecond
			continue
		}
		n.log.Debug("distsync: subscription interrupted, retrying", "channel", c.name, "err", err, "in", backoff)
		select {
		case <-time.After(backoff):
		case <-n.ctx.Done():
		}
		backoff = min(backoff*2, time.Second)
	}
}

// refuse ends channel c, whose subscription Redis refused with err: the Subscribe calls
// waiting for it return the error, and the listeners it had (if Redis took it before, and
// refuses it now that rueidis subscribes again, after the ACL changed) re-check, each meeting
// the refusal at its next Subscribe. A later Subscribe tries afresh. Called with n.mu.
func (n *Notifier) refuse(c *channel, err error) {
	cmd := "SUBSCRIBE"
	if n.sharded {
		cmd = "SSUBSCRIBE"
	}
	n.log.Warn("distsync: subscription refused", "channel", c.name, "err", err)
	c.err = fmt.Errorf("%s %s: %w", cmd, c.name, err)
	close(c.refused)
	if n.chans[c.name] == c {
		delete(n.chans, c.name)
	}
	if c.linger != nil {
		c.linger.Stop()
	}
	for _, l := range c.listeners {
		l.Resubscribed()
	}
}

// confirm handles the subscription hook. It runs in rueidis' reader goroutine.
func (n *Notifier) confirm(c *channel, s rueidis.PubSubSubscription) {
	if s.Channel != c.name || (s.Kind != "subscribe" && s.Kind != "ssubscribe") {
		return
	}
	n.mu.Lock()
	if !c.isConfirmed {
		c.isConfirmed = true
		close(c.confirmed)
	}
	again := c.everConfirmed
	c.everConfirmed = true
	if c.refs == 0 && !n.closed && c.linger == nil {
		// Re-subscribed (by rueidis, after a reconnect) although nobody listens any more.
		n.unsubscribe(c)
	}
	if again {
		for _, l := range c.listeners {
			l.Resubscribed()
		}
	}
	n.mu.Unlock()
}

func (n *Notifier) dispatch(c *channel, payload string) {
	n.mu.Lock()
	for _, l := range c.listeners {
		l.Message(payload)
	}
	n.mu.Unlock()
}

// Close unsubscribes every channel and stops the notifier's goroutines, waiting at most until
// ctx ends. Listeners hear nothing more.
func (n *Notifier) Close(ctx context.Context) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	names := make([]string, 0, len(n.chans))
	for name, c := range n.chans {
		if c.linger != nil {
			c.linger.Stop()
		}
		names = append(names, name)
	}
	n.mu.Unlock()

	// Unsubscribe for real (cancelling Receive alone would leave the server-side subscription
	// on the user's connection), then stop whatever is still running.
	if len(names) > 0 {
		// Bounded apart from ctx: if Redis cannot be reached, the subscription connection is
		// gone, and the subscriptions with it.
		uctx, cancel := context.WithTimeout(ctx, unsubscribeTimeout)
		for _, name := range names {
			if err := n.client.Do(uctx, n.unsubscribeCmd(name)).Error(); err != nil && uctx.Err() != nil {
				break
			}
		}
		cancel()
	}
	n.cancel()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

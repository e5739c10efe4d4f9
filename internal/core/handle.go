// Package core is the machinery every distsync primitive shares: the handle (client, key
// layout, defaults, notifier, renewal loop, background work) and the lease of a held claim.
// Package distsync wraps it for users; primitive packages use it directly.
package core

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/keys"
	"github.com/distsync/distsync/internal/pubsub"
)

// Config holds a handle's settings; package distsync documents and validates them. A
// primitive's Settings start from them.
type Config struct {
	Prefix        string
	LeaseTTL      time.Duration
	Fixed         bool // leases are not renewed (WithFixedLease)
	FenceTTL      time.Duration
	HandoffWindow time.Duration
	WaiterLease   time.Duration
	Logger        *slog.Logger
	Identity      string      // who the handle is, for operators: the first part of its id
	ReplicaAck    ReplicaAck  // N 0: none
	Observer      func(Event) // nil: none (see Emit)
}

// Handle is the shared state behind a distsync.Handle.
type Handle struct {
	// Client is what the primitives send their commands to: the user's client, wrapped to
	// wait for replicas if the Handle has a replica ack (Raw is the user's client as given).
	Client   rueidis.Client
	Raw      rueidis.Client
	Config   Config
	Notifier *pubsub.Notifier
	// Pub is the publish command scripts use: SPUBLISH on a Cluster with sharded pub/sub
	// (Server.Sharded), else PUBLISH.
	Pub string
	// Server is what New learned of the servers, once.
	Server Server

	id  string
	seq atomic.Uint64

	ren *renewer

	ctx    context.Context // ends when Close is done with Redis: background work stops then
	cancel context.CancelFunc
	bg     sync.WaitGroup
	closed atomic.Bool

	// closing is closed when Close starts ending the calls in progress (Done); Close waits
	// for them (Enter, Exit), then a moment for the clean-ups still being retried, before it
	// stops the notifier and background work, so that a waiter it ends still cleans up after
	// itself in Redis.
	closing  chan struct{}
	calls    tracker
	cleanups tracker
}

// cleanupGrace is how long Close lets clean-ups that are being retried in the background (a
// queue entry to remove, a release to finish) go on before it stops them: long enough for a
// few retries after a dropped connection, short against Redis being unreachable.
const cleanupGrace = time.Second

// tracker counts work in progress that Close waits for.
type tracker struct {
	mu      sync.Mutex
	n       int
	closed  bool
	drained chan struct{} // closed when n reaches 0 after close
}

// enter registers one more piece of work, unless close was called.
func (t *tracker) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.n++
	return true
}

func (t *tracker) exit() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 && t.drained != nil {
		close(t.drained)
		t.drained = nil
	}
}

// close refuses new work and returns a channel closed once the work in progress is done.
func (t *tracker) close() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	ch := make(chan struct{})
	if t.n == 0 {
		close(ch)
	} else {
		t.drained = ch
	}
	return ch
}

// NewHandle starts a handle on client, whose servers ProbeServer described as srv. cfg must
// be valid.
func NewHandle(client rueidis.Client, cfg Config, srv Server) *Handle {
	var b [12]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	raw := client
	if cfg.ReplicaAck.N > 0 {
		client = WithReplicaAck(client, cfg.ReplicaAck)
	}
	h := &Handle{
		Client:   client,
		Raw:      raw,
		Config:   cfg,
		Notifier: pubsub.New(raw, srv.Sharded, cfg.Logger),
		Server:   srv,
		id:       escapeIdentity(cfg.Identity) + "." + base64.RawURLEncoding.EncodeToString(b[:]),
		ctx:      ctx,
		cancel:   cancel,
		closing:  make(chan struct{}),
	}
	h.Pub = "PUBLISH"
	if h.Notifier.Sharded() {
		h.Pub = "SPUBLISH"
	}
	h.ren = newRenewer(h)
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		h.ren.run(ctx)
	}()
	return h
}

// Log returns the handle's logger.
func (h *Handle) Log() *slog.Logger { return h.Config.Logger }

// NewID returns an identifier unique across every handle of every process: the handle's id
// (its escaped identity and a random part, see idSafe) and a counter, '<handle id>:<n>'. It
// names owner values and waiter queues.
func (h *Handle) NewID() string {
	var b [maxIDLen + 1 + 13]byte // one allocation, the string's own (13: a uint64 in base 36)
	return string(strconv.AppendUint(append(append(b[:0], h.id...), ':'), h.seq.Add(1), 36))
}

// NewIDAfter returns prefix + NewID(), in one allocation.
func (h *Handle) NewIDAfter(prefix string) string {
	var b [2*maxIDLen + 2 + 13]byte // on the stack for a prefix up to an id and a separator
	return string(strconv.AppendUint(append(append(append(b[:0], prefix...), h.id...), ':'), h.seq.Add(1), 36))
}

// Keys returns the key space of a primitive of kind named name.
func (h *Handle) Keys(kind, name string) (keys.Space, error) {
	s, err := keys.New(h.Config.Prefix, kind, name)
	if err != nil {
		return s, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return s, nil
}

// Space checks what every primitive's New checks, a lease of at least MinLease and a
// name that makes keys, and returns the key space of the primitive of kind named name. Its
// errors match ErrInvalid.
func (h *Handle) Space(kind, name string, ttl time.Duration) (keys.Space, error) {
	if ttl < MinLease {
		return keys.Space{}, fmt.Errorf("%s %q: %w: lease TTL must be at least %v, got %v", kind, name, ErrInvalid, MinLease, ttl)
	}
	ks, err := h.Keys(kind, name)
	if err != nil {
		return ks, fmt.Errorf("%s %q: %w", kind, name, err)
	}
	return ks, nil
}

// Done is closed when the handle is closing: calls that wait must return ErrClosed, after
// cleaning up in Redis (Detached contexts still work until they have returned).
func (h *Handle) Done() <-chan struct{} { return h.closing }

// Enter registers a call that may wait and send commands (an acquire); Close waits for it to
// Exit. It returns ErrClosed, registering nothing, if the handle is closed.
func (h *Handle) Enter() error {
	if !h.calls.enter() {
		return ErrClosed
	}
	return nil
}

// Exit ends a call registered by Enter.
func (h *Handle) Exit() { h.calls.exit() }

// Closed reports whether Close has been called.
func (h *Handle) Closed() bool { return h.closed.Load() }

// Go runs f in the background. Close waits for it; f's ctx ends at Close.
func (h *Handle) Go(f func(ctx context.Context)) {
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		f(h.ctx)
	}()
}

// Background runs f in the background with its own context, which ends after timeout or
// at Close, and logs its error: for work a caller must not wait for, such as cleaning up
// after a cancelled wait or finishing an unconfirmed release. It reports whether f was
// started: not once the handle is closing.
func (h *Handle) Background(what string, timeout time.Duration, f func(ctx context.Context) error) (started bool) {
	if !h.cleanups.enter() {
		return false // closing
	}
	h.Go(func(hctx context.Context) {
		defer h.cleanups.exit()
		ctx, cancel := context.WithTimeout(hctx, timeout)
		defer cancel()
		if err := f(ctx); err != nil {
			h.Log().Warn("distsync: "+what+" failed", "err", err)
		}
	})
	return true
}

// Context returns a context that ends when the handle is closed.
func (h *Handle) Context() context.Context { return h.ctx }

// Detached returns a context for a command that must not be cut short by the caller's
// context (a release, a cleanup): it ends after timeout or when the handle is closed.
func (h *Handle) Detached(timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(h.ctx, timeout)
}

// Close releases every lease the handle still holds (waiting at most until ctx ends), ends
// the calls that wait and waits for them to clean up, gives clean-ups that are being retried
// up to cleanupGrace to finish, then stops the renewal loop and the notifier, and waits for
// background work.
func (h *Handle) Close(ctx context.Context) error {
	if h.closed.Swap(true) {
		return nil
	}
	drained := h.calls.close()
	err := h.ren.closeAll(ctx)
	// End the calls in progress and let them clean up (leave their queues, pass on what was
	// granted to them meanwhile) while Redis can still be reached through the handle.
	close(h.closing)
	select {
	case <-drained:
	case <-ctx.Done():
	}
	// Clean-ups being retried (a connection dropped under one) get a moment to finish.
	grace, cancel := context.WithTimeout(ctx, cleanupGrace)
	select {
	case <-h.cleanups.close():
	case <-grace.Done():
	}
	cancel()
	h.Notifier.Close(ctx)
	h.cancel()
	done := make(chan struct{})
	go func() { h.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	return err
}

// Undo runs f, an idempotent clean-up (voiding or undoing an attempt whose reply was lost),
// once with a short timeout; if that fails, as it will when the connection that lost the reply
// is still down, it keeps trying in the background, with backoff, for up to timeout. The
// channel it returns is closed when f has succeeded or Undo has given up.
func (h *Handle) Undo(what string, timeout time.Duration, f func(ctx context.Context) error) <-chan struct{} {
	done := make(chan struct{})
	ctx, cancel := h.Detached(time.Second)
	err := f(ctx)
	cancel()
	if err == nil || !h.cleanups.enter() {
		close(done)
		return done
	}
	h.Go(func(hctx context.Context) {
		defer h.cleanups.exit()
		defer close(done)
		ctx, cancel := context.WithTimeout(hctx, timeout)
		defer cancel()
		for backoff := 20 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
			err := f(ctx)
			if err == nil || !Transient(err) {
				if err != nil {
					h.Log().Warn("distsync: "+what+" failed", "err", err)
				}
				return
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				h.Log().Warn("distsync: "+what+" failed", "err", err)
				return
			}
		}
	})
	return done
}

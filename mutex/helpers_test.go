package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/counting"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
)

// pod is one simulated process: its own rueidis client (counted from after New, and the
// replies it got noted, for waitSubscribed) and distsync handle.
type pod struct {
	raw     rueidis.Client
	client  *counting.Client
	h       *distsync.Handle
	replies *replies
}

func newPod(t *testing.T, b *redistest.Backend, prefix string, opts ...distsync.Option) *pod {
	t.Helper()
	return podOn(t, b, b.Client(t), prefix, opts)
}

// newPodVia is newPod whose connections go through net, for partitions.
func newPodVia(t *testing.T, b *redistest.Backend, prefix string, net *redistest.Network, opts ...distsync.Option) *pod {
	t.Helper()
	return podOn(t, b, b.ClientVia(t, net), prefix, opts)
}

func podOn(t *testing.T, b *redistest.Backend, raw rueidis.Client, prefix string, opts []distsync.Option) *pod {
	t.Helper()
	r := &replies{Client: raw}
	c := counting.New(r)
	h := b.Handle(t, c, append([]distsync.Option{distsync.WithKeyPrefix(prefix)}, opts...)...)
	c.Reset() // New's version check: the tests count what the mutex sends
	return &pod{raw: raw, client: c, h: h, replies: r}
}

// replies is a client that notes, in order, the commands whose replies came back, and the
// subscriptions started (Receive, which returns only when the subscription ends).
type replies struct {
	rueidis.Client
	mu  sync.Mutex
	log []string
}

func (r *replies) note(names ...string) {
	r.mu.Lock()
	r.log = append(r.log, names...)
	r.mu.Unlock()
}

func (r *replies) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	name := cmd.Commands()[0] // before Do, which may recycle cmd
	res := r.Client.Do(ctx, cmd)
	r.note(name)
	return res
}

func (r *replies) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	names := make([]string, len(multi))
	for i, cmd := range multi {
		names[i] = cmd.Commands()[0]
	}
	res := r.Client.DoMulti(ctx, multi...)
	r.note(names...)
	return res
}

func (r *replies) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	r.note(subscribe.Commands()[0])
	return r.Client.Receive(ctx, subscribe, fn)
}

func (r *replies) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

// rechecked reports whether a script's reply came back after a subscription began: a waiter
// subscribes after its first attempt fails, and once Redis confirms the subscription it
// attempts again (a release published between the two reached nobody); from that attempt's
// reply on, it waits for a message, its backstop or its context. (For a pod that only waits:
// a holder's renewals are scripts too.)
func (r *replies) rechecked() bool {
	subscribed := false
	for _, name := range r.names() {
		switch name {
		case "SUBSCRIBE", "SSUBSCRIBE":
			subscribed = true
		case "EVALSHA", "EVAL":
			if subscribed {
				return true
			}
		}
	}
	return false
}

// waitSubscribed waits until the waiter of p (a pod that only waits) has subscribed and
// checked again after it (see rechecked): from then on a release reaches it as a message.
func waitSubscribed(t *testing.T, p *pod) {
	t.Helper()
	if !redistest.Eventually(20*time.Second, p.replies.rechecked) {
		t.Fatalf("the waiter did not subscribe and check again; its replies: %v", p.replies.names())
	}
}

// eachInTurn is redistest.Each with the backends one after another, for a test that counts
// the process's goroutines: another backend's subtest, run meanwhile, would change the count.
func eachInTurn(t *testing.T, f func(t *testing.T, b *redistest.Backend)) {
	t.Helper()
	for _, name := range redistest.All {
		t.Run(name, func(t *testing.T) { f(t, redistest.Open(t, name)) })
	}
}

func (p *pod) mutex(t *testing.T, name string, opts ...distsync.Option) *mutex.Mutex {
	t.Helper()
	m, err := mutex.New(p.h, name, opts...)
	if err != nil {
		t.Fatalf("mutex.New(%q): %v", name, err)
	}
	return m
}

// keyOf returns the key of a part of the mutex name ("" for the lock itself), for names
// without braces or '%'.
func keyOf(prefix, name, part string) string {
	k := prefix + "{" + name + "}:mutex"
	if part != "" {
		k += ":" + part
	}
	return k
}

func lockWithin(t *testing.T, m *mutex.Mutex, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("Lock(%s): %v", m.Name(), err)
	}
}

// lockShort locks m, whose lease is short, for a test run by Retry: on a machine so slow that
// no acquisition's reply comes within the lease, Lock gives each back and tries again until
// its context ends. That is an error to return, for an attempt with a longer lease.
func lockShort(t *testing.T, m *mutex.Mutex) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := m.Lock(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("Lock(%s) did not take the free lock in 10 s, its replies too late for its lease: %w", m.Name(), err)
	}
	if err != nil {
		t.Fatalf("Lock(%s): %v", m.Name(), err)
	}
	return nil
}

func unlock(t *testing.T, m *mutex.Mutex) {
	t.Helper()
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock(%s): %v", m.Name(), err)
	}
}

// unlockOrLost unlocks m, for a test about something else than holds: one that a stalled
// machine lost (Unlock reports ErrLost) is fine.
func unlockOrLost(t *testing.T, m *mutex.Mutex) {
	t.Helper()
	if err := m.Unlock(context.Background()); err != nil && !errors.Is(err, distsync.ErrLost) {
		t.Fatalf("Unlock(%s): %v", m.Name(), err)
	}
}

// lockAsync starts Lock in a goroutine and returns a channel that yields its error and the
// time it returned.
func lockAsync(ctx context.Context, m *mutex.Mutex) <-chan redistest.Returned {
	return redistest.Async(ctx, m.Lock)
}

// wait returns what ch yields, failing t if Lock does not return within limit.
func wait(t *testing.T, ch <-chan redistest.Returned, limit time.Duration) redistest.Returned {
	t.Helper()
	return redistest.Await(t, ch, limit)
}

// waitQueued waits until the mutex's Redis queue holds n waiting processes.
func waitQueued(t *testing.T, b *redistest.Backend, prefix, name string, n int64) {
	t.Helper()
	var got int64
	ok := redistest.Eventually(20*time.Second, func() bool {
		got, _ = b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Zcard().Key(keyOf(prefix, name, "q")).Build()
		}).AsInt64()
		return got == n
	})
	if !ok {
		t.Fatalf("queue of %q holds %d waiters, want %d", name, got, n)
	}
}

// expiryOf returns the earliest moment Redis may let the hold of m's name go, read now with
// Holders (one round trip): when the read began, plus what Redis said was left, less 2 ms for
// its rounding to the millisecond. It returns an error, for Retry, if the name is not held
// with token any more: the hold a test set up ran out before the test read it (a renewal
// too late on a stalled machine).
func expiryOf(t *testing.T, m *mutex.Mutex, token int64) (time.Time, error) {
	t.Helper()
	start := time.Now()
	hs, err := m.Holders(context.Background())
	if err != nil {
		t.Fatalf("Holders(%s): %v", m.Name(), err)
	}
	if len(hs) != 1 || hs[0].Token != token {
		return time.Time{}, fmt.Errorf("%s is held by %+v, not by the hold with token %d: that hold ran out before the test read it", m.Name(), hs, token)
	}
	return start.Add(hs[0].Remaining - 2*time.Millisecond), nil
}

// waitQueuedOr is waitQueued for a queue that the Lock whose result ch yields is to join
// behind a holder the test set up. It returns false if that Lock returns instead: the lock
// was free, the holder's lease run out (a renewal too late on a stalled machine).
func waitQueuedOr(t *testing.T, b *redistest.Backend, prefix, name string, n int64, ch <-chan redistest.Returned) bool {
	t.Helper()
	var got int64
	var returned bool
	if !redistest.Eventually(20*time.Second, func() bool {
		got, _ = b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Zcard().Key(keyOf(prefix, name, "q")).Build()
		}).AsInt64()
		returned = len(ch) > 0
		return got == n || returned
	}) {
		t.Fatalf("queue of %q holds %d waiters, want %d", name, got, n)
	}
	return got == n
}

// heldTooShort is the error of an attempt whose waiter took the lock that the holder with
// lease was to keep: a premise a stalled machine breaks, once the holder's lease has run out
// (and a failure of t while it is alive).
func heldTooShort(t *testing.T, lease *distsync.Lease) error {
	t.Helper()
	err := lease.Err()
	if err == nil {
		t.Fatal("the waiter took the lock while the holder's lease was alive")
	}
	return fmt.Errorf("the waiter took the lock before the test was ready: the holder's lease ended: %w", err)
}

func isBoth(err error, targets ...error) bool {
	for _, t := range targets {
		if !errors.Is(err, t) {
			return false
		}
	}
	return true
}

package pubsub_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/counting"
	"github.com/distsync/distsync/internal/pubsub"
	"github.com/distsync/distsync/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type listener struct {
	mu       sync.Mutex
	messages []string
	resubs   int
	signal   chan struct{}
}

func newListener() *listener { return &listener{signal: make(chan struct{}, 100)} }

func (l *listener) Message(p string) {
	l.mu.Lock()
	l.messages = append(l.messages, p)
	l.mu.Unlock()
	l.signal <- struct{}{}
}

func (l *listener) Resubscribed() {
	l.mu.Lock()
	l.resubs++
	l.mu.Unlock()
	l.signal <- struct{}{}
}

func (l *listener) snapshot() ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.messages...), l.resubs
}

func publish(t *testing.T, b *redistest.Backend, channel, msg string) {
	t.Helper()
	b.Do(t, func(c rueidis.Client) rueidis.Completed {
		if b.Sharded() {
			return c.B().Spublish().Channel(channel).Message(msg).Build()
		}
		return c.B().Publish().Channel(channel).Message(msg).Build()
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !redistest.Eventually(10*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Two listeners on one channel share one subscription; the channel is unsubscribed when the
// last one leaves, and its goroutine ends.
func TestOneSubscriptionPerChannel(t *testing.T) {
	// The backends one after another, not in parallel as redistest.Each runs them: the test
	// counts the process's goroutines, which another backend's subtest would change meanwhile.
	for _, name := range redistest.All {
		t.Run(name, func(t *testing.T) { oneSubscriptionPerChannel(t, redistest.Open(t, name)) })
	}
}

func oneSubscriptionPerChannel(t *testing.T, b *redistest.Backend) {
	baseline := redistest.LibraryGoroutines()
	client := counting.New(b.Client(t))
	n := pubsub.New(client, b.Sharded(), nil)
	defer n.Close(context.Background())
	n.SetLinger(0)
	channel := b.Prefix(t) + "{x}:ch"
	ctx := context.Background()

	l1, l2 := newListener(), newListener()
	s1, err := n.Subscribe(ctx, channel, l1)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := n.Subscribe(ctx, channel, l2)
	if err != nil {
		t.Fatal(err)
	}
	subs := client.Counts()["SUBSCRIBE"] + client.Counts()["SSUBSCRIBE"]
	if subs != 1 {
		t.Fatalf("%d SUBSCRIBE commands for one channel, want 1", subs)
	}
	if got := b.Subscribers(t, channel); got != 1 {
		t.Fatalf("Redis counts %d subscribers, want 1", got)
	}
	publish(t, b, channel, "hello")
	waitFor(t, "both listeners to get the message", func() bool {
		m1, _ := l1.snapshot()
		m2, _ := l2.snapshot()
		return len(m1) == 1 && len(m2) == 1
	})

	s1.Close()
	if got := b.Subscribers(t, channel); got != 1 {
		t.Fatalf("after one of two listeners left, %d subscribers, want 1", got)
	}
	s2.Close()
	s2.Close() // idempotent
	waitFor(t, "the unsubscribe", func() bool { return b.Subscribers(t, channel) == 0 })
	waitFor(t, "the channel to be dropped", func() bool { return n.Channels() == 0 })
	n.Close(context.Background())
	redistest.WaitGoroutines(t, baseline, 5*time.Second)
}

// A channel whose last listener left stays subscribed for the linger period; a listener that
// comes back within it attaches without a round trip.
func TestLingerKeepsTheSubscription(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const linger = 500 * time.Millisecond
		redistest.Retry(t, 3, func() error {
			client := counting.New(b.Client(t))
			n := pubsub.New(client, b.Sharded(), nil)
			defer n.Close(context.Background())
			n.SetLinger(linger)
			channel := b.Prefix(t) + "{x}:ch"

			s, err := n.Subscribe(context.Background(), channel, newListener())
			if err != nil {
				t.Fatal(err)
			}
			closed := time.Now()
			s.Close()
			again := n.Attach(channel, newListener())
			sent := client.Total()
			if again == nil || sent != 1 {
				// The linger's timer starts in Close: within the linger it cannot have fired.
				// After it (a stalled machine), the channel may be unsubscribed already.
				if d := time.Since(closed); d >= linger {
					return fmt.Errorf("Attach came %v after Close, past the linger (%v)", d, linger)
				}
				if again == nil {
					t.Fatal("Attach within the linger period found no subscription")
				}
				t.Fatalf("%d commands, want the one SUBSCRIBE", sent)
			}
			again.Close()
			waitFor(t, "the unsubscribe after the linger", func() bool { return b.Subscribers(t, channel) == 0 })
			waitFor(t, "the channel to be dropped", func() bool { return n.Channels() == 0 })
			if n.Attach(channel, newListener()) != nil {
				t.Fatal("Attach after the unsubscribe returned a subscription")
			}
			return nil
		})
	})
}

// When the subscription connection is killed, rueidis re-subscribes by itself; the listener
// is told so that it re-checks, and messages flow again.
func TestResubscribedAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		n := pubsub.New(b.Client(t), b.Sharded(), nil)
		defer n.Close(context.Background())
		channel := b.Prefix(t) + "{x}:ch"
		l := newListener()
		if _, err := n.Subscribe(context.Background(), channel, l); err != nil {
			t.Fatal(err)
		}
		b.KillPubSub(t)
		waitFor(t, "Resubscribed", func() bool { _, r := l.snapshot(); return r >= 1 })
		publish(t, b, channel, "after")
		waitFor(t, "a message after the re-subscription", func() bool {
			m, _ := l.snapshot()
			return len(m) == 1 && m[0] == "after"
		})
	})
}

// Subscribe gives up when its context ends and leaves nothing registered.
func TestSubscribeAfterClose(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Mini)
	n := pubsub.New(b.Client(t), b.Sharded(), nil)
	n.Close(context.Background())
	if _, err := n.Subscribe(context.Background(), "c", newListener()); err != pubsub.ErrClosed {
		t.Fatalf("Subscribe after Close = %v, want ErrClosed", err)
	}
}

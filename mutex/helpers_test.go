package mutex_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/counting"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
)

// pod is one simulated process: its own rueidis client (counted from after New) and distsync
// handle.
type pod struct {
	raw    rueidis.Client
	client *counting.Client
	h      *distsync.Handle
}

func newPod(t *testing.T, b *redistest.Backend, prefix string, opts ...distsync.Option) *pod {
	t.Helper()
	raw := b.Client(t)
	c := counting.New(raw)
	h := b.Handle(t, c, append([]distsync.Option{distsync.WithKeyPrefix(prefix)}, opts...)...)
	c.Reset() // New's version check: the tests count what the mutex sends
	return &pod{raw: raw, client: c, h: h}
}

// newPodVia is newPod whose connections go through net, for partitions.
func newPodVia(t *testing.T, b *redistest.Backend, prefix string, net *redistest.Network, opts ...distsync.Option) *pod {
	t.Helper()
	raw := b.ClientVia(t, net)
	c := counting.New(raw)
	h := b.Handle(t, c, append([]distsync.Option{distsync.WithKeyPrefix(prefix)}, opts...)...)
	c.Reset() // New's version check: the tests count what the mutex sends
	return &pod{raw: raw, client: c, h: h}
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

func unlock(t *testing.T, m *mutex.Mutex) {
	t.Helper()
	if err := m.Unlock(context.Background()); err != nil {
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
	ok := redistest.Eventually(5*time.Second, func() bool {
		got, _ = b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Zcard().Key(keyOf(prefix, name, "q")).Build()
		}).AsInt64()
		return got == n
	})
	if !ok {
		t.Fatalf("queue of %q holds %d waiters, want %d", name, got, n)
	}
}

func isBoth(err error, targets ...error) bool {
	for _, t := range targets {
		if !errors.Is(err, t) {
			return false
		}
	}
	return true
}

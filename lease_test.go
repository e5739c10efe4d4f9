package distsync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/semaphore"
)

// Deadline says how long the holder surely has; Refresh renews now and moves it; a Refresh
// that finds the claim gone reports the loss at once and ends the lease.
func TestLeaseRefreshReportsALossSynchronously(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		h := b.Pod(t, prefix, distsync.WithLeaseTTL(30*time.Second)).H
		ctx := context.Background()
		m, _ := mutex.New(h, "refresh")
		before := time.Now()
		l, err := m.LockLease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := l.Deadline(); d.Before(before.Add(29*time.Second)) || d.After(time.Now().Add(30*time.Second)) {
			t.Fatalf("Deadline %v after the lock, want within the 30 s lease less drift", d.Sub(before))
		}
		first := l.Deadline()
		time.Sleep(20 * time.Millisecond)
		if err := l.Refresh(ctx); err != nil {
			t.Fatalf("Refresh of a held lease: %v", err)
		}
		if !l.Deadline().After(first) {
			t.Fatalf("Refresh did not move the deadline: %v, was %v", l.Deadline(), first)
		}
		// An operator deletes the key: Refresh tells at once, long before the loop would.
		b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Del().Key(prefix + "{refresh}:mutex").Build()
		})
		err = l.Refresh(ctx)
		if !errors.Is(err, distsync.ErrLost) {
			t.Fatalf("Refresh of a deleted claim: %v, want ErrLost", err)
		}
		select {
		case <-l.Done():
		default:
			t.Fatal("the lease did not end when Refresh found the claim gone")
		}
		if !errors.Is(l.Err(), distsync.ErrLost) {
			t.Fatalf("Err after the loss: %v", l.Err())
		}
		if err := l.Refresh(ctx); !errors.Is(err, distsync.ErrLost) {
			t.Fatalf("Refresh after the loss: %v", err)
		}
		if err := m.Unlock(ctx); !errors.Is(err, distsync.ErrNotHeld) || !errors.Is(err, distsync.ErrLost) {
			t.Fatalf("Unlock after the loss: %v", err)
		}
		// A released lease refreshes no more.
		l2, err := m.LockLease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = m.Unlock(ctx)
		if err := l2.Refresh(ctx); !errors.Is(err, distsync.ErrReleased) {
			t.Fatalf("Refresh after Unlock: %v, want ErrReleased", err)
		}
	})
}

// Extend changes a fixed lease in Redis and here, shorter or longer; a renewed lease refuses it.
func TestLeaseExtendOfAFixedLease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		h := b.Pod(t, prefix).H
		ctx := context.Background()
		pttl := func(name string) time.Duration {
			n, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Pttl().Key(prefix + "{" + name + "}:mutex").Build()
			}).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			return time.Duration(n) * time.Millisecond
		}
		// A fixed lease long enough to be extended on a loaded machine, shorter than the minute
		// it is extended to.
		m, _ := mutex.New(h, "fixed", distsync.WithFixedLease(20*time.Second))
		l, err := m.LockLease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if p := pttl("fixed"); p < 50*time.Second {
			t.Fatalf("PTTL after Extend(1m) = %v", p)
		}
		if until := time.Until(l.Deadline()); until < 50*time.Second || until > time.Minute {
			t.Fatalf("deadline after Extend(1m) in %v", until)
		}
		shortened := time.Now()
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if p := pttl("fixed"); p > 5*time.Second {
			t.Fatalf("PTTL after Extend(5s) = %v", p)
		}
		if until := time.Until(l.Deadline()); until > 5*time.Second {
			t.Fatalf("deadline after the shorter Extend in %v, want it shortened", until)
		}
		if err := l.Extend(ctx, time.Millisecond); !errors.Is(err, distsync.ErrInvalid) {
			t.Fatalf("Extend below MinLeaseTTL: %v", err)
		}
		if err := m.Unlock(ctx); err != nil && !(errors.Is(err, distsync.ErrLost) && time.Since(shortened) >= 5*time.Second) {
			// A loss is right only if the shortened lease could have run out (a loaded
			// machine took 5 s to get here).
			t.Fatal(err)
		}

		r, _ := mutex.New(h, "renewed")
		rl, err := r.LockLease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := rl.Extend(ctx, time.Minute); !errors.Is(err, distsync.ErrInvalid) {
			t.Fatalf("Extend of a renewed lease: %v, want ErrInvalid", err)
		}
		if err := r.Unlock(ctx); err != nil {
			t.Fatal(err)
		}

		// A fixed lease that ran out cannot be extended back.
		short, _ := mutex.New(h, "short", distsync.WithFixedLease(50*time.Millisecond))
		sl, err := short.LockLease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		<-sl.Done()
		if err := sl.Extend(ctx, time.Minute); !errors.Is(err, distsync.ErrLost) {
			t.Fatalf("Extend after the fixed lease ran out: %v, want ErrLost", err)
		}
	})
}

// Every acquire's lease-returning form gives a live lease with the hold's token; the semaphore's
// try form too (before, TryAcquire gave no lease at all).
func TestLeaseReturningForms(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		h := b.Pod(t, b.Prefix(t)).H
		ctx := context.Background()
		m, _ := mutex.New(h, "forms")
		l, ok, err := m.TryLockLease(ctx)
		if err != nil || !ok || l == nil || l.Token() <= 0 || l.Err() != nil {
			t.Fatalf("TryLockLease: %v %v %v", l, ok, err)
		}
		l2, ok, err := m.TryLockLease(ctx)
		if err != nil || ok || l2 != nil {
			t.Fatalf("TryLockLease of a held mutex: %v %v %v", l2, ok, err)
		}
		_ = m.Unlock(ctx)
		s, _ := semaphore.New(h, "forms", 3)
		sl, ok, err := s.TryAcquireLease(ctx, 2)
		if err != nil || !ok || sl == nil || sl.Err() != nil {
			t.Fatalf("TryAcquireLease: %v %v %v", sl, ok, err)
		}
		if err := s.Release(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(sl.Err(), distsync.ErrReleased) {
			t.Fatalf("the permits' lease after Release: %v", sl.Err())
		}
	})
}

package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/mutex"
)

// An All's Lock begun on a real Redis stopped with SIGSTOP past the lease returns holding the
// set once Redis resumes: the take that came too late is given back and taken again
// (TestAllAcquisitionTooLateToUseIsTakenAgain has it with a delayed reply on every backend).
func TestAllLockBegunDuringAPauseGoesOn(t *testing.T) {
	t.Parallel()
	// A lease of 500 ms at first, twice as long at each next attempt: a loaded machine that
	// holds the renewals up for a lease loses the set before its Unlock.
	redistest.RetryScaled(t, 3, 500*time.Millisecond, func(ttl time.Duration) error {
		srv := redistest.StartRedis(t)
		h := redistest.Handle(t, srv.Client(t), distsync.WithLeaseTTL(ttl))
		var ms []*mutex.Mutex
		for _, name := range []string{"a", "b"} {
			m, err := mutex.New(h, name)
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		a, err := mutex.NewAll(ms...)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Resume() })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res := redistest.Async(ctx, a.Lock)
		time.Sleep(3 * ttl)
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		r := redistest.Await(t, res, 25*time.Second)
		if r.Err != nil {
			t.Fatalf("Lock begun while Redis was paused past the lease, with %v of ctx left: %v", time.Until(deadline(ctx)), r.Err)
		}
		if err := a.Unlock(ctx); errors.Is(err, distsync.ErrLost) {
			return fmt.Errorf("Unlock: %v (a lease of %v lapsed after Lock returned)", err, ttl)
		} else if err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		return nil
	})
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// A quorum Lock whose majority never holds (the fencing counters cannot be raised on two of
// the three primaries) ends when its ctx does, with an error that says so and wraps ctx's,
// never a nil (TestQuorumLockGathersAgainWhenItsMajorityFails has it gather again).
func TestQuorumLockThatNeverHoldsEndsWithItsCtx(t *testing.T) {
	t.Parallel()
	ps := primaries(t, 3)
	var hs []*distsync.Handle
	for i, p := range ps {
		f := redistest.NewFaulty(p.Client(t))
		if i < 2 {
			f.Expire(1<<20, redistest.ScriptCall(scripts.FenceRaise))
		}
		hs = append(hs, redistest.Handle(t, f, distsync.WithKeyPrefix("quorum:")))
	}
	m, err := mutex.New(hs[0], "never", mutex.WithQuorum(hs[1:]...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = m.Lock(ctx)
	if !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("quorum Lock whose majority never holds: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if s := err.Error(); strings.Contains(s, "%!") || strings.Contains(s, "<nil>") {
		t.Fatalf("malformed error: %q", s)
	}
}

// Unlock of a Mutex held as a member of an All is refused, and changes nothing: the hold is the
// set's, and ends with the set's Unlock. Lock of it waits for that Unlock; TryLock fails.
func TestMemberOfAHeldAllIsTheSets(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := newPod(t, b, prefix)
		a, ms := p.all(t, sameSlot(prefix, 2)...)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ms[0].Unlock(ctx); !errors.Is(err, distsync.ErrNotHeld) {
			t.Fatalf("Unlock of a member of a held set: %v, want ErrNotHeld", err)
		}
		other := newPod(t, b, prefix).mutex(t, sameSlot(prefix, 2)[0])
		if ok, err := other.TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock in another process of a name the set holds, after a refused member Unlock: %v, %v", ok, err)
		}
		if ok, err := ms[0].TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock of a member of a held set: %v, %v, want false", ok, err)
		}
		locked := make(chan error, 1)
		go func() { locked <- ms[0].Lock(ctx) }()
		redistest.Blocks(t, "Lock of a member of a held set", locked, 300*time.Millisecond)
		if err := a.Unlock(ctx); err != nil {
			t.Fatalf("the set's Unlock: %v", err)
		}
		redistest.Returns(t, "Lock of the member after the set's Unlock", locked, 10*time.Second)
		unlock(t, ms[0])
	})
}

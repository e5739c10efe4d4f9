package mutex_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/counting"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/mutex"
)

// newPodOn is newPod on a client the test made (a Faulty, say).
func newPodOn(t *testing.T, b *redistest.Backend, prefix string, raw *redistest.Faulty, opts ...distsync.Option) *pod {
	t.Helper()
	c := counting.New(raw)
	h := b.Handle(t, c, append([]distsync.Option{distsync.WithKeyPrefix(prefix)}, opts...)...)
	c.Reset()
	return &pod{raw: raw, client: c, h: h}
}

// A set whose take comes back too late to use (Redis, or the network, stalled past the lease)
// is given back, and Lock goes on until it holds the set: ctx bounds its wait and nothing
// else, as it bounds a Mutex's.
func TestAllLockGoesOnAfterALateTake(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 300 * time.Millisecond
		prefix := b.Prefix(t)
		f := redistest.NewFaulty(b.Client(t))
		p := newPodOn(t, b, prefix, f, distsync.WithLeaseTTL(ttl))
		a, _ := p.all(t, sameSlot(prefix, 2)...)
		f.Delay(1, 3*ttl, redistest.ScriptCall(scripts.MutexAcquireAll)) // the one-round-trip take
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Lock(ctx); err != nil {
			t.Fatalf("Lock after a take that came too late, with %v of ctx left: %v", time.Until(deadline(ctx)), err)
		}
		if f.Dropped() != 1 {
			t.Fatalf("the take was delayed %d times, want 1: the scenario did not happen", f.Dropped())
		}
		if err := a.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	})
}

// The same on a real Redis stopped with SIGSTOP past the lease while the Lock begins: it
// returns holding the set once Redis resumes.
func TestAllLockBegunDuringAPauseGoesOn(t *testing.T) {
	t.Parallel()
	srv := redistest.StartRedis(t)
	const ttl = 500 * time.Millisecond
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
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// A quorum Lock whose majority cannot be held once gathered (the fencing counters could not be
// raised in time on two of the three primaries: they stalled, or restarted) gathers again: it
// ends only when ctx does, and its error never wraps a nil.
func TestQuorumLockGathersAgainWhenItsMajorityLapses(t *testing.T) {
	t.Parallel()
	ps := primaries(t, 3)
	var hs []*distsync.Handle
	var fs []*redistest.Faulty
	for _, p := range ps {
		f := redistest.NewFaulty(p.Client(t))
		fs = append(fs, f)
		hs = append(hs, redistest.Handle(t, f, distsync.WithKeyPrefix("quorum:")))
	}
	m, err := mutex.New(hs[0], "lapse", mutex.WithQuorum(hs[1:]...))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		f.Expire(1, redistest.ScriptCall(scripts.FenceRaise))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("quorum Lock with %v of ctx left: %v", time.Until(deadline(ctx)), err)
	}
	failed := 0
	for _, f := range fs {
		failed += f.Dropped()
	}
	if failed < 2 {
		t.Fatalf("%d raises failed, want at least 2: the scenario did not happen", failed)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	// When ctx ends, the error says so, and wraps ctx's error, not a nil.
	for _, f := range fs[:2] {
		f.Expire(1000, redistest.ScriptCall(scripts.FenceRaise))
	}
	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	err = m.Lock(short)
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

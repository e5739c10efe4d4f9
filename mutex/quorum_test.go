package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/mutex"
)

// primaries starts n independent redis-servers.
func primaries(t *testing.T, n int) []*redistest.Proc {
	var ps []*redistest.Proc
	for range n {
		ps = append(ps, redistest.StartRedis(t))
	}
	return ps
}

// quorumPod is one process's Handles, one per primary, and its quorum Mutex called name.
func quorumPod(t *testing.T, ps []*redistest.Proc, name string, opts ...distsync.Option) (*mutex.Mutex, []*distsync.Handle) {
	t.Helper()
	var hs []*distsync.Handle
	for _, p := range ps {
		hs = append(hs, redistest.Handle(t, p.Client(t), distsync.WithKeyPrefix("quorum:")))
	}
	m, err := mutex.New(hs[0], name, append([]distsync.Option{mutex.WithQuorum(hs[1:]...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m, hs
}

// hold is one hold of a quorum mutex, as its holder saw it.
type hold struct {
	from, to time.Time
	token    int64
	who      string
}

// contend has pods × goroutines lock ms (one quorum Mutex per pod) rounds times each, holding
// each time for a moment, and returns the holds in the order they began.
func contend(t *testing.T, ms []*mutex.Mutex, goroutines, rounds int) []hold {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	var holds []hold
	var wg sync.WaitGroup
	errs := make(chan error, len(ms)*goroutines)
	for p, m := range ms {
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					l, err := m.LockLease(ctx)
					if err != nil {
						errs <- err
						return
					}
					from := time.Now()
					time.Sleep(time.Millisecond)
					to := time.Now()
					if l.Err() != nil {
						errs <- fmt.Errorf("lease ended while held: %w", l.Err())
						_ = m.Unlock(ctx) // for the other goroutines, and the next subtests
						return
					}
					if err := m.Unlock(ctx); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					holds = append(holds, hold{from, to, l.Token(), fmt.Sprintf("pod %d goroutine %d", p, g)})
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.SortFunc(holds, func(a, b hold) int { return a.from.Compare(b.from) })
	return holds
}

// exclusive fails t if two holds overlap or a token is not larger than the one before.
func exclusive(t *testing.T, holds []hold) {
	t.Helper()
	for i := 1; i < len(holds); i++ {
		a, b := holds[i-1], holds[i]
		if b.from.Before(a.to) {
			t.Errorf("holds overlap: %s %v–%v and %s from %v", a.who, a.from.Format("15:04:05.000000"), a.to.Format("15:04:05.000000"), b.who, b.from.Format("15:04:05.000000"))
		}
		if b.token <= a.token {
			t.Errorf("token %d of %s not larger than %d of %s before it", b.token, b.who, a.token, a.who)
		}
	}
}

// TestQuorum: a Mutex on a quorum of three primaries excludes and hands out increasing tokens
// with all three up and with one down (frozen); with two down, Lock fails with a clear error
// when its context ends and leaves nothing held on the one that is up; a holder whose quorum
// goes away is told, and its Unlock reports the loss.
func TestQuorum(t *testing.T) {
	t.Parallel()
	ps := primaries(t, 3)
	// Short, for "quorum lost" to wait little, and long enough for "all up" and "one down" to
	// keep their holds on a stalled machine (a quorum's claims are renewed each on its own).
	ttl := 5 * time.Second
	// A primary's hand-off stays its grantee's until it confirms it, as long as this: on a
	// stalled machine a grantee that confirms late would lose that primary's claim.
	window := distsync.WithHandoffWindow(time.Minute)
	a, ha := quorumPod(t, ps, "q", distsync.WithLeaseTTL(ttl), window)
	b, _ := quorumPod(t, ps, "q", distsync.WithLeaseTTL(ttl), window)
	paused := map[int]bool{}
	pause := func(i int) {
		if err := ps[i].Pause(); err != nil {
			t.Fatal(err)
		}
		paused[i] = true
	}
	resume := func() {
		for i := range paused {
			if err := ps[i].Resume(); err != nil {
				t.Error(err)
			}
			delete(paused, i)
		}
	}
	defer resume()

	t.Run("all up", func(t *testing.T) {
		holds := contend(t, []*mutex.Mutex{a, b}, 2, 10)
		if len(holds) != 40 {
			t.Fatalf("%d holds, want 40", len(holds))
		}
		exclusive(t, holds)
	})
	t.Run("one down", func(t *testing.T) {
		pause(2)
		defer resume()
		holds := contend(t, []*mutex.Mutex{a, b}, 2, 5)
		if len(holds) != 20 {
			t.Fatalf("%d holds, want 20", len(holds))
		}
		exclusive(t, holds)
	})
	t.Run("two down", func(t *testing.T) {
		pause(1)
		pause(2)
		defer resume()
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		err := a.Lock(ctx)
		if !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock with two of three primaries down: %v, want ErrNotAcquired and DeadlineExceeded", err)
		}
		// At most the one that is up (how many a round got by the time ctx ended depends on
		// the machine's load).
		if msg := err.Error(); !strings.Contains(msg, "of 3 primaries at most, fewer than the quorum of 2") || strings.Contains(msg, "held on 2") {
			t.Errorf("the error does not say how many primaries were held: %v", err)
		}
		// Nothing held on the primary that is up: a plain mutex of the same name there is free.
		plain, err := mutex.New(ha[0], "q")
		if err != nil {
			t.Fatal(err)
		}
		hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer hcancel()
		if hs, err := plain.Holders(hctx); err != nil || len(hs) != 0 {
			t.Errorf("holders on the live primary after the failed Lock: %v %v, want none", hs, err)
		}
		if ok, err := plain.TryLock(hctx); !ok || err != nil {
			t.Errorf("TryLock on the live primary: %v %v, want it free", ok, err)
		} else if err := plain.Unlock(hctx); err != nil {
			t.Error(err)
		}
	})
	t.Run("quorum lost", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		locking := time.Now()
		l, err := a.LockLease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hs, err := a.Holders(ctx)
		if err != nil || len(hs) != 1 || hs[0].Handle != ha[0].ID() || hs[0].Token != l.Token() {
			t.Errorf("Holders while held: %+v %v, want one hold of %s with token %d", hs, err, ha[0].ID(), l.Token())
		}
		pause(0)
		pause(1)
		defer resume()
		t0 := time.Now()
		// The quorum's deadline is its members' (the need-th latest), which the stopped primaries'
		// no longer move; it reads none once they are gone.
		deadline := l.Deadline()
		defer func() { t.Logf("quorum lost: lease ended after %v", time.Since(t0)) }()
		select {
		case <-l.Done():
		case <-time.After(ttl + 10*time.Second):
			t.Fatalf("the lease did not end %v after two of three primaries stopped answering", ttl+10*time.Second)
		}
		ended := time.Now()
		if !errors.Is(l.Err(), distsync.ErrLost) {
			t.Errorf("lease error %v, want ErrLost", l.Err())
		}
		// The claims on the stopped primaries run out at their deadlines, a lease at most after
		// the pause: the quorum's lease ends then (within 2 s).
		switch {
		case deadline.IsZero():
			t.Logf("the lease had ended before the pause (too slow a machine for a %v lease): %v", ttl, l.Err())
		case deadline.Sub(t0) > ttl:
			t.Errorf("the lease's deadline was %v after two of three primaries stopped answering, beyond the lease (%v)", deadline.Sub(t0), ttl)
		default:
			if err := redistest.Late("the lease ended after its deadline", ended.Sub(deadline), 2*time.Second, locking, ended); err != nil {
				t.Error(err)
			}
		}
		t1 := time.Now()
		err = a.Unlock(ctx)
		t.Logf("Unlock after the loss returned in %v", time.Since(t1))
		if !errors.Is(err, distsync.ErrLost) || !errors.Is(err, distsync.ErrNotHeld) {
			t.Errorf("Unlock after the loss: %v, want ErrNotHeld and ErrLost", err)
		}
	})
	t.Run("after", func(t *testing.T) {
		// Every primary back: the lock works again, in both pods.
		exclusive(t, contend(t, []*mutex.Mutex{a, b}, 1, 3))
	})
}

func TestQuorumOptions(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Mini)
	h1, h2, h3 := b.Handle(t, b.Client(t)), b.Handle(t, b.Client(t)), b.Handle(t, b.Client(t))
	for _, c := range []struct {
		what string
		opt  distsync.Option
	}{
		{"no other Handle", mutex.WithQuorum()},
		{"one other Handle", mutex.WithQuorum(h2)},
		{"a Handle twice", mutex.WithQuorum(h2, h2)},
		{"its own Handle again", mutex.WithQuorum(h1, h2)},
		{"a nil Handle", mutex.WithQuorum(h2, nil)},
	} {
		if _, err := mutex.New(h1, "x", c.opt); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.what, err)
		}
	}
	if _, err := fair.New(h1, "x", mutex.WithQuorum(h2, h3)); !errors.Is(err, distsync.ErrInvalid) {
		t.Errorf("fair.New with WithQuorum: %v, want ErrInvalid", err)
	}
	if _, err := mutex.New(h1, "x", mutex.WithQuorum(h2, h3)); err != nil {
		t.Errorf("three Handles: %v", err)
	}
}

// evalshas returns how many scripts addr has run.
func evalshas(t *testing.T, addr string) int {
	t.Helper()
	info, err := redistest.Command(addr, 2*time.Second, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			var n int
			fmt.Sscanf(rest, "%d", &n)
			return n
		}
	}
	return 0
}

// TestQuorumWaiterDoesNotPoll: a holder has a bare majority (two of three primaries, the third
// was down when it locked); a waiter takes the free third at once, gives it back when the
// others do not come, and then waits for them without taking and giving back the free one
// again and again; it gets the lock when the holder unlocks.
func TestQuorumWaiterDoesNotPoll(t *testing.T) {
	t.Parallel()
	ps := primaries(t, 3)
	holder, _ := quorumPod(t, ps, "p")
	// The waiter's pod, its client of the free primary watched for the give-back.
	free := &replied{Client: ps[0].Client(t), match: redistest.ScriptCall(scripts.MutexRelease)}
	hs := []*distsync.Handle{redistest.Handle(t, free, distsync.WithKeyPrefix("quorum:"))}
	for _, p := range ps[1:] {
		hs = append(hs, redistest.Handle(t, p.Client(t), distsync.WithKeyPrefix("quorum:")))
	}
	waiter, err := mutex.New(hs[0], "p", mutex.WithQuorum(hs[1:]...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ps[0].Pause(); err != nil {
		t.Fatal(err)
	}
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ps[0].Resume(); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	// The waiter takes the free primary and gives it back (QuorumWait, and up to as long
	// again, later).
	if !redistest.Eventually(10*time.Second, func() bool { return free.n.Load() > 0 }) {
		t.Fatal("the waiter did not give back the free primary")
	}
	before := evalshas(t, ps[0].Addr())
	time.Sleep(2 * time.Second)
	if n := evalshas(t, ps[0].Addr()) - before; n > 4 {
		t.Errorf("the waiter ran %d scripts on the free primary in 2 s while the holder kept the others: it polls", n)
	}
	select {
	case err := <-got:
		t.Fatalf("the waiter's Lock returned while the holder held a majority: %v", err)
	default:
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock after the holder's Unlock")
	}
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A quorum Lock whose majority cannot be made a hold (its fencing counters could not be
// raised: here the raises fail, unsent) gives it back and gathers again: only its context
// bounds it, and it returns with the lock, not an error.
func TestQuorumLockGathersAgainWhenItsMajorityFails(t *testing.T) {
	t.Parallel()
	ps := primaries(t, 3)
	var hs []*distsync.Handle
	var fs []*redistest.Faulty
	for _, p := range ps {
		f := redistest.NewFaulty(p.Client(t))
		f.Expire(1, redistest.ScriptCall(scripts.FenceRaise))
		fs = append(fs, f)
		hs = append(hs, redistest.Handle(t, f, distsync.WithKeyPrefix("quorum:")))
	}
	m, err := mutex.New(hs[0], "raise", mutex.WithQuorum(hs[1:]...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := m.LockLease(ctx)
	if err != nil {
		t.Fatalf("Lock whose first majority's raises failed = %v; want it to gather again", err)
	}
	failed := 0
	for _, f := range fs {
		failed += f.Dropped()
	}
	if failed < 2 {
		t.Fatalf("the raises failed on %d primaries, want a majority: the test's premise", failed)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the lease Lock returned: %v", err)
	}
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// replied is a client that counts the replies that came back to the commands that match.
type replied struct {
	rueidis.Client
	match func(cmd []string) bool
	n     atomic.Int64
}

func (c *replied) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	hit := c.match(cmd.Commands()) // before Do, which may recycle cmd
	res := c.Client.Do(ctx, cmd)
	if hit {
		c.n.Add(1)
	}
	return res
}

func (c *replied) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	hits := 0
	for _, cmd := range multi {
		if c.match(cmd.Commands()) {
			hits++
		}
	}
	res := c.Client.DoMulti(ctx, multi...)
	c.n.Add(int64(hits))
	return res
}

// TestQuorumUnlockReportsLoss: two of three primaries restart empty while the lock is held, and
// the holder unlocks before a renewal tells it: the releases find the claims gone, and Unlock
// reports the loss (another process could have held a majority meanwhile).
func TestQuorumUnlockReportsLoss(t *testing.T) {
	t.Parallel()
	ps := primaries(t, 3)
	a, _ := quorumPod(t, ps, "r")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps[1:] {
		if err := p.Restart(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Unlock(ctx); !errors.Is(err, distsync.ErrLost) || !errors.Is(err, distsync.ErrNotHeld) {
		t.Fatalf("Unlock after two of three primaries lost the claims: %v, want ErrNotHeld and ErrLost", err)
	}
	// The lock is usable again.
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A quorum Lock whose split vote gives back a claim on a primary that answers slowly (stopped,
// cut off) does not stop gathering meanwhile: when the primaries it waits for come free, it
// takes its majority at once, not when the slow primary answers the give-back.
func TestQuorumGivesBackWithoutStalling(t *testing.T) {
	t.Parallel()
	// The give-back answers 3 s late, later in the attempts after one that a stalled machine
	// spoiled.
	redistest.RetryScaled(t, 3, 3*time.Second, func(slow time.Duration) error {
		ps := primaries(t, 3)
		var hs []*distsync.Handle
		f := redistest.NewFaulty(ps[0].Client(t))
		hs = append(hs, redistest.Handle(t, f, distsync.WithKeyPrefix("quorum:")))
		for _, p := range ps[1:] {
			hs = append(hs, redistest.Handle(t, p.Client(t), distsync.WithKeyPrefix("quorum:")))
		}
		m, err := mutex.New(hs[0], "slow", mutex.WithQuorum(hs[1:]...))
		if err != nil {
			t.Fatal(err)
		}
		// Another process holds the name on the second and third primaries (plain mutexes).
		var others []*mutex.Mutex
		for _, p := range ps[1:] {
			o, err := mutex.New(redistest.Handle(t, p.Client(t), distsync.WithKeyPrefix("quorum:")), "slow")
			if err != nil {
				t.Fatal(err)
			}
			lockWithin(t, o, 5*time.Second)
			others = append(others, o)
		}
		// m takes the first primary, waits on the others, and after QuorumWait gives the first back
		// (a split vote); that release's reply comes late, by slow.
		f.Delay(1, slow, redistest.ScriptCall(scripts.MutexRelease))
		res := redistest.Async(context.Background(), func(context.Context) error {
			ctx, cancel := context.WithTimeout(context.Background(), slow+30*time.Second)
			defer cancel()
			_, err := m.LockLease(ctx)
			return err
		})
		if !redistest.Eventually(5*time.Second, func() bool { return f.Dropped() > 0 }) {
			t.Fatal("the quorum Lock never gave back its first primary")
		}
		freed := time.Now()
		for _, o := range others {
			unlock(t, o)
		}
		r := redistest.Await(t, res, slow+20*time.Second)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		d := r.At.Sub(freed)
		t.Logf("the quorum Lock took its majority %v after it came free (a give-back answered %v late)", d.Round(time.Millisecond), slow)
		if err := m.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Not when the slow give-back answers.
		return redistest.Late(fmt.Sprintf("the quorum Lock (waiting for the give-back that answers %v late?) took its majority", slow),
			d, slow*2/3, freed, r.At)
	})
}

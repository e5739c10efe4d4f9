package rwmutex_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/rwmutex"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newRW(t *testing.T, p *redistest.Pod, name string, opts ...distsync.Option) *rwmutex.RWMutex {
	t.Helper()
	m, err := rwmutex.New(p.H, name, opts...)
	if err != nil {
		t.Fatalf("rwmutex.New(%q): %v", name, err)
	}
	return m
}

func key(prefix, name, part string) string {
	k := prefix + "{" + name + "}:rwmutex"
	if part != "" {
		k += ":" + part
	}
	return k
}

func must(t *testing.T, what string, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// async runs f in a goroutine and returns a channel with its error.
func async(ctx context.Context, f func(context.Context) error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f(ctx) }()
	return ch
}

// exists reports whether key k exists.
func exists(t *testing.T, b *redistest.Backend, k string) bool {
	t.Helper()
	n, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Exists().Key(k).Build() }).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// Readers and writers from several pods: readers are inside together (really: several at
// once), never with a writer; writers are alone; write tokens strictly increase.
func TestReadersShareWritersExclude(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const pods, goroutines, rounds = 3, 4, 12
		prefix := b.Prefix(t)
		var readers, writers, maxReaders atomic.Int32
		var mu sync.Mutex
		var tokens []int64
		var wg sync.WaitGroup
		errs := make(chan error, pods*goroutines*rounds)
		for range pods {
			m := newRW(t, b.Pod(t, prefix), "data")
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					for range rounds {
						if g == 0 && rand.IntN(2) == 0 { // about 1 in 8 acquisitions writes
							if err := m.Lock(ctx); err != nil {
								errs <- err
								return
							}
							if w, r := writers.Add(1), readers.Load(); w != 1 || r != 0 {
								errs <- fmt.Errorf("writer inside with %d writers and %d readers", w, r)
							}
							mu.Lock()
							tokens = append(tokens, m.Lease().Token())
							mu.Unlock()
							time.Sleep(time.Millisecond)
							writers.Add(-1)
							if err := m.Unlock(ctx); err != nil {
								errs <- err
								return
							}
							continue
						}
						if err := m.RLock(ctx); err != nil {
							errs <- err
							return
						}
						r := readers.Add(1)
						if w := writers.Load(); w != 0 {
							errs <- fmt.Errorf("reader inside with %d writers", w)
						}
						for cur := maxReaders.Load(); r > cur && !maxReaders.CompareAndSwap(cur, r); cur = maxReaders.Load() {
						}
						time.Sleep(3 * time.Millisecond)
						readers.Add(-1)
						if err := m.RUnlock(ctx); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if maxReaders.Load() < 2 {
			t.Errorf("never more than %d reader inside at once: readers do not share", maxReaders.Load())
		}
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("write token %d after %d", tokens[i], tokens[i-1])
			}
		}
		t.Logf("%d writes, up to %d readers inside at once", len(tokens), maxReaders.Load())
	})
}

// Readers in different processes hold at the same time: each waits inside for all the others.
func TestReadersHoldTogether(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const n = 4
		prefix := b.Prefix(t)
		var inside sync.WaitGroup
		inside.Add(n)
		all := make(chan struct{})
		done := make(chan error, n)
		for range n {
			m := newRW(t, b.Pod(t, prefix), "together")
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := m.RLock(ctx); err != nil {
					inside.Done()
					done <- err
					return
				}
				inside.Done()
				<-all
				done <- m.RUnlock(ctx)
			}()
		}
		waited := make(chan struct{})
		go func() { inside.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			t.Fatal("readers did not all get in together")
		}
		close(all)
		for range n {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// With readers continuously re-acquiring, their holds overlapping so that some reader is
// always inside, a writer still gets in: once it waits, new readers wait behind it.
func TestWriterIsNotStarvedByReaders(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var reads atomic.Int64
		for range 3 {
			m := newRW(t, b.Pod(t, prefix), "hot")
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						if m.RLock(ctx) == nil {
							reads.Add(1)
							time.Sleep(time.Duration(10+rand.IntN(20)) * time.Millisecond)
							_ = m.RUnlock(ctx)
						}
						cancel()
					}
				}()
			}
		}
		defer func() { close(stop); wg.Wait() }()
		time.Sleep(300 * time.Millisecond)
		if reads.Load() == 0 {
			t.Fatal("readers made no progress")
		}
		w := newRW(t, b.Pod(t, prefix), "hot")
		start := time.Now()
		must(t, "writer Lock", w.Lock) // 15 s limit: the test runs readers for as long as it takes
		d := time.Since(start)
		if d > 2*time.Second {
			t.Fatalf("writer waited %v behind readers that each hold for at most 30ms", d)
		}
		t.Logf("writer got in after %v among %d reads", d, reads.Load())
		must(t, "writer Unlock", w.Unlock)
	})
}

// With writers continuously re-acquiring, a reader still gets in: a writer's Unlock admits
// the readers waiting then, before the next writer.
func TestReaderIsNotStarvedByWriters(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var writes atomic.Int64
		for range 2 {
			m := newRW(t, b.Pod(t, prefix), "hotw")
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						if m.Lock(ctx) == nil {
							writes.Add(1)
							time.Sleep(5 * time.Millisecond)
							_ = m.Unlock(ctx)
						}
						cancel()
					}
				}()
			}
		}
		defer func() { close(stop); wg.Wait() }()
		time.Sleep(300 * time.Millisecond)
		r := newRW(t, b.Pod(t, prefix), "hotw")
		for i := range 3 {
			start := time.Now()
			must(t, "reader RLock", r.RLock)
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("reader %d waited %v behind writers that each hold for 5ms", i, d)
			}
			must(t, "reader RUnlock", r.RUnlock)
		}
		t.Logf("%d writes meanwhile", writes.Load())
	})
}

// A reader that vanishes (network cut) gives its share back after its lease: a waiting writer
// proceeds then, and not before.
func TestCrashedReaderExpires(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = time.Second
		prefix := b.Prefix(t)
		net := redistest.NewNetwork()
		reader := newRW(t, b.PodVia(t, prefix, net, distsync.WithLeaseTTL(ttl)), "crash")
		writer := newRW(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "crash")
		must(t, "RLock", reader.RLock)
		share := reader.RLease()
		net.Cut()
		start := time.Now()
		must(t, "writer Lock", writer.Lock)
		if d := time.Since(start); d < ttl/2 || d > 3*ttl {
			t.Fatalf("writer got in %v after the reader crashed; lease %v", d, ttl)
		}
		select {
		case <-share.Done():
		case <-time.After(2 * ttl):
			t.Fatal("the crashed reader's lease did not end")
		}
		must(t, "writer Unlock", writer.Unlock)
	})
}

// A writer that vanishes while waiting holds new readers back only until its waiting mark
// lapses (about a lease), not forever.
func TestCrashedWaitingWriterDoesNotBlockReaders(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = time.Second
		prefix := b.Prefix(t)
		net := redistest.NewNetwork()
		first := newRW(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "ghost")
		writer := newRW(t, b.PodVia(t, prefix, net, distsync.WithLeaseTTL(ttl)), "ghost")
		late := newRW(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "ghost")
		must(t, "first RLock", first.RLock)
		wctx, wcancel := context.WithCancel(context.Background())
		defer wcancel()
		wres := async(wctx, writer.Lock)
		if !redistest.Eventually(5*time.Second, func() bool { return exists(t, b, key(prefix, "ghost", "ww")) }) {
			t.Fatal("the writer never marked itself as waiting")
		}
		lres := async(context.Background(), late.RLock)
		redistest.Blocks(t, "RLock behind a waiting writer", lres, 200*time.Millisecond)
		net.Cut() // the waiting writer is gone
		start := time.Now()
		must(t, "first RUnlock", first.RUnlock)
		redistest.Returns(t, "RLock after the writer vanished", lres, 5*ttl)
		t.Logf("reader got in %v after the waiting writer vanished (lease %v)", time.Since(start), ttl)
		must(t, "late RUnlock", late.RUnlock)
		net.Restore() // so that the writer's process can end cleanly
		wcancel()
		<-wres
	})
}

// Idle waiters, reader and writer, send at most the backstop re-check (one per lease) while a
// writer holds and renews; the writer's Unlock wakes the readers promptly.
func TestIdleWaitersDoNotPoll(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = time.Second
		prefix := b.Prefix(t)
		holder := newRW(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "idle")
		rp := b.Pod(t, prefix, distsync.WithLeaseTTL(ttl))
		wp := b.Pod(t, prefix, distsync.WithLeaseTTL(ttl))
		reader, writer := newRW(t, rp, "idle"), newRW(t, wp, "idle")
		must(t, "Lock", holder.Lock)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rres, wres := async(ctx, reader.RLock), async(ctx, writer.Lock)
		time.Sleep(300 * time.Millisecond)
		const window = 3 * time.Second
		from := time.Now()
		time.Sleep(window)
		limit := int(window/ttl) + 1
		for name, p := range map[string]*redistest.Pod{"reader": rp, "writer": wp} {
			if sent := p.Client.Since(from); len(sent) > limit {
				t.Errorf("idle %s sent %d commands in %v (lease %v), want at most %d: %v", name, len(sent), window, ttl, limit, sent)
			}
		}
		start := time.Now()
		must(t, "Unlock", holder.Unlock)
		redistest.Returns(t, "reader woken by Unlock", rres, ttl/2)
		t.Logf("reader woken %v after the Unlock", time.Since(start))
		redistest.Blocks(t, "writer while a reader holds", wres, 100*time.Millisecond)
		must(t, "RUnlock", reader.RUnlock)
		redistest.Returns(t, "writer woken by the last RUnlock", wres, ttl/2)
		must(t, "writer Unlock", writer.Unlock)
	})
}

// Waiters whose context ends leave no waiting mark: readers are not held back by a writer that
// gave up, and after the holder leaves only keys with a TTL remain.
func TestCancelledWaitersLeaveNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		holder := newRW(t, b.Pod(t, prefix), "cancel")
		reader := newRW(t, b.Pod(t, prefix), "cancel")
		writer := newRW(t, b.Pod(t, prefix), "cancel")
		must(t, "RLock", holder.RLock)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := writer.Lock(ctx)
		cancel()
		if !errors.Is(err, distsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled Lock: %v", err)
		}
		// Without the writer's mark, a new reader gets in at once.
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if !redistest.Eventually(2*time.Second, func() bool { return !exists(t, b, key(prefix, "cancel", "ww")) }) {
			t.Fatal("the cancelled writer's waiting mark is still there")
		}
		if ok, err := reader.TryRLock(ctx); err != nil || !ok {
			t.Fatalf("TryRLock after the writer gave up: %v %v", ok, err)
		}
		must(t, "RUnlock", reader.RUnlock)
		must(t, "holder RUnlock", holder.RUnlock)

		must(t, "Lock", holder.Lock)
		ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err = reader.RLock(ctx2)
		cancel2()
		if !errors.Is(err, distsync.ErrNotAcquired) {
			t.Fatalf("cancelled RLock: %v", err)
		}
		must(t, "Unlock", holder.Unlock)
		ok := redistest.Eventually(3*time.Second, func() bool {
			for _, k := range b.Keys(t, prefix) {
				// The fence counter, void marks, and the last release (each with a TTL) may stay.
				if k != key(prefix, "cancel", "fence") && k != key(prefix, "cancel", "ops") && k != key(prefix, "cancel", "rel") {
					return false
				}
			}
			return true
		})
		if !ok {
			t.Fatalf("keys left: %v", b.Keys(t, prefix))
		}
		if keys := b.KeysWithoutTTL(t, prefix); len(keys) > 0 {
			t.Errorf("keys without a TTL: %v", keys)
		}
	})
}

// Misuse: clear errors, and Redis unchanged.
func TestMisuse(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := b.Pod(t, prefix)
		m := newRW(t, p, "misuse")
		snapshot := func() string {
			var out []string
			for _, k := range b.Keys(t, prefix) {
				typ, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Type().Key(k).Build() }).ToString()
				var v string
				switch typ {
				case "string":
					v, _ = b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Get().Key(k).Build() }).ToString()
				case "zset":
					vs, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Zrange().Key(k).Min("0").Max("-1").Build() }).AsStrSlice()
					v = fmt.Sprint(vs)
				}
				out = append(out, k+"="+v)
			}
			sort.Strings(out)
			return fmt.Sprint(out)
		}
		check := func(what string, err error, before string) {
			t.Helper()
			if !errors.Is(err, distsync.ErrNotHeld) {
				t.Errorf("%s: %v, want ErrNotHeld", what, err)
			}
			if after := snapshot(); after != before {
				t.Errorf("%s changed Redis:\n%s\n%s", what, before, after)
			}
		}
		ctx := context.Background()
		check("RUnlock without RLock", m.RUnlock(ctx), snapshot())
		check("Unlock without Lock", m.Unlock(ctx), snapshot())
		must(t, "RLock", m.RLock)
		check("Unlock by a reader", m.Unlock(ctx), snapshot())
		must(t, "RUnlock", m.RUnlock)
		check("a second RUnlock", m.RUnlock(ctx), snapshot())
		must(t, "Lock", m.Lock)
		check("RUnlock by the writer", m.RUnlock(ctx), snapshot())
		must(t, "Unlock", m.Unlock)

		if _, err := rwmutex.New(p.H, ""); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New with an empty name: %v", err)
		}
		if _, err := rwmutex.New(p.H, "x", distsync.WithLeaseTTL(0)); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New with a zero TTL: %v", err)
		}
	})
}

// Write holds get increasing tokens; a read hold carries the last write's token.
func TestTokens(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		a, c := newRW(t, b.Pod(t, prefix), "tok"), newRW(t, b.Pod(t, prefix), "tok")
		must(t, "Lock", a.Lock)
		t1 := a.Lease().Token()
		must(t, "Unlock", a.Unlock)
		must(t, "RLock", c.RLock)
		if got := c.RLease().Token(); got != t1 {
			t.Fatalf("read hold token %d, want the last write's %d", got, t1)
		}
		must(t, "RUnlock", c.RUnlock)
		must(t, "Lock", c.Lock)
		if t2 := c.Lease().Token(); t2 <= t1 {
			t.Fatalf("write token %d not above %d", t2, t1)
		}
		must(t, "Unlock", c.Unlock)
	})
}

// Deleting the holds behind their holders' backs fires the loss signals; the releases then
// report the loss.
func TestLossIsSignalled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 900 * time.Millisecond
		prefix := b.Prefix(t)
		r := newRW(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "loss")
		must(t, "RLock", r.RLock)
		share := r.RLease()
		b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(key(prefix, "loss", "r")).Build() })
		select {
		case <-share.Done():
		case <-time.After(ttl/3 + time.Second):
			t.Fatal("reader's loss not signalled within a renewal period")
		}
		if err := r.RUnlock(context.Background()); !errors.Is(err, distsync.ErrLost) || !errors.Is(err, distsync.ErrNotHeld) {
			t.Fatalf("RUnlock after the loss: %v", err)
		}
		must(t, "Lock", r.Lock)
		lease := r.Lease()
		b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Set().Key(key(prefix, "loss", "")).Value("someone").Build()
		})
		select {
		case <-lease.Done():
		case <-time.After(ttl/3 + time.Second):
			t.Fatal("writer's loss not signalled within a renewal period")
		}
		if err := r.Unlock(context.Background()); !errors.Is(err, distsync.ErrLost) {
			t.Fatalf("Unlock after the loss: %v", err)
		}
	})
}

func TestRLocker(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		m := newRW(t, b.Pod(t, b.Prefix(t)), "rlocker")
		l := m.RLocker()
		l.Lock()
		l.Lock()
		l.Unlock() //lint:ignore SA2001 the RLocker's Lock and Unlock are what is tested
		l.Unlock()
		defer func() {
			if recover() == nil {
				t.Fatal("RLocker.Unlock without a read hold did not panic")
			}
		}()
		l.Unlock()
	})
}

// A reader admitted by a writer's Unlock that never comes (its process died) holds the next
// writer back for one admission window, not for a lease.
func TestAdmittedReaderThatNeverComes(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		w1 := newRW(t, b.Pod(t, prefix), "admit") // default 10 s lease, 500 ms window
		must(t, "Lock", w1.Lock)
		net := redistest.NewNetwork()
		dead := newRW(t, b.PodVia(t, prefix, net), "admit")
		dctx, dcancel := context.WithCancel(context.Background())
		defer dcancel()
		dres := async(dctx, dead.RLock)
		if !redistest.Eventually(5*time.Second, func() bool { return exists(t, b, key(prefix, "admit", "rq")) }) {
			t.Fatal("the reader never marked itself as waiting")
		}
		w2 := newRW(t, b.Pod(t, prefix), "admit")
		wres := async(context.Background(), w2.Lock)
		if !redistest.Eventually(5*time.Second, func() bool { return exists(t, b, key(prefix, "admit", "ww")) }) {
			t.Fatal("the second writer never marked itself as waiting")
		}
		net.Cut() // the reader's process is gone; its mark is not
		start := time.Now()
		must(t, "Unlock", w1.Unlock) // admits the dead reader
		redistest.Returns(t, "the next writer", wres, 3*time.Second)
		t.Logf("the next writer got in %v after the Unlock", time.Since(start))
		must(t, "Unlock", w2.Unlock)
		net.Restore()
		dcancel()
		<-dres
	})
}

// Writers of several processes, each locking again as soon as it unlocked, take turns: a
// writer waiting in Lock is overtaken by at most one hold of each other writer (plus one in
// flight), never without bound; the releaser does not simply take the lock again. Holds are
// long against a round trip, so that a Lock that reaches Redis late on a loaded machine is not
// overtaken for that; each writer's first Lock, which starts with its process, is not counted.
func TestWritersAreServedInTurn(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const writers, rounds, hold = 3, 10, 20 * time.Millisecond
		prefix := b.Prefix(t)
		var mu sync.Mutex
		var log []int // which writer acquired, in order
		worst := make([]int, writers)
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for i := range writers {
			m := newRW(t, b.Pod(t, prefix), "turns")
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				for round := range rounds {
					mu.Lock()
					from := len(log)
					mu.Unlock()
					if err := m.Lock(ctx); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					if round > 0 {
						worst[i] = max(worst[i], len(log)-from)
					}
					log = append(log, i)
					mu.Unlock()
					time.Sleep(hold)
					if err := m.Unlock(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for i, w := range worst {
			if w > 2*(writers-1) {
				t.Fatalf("writer %d was overtaken %d times while it waited (order %v)", i, w, log)
			}
		}
		t.Logf("most overtakes per wait: %v", worst)
	})
}

// A read hold's token never goes below a token handed out before: when the fence keeps no
// token (here, every key of the name deleted, as a Redis restarted empty would leave it), the
// reader takes one from the server clock, later readers share it, and the next write's is
// larger again.
func TestReadTokenAfterTheFenceIsGone(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		a, c := newRW(t, b.Pod(t, prefix), "lost"), newRW(t, b.Pod(t, prefix), "lost")
		must(t, "Lock", a.Lock)
		t1 := a.Lease().Token()
		must(t, "Unlock", a.Unlock)
		for _, k := range b.Keys(t, prefix) {
			b.Do(t, func(cl rueidis.Client) rueidis.Completed { return cl.B().Del().Key(k).Build() })
		}
		must(t, "RLock", c.RLock)
		r1 := c.RLease().Token()
		must(t, "RLock", a.RLock)
		r2 := a.RLease().Token()
		if r1 <= t1 || r2 != r1 {
			t.Fatalf("read tokens %d and %d after the fence was lost, the last write's was %d: want one token above it, shared", r1, r2, t1)
		}
		must(t, "RUnlock", c.RUnlock)
		must(t, "RUnlock", a.RUnlock)
		must(t, "Lock", c.Lock)
		if t2 := c.Lease().Token(); t2 <= r1 {
			t.Fatalf("write token %d not above the read token %d", t2, r1)
		}
		must(t, "Unlock", c.Unlock)
	})
}

// serverNow returns the server's clock in ms, with the local time it was read at.
func serverNow(t *testing.T, b *redistest.Backend) (int64, time.Time) {
	t.Helper()
	local := time.Now()
	tm, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Time().Build() }).AsStrSlice()
	if err != nil || len(tm) != 2 {
		t.Fatalf("TIME: %v, %v", tm, err)
	}
	s, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	return s*1000 + us/1000, local
}

// writerExpiry returns when the write hold's lease runs out, as a local time.
func writerExpiry(t *testing.T, b *redistest.Backend, prefix, name string) time.Time {
	t.Helper()
	local := time.Now()
	left, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Pttl().Key(key(prefix, name, "")).Build() }).AsInt64()
	if err != nil || left <= 0 {
		t.Fatalf("PTTL of the write hold: %d, %v", left, err)
	}
	return local.Add(time.Duration(left) * time.Millisecond)
}

// shareExpiry returns when the last read share's lease runs out, as a local time.
func shareExpiry(t *testing.T, b *redistest.Backend, prefix, name string) time.Time {
	t.Helper()
	e, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
		return c.B().Zrange().Key(key(prefix, name, "r")).Min("-1").Max("-1").Withscores().Build()
	}).AsZScores()
	if err != nil || len(e) != 1 {
		t.Fatalf("the last read share: %v, %v", e, err)
	}
	now, local := serverNow(t, b)
	return local.Add(time.Duration(int64(e[0].Score)-now) * time.Millisecond)
}

// within fails unless res delivers nil within a few round trips of expiry (a lease that ran
// out: nothing is published then), with the margins of mutex's and fair's tests of the same
// kind; it returns how late it was.
func within(t *testing.T, what string, res <-chan error, expiry time.Time, limit time.Duration) time.Duration {
	t.Helper()
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(time.Until(expiry) + 20*time.Second):
		t.Fatalf("%s never got in", what)
	}
	late := time.Since(expiry)
	t.Logf("%s got in %v after the lease it waited behind ran out", what, late)
	if late > limit {
		t.Fatalf("%s got in %v after the lease it waited behind ran out, want within a few round trips", what, late)
	}
	return late
}

// A writer that dies holding (its network cut) is replaced a round trip after its lease runs
// out: each renewal of the write hold tells the waiting readers, and the first waiting writer,
// when it now ends, and they re-check right after that, not at their backstop (up to a third
// of a lease later). With only readers waiting, they all get in; with a writer waiting too, it
// gets in first (writers are preferred, and a lapsed hold admits nobody, as an Unlock would),
// and the readers follow its Unlock.
func TestDeadWritersLockIsTakenAtItsExpiry(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	const margin = 350 * time.Millisecond
	opts := []distsync.Option{distsync.WithLeaseTTL(ttl)}
	// start makes a writer that dies holding once its second renewal is past: a waiter that
	// only knew the lease it saw when it queued would wake half a second after the expiry, at
	// the earliest. queue starts the waiters; it returns when the writer died, with the
	// expiry of its lease.
	start := func(t *testing.T, b *redistest.Backend, prefix string, queue func()) time.Time {
		net := redistest.NewNetwork()
		t.Cleanup(net.Restore)
		dead := newRW(t, b.PodVia(t, prefix, net, opts...), "dead")
		locked := time.Now()
		must(t, "Lock", dead.Lock)
		queue()
		time.Sleep(time.Until(locked.Add(2*ttl/3 + 200*time.Millisecond)))
		net.Cut()
		return writerExpiry(t, b, prefix, "dead")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Run("readers", func(t *testing.T) {
		redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
			prefix := b.Prefix(t)
			readers := []*rwmutex.RWMutex{newRW(t, b.Pod(t, prefix, opts...), "dead"), newRW(t, b.Pod(t, prefix, opts...), "dead")}
			var res []<-chan error
			expiry := start(t, b, prefix, func() {
				for _, r := range readers {
					res = append(res, async(ctx, r.RLock))
				}
				if !redistest.Eventually(5*time.Second, func() bool { return exists(t, b, key(prefix, "dead", "rq")) }) {
					t.Fatal("the readers never marked themselves as waiting")
				}
			})
			for i, r := range readers {
				within(t, fmt.Sprintf("reader %d", i), res[i], expiry, margin)
				must(t, "RUnlock", r.RUnlock)
			}
		})
	})
	t.Run("writer", func(t *testing.T) {
		redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
			prefix := b.Prefix(t)
			writer := newRW(t, b.Pod(t, prefix, opts...), "dead")
			reader := newRW(t, b.Pod(t, prefix, opts...), "dead")
			var wres, rres <-chan error
			expiry := start(t, b, prefix, func() {
				wres = async(ctx, writer.Lock)
				if !redistest.Eventually(5*time.Second, func() bool { return exists(t, b, key(prefix, "dead", "ww")) }) {
					t.Fatal("the writer never marked itself as waiting")
				}
				rres = async(ctx, reader.RLock)
				if !redistest.Eventually(5*time.Second, func() bool { return exists(t, b, key(prefix, "dead", "rq")) }) {
					t.Fatal("the reader never marked itself as waiting")
				}
			})
			within(t, "the waiting writer", wres, expiry, margin)
			redistest.Blocks(t, "the reader while the next writer holds", rres, 100*time.Millisecond)
			must(t, "Unlock", writer.Unlock)
			redistest.Returns(t, "the reader, after the next writer's Unlock", rres, time.Second)
			must(t, "RUnlock", reader.RUnlock)
		})
	})
}

// A reader that dies holding a share (its network cut) gives it back when its lease runs
// out, and the waiting writer gets in a round trip after that: each renewal of a share tells
// the first waiting writer when the last live share now lapses.
func TestDeadReadersShareIsTakenAtItsExpiry(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 3 * time.Second
		prefix := b.Prefix(t)
		opts := []distsync.Option{distsync.WithLeaseTTL(ttl)}
		net := redistest.NewNetwork()
		defer net.Restore()
		dead := newRW(t, b.PodVia(t, prefix, net, opts...), "deadr")
		writer := newRW(t, b.Pod(t, prefix, opts...), "deadr")
		locked := time.Now()
		must(t, "RLock", dead.RLock)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		wres := async(ctx, writer.Lock)
		if !redistest.Eventually(5*time.Second, func() bool { return exists(t, b, key(prefix, "deadr", "ww")) }) {
			t.Fatal("the writer never marked itself as waiting")
		}
		time.Sleep(time.Until(locked.Add(2*ttl/3 + 200*time.Millisecond)))
		net.Cut()
		within(t, "the waiting writer", wres, shareExpiry(t, b, prefix, "deadr"), 350*time.Millisecond)
		must(t, "Unlock", writer.Unlock)
	})
}

// The readers' bound: a reader waiting behind a stream of writers from several processes is
// overtaken by at most one write hold. The first write hold to end after its request reached
// Redis ends with an Unlock that admits it (and the other readers waiting then) before the
// next writer; the hold that admits it began either before its request (it was holding) or
// after it (it was the first writer waiting): one hold at most. A hold is counted if it began
// after RLock was called (its Lock had not returned then) and its token is at most the read
// token (the name's last token when the reader got in: the last write before its share).
// Other readers come and go too, so that the reader also arrives while shares are held and a
// writer waits for them (that writer then overtakes it). Holds are long against a round trip,
// so that none begins and ends while the reader's first request is on its way.
func TestReaderIsOvertakenByAtMostOneWrite(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const writerPods, perPod, reads, hold = 3, 2, 12, 40 * time.Millisecond
		prefix := b.Prefix(t)
		var mu sync.Mutex
		var tokens []int64 // the write holds' tokens, as their Locks returned
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range writerPods {
			m := newRW(t, b.Pod(t, prefix), "stream")
			for range perPod {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						if l, err := m.LockLease(ctx); err == nil {
							mu.Lock()
							tokens = append(tokens, l.Token())
							mu.Unlock()
							time.Sleep(hold)
							_ = m.Unlock(ctx)
						}
						cancel()
					}
				}()
			}
		}
		others := newRW(t, b.Pod(t, prefix), "stream")
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					if others.RLock(ctx) == nil {
						time.Sleep(hold)
						_ = others.RUnlock(ctx)
					}
					cancel()
					time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
				}
			}()
		}
		defer func() { close(stop); wg.Wait() }()
		time.Sleep(300 * time.Millisecond)
		r := newRW(t, b.Pod(t, prefix), "stream")
		seen := make([]int, 3) // reads by the number of write holds that overtook them
		for i := range reads {
			mu.Lock()
			var before int64
			for _, tok := range tokens {
				before = max(before, tok)
			}
			mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			l, err := r.RLockLease(ctx)
			cancel()
			if err != nil {
				t.Fatalf("RLock %d: %v", i, err)
			}
			mu.Lock()
			var over []int64
			for _, tok := range tokens {
				if tok > before && tok <= l.Token() {
					over = append(over, tok)
				}
			}
			mu.Unlock()
			seen[min(len(over), 2)]++
			if len(over) > 1 {
				t.Fatalf("read %d was overtaken by %d write holds (tokens %v, read token %d)", i, len(over), over, l.Token())
			}
			must(t, "RUnlock", r.RUnlock)
			time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
		}
		mu.Lock()
		t.Logf("%d reads overtaken by no write hold, %d by one; %d write holds in all", seen[0], seen[1], len(tokens))
		mu.Unlock()
	})
}

// Idle writers behind read shares send at most one command per lease (the first of them
// re-checks only to keep its waiting mark alive: the shares' renewals tell it when they now
// end) while two readers, out of phase, hold and renew; the last RUnlock wakes the first
// writer.
func TestIdleWritersBehindReadersDoNotPoll(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl, window = time.Second, 3 * time.Second
		prefix := b.Prefix(t)
		opts := []distsync.Option{distsync.WithLeaseTTL(ttl)}
		readers := []*rwmutex.RWMutex{newRW(t, b.Pod(t, prefix, opts...), "idler"), newRW(t, b.Pod(t, prefix, opts...), "idler")}
		must(t, "RLock", readers[0].RLock)
		time.Sleep(ttl / 6)
		must(t, "RLock", readers[1].RLock)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pods := []*redistest.Pod{b.Pod(t, prefix, opts...), b.Pod(t, prefix, opts...)}
		var writers []*rwmutex.RWMutex
		var res []<-chan error
		for _, p := range pods {
			w := newRW(t, p, "idler")
			writers = append(writers, w)
			res = append(res, async(ctx, w.Lock))
			time.Sleep(50 * time.Millisecond) // in this order
		}
		time.Sleep(300 * time.Millisecond)
		from := time.Now()
		time.Sleep(window)
		limit := int(window/ttl) + 1
		for i, p := range pods {
			sent := p.Client.Since(from)
			if len(sent) > limit {
				t.Errorf("idle writer %d sent %d commands in %v (lease %v), want at most %d: %v", i, len(sent), window, ttl, limit, sent)
			}
			t.Logf("idle writer %d sent %d commands in %v", i, len(sent), window)
		}
		must(t, "RUnlock", readers[0].RUnlock)
		must(t, "RUnlock", readers[1].RUnlock)
		for i, w := range writers {
			redistest.Returns(t, fmt.Sprintf("writer %d", i), res[i], ttl)
			must(t, "Unlock", w.Unlock)
		}
	})
}

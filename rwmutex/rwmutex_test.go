package rwmutex_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
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

// async runs f in a goroutine and returns a channel with what it returned, and when.
func async(ctx context.Context, f func(context.Context) error) <-chan redistest.Returned {
	return redistest.Async(ctx, f)
}

// await returns when the call ch reports returned, failing t if it returned an error or
// nothing came within limit (a bound on a hang only).
func await(t *testing.T, what string, ch <-chan redistest.Returned, limit time.Duration) time.Time {
	t.Helper()
	select {
	case r := <-ch:
		if r.Err != nil {
			t.Fatalf("%s: %v", what, r.Err)
		}
		return r.At
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
	}
	return time.Time{}
}

// waits fails t if the call ch reports returns within d: it must wait while what it waits
// behind holds. If that is a lease or a waiting mark that a stall of premise or more could have
// let lapse, and this process, or a reply of Redis to one of the pods that keep it, stalled
// that long since the premise was set up (since), it returns an error instead, for
// redistest.Retry.
func waits(t *testing.T, what string, ch <-chan redistest.Returned, d time.Duration, since time.Time, premise time.Duration, keepers ...*redistest.Pod) error {
	t.Helper()
	select {
	case r := <-ch:
		stalled := redistest.Stalled(since, r.At)
		for _, p := range keepers {
			stalled = max(stalled, p.Client.Slowest(since, r.At))
		}
		if stalled >= premise {
			return fmt.Errorf("%s returned (%v) while it should wait, but this process or Redis stalled %v meanwhile: what it waited behind may have lapsed",
				what, r.Err, stalled.Round(time.Millisecond))
		}
		t.Fatalf("%s returned (%v) while it should wait", what, r.Err)
	case <-time.After(d):
	}
	return nil
}

// kept runs f, the release of a hold the test kept, as must does; if the hold had been lost,
// which only a machine stalled for most of a lease does to a hold that is renewed, it returns
// an error, for redistest.Retry.
func kept(t *testing.T, what string, f func(context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	switch err := f(ctx); {
	case errors.Is(err, distsync.ErrLost):
		return fmt.Errorf("%s: %w (a hold the test kept, lost: the machine stalled for most of a lease)", what, err)
	case err != nil:
		t.Fatalf("%s: %v", what, err)
	}
	return nil
}

// rwState describes the RWMutex name's keys in Redis, for a test that reports a hang.
func rwState(t *testing.T, b *redistest.Backend, prefix, name string) string {
	t.Helper()
	var out []string
	for _, part := range []string{"", "r", "ww", "rq", "ra", "wo"} {
		k := key(prefix, name, part)
		typ, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Type().Key(k).Build() }).ToString()
		var v any
		switch typ {
		case "string":
			v, _ = b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Get().Key(k).Build() }).ToString()
		case "zset":
			v, _ = b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()
			}).AsZScores()
		}
		pttl, _ := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Pttl().Key(k).Build() }).AsInt64()
		out = append(out, fmt.Sprintf("%s=%v (%s, PTTL %d)", k, v, typ, pttl))
	}
	return strings.Join(out, "; ")
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
		redistest.Retry(t, 3, func() error {
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
			var all []error
			for err := range errs {
				all = append(all, err)
			}
			// A hold lost (which only a machine stalled for most of a lease does to a hold that is
			// renewed) lets the next holder in while its holder is still inside: the premise of
			// the scenario is gone, not the property.
			if err := errors.Join(all...); errors.Is(err, distsync.ErrLost) {
				return fmt.Errorf("a hold was lost: %w", err)
			} else if err != nil {
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
			return nil
		})
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
		redistest.Retry(t, 3, func() error {
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
			if !redistest.Eventually(10*time.Second, func() bool { return reads.Load() >= 6 }) {
				t.Fatal("readers made no progress")
			}
			w := newRW(t, b.Pod(t, prefix), "hot")
			start := time.Now()
			must(t, "writer Lock", w.Lock) // 15 s limit: the test runs readers for as long as it takes
			in := time.Now()
			t.Logf("writer got in after %v among %d reads", in.Sub(start), reads.Load())
			must(t, "writer Unlock", w.Unlock)
			return redistest.Late("the writer, behind readers that each hold for at most 30ms, got in", in.Sub(start), 2*time.Second, start, in)
		})
	})
}

// With writers continuously re-acquiring, a reader still gets in: a writer's Unlock admits
// the readers waiting then, before the next writer.
func TestReaderIsNotStarvedByWriters(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.Retry(t, 3, func() error {
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
			if !redistest.Eventually(10*time.Second, func() bool { return writes.Load() >= 4 }) {
				t.Fatal("writers made no progress")
			}
			r := newRW(t, b.Pod(t, prefix), "hotw")
			var late error
			for i := range 3 {
				start := time.Now()
				must(t, "reader RLock", r.RLock)
				in := time.Now()
				must(t, "reader RUnlock", r.RUnlock)
				if late == nil {
					late = redistest.Late(fmt.Sprintf("reader %d, behind writers that each hold for 5ms, got in", i), in.Sub(start), 2*time.Second, start, in)
				}
			}
			t.Logf("%d writes meanwhile", writes.Load())
			return late
		})
	})
}

// A reader that vanishes (network cut) gives its share back after its lease: a waiting writer
// proceeds then, and not before.
func TestCrashedReaderExpires(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Every time scales with the lease: 1 s in the first attempt, longer in the next.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			reader := newRW(t, b.PodVia(t, prefix, net, distsync.WithLeaseTTL(ttl)), "crash")
			writer := newRW(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "crash")
			obs := b.Client(t)
			must(t, "RLock", reader.RLock)
			share := reader.RLease()
			net.Cut()
			// When the share runs out, by Redis's clock: read after the cut, so that no renewal
			// moves it later.
			expiry, err := shareExpiry(t, obs, prefix, "crash")
			if err != nil {
				return err
			}
			must(t, "writer Lock", writer.Lock)
			in := time.Now()
			if early := expiry.Sub(in); early > 0 {
				t.Fatalf("writer got in %v before the crashed reader's share ran out; lease %v", early, ttl)
			}
			select {
			case <-share.Done():
			case <-time.After(2 * ttl):
				t.Fatal("the crashed reader's lease did not end")
			}
			if err := kept(t, "writer Unlock", writer.Unlock); err != nil {
				return err
			}
			t.Logf("writer got in %v after the crashed reader's share ran out", in.Sub(expiry))
			return redistest.Late("the writer, after the crashed reader's share ran out, got in", in.Sub(expiry), 2*ttl, expiry, in)
		})
	})
}

// A writer that vanishes while waiting holds new readers back only until its waiting mark
// lapses (about a lease), not forever.
func TestCrashedWaitingWriterDoesNotBlockReaders(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Every time scales with the lease: 1 s in the first attempt, longer in the next.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			first := newRW(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "ghost")
			wpod := b.PodVia(t, prefix, net, distsync.WithLeaseTTL(ttl))
			writer := newRW(t, wpod, "ghost")
			late := newRW(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "ghost")
			must(t, "first RLock", first.RLock)
			wctx, wcancel := context.WithCancel(context.Background())
			defer wcancel()
			wres := async(wctx, writer.Lock)
			if err := redistest.Waiting(t, "the writer marks itself as waiting", func() bool { return exists(t, b, key(prefix, "ghost", "ww")) }, wres); err != nil {
				return err
			}
			marked := time.Now()
			lres := async(context.Background(), late.RLock)
			// The writer re-checks a tenth of a second before its mark would lapse (waitq's
			// keepMargin): a stall that long may let the mark lapse.
			if err := waits(t, "RLock behind a waiting writer", lres, 200*time.Millisecond, marked, 100*time.Millisecond, wpod); err != nil {
				return err
			}
			net.Cut() // the waiting writer is gone
			if err := kept(t, "first RUnlock", first.RUnlock); err != nil {
				return err
			}
			released := time.Now()
			in := await(t, "RLock after the writer vanished", lres, 20*time.Second)
			t.Logf("reader got in %v after the waiting writer vanished (lease %v)", in.Sub(released), ttl)
			must(t, "late RUnlock", late.RUnlock)
			net.Restore() // so that the writer's process can end cleanly
			wcancel()
			<-wres
			return redistest.Late("the reader, after the waiting writer vanished, got in", in.Sub(released), 5*ttl, released, in)
		})
	})
}

// Idle waiters, reader and writer, send at most the backstop re-check (one per lease) while a
// writer holds and renews; the writer's Unlock wakes the readers promptly.
func TestIdleWaitersDoNotPoll(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Every time scales with the lease: 1 s in the first attempt, longer in the next; the
		// admission of the readers an Unlock lets in lasts half of it (500 ms, the default,
		// in the first).
		redistest.RetryScaled(t, 4, time.Second, func(ttl time.Duration) error {
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithHandoffWindow(ttl / 2)}
			prefix := b.Prefix(t)
			holder := newRW(t, b.Pod(t, prefix, opts...), "idle")
			rp := b.Pod(t, prefix, opts...)
			wp := b.Pod(t, prefix, opts...)
			reader, writer := newRW(t, rp, "idle"), newRW(t, wp, "idle")
			must(t, "Lock", holder.Lock)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rres, wres := async(ctx, reader.RLock), async(ctx, writer.Lock)
			// Each waits once its mark is in Redis and its channel subscribed: it then has at
			// most its re-check after subscribing left to send (one round trip), which the
			// bound below leaves room for.
			ch := key(prefix, "idle", "ch")
			if err := redistest.Waiting(t, "the reader and the writer wait, subscribed", func() bool {
				return exists(t, b, key(prefix, "idle", "rq")) && exists(t, b, key(prefix, "idle", "ww")) &&
					b.Subscribers(t, ch+":r") > 0 && b.Subscribers(t, ch+":w") > 0
			}, rres, wres); err != nil {
				return err
			}
			window := 3 * ttl
			from := time.Now()
			time.Sleep(window)
			// A premise only a machine stalled for most of a lease breaks: the holder kept it.
			if err := holder.Lease().Err(); err != nil {
				return fmt.Errorf("the holder lost its lease (%v) while the waiters were watched", err)
			}
			limit := int(window/ttl) + 1
			for name, p := range map[string]*redistest.Pod{"reader": rp, "writer": wp} {
				if sent := p.Client.Since(from); len(sent) > limit {
					t.Errorf("idle %s sent %d commands in %v (lease %v), want at most %d: %v", name, len(sent), window, ttl, limit, sent)
				}
			}
			if err := kept(t, "Unlock", holder.Unlock); err != nil {
				return err
			}
			unlocked := time.Now()
			var in time.Time
			select {
			case r := <-rres:
				if r.Err != nil {
					t.Fatalf("reader woken by Unlock: %v", r.Err)
				}
				in = r.At
			case r := <-wres:
				// The Unlock admitted the reader, before the writer, for its admission window:
				// a reader that comes later (on a machine that slow) is behind the writer.
				return fmt.Errorf("the writer got in (%v) before the reader the Unlock admitted: the reader did not come within its admission (%v)", r.Err, ttl/2)
			case <-time.After(10 * time.Second):
				t.Fatal("reader woken by Unlock did not return within 10s")
			}
			t.Logf("reader woken %v after the Unlock", in.Sub(unlocked))
			// The reader's share, renewed, lapses only if this process stalls for two renewal
			// periods.
			if err := waits(t, "writer while a reader holds", wres, 100*time.Millisecond, in, 2*ttl/3); err != nil {
				return err
			}
			if err := kept(t, "RUnlock", reader.RUnlock); err != nil {
				return err
			}
			runlocked := time.Now()
			win := await(t, "writer woken by the last RUnlock", wres, 10*time.Second)
			must(t, "writer Unlock", writer.Unlock)
			return errors.Join(
				redistest.Late("the reader, woken by Unlock, got in", in.Sub(unlocked), ttl/2, unlocked, in),
				redistest.Late("the writer, woken by the last RUnlock, got in", win.Sub(runlocked), ttl/2, runlocked, win))
		})
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
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second) // bounds a hang only
		defer cancel()
		if !redistest.Eventually(5*time.Second, func() bool { return !exists(t, b, key(prefix, "cancel", "ww")) }) {
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
		ok := redistest.Eventually(5*time.Second, func() bool {
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
		type entry struct {
			v       string
			expires time.Time // the earliest it can have expired, for a key with a TTL
		}
		ctx := context.Background()
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			p := b.Pod(t, prefix)
			m := newRW(t, p, "misuse")
			obs := b.Client(t)
			// snapshot reads every key of the test, and returns when it had listed them.
			snapshot := func() (map[string]entry, time.Time) {
				keys := b.Keys(t, prefix)
				listed := time.Now()
				out := make(map[string]entry, len(keys))
				for _, k := range keys {
					var e entry
					switch typ, _ := obs.Do(ctx, obs.B().Type().Key(k).Build()).ToString(); typ {
					case "string":
						e.v, _ = obs.Do(ctx, obs.B().Get().Key(k).Build()).ToString()
					case "zset":
						vs, _ := obs.Do(ctx, obs.B().Zrange().Key(k).Min("0").Max("-1").Build()).AsStrSlice()
						e.v = fmt.Sprint(vs)
					}
					read := time.Now()
					switch pttl, _ := obs.Do(ctx, obs.B().Pttl().Key(k).Build()).AsInt64(); {
					case pttl == -2: // expired since it was listed
						e.expires = read
					case pttl >= 0:
						e.expires = read.Add(time.Duration(pttl) * time.Millisecond)
					}
					out[k] = e
				}
				return out, listed
			}
			// check makes the call, which must fail with ErrNotHeld, and compares Redis before
			// and after it: a key with a TTL that ran out meanwhile is not a change.
			check := func(what string, call func(context.Context) error) {
				t.Helper()
				before, _ := snapshot()
				err := call(ctx)
				if !errors.Is(err, distsync.ErrNotHeld) {
					t.Errorf("%s: %v, want ErrNotHeld", what, err)
				}
				after, listed := snapshot()
				for k, e := range before {
					if a, ok := after[k]; ok && a.v != e.v {
						t.Errorf("%s changed %s: %q, then %q", what, k, e.v, a.v)
					} else if !ok && (e.expires.IsZero() || e.expires.After(listed)) {
						t.Errorf("%s deleted %s (%q)", what, k, e.v)
					}
				}
				for k, a := range after {
					if _, ok := before[k]; !ok {
						t.Errorf("%s wrote %s (%q)", what, k, a.v)
					}
				}
			}
			check("RUnlock without RLock", m.RUnlock)
			check("Unlock without Lock", m.Unlock)
			must(t, "RLock", m.RLock)
			check("Unlock by a reader", m.Unlock)
			if err := kept(t, "RUnlock", m.RUnlock); err != nil {
				return err
			}
			check("a second RUnlock", m.RUnlock)
			must(t, "Lock", m.Lock)
			check("RUnlock by the writer", m.RUnlock)
			if err := kept(t, "Unlock", m.Unlock); err != nil {
				return err
			}

			if _, err := rwmutex.New(p.H, ""); !errors.Is(err, distsync.ErrInvalid) {
				t.Errorf("New with an empty name: %v", err)
			}
			if _, err := rwmutex.New(p.H, "x", distsync.WithLeaseTTL(0)); !errors.Is(err, distsync.ErrInvalid) {
				t.Errorf("New with a zero TTL: %v", err)
			}
			return nil
		})
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

// Deleting the holds behind their holders' backs fires the loss signals within a renewal
// period; the releases then report the loss.
func TestLossIsSignalled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 900 * time.Millisecond
		// signalled waits for l's loss signal (10 s bounds a hang only) and returns when it came.
		signalled := func(what string, l *distsync.Lease) time.Time {
			t.Helper()
			select {
			case <-l.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("%s's loss not signalled", what)
			}
			return time.Now()
		}
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			r := newRW(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "loss")
			must(t, "RLock", r.RLock)
			share := r.RLease()
			b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(key(prefix, "loss", "r")).Build() })
			deleted := time.Now()
			rlost := signalled("reader", share)
			if err := r.RUnlock(context.Background()); !errors.Is(err, distsync.ErrLost) || !errors.Is(err, distsync.ErrNotHeld) {
				t.Fatalf("RUnlock after the loss: %v", err)
			}
			must(t, "Lock", r.Lock)
			lease := r.Lease()
			b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Set().Key(key(prefix, "loss", "")).Value("someone").Build()
			})
			taken := time.Now()
			wlost := signalled("writer", lease)
			if err := r.Unlock(context.Background()); !errors.Is(err, distsync.ErrLost) {
				t.Fatalf("Unlock after the loss: %v", err)
			}
			return errors.Join(
				redistest.Late("counted from the deletion, the reader's loss was signalled", rlost.Sub(deleted), ttl/3+time.Second, deleted, rlost),
				redistest.Late("counted from the overwrite, the writer's loss was signalled", wlost.Sub(taken), ttl/3+time.Second, taken, wlost))
		})
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
		redistest.Retry(t, 3, func() error {
			prefix := b.Prefix(t)
			w1 := newRW(t, b.Pod(t, prefix), "admit") // default 10 s lease, 500 ms window
			must(t, "Lock", w1.Lock)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			dead := newRW(t, b.PodVia(t, prefix, net), "admit")
			dctx, dcancel := context.WithCancel(context.Background())
			defer dcancel()
			dres := async(dctx, dead.RLock)
			if !redistest.Eventually(10*time.Second, func() bool { return exists(t, b, key(prefix, "admit", "rq")) }) {
				t.Fatal("the reader never marked itself as waiting")
			}
			w2 := newRW(t, b.Pod(t, prefix), "admit")
			wres := async(context.Background(), w2.Lock)
			if !redistest.Eventually(10*time.Second, func() bool { return exists(t, b, key(prefix, "admit", "ww")) }) {
				t.Fatal("the second writer never marked itself as waiting")
			}
			net.Cut() // the reader's process is gone; its mark is not
			// The Unlock admits the dead reader.
			must(t, "Unlock", w1.Unlock)
			unlocked := time.Now()
			in := await(t, "the next writer", wres, 20*time.Second)
			t.Logf("the next writer got in %v after the Unlock", in.Sub(unlocked))
			must(t, "Unlock", w2.Unlock)
			net.Restore()
			dcancel()
			<-dres
			return redistest.Late("the next writer, after the Unlock that admitted a dead reader, got in", in.Sub(unlocked), 3*time.Second, unlocked, in)
		})
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

// writerExpiry returns when the write hold's lease runs out, by Redis's clock, which is this
// host's (the servers run here): exact, however long the read took. c is a client made
// beforehand, so that the read comes at once. The hold is the one whose owner value is held
// (read while it held); if another holds now, or nobody (the hold lapsed first, on a machine
// that stalled for most of a lease), it returns an error, for redistest.Retry.
func writerExpiry(t *testing.T, c rueidis.Client, prefix, name, held string) (time.Time, error) {
	t.Helper()
	vals, err := c.Do(context.Background(), c.B().Eval().Script(valueAndExpiry).Numkeys(1).Key(key(prefix, name, "")).Build()).ToArray()
	if err != nil || len(vals) != 2 {
		t.Fatalf("the write hold and its expiry: %v, %v", vals, err)
	}
	v, _ := vals[0].ToString()
	ms, _ := vals[1].AsInt64()
	switch {
	case v != held:
		return time.Time{}, fmt.Errorf("the write hold was %q, not the dead writer's %q, when its expiry was read: it had lapsed (the machine stalled?)", v, held)
	case ms < 0:
		t.Fatalf("the write hold has no TTL (%d)", ms)
	}
	return time.UnixMilli(ms), nil
}

// valueAndExpiry reads a string key's value and its expiry at one moment: as PEXPIRETIME would give it,
// from TIME and PTTL (Redis 6.2 has no PEXPIRETIME), a millisecond early to cover rounding.
const valueAndExpiry = `local t, p = redis.call('TIME'), redis.call('PTTL', KEYS[1])
if p >= 0 then p = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + p - 1 end
return {redis.call('GET', KEYS[1]) or '', p}`

// shareExpiry returns when the last read share's lease runs out, by Redis's clock (its score),
// read with c as writerExpiry does (or an error if no share is left).
func shareExpiry(t *testing.T, c rueidis.Client, prefix, name string) (time.Time, error) {
	t.Helper()
	e, err := c.Do(context.Background(), c.B().Zrange().Key(key(prefix, name, "r")).Min("-1").Max("-1").Withscores().Build()).AsZScores()
	switch {
	case err != nil:
		t.Fatalf("the last read share: %v", err)
	case len(e) != 1:
		return time.Time{}, fmt.Errorf("no read share was left (%v) when its expiry was read: the machine stalled", e)
	}
	return time.UnixMilli(int64(e[0].Score)), nil
}

// within returns nil if the waiter that got in at (not before expiry: a lease that ran out,
// nothing is published then) sent the attempt that got in (the last of those sends logged,
// if sent since from, else at itself) within limit of expiry, allowing for what this process
// stalled since from (redistest.Late): the waiter's re-check is timed, not the round trip
// after it. Otherwise it returns an error, for redistest.Retry.
func within(t *testing.T, what string, at time.Time, sends *redistest.SendLog, expiry time.Time, limit time.Duration, from time.Time) error {
	t.Helper()
	if at.Before(expiry) {
		t.Fatalf("%s got in %v before the lease it waited behind ran out", what, expiry.Sub(at))
	}
	sent := sends.Last(at)
	if sent.Before(from) {
		sent = at
	}
	late := sent.Sub(expiry)
	t.Logf("%s sent the attempt that got in %v after the lease it waited behind ran out, and was in %v after that", what, late, at.Sub(sent))
	return redistest.Late(what+", after the lease it waited behind ran out, sent the attempt that got in", late, limit, from, sent)
}

// lockSends returns a client of b that logs when rwmutex_lock.lua is sent through it.
func lockSends(t *testing.T, b *redistest.Backend) *redistest.SendLog {
	return redistest.NewSendLog(b.Client(t), redistest.ScriptCall(scripts.RWMutexLock))
}

// A writer that dies holding (its network cut) is replaced a round trip after its lease runs
// out: each renewal of the write hold tells the waiting readers, and the first waiting writer,
// when it now ends, and they re-check right after that, not at their backstop (up to a third
// of a lease later). With only readers waiting, they all get in; with a writer waiting too, it
// gets in first (writers are preferred, and a lapsed hold admits nobody, as an Unlock would),
// and the readers follow its Unlock. Every time scales with the lease: 3 s in the first
// attempt, longer in the next (redistest.RetryScaled).
func TestDeadWritersLockIsTakenAtItsExpiry(t *testing.T) {
	t.Parallel()
	// start makes a writer that dies holding once its second renewal is past: a waiter that
	// only knew the lease it saw when it queued would wake a sixth of a lease after the
	// expiry, at the earliest. queue starts the waiters; it returns when the writer died, with
	// the expiry of its lease (or an error if the hold was gone before it could be read).
	start := func(t *testing.T, b *redistest.Backend, prefix string, ttl time.Duration, queue func()) (cut, expiry time.Time, err error) {
		net := redistest.NewNetwork()
		t.Cleanup(net.Restore)
		dead := newRW(t, b.PodVia(t, prefix, net, distsync.WithLeaseTTL(ttl)), "dead")
		obs := b.Client(t)
		locked := time.Now()
		must(t, "Lock", dead.Lock)
		held, err := obs.Do(context.Background(), obs.B().Get().Key(key(prefix, "dead", "")).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		queue()
		time.Sleep(time.Until(locked.Add(2*ttl/3 + ttl/15)))
		net.Cut()
		cut = time.Now()
		expiry, err = writerExpiry(t, obs, prefix, "dead", held)
		return cut, expiry, err
	}
	t.Run("readers", func(t *testing.T) {
		redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
			redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute+ttl)
				defer cancel()
				prefix := b.Prefix(t)
				sends := []*redistest.SendLog{lockSends(t, b), lockSends(t, b)}
				var readers []*rwmutex.RWMutex
				for _, c := range sends {
					readers = append(readers, newRW(t, b.PodOn(t, c, prefix, distsync.WithLeaseTTL(ttl)), "dead"))
				}
				var res []<-chan redistest.Returned
				cut, expiry, err := start(t, b, prefix, ttl, func() {
					for _, r := range readers {
						res = append(res, async(ctx, r.RLock))
					}
					if !redistest.Eventually(10*time.Second, func() bool { return exists(t, b, key(prefix, "dead", "rq")) }) {
						t.Fatal("the readers never marked themselves as waiting")
					}
				})
				if err != nil {
					return err
				}
				margin := ttl * 7 / 60 // 350 ms for a lease of 3 s
				var late error
				for i, r := range readers {
					what := fmt.Sprintf("reader %d", i)
					at := await(t, what, res[i], time.Until(expiry)+20*time.Second)
					if err := within(t, what, at, sends[i], expiry, margin, cut); late == nil {
						late = err
					}
					if err := kept(t, "RUnlock", r.RUnlock); err != nil {
						return err
					}
				}
				return late
			})
		})
	})
	t.Run("writer", func(t *testing.T) {
		redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
			redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute+ttl)
				defer cancel()
				prefix := b.Prefix(t)
				sends := lockSends(t, b)
				wpod := b.PodOn(t, sends, prefix, distsync.WithLeaseTTL(ttl))
				writer := newRW(t, wpod, "dead")
				reader := newRW(t, b.Pod(t, prefix, distsync.WithLeaseTTL(ttl)), "dead")
				var wres, rres <-chan redistest.Returned
				cut, expiry, err := start(t, b, prefix, ttl, func() {
					wres = async(ctx, writer.Lock)
					if !redistest.Eventually(10*time.Second, func() bool { return exists(t, b, key(prefix, "dead", "ww")) }) {
						t.Fatal("the writer never marked itself as waiting")
					}
					rres = async(ctx, reader.RLock)
					if !redistest.Eventually(10*time.Second, func() bool { return exists(t, b, key(prefix, "dead", "rq")) }) {
						t.Fatal("the reader never marked itself as waiting")
					}
				})
				if err != nil {
					return err
				}
				margin := ttl * 7 / 60 // 350 ms for a lease of 3 s
				var in redistest.Returned
				select {
				case in = <-wres:
					if in.Err != nil {
						t.Fatalf("the waiting writer: %v", in.Err)
					}
				case r := <-rres:
					// The waiting writer's mark, which holds new readers back, lives as long as
					// it re-checks, which it does with a tenth of a second to spare (waitq's
					// keepMargin): a stall of this process, or a reply of Redis, that long may
					// let the mark lapse.
					if stalled := max(redistest.Stalled(cut, r.At), wpod.Client.Slowest(cut, r.At)); stalled >= 100*time.Millisecond {
						return fmt.Errorf("the reader got in (%v) before the waiting writer, but this process or Redis stalled %v meanwhile: the writer's mark may have lapsed",
							r.Err, stalled.Round(time.Millisecond))
					}
					t.Fatalf("the reader got in (%v) before the waiting writer", r.Err)
				case <-time.After(time.Until(expiry) + 20*time.Second):
					t.Fatalf("the waiting writer did not get in within 20s of the dead writer's expiry; Redis has %s", rwState(t, b, prefix, "dead"))
				}
				late := within(t, "the waiting writer", in.At, sends, expiry, margin, cut)
				// The next writer's lease, renewed, lapses only if this process stalls for two
				// renewal periods.
				if err := waits(t, "the reader while the next writer holds", rres, 100*time.Millisecond, cut, 2*ttl/3, wpod); err != nil {
					return err
				}
				if err := kept(t, "Unlock", writer.Unlock); err != nil {
					return err
				}
				unlocked := time.Now()
				rin := await(t, "the reader, after the next writer's Unlock", rres, 10*time.Second)
				if err := kept(t, "RUnlock", reader.RUnlock); err != nil {
					return err
				}
				if late != nil {
					return late
				}
				// A second for a lease of 3 s: a reader not woken re-checks at its backstop.
				return redistest.Late("the reader, after the next writer's Unlock, got in", rin.Sub(unlocked), ttl/3, unlocked, rin)
			})
		})
	})
}

// A reader that dies holding a share (its network cut) gives it back when its lease runs
// out, and the waiting writer gets in a round trip after that: each renewal of a share tells
// the first waiting writer when the last live share now lapses.
func TestDeadReadersShareIsTakenAtItsExpiry(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Every time scales with the lease: 3 s in the first attempt, longer in the next.
		redistest.RetryScaled(t, 3, 3*time.Second, func(ttl time.Duration) error {
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl)}
			prefix := b.Prefix(t)
			net := redistest.NewNetwork()
			t.Cleanup(net.Restore)
			dead := newRW(t, b.PodVia(t, prefix, net, opts...), "deadr")
			sends := lockSends(t, b)
			writer := newRW(t, b.PodOn(t, sends, prefix, opts...), "deadr")
			obs := b.Client(t)
			locked := time.Now()
			must(t, "RLock", dead.RLock)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute+ttl)
			defer cancel()
			wres := async(ctx, writer.Lock)
			if !redistest.Eventually(10*time.Second, func() bool { return exists(t, b, key(prefix, "deadr", "ww")) }) {
				t.Fatal("the writer never marked itself as waiting")
			}
			time.Sleep(time.Until(locked.Add(2*ttl/3 + ttl/15)))
			net.Cut()
			cut := time.Now()
			expiry, err := shareExpiry(t, obs, prefix, "deadr")
			if err != nil {
				return err
			}
			margin := ttl * 7 / 60 // 350 ms for a lease of 3 s
			at := await(t, "the waiting writer", wres, time.Until(expiry)+20*time.Second)
			late := within(t, "the waiting writer", at, sends, expiry, margin, cut)
			if err := kept(t, "Unlock", writer.Unlock); err != nil {
				return err
			}
			return late
		})
	})
}

// The readers' bound: a reader waiting behind a stream of writers from several processes is
// overtaken by at most one write hold. The first write hold to end after its request reached
// Redis ends with an Unlock that admits it (and the other readers waiting then) before the
// next writer; the hold that admits it began either before its request (it was holding) or
// after it (it was the first writer waiting): one hold at most. A hold is counted if it began
// after the request reached Redis (its token is above the name's last token read as the call
// reported it queued) and its token is at most the read token (the name's last token when the
// reader got in: the last write before its share).
// Other readers come and go too, so that the reader also arrives while shares are held and a
// writer waits for them (that writer then overtakes it).
func TestReaderIsOvertakenByAtMostOneWrite(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const writerPods, perPod, reads, hold = 3, 2, 12, 40 * time.Millisecond
		prefix := b.Prefix(t)
		// A hand-off window long against any stall, on every pod (the one whose Unlock or
		// RUnlock admits others sets how long the admission lasts), and places kept as long:
		// a reader admitted but paused past its window, or whose place lapsed, is the
		// documented way past the bound, not what this test checks.
		window := distsync.WithHandoffWindow(time.Minute)
		place := distsync.WithWaiterLease(time.Minute)
		var mu sync.Mutex
		var tokens []int64 // the write holds' tokens, as their Locks returned
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range writerPods {
			m := newRW(t, b.Pod(t, prefix, window, place), "stream")
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
		others := newRW(t, b.Pod(t, prefix, window, place), "stream")
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
		if !redistest.Eventually(10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(tokens) >= 3 }) {
			t.Fatal("the writers made no progress")
		}
		// The bound counts from the moment the read's request reached Redis: the
		// observer reads the last token as the call reports it queued (after its
		// attempt's reply), and a write begun before that is not one that overtook it.
		// A write begun between the request's arrival and that read goes uncounted; two
		// begun after it are a failure whatever the load.
		obs := b.Client(t)
		var queuedMu sync.Mutex
		var queuedAt int64 // the last token when the call in progress queued; -1 before
		watch := distsync.WithObserver(func(e distsync.Event) {
			if e.Kind != distsync.EventQueued {
				return
			}
			queuedMu.Lock()
			defer queuedMu.Unlock()
			if queuedAt >= 0 {
				return
			}
			if v, err := obs.Do(context.Background(), obs.B().Get().Key(key(prefix, "stream", "fence")).Build()).AsInt64(); err == nil {
				queuedAt = v
			}
		})
		r := newRW(t, b.Pod(t, prefix, watch, window, place), "stream")
		seen := make([]int, 3) // reads by the number of write holds that overtook them
		for i := range reads {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			queuedMu.Lock()
			queuedAt = -1
			queuedMu.Unlock()
			l, err := r.RLockLease(ctx)
			cancel()
			if err != nil {
				t.Fatalf("RLock %d: %v", i, err)
			}
			queuedMu.Lock()
			from := queuedAt
			queuedMu.Unlock()
			var over []int64
			if from >= 0 { // it waited; else it took its share at once, overtaken by none
				mu.Lock()
				for _, tok := range tokens {
					if tok > from && tok <= l.Token() {
						over = append(over, tok)
					}
				}
				mu.Unlock()
			}
			seen[min(len(over), 2)]++
			if len(over) > 1 {
				t.Fatalf("read %d was overtaken by %d write holds begun after it queued (tokens %v, the last when it queued %d, read token %d)",
					i, len(over), over, from, l.Token())
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
		// Every time scales with the lease: 1 s in the first attempt, twice as long in each
		// next one, of four: a stalled process loses short shares first.
		redistest.RetryScaled(t, 4, time.Second, func(ttl time.Duration) error {
			window := 3 * ttl
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl)}
			prefix := b.Prefix(t)
			readers := []*rwmutex.RWMutex{newRW(t, b.Pod(t, prefix, opts...), "idler"), newRW(t, b.Pod(t, prefix, opts...), "idler")}
			must(t, "RLock", readers[0].RLock)
			time.Sleep(ttl / 6) // out of phase (any longer is as good)
			must(t, "RLock", readers[1].RLock)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pods := []*redistest.Pod{b.Pod(t, prefix, opts...), b.Pod(t, prefix, opts...)}
			var writers []*rwmutex.RWMutex
			var res []<-chan redistest.Returned
			for i, p := range pods {
				w := newRW(t, p, "idler")
				writers = append(writers, w)
				res = append(res, async(ctx, w.Lock))
				// In this order: the writer is in the writers' order in Redis before the next starts.
				if err := redistest.Waiting(t, fmt.Sprintf("writer %d queues", i), func() bool { return zcard(t, b, key(prefix, "idler", "wo")) == int64(i+1) }, res...); err != nil {
					return err
				}
			}
			queued := time.Now()
			// Each waits once its channel is subscribed: it then has at most its re-check after
			// subscribing left to send (one round trip), which the bound below leaves room for.
			if err := redistest.Waiting(t, "the writers subscribe", func() bool { return b.Subscribers(t, key(prefix, "idler", "ch")+":w") >= int64(len(pods)) }, res...); err != nil {
				return err
			}
			from := time.Now()
			time.Sleep(window)
			// A premise only a machine stalled for most of a lease breaks: the readers kept
			// their shares.
			for i, r := range readers {
				if err := r.RLease().Err(); err != nil {
					return fmt.Errorf("reader %d lost its share (%v) while the writers were watched", i, err)
				}
			}
			limit := int(window/ttl) + 1
			for i, p := range pods {
				sent := p.Client.Since(from)
				if len(sent) > limit {
					t.Errorf("idle writer %d sent %d commands in %v (lease %v), want at most %d: %v", i, len(sent), window, ttl, limit, sent)
				}
				t.Logf("idle writer %d sent %d commands in %v", i, len(sent), window)
			}
			for i, r := range readers {
				if err := kept(t, fmt.Sprintf("RUnlock %d", i), r.RUnlock); err != nil {
					return err
				}
			}
			released := time.Now()
			var first redistest.Returned
			select {
			case first = <-res[0]:
			case r := <-res[1]:
				// Writer 0 keeps its place in the writers' order as long as it re-checks before
				// its waiting mark lapses, which it does with a tenth of a second to spare
				// (waitq's keepMargin): a stall of this process, or a reply of Redis, that long
				// may cost it its place.
				if stalled := max(redistest.Stalled(queued, r.At), pods[0].Client.Slowest(queued, r.At)); stalled >= 100*time.Millisecond {
					return fmt.Errorf("writer 1 got in (%v) before writer 0, but this process or Redis stalled %v meanwhile: writer 0's waiting mark may have lapsed",
						r.Err, stalled.Round(time.Millisecond))
				}
				t.Fatalf("writer 1 got in (%v) before writer 0, the first writer waiting", r.Err)
			case <-time.After(10 * time.Second):
				t.Fatal("no writer got in within 10s of the last RUnlock")
			}
			if first.Err != nil {
				t.Fatalf("writer 0: %v", first.Err)
			}
			late := []error{redistest.Late("writer 0, woken by the last RUnlock, got in", first.At.Sub(released), ttl, released, first.At)}
			must(t, "Unlock", writers[0].Unlock)
			released = time.Now()
			in := await(t, "writer 1", res[1], 10*time.Second)
			late = append(late, redistest.Late("writer 1, woken by writer 0's Unlock, got in", in.Sub(released), ttl, released, in))
			must(t, "Unlock", writers[1].Unlock)
			return errors.Join(late...)
		})
	})
}

// zcard returns the number of members of zset k.
func zcard(t *testing.T, b *redistest.Backend, k string) int64 {
	t.Helper()
	n, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Zcard().Key(k).Build() }).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The fast paths of RLock and RUnlock (no writer holds or waits) decide nothing on the shares
// of others and leave lapsed ones in place. A writer is not held back by such a share: the
// first script that decides on the shares drops it. And a share taken by the fast path keeps
// a writer out, as any share does.
func TestLapsedShareLeftByTheFastPaths(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		r := key(prefix, "lapsed", "r")
		tm, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Time().Build() }).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		sec, _ := strconv.ParseInt(tm[0], 10, 64)
		lapsed := strconv.FormatInt(sec*1000-1000, 10) // a second ago, by the server's clock
		if err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Zadd().Key(r).ScoreMember().ScoreMember(float64(sec*1000-1000), "dead:1").Build()
		}).Error(); err != nil {
			t.Fatal(err)
		}
		if err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
			return c.B().Pexpire().Key(r).Milliseconds(60000).Build()
		}).Error(); err != nil {
			t.Fatal(err)
		}
		reader := newRW(t, b.Pod(t, prefix), "lapsed")
		writer := newRW(t, b.Pod(t, prefix), "lapsed")
		must(t, "RLock", reader.RLock)
		must(t, "RUnlock", reader.RUnlock)
		if !exists(t, b, r) {
			t.Logf("the lapsed share (score %s) was dropped already", lapsed)
		}
		ok, err := writer.TryLock(context.Background())
		if !ok || err != nil {
			t.Fatalf("TryLock after the live share went, with a lapsed one left = %v, %v; want true (%s)",
				ok, err, rwState(t, b, prefix, "lapsed"))
		}
		if exists(t, b, r) {
			t.Errorf("the lapsed share is still there after a writer got in: %s", rwState(t, b, prefix, "lapsed"))
		}
		must(t, "Unlock", writer.Unlock)
		must(t, "RLock", reader.RLock)
		if ok, err := writer.TryLock(context.Background()); ok || err != nil {
			t.Fatalf("TryLock while a share is held = %v, %v; want false", ok, err)
		}
		must(t, "RUnlock", reader.RUnlock)
	})
}

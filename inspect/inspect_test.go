package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/inspect"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/once"
	"github.com/distsync/distsync/rate"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
	"github.com/distsync/distsync/waitgroup"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// lease is the lease of every hold and every waiter's place in these tests: fixed and long,
// so that nothing renews, and so rewrites a key, while a test compares Redis before and after
// a read, and longer than a test takes on a stalled machine. The hand-off window is as long:
// a grant that a slow waiter confirms late does not lapse and pass the waiter over.
const lease = 10 * time.Minute

// env is one test's processes and observer, on one backend, under a prefix of its own.
type env struct {
	t      *testing.T
	b      *redistest.Backend
	prefix string
	c      rueidis.Client   // the test's own client, for snapshots
	obs    *distsync.Handle // an observer: a process that holds nothing
}

func newEnv(t *testing.T, b *redistest.Backend) *env {
	e := &env{t: t, b: b, prefix: b.Prefix(t), c: b.Client(t)}
	e.obs = e.pod()
	return e
}

// pod returns the Handle of a new process (its own client), with an identity of its own that
// holds what ids give a meaning to (see identities).
func (e *env) pod() *distsync.Handle {
	identity := fmt.Sprintf("pod %d:{\u65e5}~%%/,", podSeq.Add(1))
	h := e.b.Pod(e.t, e.prefix, distsync.WithFixedLease(lease), distsync.WithWaiterLease(lease), distsync.WithHandoffWindow(lease),
		distsync.WithIdentity(identity)).H
	identities.Store(h.ID(), identity)
	return h
}

// identities are the identities of the pods' Handles, by Handle id: a holder's or a waiter's
// Identity must be its Handle's.
var (
	identities sync.Map
	podSeq     atomic.Int64
)

// identityOf returns the identity of the pod whose Handle id is id ("" for "": no Handle).
func identityOf(id string) string {
	v, _ := identities.Load(id)
	s, _ := v.(string)
	return s
}

// wait runs f, a call that blocks, in a goroutine until it returns; the test's end cancels its
// context and waits for it (before the Handles close: cleanups run last first).
func (e *env) wait(f func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f(ctx)
	}()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			e.t.Errorf("a blocked call did not return within 30s of its context's end")
		}
	})
}

// inspect reads kind name through the observer.
func (e *env) inspect(kind, name string) inspect.Report {
	e.t.Helper()
	r, err := inspect.Inspect(context.Background(), e.obs, kind, name)
	if err != nil {
		e.t.Fatalf("Inspect(%s, %q): %v", kind, name, err)
	}
	return r
}

// until reads kind name until cond holds, for at most 20 s, and returns the last report.
func (e *env) until(what, kind, name string, cond func(r inspect.Report) bool) inspect.Report {
	e.t.Helper()
	var r inspect.Report
	if !redistest.Eventually(20*time.Second, func() bool { r = e.inspect(kind, name); return cond(r) }) {
		e.t.Fatalf("timed out waiting for %s; last report: %+v", what, r)
	}
	return r
}

// queued returns a condition: n waiters are queued.
func queued(n int) func(r inspect.Report) bool {
	return func(r inspect.Report) bool { return len(r.Queue) == n }
}

// snapshot is every key under a prefix: its content (DUMP; on miniredis, which DUMPs only
// strings, its own dump of the whole database), its PTTL and its PEXPIRETIME, the absolute
// expiry, which stays the same while nothing touches the key.
type snapshot struct {
	content map[string]string
	pttl    map[string]int64
	at      map[string]int64
}

func (e *env) snapshot() snapshot {
	e.t.Helper()
	s := snapshot{content: make(map[string]string), pttl: make(map[string]int64), at: make(map[string]int64)}
	ks := e.b.Keys(e.t, e.prefix)
	if len(ks) == 0 {
		e.t.Fatal("no keys under the test's prefix")
	}
	var cmds rueidis.Commands
	for _, k := range ks {
		second := e.c.B().Pexpiretime().Key(k).Build()
		if !e.hasExpireTime() {
			second = e.c.B().Time().Build().SetSlot(k) // the key's node, in the key's pipeline
		}
		cmds = append(cmds, e.c.B().Pttl().Key(k).Build(), second)
		if e.b.Name != redistest.Mini {
			cmds = append(cmds, e.c.B().Dump().Key(k).Build())
		}
	}
	res := e.c.DoMulti(context.Background(), cmds...)
	j := 0
	for _, k := range ks {
		var err1, err2 error
		s.pttl[k], err1 = res[j].AsInt64()
		if e.hasExpireTime() {
			s.at[k], err2 = res[j+1].AsInt64()
		} else if s.at[k], err2 = timeMs(res[j+1]); err2 == nil {
			if s.pttl[k] < 0 {
				s.at[k] = s.pttl[k] // -1 or -2, as PEXPIRETIME says
			} else {
				s.at[k] += s.pttl[k]
			}
		}
		if err1 != nil || err2 != nil {
			e.t.Fatalf("PTTL, PEXPIRETIME %s: %v, %v", k, err1, err2)
		}
		j += 2
		if e.b.Name != redistest.Mini {
			d, err := res[j].ToString()
			if err != nil && !rueidis.IsRedisNil(err) {
				e.t.Fatalf("DUMP %s: %v", k, err)
			}
			s.content[k] = d
			j++
		}
	}
	if e.b.Name == redistest.Mini {
		s.content["(miniredis)"] = e.b.Mini.Dump()
	}
	return s
}

// hasExpireTime reports whether the server has PEXPIRETIME (Redis 7.0+, miniredis). Without
// it (Redis 6.2), a snapshot takes a key's absolute expiry as the server's TIME plus its
// PTTL, read together: right to a couple of milliseconds.
func (e *env) hasExpireTime() bool {
	if e.b.Name == redistest.Mini {
		return true
	}
	v, err := redistest.ServerVersion()
	if err != nil {
		e.t.Fatal(err)
	}
	return v.AtLeast(7, 0)
}

// timeMs reads a reply of TIME in ms.
func timeMs(r rueidis.RedisResult) (int64, error) {
	t, err := r.AsStrSlice()
	if err != nil || len(t) != 2 {
		return 0, fmt.Errorf("TIME: %v, %v", t, err)
	}
	s, _ := strconv.ParseInt(t[0], 10, 64)
	us, _ := strconv.ParseInt(t[1], 10, 64)
	return s*1000 + us/1000, nil
}

// serverMs returns the server's clock in ms.
func (e *env) serverMs() int64 {
	e.t.Helper()
	t, err := e.c.Do(context.Background(), e.c.B().Time().Build()).AsStrSlice()
	if err != nil || len(t) != 2 {
		e.t.Fatalf("TIME: %v, %v", t, err)
	}
	s, _ := strconv.ParseInt(t[0], 10, 64)
	us, _ := strconv.ParseInt(t[1], 10, 64)
	return s*1000 + us/1000
}

// diff says how after differs from before beyond the passing of elapsed: "" if it does not.
// jitter is how far an untouched key's PEXPIRETIME may move: none on Redis, which keeps the
// expiry as an absolute time; a millisecond on miniredis, which keeps what is left; two where
// it is read as TIME + PTTL (Redis 6.2). On miniredis it may also move earlier by up to
// elapsed: what is left loses the part of a millisecond each time miniredis counts time off
// it, more often the busier the machine. A TTL set again moves it later, never earlier.
func diff(before, after snapshot, elapsed time.Duration, jitter int64, mini bool) string {
	var out []string
	for k, v := range before.content {
		if w, ok := after.content[k]; !ok || w != v {
			out = append(out, fmt.Sprintf("%s: content changed", k))
		}
	}
	for k, p := range before.pttl {
		q, ok := after.pttl[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: gone", k))
		case p < 0 || q < 0:
			if p != q {
				out = append(out, fmt.Sprintf("%s: PTTL %d, then %d", k, p, q))
			}
		case q > p || p-q > elapsed.Milliseconds()+5:
			out = append(out, fmt.Sprintf("%s: PTTL %d, then %d, %v later", k, p, q, elapsed))
		}
		early := jitter
		if mini {
			early = max(jitter, elapsed.Milliseconds()+1)
		}
		if a, b := before.at[k], after.at[k]; a-b > early || b-a > jitter {
			out = append(out, fmt.Sprintf("%s: PEXPIRETIME %d, then %d", k, a, b))
		}
	}
	for k := range after.pttl {
		if _, ok := before.pttl[k]; !ok {
			out = append(out, fmt.Sprintf("%s: new", k))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// unchanged checks that read writes nothing: every key under the prefix has the same content
// and the same absolute expiry, and a PTTL that only time has taken from, before and after
// it. The read comes at least 3 ms (and twice the jitter more) after the first snapshot by the
// server's clock, so that a TTL it set again, to the value an earlier read had set, would
// move the expiry. The
// processes renew nothing (fixed leases, minute-long waiter leases), but a waiter's place
// renewal could still land between two snapshots; so it tries up to three times. A read that
// wrote would show on every try.
func (e *env) unchanged(read func()) {
	e.t.Helper()
	jitter := int64(0)
	if e.b.Name == redistest.Mini {
		jitter = 1
	} else if !e.hasExpireTime() {
		jitter = 2 // TIME + PTTL, each rounded down to the millisecond
	}
	var last string
	for range 3 {
		start := time.Now()
		before := e.snapshot()
		from := e.serverMs()
		if !redistest.Eventually(5*time.Second, func() bool { return e.serverMs() >= from+3+2*jitter }) {
			e.t.Fatal("the server's clock did not move for 5s")
		}
		read()
		after := e.snapshot()
		if last = diff(before, after, time.Since(start), jitter, e.b.Name == redistest.Mini); last == "" {
			return
		}
	}
	e.t.Errorf("Redis changed across the read, on every try: %s", last)
}

// checkHolder checks a holder against what the holding process knows; its lease must lie
// within the test's.
func checkHolder(t *testing.T, what string, got distsync.Holder, handle string, token, count int64, shared bool) {
	t.Helper()
	if got.Handle != handle || got.Token != token || got.Count != count || got.Shared != shared {
		t.Errorf("%s: holder %+v, want Handle %q, Token %d, Count %d, Shared %v", what, got, handle, token, count, shared)
	}
	if got.Identity != identityOf(handle) {
		t.Errorf("%s: holder's Identity %q, want its Handle's %q", what, got.Identity, identityOf(handle))
	}
	if got.Remaining <= 0 || got.Remaining > lease {
		t.Errorf("%s: holder has %v left, want within the %v lease", what, got.Remaining, lease)
	}
}

// checkQueue checks the waiters' Handles, in order, and their places' leases.
func checkQueue(t *testing.T, what string, got []inspect.Waiter, handles ...string) {
	t.Helper()
	var hs []string
	for _, w := range got {
		hs = append(hs, w.Handle)
		if w.Identity != identityOf(w.Handle) || w.Identity == "" {
			t.Errorf("%s: waiter's Identity %q, want its Handle's %q", what, w.Identity, identityOf(w.Handle))
		}
		if w.Remaining <= 0 || w.Remaining > 3*lease { // a place outlives the wait it reported
			t.Errorf("%s: waiter %+v has %v left on its place", what, w, w.Remaining)
		}
	}
	if !slices.Equal(hs, handles) {
		t.Errorf("%s: queue of Handles %q, want %q", what, hs, handles)
	}
}

func TestMutex(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newEnv(t, b)
		ctx := context.Background()
		a, wb, wc := e.pod(), e.pod(), e.pod()
		m, _ := mutex.New(a, "orders:42")
		l, err := m.LockLease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range []*distsync.Handle{wb, wc} {
			w, _ := mutex.New(h, "orders:42")
			e.wait(w.Lock)
			e.until(fmt.Sprintf("%d waiting processes", i+1), inspect.Mutex, "orders:42", queued(i+1))
		}
		var r inspect.Report
		e.unchanged(func() { r = e.inspect(inspect.Mutex, "orders:42") })
		if r.Kind != inspect.Mutex || r.Name != "orders:42" || r.Idle() {
			t.Errorf("report %+v: want a busy mutex orders:42", r)
		}
		if len(r.Holders) != 1 {
			t.Fatalf("holders %+v, want 1", r.Holders)
		}
		checkHolder(t, "mutex", r.Holders[0], a.ID(), l.Token(), 1, false)
		checkQueue(t, "mutex", r.Queue, wb.ID(), wc.ID())
		if r.Queue[0].Waited < r.Queue[1].Waited || r.Queue[0].Weight != 1 {
			t.Errorf("queue %+v: the first waiter has waited longer, with weight 1", r.Queue)
		}
		if r.Fence != l.Token() {
			t.Errorf("Fence = %d, want the holder's token %d", r.Fence, l.Token())
		}
	})
}

// A mutex held as one of a set (mutex.All) is reported with the set's other names, in
// NewAll's order, read in the same step as its holder; an ordinary hold, and a hold taken
// after a set's (whose record lingers until its lease would have ended), have none.
func TestMutexHeldWithOthers(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newEnv(t, b)
		ctx := context.Background()
		a, other := e.pod(), e.pod()
		names := []string{"set:a", "set:{b}", "set:c"} // on a Cluster, most likely in other slots
		var ms []*mutex.Mutex
		for _, n := range names {
			m, _ := mutex.New(a, n)
			ms = append(ms, m)
		}
		all, err := mutex.NewAll(ms...)
		if err != nil {
			t.Fatal(err)
		}
		if err := all.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		tokens := all.Tokens()
		for i, n := range names {
			var r inspect.Report
			e.unchanged(func() { r = e.inspect(inspect.Mutex, n) })
			if len(r.Holders) != 1 {
				t.Fatalf("%q: holders %+v, want 1", n, r.Holders)
			}
			checkHolder(t, n, r.Holders[0], a.ID(), tokens[i], 1, false)
			want := slices.Delete(slices.Clone(names), i, i+1)
			if !slices.Equal(r.With, want) {
				t.Errorf("%q: With = %q, want %q", n, r.With, want)
			}
		}
		// A waiter queued behind the set's hold marks the holder's value (lib/queue.lua): the
		// holder and the set read the same.
		waiter, _ := mutex.New(other, names[0])
		wctx, wcancel := context.WithCancel(ctx)
		waited := make(chan error, 1)
		go func() { waited <- waiter.Lock(wctx) }()
		if !redistest.Eventually(10*time.Second, func() bool { return len(e.inspect(inspect.Mutex, names[0]).Queue) > 0 }) {
			t.Fatal("the waiter never queued")
		}
		r := e.inspect(inspect.Mutex, names[0])
		if len(r.Holders) != 1 {
			t.Fatalf("with a waiter: holders %+v, want 1", r.Holders)
		}
		checkHolder(t, names[0], r.Holders[0], a.ID(), tokens[0], 1, false)
		if want := names[1:]; !slices.Equal(r.With, want) {
			t.Errorf("with a waiter: With = %q, want %q", r.With, want)
		}
		wcancel()
		if err := <-waited; err == nil {
			t.Fatal("the waiter took a member of the held set")
		}
		plain, _ := mutex.New(a, "set:plain")
		if err := plain.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if r := e.inspect(inspect.Mutex, "set:plain"); len(r.Holders) != 1 || r.With != nil {
			t.Errorf("an ordinary hold: holders %+v, With %q; want 1 holder and no set", r.Holders, r.With)
		}
		// The set's records outlive its Unlock; a hold of another process is not the set's.
		if err := all.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		m, _ := mutex.New(other, names[1])
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if r := e.inspect(inspect.Mutex, names[1]); len(r.Holders) != 1 || r.Holders[0].Handle != other.ID() || r.With != nil {
			t.Errorf("a hold after the set's: holders %+v, With %q; want the other process's and no set", r.Holders, r.With)
		}
		if r := e.inspect(inspect.Mutex, names[0]); !r.Idle() || r.With != nil {
			t.Errorf("a member released: %+v; want idle and no set", r)
		}
	})
}

func TestReentrant(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newEnv(t, b)
		a, other := e.pod(), e.pod()
		m, _ := reentrant.New(a, "account:7")
		o := reentrant.NewOwner()
		ctx := reentrant.WithOwner(context.Background(), o)
		l, err := m.LockLease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		// Another owner waits: its process is queued.
		w, _ := reentrant.New(other, "account:7")
		e.wait(func(ctx context.Context) error {
			return w.Lock(reentrant.WithOwner(ctx, reentrant.NewOwner()))
		})
		e.until("a waiting process", inspect.Reentrant, "account:7", queued(1))
		var r inspect.Report
		e.unchanged(func() { r = e.inspect(inspect.Reentrant, "account:7") })
		if len(r.Holders) != 1 {
			t.Fatalf("holders %+v, want 1", r.Holders)
		}
		checkHolder(t, "reentrant", r.Holders[0], "", l.Token(), 2, false)
		if r.Holders[0].Owner != string(o) {
			t.Errorf("Owner = %q, want the reentrant owner %q", r.Holders[0].Owner, o)
		}
		checkQueue(t, "reentrant", r.Queue, other.ID())
		if r.Fence != l.Token() {
			t.Errorf("Fence %d: want the hold's token %d", r.Fence, l.Token())
		}
	})
}

func TestRWMutex(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newEnv(t, b)
		ctx := context.Background()
		a, rb, wc, rd := e.pod(), e.pod(), e.pod(), e.pod()
		m, _ := rwmutex.New(a, "config")
		l, err := m.LockLease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		reader, _ := rwmutex.New(rb, "config")
		e.wait(reader.RLock)
		e.until("a waiting reader", inspect.RWMutex, "config", queued(1))
		writer, _ := rwmutex.New(wc, "config")
		e.wait(writer.Lock)
		r := e.until("a waiting writer", inspect.RWMutex, "config", queued(2))

		// A writer holds: the readers waiting now get in at its Unlock, before the next writer.
		e.unchanged(func() { r = e.inspect(inspect.RWMutex, "config") })
		if len(r.Holders) != 1 {
			t.Fatalf("holders %+v, want the writer", r.Holders)
		}
		checkHolder(t, "writer", r.Holders[0], a.ID(), l.Token(), 1, false)
		checkQueue(t, "writer holds", r.Queue, rb.ID(), wc.ID())
		if !r.Queue[0].Shared || r.Queue[1].Shared || r.Fence != l.Token() {
			t.Errorf("queue %+v, fence %d: want a reader, then a writer; the writer's token %d", r.Queue, r.Fence, l.Token())
		}

		// The writer unlocks: the reader holds, the writer waits, and a new reader waits behind it.
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		e.until("the reader in, the writer waiting", inspect.RWMutex, "config", func(r inspect.Report) bool {
			return len(r.Holders) == 1 && r.Holders[0].Shared && len(r.Queue) == 1
		})
		late, _ := rwmutex.New(rd, "config")
		e.wait(late.RLock)
		e.until("a reader behind the waiting writer", inspect.RWMutex, "config", queued(2))
		e.unchanged(func() { r = e.inspect(inspect.RWMutex, "config") })
		if len(r.Holders) != 1 {
			t.Fatalf("holders %+v, want the reader", r.Holders)
		}
		checkHolder(t, "reader", r.Holders[0], rb.ID(), l.Token(), 1, true)
		checkQueue(t, "readers hold", r.Queue, wc.ID(), rd.ID())
		if r.Queue[0].Shared || !r.Queue[1].Shared || r.Queue[1].Admitted {
			t.Errorf("queue %+v: want the writer, then a reader that waits", r.Queue)
		}
	})
}

func TestFair(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newEnv(t, b)
		ctx := context.Background()
		a, wb, wc := e.pod(), e.pod(), e.pod()
		m, _ := fair.New(a, "printer")
		l, err := m.LockLease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Three calls queue: two of one process, then one of another.
		for i, h := range []*distsync.Handle{wb, wb, wc} {
			w, _ := fair.New(h, "printer")
			e.wait(w.Lock)
			e.until(fmt.Sprintf("%d waiting calls", i+1), inspect.Fair, "printer", queued(i+1))
		}
		var r inspect.Report
		e.unchanged(func() { r = e.inspect(inspect.Fair, "printer") })
		if len(r.Holders) != 1 {
			t.Fatalf("holders %+v, want 1", r.Holders)
		}
		checkHolder(t, "fair", r.Holders[0], a.ID(), l.Token(), 1, false)
		checkQueue(t, "fair", r.Queue, wb.ID(), wb.ID(), wc.ID())
		for i := 1; i < len(r.Queue); i++ {
			if r.Queue[i-1].Waited < r.Queue[i].Waited || r.Queue[i-1].ID == r.Queue[i].ID {
				t.Errorf("queue %+v: want distinct calls, the earlier having waited longer", r.Queue)
			}
		}
		if r.Fence != l.Token() {
			t.Errorf("Fence = %d, want %d", r.Fence, l.Token())
		}
	})
}

func TestSemaphore(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newEnv(t, b)
		ctx := context.Background()
		a, hb, wc, wd := e.pod(), e.pod(), e.pod(), e.pod()
		for _, x := range []struct {
			h *distsync.Handle
			n int64
		}{{a, 3}, {hb, 1}} {
			s, _ := semaphore.New(x.h, "partner-api", 5)
			if err := s.Acquire(ctx, x.n); err != nil {
				t.Fatal(err)
			}
		}
		// 4 does not fit in the 1 left; 1 would, but waits behind it (FIFO).
		for i, x := range []struct {
			h *distsync.Handle
			n int64
		}{{wc, 4}, {wd, 1}} {
			s, _ := semaphore.New(x.h, "partner-api", 5)
			e.wait(func(ctx context.Context) error { return s.Acquire(ctx, x.n) })
			e.until(fmt.Sprintf("%d waiting calls", i+1), inspect.Semaphore, "partner-api", queued(i+1))
		}
		var r inspect.Report
		e.unchanged(func() { r = e.inspect(inspect.Semaphore, "partner-api") })
		if r.Size != 5 || r.InUse != 4 || r.Fence != 0 {
			t.Errorf("Size %d, InUse %d, Fence %d: want 5, 4, 0", r.Size, r.InUse, r.Fence)
		}
		if len(r.Holders) != 2 {
			t.Fatalf("holders %+v, want 2", r.Holders)
		}
		slices.SortFunc(r.Holders, func(x, y distsync.Holder) int { return int(y.Count - x.Count) })
		checkHolder(t, "3 permits", r.Holders[0], a.ID(), 0, 3, false)
		checkHolder(t, "1 permit", r.Holders[1], hb.ID(), 0, 1, false)
		checkQueue(t, "semaphore", r.Queue, wc.ID(), wd.ID())
		if r.Queue[0].Weight != 4 || r.Queue[1].Weight != 1 {
			t.Errorf("queue %+v: want weights 4, then 1", r.Queue)
		}
	})
}

func TestOnce(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newEnv(t, b)
		ctx := context.Background()
		a, wb := e.pod(), e.pod()
		g, _ := once.NewGroup[string](a, "cache:v1", once.WithKeep(lease))
		started := make(chan int64, 1)
		release := make(chan struct{})
		e.wait(func(ctx context.Context) error {
			_, err, _ := g.Do(ctx, "k1", func(fctx context.Context) (string, error) {
				l, _ := distsync.LeaseFromContext(fctx)
				started <- l.Token()
				<-release
				return "v1", nil
			})
			return err
		})
		t.Cleanup(func() { close(release) }) // before the call's own cleanup waits for it
		var token int64
		select {
		case token = <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("the leader's function never started")
		}
		// Another process waits for the same key: on pub/sub, which Redis keeps no queue of.
		gb, _ := once.NewGroup[string](wb, "cache:v1", once.WithKeep(lease))
		e.wait(func(ctx context.Context) error {
			_, err, _ := gb.Do(ctx, "k1", func(context.Context) (string, error) { return "not run", nil })
			return err
		})
		if _, err, _ := g.Do(ctx, "k2", func(context.Context) (string, error) { return "v2", nil }); err != nil {
			t.Fatal(err)
		}
		o, _ := once.NewOnce(a, "init")
		if err := o.Do(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}

		var r, ro inspect.Report
		e.unchanged(func() {
			r = e.inspect(inspect.Once, "cache:v1")
			ro = e.inspect(inspect.Once, "init")
		})
		if len(r.Keys) != 2 || r.Keys[0].Key != "k1" || r.Keys[1].Key != "k2" {
			t.Fatalf("keys %+v, want k1 and k2", r.Keys)
		}
		if k := r.Keys[0]; k.Leader == nil || k.Kept != "" {
			t.Errorf("k1 = %+v, want a call in flight, nothing kept", k)
		} else {
			checkHolder(t, "k1's leader", *k.Leader, a.ID(), token, 1, false)
		}
		if k := r.Keys[1]; k.Leader != nil || k.Kept != "value" || k.KeptFor <= 0 || k.KeptFor > lease {
			t.Errorf("k2 = %+v, want a value kept for at most %v", k, lease)
		}
		if len(ro.Keys) != 1 || ro.Keys[0].Key != "" || ro.Keys[0].Kept != "value" || ro.Keys[0].KeptFor >= 0 {
			t.Errorf("Once keys %+v, want its one key's success kept until Reset", ro.Keys)
		}
		if r.Holders != nil || r.Queue != nil {
			t.Errorf("report %+v: once keeps its leaders in Keys, and no queue", r)
		}
	})
}

func TestElection(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newEnv(t, b)
		ctx := context.Background()
		a, cb, cc := e.pod(), e.pod(), e.pod()
		el, _ := election.New(a, "scheduler")
		term, err := el.Campaign(ctx, "pod-a")
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range []struct {
			h     *distsync.Handle
			value string
		}{{cb, "pod-b"}, {cc, "pod-c"}} {
			x, _ := election.New(c.h, "scheduler")
			e.wait(func(ctx context.Context) error { _, err := x.Campaign(ctx, c.value); return err })
			e.until(fmt.Sprintf("%d candidates", i+1), inspect.Election, "scheduler", queued(i+1))
		}
		var r inspect.Report
		e.unchanged(func() { r = e.inspect(inspect.Election, "scheduler") })
		if len(r.Holders) != 1 || r.Leader == nil {
			t.Fatalf("report %+v, want a leader", r)
		}
		checkHolder(t, "leader", r.Holders[0], a.ID(), term.Token(), 1, false)
		if r.Leader.Value != "pod-a" || r.Leader.Term != term.Token() || r.Leader.Rev < 1 || r.Fence != term.Token() {
			t.Errorf("leader %+v, fence %d: want pod-a, term %d", r.Leader, r.Fence, term.Token())
		}
		checkQueue(t, "candidates", r.Queue, cb.ID(), cc.ID())
		if r.Queue[0].Value != "pod-b" || r.Queue[1].Value != "pod-c" {
			t.Errorf("candidates %+v: want pod-b, then pod-c", r.Queue)
		}

		rev := r.Leader.Rev
		if err := term.Proclaim(ctx, "pod-a:v2"); err != nil {
			t.Fatal(err)
		}
		r = e.inspect(inspect.Election, "scheduler")
		if r.Leader == nil || r.Leader.Value != "pod-a:v2" || r.Leader.Rev <= rev || r.Leader.Term != term.Token() {
			t.Errorf("after Proclaim: leader %+v, want pod-a:v2 with a later Rev than %d", r.Leader, rev)
		}
	})
}

func TestWaitGroup(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newEnv(t, b)
		ctx := context.Background()
		a, mb := e.pod(), e.pod()
		wg, _ := waitgroup.New(a, "batch")
		// A round that ends, then one that stays open: 2 plain units and a member.
		if err := wg.Add(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := wg.Done(ctx); err != nil {
			t.Fatal(err)
		}
		if err := wg.Add(ctx, 2); err != nil {
			t.Fatal(err)
		}
		wgb, _ := waitgroup.New(mb, "batch")
		if _, err := wgb.Join(ctx); err != nil {
			t.Fatal(err)
		}
		e.wait(wg.Wait)

		var r inspect.Report
		e.unchanged(func() { r = e.inspect(inspect.WaitGroup, "batch") })
		ct := r.Counter
		if ct == nil {
			t.Fatalf("report %+v, want a counter", r)
		}
		if ct.Pending != 3 || ct.Units != 2 || !ct.Open || ct.Lost != 0 || ct.Err != "" {
			t.Errorf("counter %+v: want 3 pending (2 units and a member), open, nothing lost", ct)
		}
		if len(ct.Ended) != 1 || ct.Ended[0].Round != ct.Round-1 || ct.Ended[0].Lost != 0 || ct.Ended[0].Err != "" {
			t.Errorf("counter %+v: want the last round's clean outcome, one round before", ct)
		}
		if len(r.Holders) != 1 {
			t.Fatalf("holders %+v, want the member", r.Holders)
		}
		checkHolder(t, "member", r.Holders[0], mb.ID(), 0, 1, false)
	})
}

// A rate limiter's bucket: its tokens (exact once both settings are stored, else as its last
// write left them), its stored settings, and its latest time to act while one is ahead.
func TestRate(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newEnv(t, b)
		ctx := context.Background()
		// One token per 100 s: nothing this test does takes long enough to refill a tenth, on a
		// machine that is not stalled (the bounds below allow for what refilled meanwhile).
		l, err := rate.NewLimiter(e.pod(), "api", rate.Every(100*time.Second), 3)
		if err != nil {
			t.Fatal(err)
		}
		if r := e.inspect(inspect.Rate, "api"); r.Bucket != nil || !r.Idle() {
			t.Fatalf("before any decision: %+v, want no bucket", r)
		}
		allowed := time.Now() // every write comes after it, by the server's clock too
		if ok, err := l.AllowN(ctx, 2); !ok || err != nil {
			t.Fatalf("AllowN(2): %v, %v", ok, err)
		}
		var r inspect.Report
		e.unchanged(func() { r = e.inspect(inspect.Rate, "api") })
		bk := r.Bucket
		if bk == nil || bk.Exact || bk.Tokens != 1 || bk.LimitSet || bk.BurstSet || bk.Next != 0 ||
			bk.Updated < 0 || bk.Updated > time.Since(allowed)+10*time.Millisecond || !r.Idle() || r.Holders != nil || r.Queue != nil {
			t.Fatalf("after AllowN(2): %+v %+v; want 1 token at the last write, no settings, idle", r, bk)
		}

		res, err := l.ReserveN(ctx, 2) // 1 token short: its time to act is about 100 s away
		if err != nil || !res.OK() {
			t.Fatalf("ReserveN(2): %v, %v", res, err)
		}
		r = e.inspect(inspect.Rate, "api")
		elapsed := time.Since(allowed) // at most that refilled since AllowN, at a token per 100 s
		if bk = r.Bucket; bk == nil || bk.Tokens < -1 || bk.Tokens > -0.9+elapsed.Seconds()/100 ||
			bk.Next < 50*time.Second-elapsed || bk.Next > 100*time.Second || r.Idle() {
			t.Fatalf("after ReserveN(2), %v after AllowN: %+v; want about -1 token and a time to act about 100 s ahead, not idle", elapsed, bk)
		}

		if err := l.SetLimit(ctx, rate.Every(50*time.Second)); err != nil {
			t.Fatal(err)
		}
		if r = e.inspect(inspect.Rate, "api"); !r.Bucket.LimitSet || r.Bucket.Limit != 0.02 || r.Bucket.BurstSet || r.Bucket.Exact {
			t.Fatalf("after SetLimit: %+v; want the limit stored, the burst the callers' own", r.Bucket)
		}
		if err := l.SetBurst(ctx, 4); err != nil {
			t.Fatal(err)
		}
		read := time.Now()
		e.unchanged(func() { r = e.inspect(inspect.Rate, "api") })
		// A token per 50 s now: at most that refilled since AllowN.
		if bk = r.Bucket; !bk.Exact || !bk.BurstSet || bk.Burst != 4 || bk.Tokens < -1 || bk.Tokens > -0.5+time.Since(allowed).Seconds()/50 {
			t.Fatalf("after SetBurst: %+v; want both stored and the tokens now, a little over -1", bk)
		}
		now, err := l.Tokens(ctx)
		if err != nil || now < bk.Tokens || now > bk.Tokens+0.5+time.Since(read).Seconds()/50 {
			t.Errorf("Tokens() = %v, %v; inspect read %v just before", now, err, bk.Tokens)
		}

		if err := l.SetLimit(ctx, rate.Inf); err != nil {
			t.Fatal(err)
		}
		if r = e.inspect(inspect.Rate, "api"); !math.IsInf(r.Bucket.Limit, 1) || !r.Bucket.LimitSet {
			t.Errorf("after SetLimit(Inf): %+v, want +Inf stored", r.Bucket)
		}
	})
}

// Name finds every kind a name has keys of; List finds every primitive under the prefix, by
// name, and filters by pattern; names with braces and percent signs come back as given.
func TestNameAndList(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newEnv(t, b)
		ctx := context.Background()
		a := e.pod()
		odd := "a{b}%7B:c"
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		m, _ := mutex.New(a, "orders")
		must(m.Lock(ctx))
		s, _ := semaphore.New(a, "orders", 2)
		must(s.Acquire(ctx, 1))
		r, _ := reentrant.New(a, odd)
		must(r.Lock(reentrant.WithOwner(ctx, reentrant.NewOwner())))
		rw, _ := rwmutex.New(a, "config")
		must(rw.RLock(ctx))
		f, _ := fair.New(a, "printer")
		must(f.Lock(ctx))
		el, _ := election.New(a, "leader")
		_, err := el.Campaign(ctx, "x")
		must(err)
		wg, _ := waitgroup.New(a, "orders:batch")
		must(wg.Add(ctx, 1))
		g, _ := once.NewGroup[string](a, "orders:cache", once.WithKeep(lease))
		for _, k := range []string{"1", "2", "{3}"} {
			_, err, _ := g.Do(ctx, k, func(context.Context) (string, error) { return "v", nil })
			must(err)
		}
		lim, _ := rate.NewLimiter(a, "orders:cache", rate.Every(time.Hour), 2) // a bucket for an hour
		if ok, err := lim.Allow(ctx); !ok || err != nil {
			t.Fatalf("Allow: %v, %v", ok, err)
		}

		all := []inspect.Entry{
			{Kind: inspect.RWMutex, Name: "config"}, {Kind: inspect.Reentrant, Name: odd},
			{Kind: inspect.Election, Name: "leader"},
			{Kind: inspect.Mutex, Name: "orders"}, {Kind: inspect.Semaphore, Name: "orders"},
			{Kind: inspect.WaitGroup, Name: "orders:batch"}, {Kind: inspect.Once, Name: "orders:cache"},
			{Kind: inspect.Rate, Name: "orders:cache"}, {Kind: inspect.Fair, Name: "printer"},
		}
		slices.SortStableFunc(all, func(x, y inspect.Entry) int { return strings.Compare(x.Name, y.Name) })
		var got []inspect.Entry
		e.unchanged(func() {
			var err error
			if got, err = inspect.List(ctx, e.obs, ""); err != nil {
				t.Fatal(err)
			}
		})
		if !slices.Equal(got, all) {
			t.Errorf("List = %v\nwant   %v", got, all)
		}
		for pattern, want := range map[string][]inspect.Entry{
			"orders*":    {all[3], all[4], all[5], all[6], all[7]},
			"orders":     {all[3], all[4]},
			"orders:?*h": {all[5]},
			"[a-c]*":     {all[0], all[1]},
			"a\\{*":      {all[0]},
			"[^o]*r":     {all[2], all[8]},
			"nothing*":   nil,
		} {
			got, err := inspect.List(ctx, e.obs, pattern)
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("List(%q) = %v, %v; want %v", pattern, got, err, want)
			}
		}
		if _, err := inspect.List(ctx, e.obs, "orders["); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("List with an unclosed '[': %v, want ErrInvalid", err)
		}

		var rs []inspect.Report
		e.unchanged(func() {
			var err error
			if rs, err = inspect.Name(ctx, e.obs, "orders"); err != nil {
				t.Fatal(err)
			}
		})
		if len(rs) != 2 || rs[0].Kind != inspect.Mutex || rs[1].Kind != inspect.Semaphore ||
			len(rs[0].Holders) != 1 || rs[1].InUse != 1 {
			t.Errorf("Name(orders) = %+v, want its mutex and its semaphore, both held", rs)
		}
		switch v, _ := redistest.ServerVersion(); {
		case b.Name == redistest.Mini: // miniredis counts TIME as a write in a read-only script
		case !v.AtLeast(7, 0):
			t.Logf("the inspect script's run with EVAL_RO is SKIPPED on Redis %v: EVAL_RO came with 7.0", v)
		default:
			readOnly(t, e, a, "orders", "config", "printer", "leader", "orders:batch", odd, "orders:cache")
		}
		rs, err = inspect.Name(ctx, e.obs, "orders:cache")
		if err != nil || len(rs) != 2 || rs[0].Kind != inspect.Once || len(rs[0].Keys) != 3 || rs[0].Keys[2].Key != "{3}" ||
			rs[1].Kind != inspect.Rate || rs[1].Bucket == nil {
			t.Errorf("Name(orders:cache) = %+v, %v; want the once group's 3 kept keys, then the rate limiter's bucket", rs, err)
		}
		rs, err = inspect.Name(ctx, e.obs, odd)
		if err != nil || len(rs) != 1 || len(rs[0].Holders) != 1 || rs[0].Holders[0].Count != 1 {
			t.Errorf("Name(%q) = %+v, %v; want its reentrant hold", odd, rs, err)
		}
	})
}

// A name Redis has nothing of gives an empty report and no kinds; bad input is an error
// matching ErrInvalid, and sends nothing to Redis.
func TestNothingAndBadInput(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		pod := b.Pod(t, prefix)
		ctx := context.Background()
		for _, kind := range inspect.Kinds() {
			r, err := inspect.Inspect(ctx, pod.H, kind, "nobody")
			if err != nil || r.Kind != kind || r.Name != "nobody" || !r.Idle() ||
				r.Holders != nil || r.Queue != nil || r.Keys != nil || r.Leader != nil || r.Counter != nil || r.Fence != 0 ||
				r.Bucket != nil {
				t.Errorf("Inspect(%s, nobody) = %+v, %v; want an empty report", kind, r, err)
			}
		}
		if rs, err := inspect.Name(ctx, pod.H, "nobody"); err != nil || len(rs) != 0 {
			t.Errorf("Name(nobody) = %+v, %v; want none", rs, err)
		}
		if es, err := inspect.List(ctx, pod.H, ""); err != nil || len(es) != 0 {
			t.Errorf("List on an empty prefix = %+v, %v; want none", es, err)
		}

		sent := pod.Client.Total()
		for _, bad := range []struct {
			what string
			err  error
		}{
			{"unknown kind", first(inspect.Inspect(ctx, pod.H, "spinlock", "x"))},
			{"empty name", first(inspect.Inspect(ctx, pod.H, inspect.Mutex, ""))},
			{"empty once name", first(inspect.Inspect(ctx, pod.H, inspect.Once, ""))},
			{"Name of an empty name", first(inspect.Name(ctx, pod.H, ""))},
			{"nil Handle", first(inspect.Inspect(ctx, nil, inspect.Mutex, "x"))},
			{"Name on a nil Handle", first(inspect.Name(ctx, nil, "x"))},
			{"List on a nil Handle", first(inspect.List(ctx, nil, ""))},
			{"bad pattern", first(inspect.List(ctx, pod.H, `x\`))},
		} {
			if !errors.Is(bad.err, distsync.ErrInvalid) {
				t.Errorf("%s: %v, want an error matching ErrInvalid", bad.what, bad.err)
			}
		}
		if n := pod.Client.Total() - sent; n != 0 {
			t.Errorf("bad input sent %d commands to Redis, want none", n)
		}
	})
}

func first[T any](_ T, err error) error { return err }

// readOnly runs inspect.lua with EVAL_RO, which Redis refuses to a script that writes, for
// every kind of each name, and for a once key.
func readOnly(t *testing.T, e *env, h *distsync.Handle, names ...string) {
	t.Helper()
	type call struct{ keys, args []string }
	var calls []call
	for _, name := range names {
		var c call
		for _, kind := range inspect.Kinds() {
			if kind == inspect.Once {
				continue
			}
			ks, err := inspect.KeysOf(h, kind, name)
			if err != nil {
				t.Fatal(err)
			}
			c.keys, c.args = append(c.keys, ks...), append(c.args, kind)
		}
		calls = append(calls, c)
	}
	ks, err := inspect.KeysOf(h, inspect.Once, inspect.OnceName("orders:cache", "1"))
	if err != nil {
		t.Fatal(err)
	}
	calls = append(calls, call{ks, []string{inspect.Once}})
	for _, c := range calls {
		cmd := e.c.B().EvalRo().Script(scripts.Inspect.Source()).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
		if err := e.c.Do(context.Background(), cmd).Error(); err != nil {
			t.Errorf("inspect.lua with EVAL_RO, kinds %v: %v", c.args, err)
		}
	}
}

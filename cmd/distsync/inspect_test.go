//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/inspect"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/once"
	"github.com/distsync/distsync/rate"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
	"github.com/distsync/distsync/waitgroup"
)

// inspectState is what TestInspectCommand makes in Redis, one primitive of each kind, named
// by its kind, each held (and waited for where the kind keeps a queue in Redis).
type inspectState struct {
	holder, waiter *distsync.Handle
	tokens         map[string]int64 // by kind: the holder's token (0 for the semaphore and waitgroup)
}

func makeInspectState(t *testing.T, b *redistest.Backend, prefix string) inspectState {
	t.Helper()
	ctx := context.Background()
	pod := func() *distsync.Handle {
		return redistest.Handle(t, b.Client(t), distsync.WithKeyPrefix(prefix), distsync.WithFixedLease(time.Minute))
	}
	st := inspectState{holder: pod(), waiter: pod(), tokens: make(map[string]int64)}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// block runs f until the test ends, which cancels it and waits for it.
	block := func(f func(ctx context.Context) error) {
		bctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = f(bctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("a blocked call did not return within 30s of its context's end")
			}
		})
	}
	queued := func(kind string, n int) {
		t.Helper()
		ok := redistest.Eventually(20*time.Second, func() bool {
			r, err := inspect.Inspect(ctx, st.holder, kind, kind)
			return err == nil && len(r.Queue) == n
		})
		if !ok {
			t.Fatalf("%s: %d waiters never queued", kind, n)
		}
	}

	m, _ := mutex.New(st.holder, "mutex")
	l, err := m.LockLease(ctx)
	must(err)
	st.tokens["mutex"] = l.Token()
	mw, _ := mutex.New(st.waiter, "mutex")
	block(mw.Lock)
	queued("mutex", 1)

	r, _ := reentrant.New(st.holder, "reentrant")
	l, err = r.LockLease(reentrant.WithOwner(ctx, "owner-1"))
	must(err)
	st.tokens["reentrant"] = l.Token()

	rw, _ := rwmutex.New(st.holder, "rwmutex")
	l, err = rw.LockLease(ctx)
	must(err)
	st.tokens["rwmutex"] = l.Token()
	rww, _ := rwmutex.New(st.waiter, "rwmutex")
	block(rww.RLock)
	queued("rwmutex", 1)

	f, _ := fair.New(st.holder, "fair")
	l, err = f.LockLease(ctx)
	must(err)
	st.tokens["fair"] = l.Token()
	fw, _ := fair.New(st.waiter, "fair")
	block(fw.Lock)
	queued("fair", 1)

	s, _ := semaphore.New(st.holder, "semaphore", 3)
	must(s.Acquire(ctx, 2))
	sw, _ := semaphore.New(st.waiter, "semaphore", 3)
	block(func(ctx context.Context) error { return sw.Acquire(ctx, 2) })
	queued("semaphore", 1)

	g, _ := once.NewGroup[string](st.holder, "once", once.WithKeep(time.Minute))
	started, release := make(chan int64, 1), make(chan struct{})
	block(func(ctx context.Context) error {
		_, err, _ := g.Do(ctx, "in-flight", func(fctx context.Context) (string, error) {
			l, _ := distsync.LeaseFromContext(fctx)
			started <- l.Token()
			<-release
			return "v", nil
		})
		return err
	})
	t.Cleanup(func() { close(release) })
	select {
	case st.tokens["once"] = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the once leader never started")
	}
	_, err, _ = g.Do(ctx, "kept", func(context.Context) (string, error) { return "v", nil })
	must(err)

	e, _ := election.New(st.holder, "election")
	term, err := e.Campaign(ctx, "leader-value")
	must(err)
	st.tokens["election"] = term.Token()
	ew, _ := election.New(st.waiter, "election")
	block(func(ctx context.Context) error { _, err := ew.Campaign(ctx, "candidate-value"); return err })
	queued("election", 1)

	wg, _ := waitgroup.New(st.holder, "waitgroup")
	must(wg.Add(ctx, 1))
	wgw, _ := waitgroup.New(st.waiter, "waitgroup")
	_, err = wgw.Join(ctx)
	must(err)

	// A rate limiter whose burst was spent, with a reservation an hour ahead, and its
	// limit stored (its burst is the callers' own).
	lim, _ := rate.NewLimiter(st.holder, "rate", rate.Every(time.Hour), 2)
	if ok, err := lim.AllowN(ctx, 2); !ok || err != nil {
		t.Fatalf("AllowN(2): %v, %v", ok, err)
	}
	_, err = lim.Reserve(ctx)
	must(err)
	must(lim.SetLimit(ctx, rate.Every(time.Hour)))
	return st
}

// runInspectCmd runs f (runInspect or runLs) with args and returns its status and output.
func runInspectCmd(f func(context.Context, []string, io.Writer, io.Writer) int, args ...string) (int, string, string) {
	var out, errOut strings.Builder
	status := f(context.Background(), args, &out, &errOut)
	return status, out.String(), errOut.String()
}

func TestInspectCommand(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Standalone)
	prefix := b.Prefix(t)
	st := makeInspectState(t, b, prefix)
	url := "redis://" + b.Addrs()[0]
	kinds := inspect.Kinds()

	status, out, errOut := runInspectCmd(runInspect, append([]string{"--redis", url, "--prefix", prefix, "--json"},
		append(kinds, "nothing")...)...)
	if status != exitOK {
		t.Fatalf("inspect --json: status %d, stderr %s", status, errOut)
	}
	for _, field := range []string{`"remaining_ms"`, `"handle"`, `"token"`, `"waited_ms"`, `"in_use"`, `"kept_ms"`, `"pending"`,
		`"bucket"`, `"next_ms"`, `"burst": null`} {
		if !strings.Contains(out, field) {
			t.Errorf("inspect --json: no field %s in\n%s", field, out)
		}
	}
	var got []nameJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	if len(got) != len(kinds)+1 {
		t.Fatalf("inspect --json: %d names, want %d", len(got), len(kinds)+1)
	}
	if n := got[len(kinds)]; n.Name != "nothing" || len(n.Primitives) != 0 {
		t.Errorf("inspect --json of a name with nothing: %+v", n)
	}
	for i, kind := range kinds {
		n := got[i]
		if n.Name != kind || len(n.Primitives) != 1 || n.Primitives[0].Kind != kind {
			t.Errorf("%s: %+v, want one %s", kind, n, kind)
			continue
		}
		p := n.Primitives[0]
		holders := p.Holders
		if kind == inspect.Once {
			holders = nil
			for _, k := range p.Keys {
				if k.Leader != nil {
					holders = append(holders, *k.Leader)
				}
			}
			if len(p.Keys) != 2 || p.Keys[0].Key != "in-flight" || p.Keys[1].Key != "kept" || p.Keys[1].Kept != "value" || p.Keys[1].KeptMs <= 0 {
				t.Errorf("once keys %+v, want in-flight, then kept", p.Keys)
			}
		}
		if kind == inspect.Rate {
			bk := p.Bucket
			if len(p.Holders) != 0 || len(p.Queue) != 0 || p.Idle || bk == nil || bk.Exact || bk.Tokens > -0.99 ||
				bk.Tokens < -1 || bk.Limit != 1/3600.0 || bk.Burst != nil || bk.NextMs < 3500_000 || bk.NextMs > 3600_000 {
				t.Errorf("rate: %+v %+v, want its bucket: -1 token at its last write, the limit stored, the burst not, "+
					"a reservation an hour ahead", p, bk)
			}
			continue
		}
		wantHandle := st.holder.ID()
		switch kind {
		case inspect.Reentrant:
			wantHandle = "" // a reentrant hold is its owner's
		case inspect.WaitGroup:
			wantHandle = st.waiter.ID() // the member
		}
		if len(holders) != 1 || holders[0].Handle != wantHandle || holders[0].Token != st.tokens[kind] ||
			holders[0].RemainingMs <= 0 || holders[0].RemainingMs > 60000 {
			t.Errorf("%s: holders %+v, want Handle %q, token %d", kind, holders, wantHandle, st.tokens[kind])
		}
		wantQueue := 1
		if kind == inspect.Reentrant || kind == inspect.Once || kind == inspect.WaitGroup {
			wantQueue = 0
		}
		if len(p.Queue) != wantQueue || wantQueue == 1 && (p.Queue[0].Handle != st.waiter.ID() || p.Queue[0].RemainingMs <= 0) {
			t.Errorf("%s: queue %+v, want %d waiter(s) of Handle %q", kind, p.Queue, wantQueue, st.waiter.ID())
		}
		switch kind {
		case inspect.Semaphore:
			if p.Size == nil || *p.Size != 3 || p.InUse == nil || *p.InUse != 2 || p.Queue[0].Weight != 2 {
				t.Errorf("semaphore: %+v, want size 3, 2 in use, a waiter for 2", p)
			}
		case inspect.Election:
			if p.Leader == nil || p.Leader.Value != "leader-value" || p.Leader.Term != st.tokens[kind] || p.Queue[0].Value != "candidate-value" {
				t.Errorf("election: leader %+v, queue %+v", p.Leader, p.Queue)
			}
		case inspect.WaitGroup:
			if c := p.Counter; c == nil || c.Pending != 2 || c.Units != 1 || !c.Open {
				t.Errorf("waitgroup: counter %+v, want 2 pending (a unit and a member), open", c)
			}
		case inspect.RWMutex:
			if !p.Queue[0].Shared {
				t.Errorf("rwmutex: queue %+v, want a reader", p.Queue)
			}
		}
	}

	// The table names the holder's Handle and the waiter's, and says when there is nothing.
	status, out, errOut = runInspectCmd(runInspect, "--redis", b.Addrs()[0], "--prefix", prefix, "mutex", "nothing", "--kind", "mutex")
	if status != exitOK {
		t.Fatalf("inspect: status %d, stderr %s", status, errOut)
	}
	for _, want := range []string{`mutex mutex: 1 holding, 1 waiting; last token ` + fmt.Sprint(st.tokens["mutex"]),
		"holder", st.holder.ID(), "waiting 1", st.waiter.ID(), "nothing: nothing held or queued"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect table: no %q in\n%s", want, out)
		}
	}
	status, out, errOut = runInspectCmd(runInspect, "--redis", url, "--prefix", prefix, "rate")
	if want := "rate rate: -1.00 tokens at its last decision, "; status != exitOK || !strings.HasPrefix(out, want) ||
		!strings.Contains(out, "limit 0.0002778/s (stored); burst: the callers' own; latest reservation acts in ") {
		t.Errorf("inspect rate: status %d\n%s%s\nwant it to start %q, and name the stored limit, the burst and the reservation", status, out, errOut, want)
	}
	status, out, _ = runInspectCmd(runInspect, "--redis", url, "--prefix", prefix, "--kind", "fair", "mutex")
	if status != exitOK || !strings.Contains(out, "mutex: nothing held or queued") {
		t.Errorf("inspect --kind fair of a mutex's name: status %d,\n%s", status, out)
	}
	for _, kind := range kinds { // every table prints
		if status, out, errOut = runInspectCmd(runInspect, "--redis", url, "--prefix", prefix, kind); status != exitOK ||
			!strings.HasPrefix(out, kind+" "+kind+": ") {
			t.Errorf("inspect %s: status %d\n%s%s", kind, status, out, errOut)
		}
	}
}

// fieldLines returns out's lines, each as its fields joined by one space, each ended by '|'.
func fieldLines(out string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		b.WriteString(strings.Join(strings.Fields(l), " ") + "|")
	}
	return b.String()
}

func TestLsCommand(t *testing.T) {
	t.Parallel()
	for _, name := range []string{redistest.Standalone, redistest.ClusterB} {
		t.Run(name, func(t *testing.T) {
			b := redistest.Open(t, name)
			prefix := b.Prefix(t)
			makeInspectState(t, b, prefix)
			url := demoURL(b) // every node, as ?addr=
			status, out, errOut := runInspectCmd(runLs, "--redis", url, "--prefix", prefix, "--json")
			if status != exitOK {
				t.Fatalf("ls --json: status %d, stderr %s", status, errOut)
			}
			var got []entryJSON
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("ls --json: %v\n%s", err, out)
			}
			var want []entryJSON
			for _, k := range inspect.Kinds() {
				want = append(want, entryJSON{Kind: k, Name: k})
			}
			// Sorted by name: election, fair, mutex, once, rate, reentrant, rwmutex, semaphore,
			// waitgroup.
			if len(got) != len(want) {
				t.Fatalf("ls = %+v, want every kind", got)
			}
			for i := 1; i < len(got); i++ {
				if got[i-1].Name >= got[i].Name || got[i].Kind != got[i].Name {
					t.Errorf("ls = %+v, want each kind once, sorted by name", got)
				}
			}
			// Who holds each, as lslocks shows a PID: the holders' identities (this process's
			// host and PID: every Handle of the test is in it), a reentrant's owner.
			host, _ := os.Hostname()
			self := fmt.Sprintf("%s:%d", host, os.Getpid())
			for _, e := range got {
				if e.Kind != inspect.Reentrant && len(e.HeldBy) > 0 && e.HeldBy[0] != self {
					t.Errorf("ls --json: %s held by %q, want %q", e.Kind, e.HeldBy, self)
				}
			}
			// A mutex locked and unlocked keeps its fencing token only (for a week): idle, and
			// listed with --all only, marked so.
			idle, err := mutex.New(redistest.Handle(t, b.Client(t), distsync.WithKeyPrefix(prefix)), "idle")
			if err != nil {
				t.Fatal(err)
			}
			if err := idle.Lock(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := idle.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, all := range []bool{false, true} {
				a := []string{"--redis", url, "--prefix", prefix, "--json", "i*"}
				if all {
					a = append(a, "--all")
				}
				status, out, errOut := runInspectCmd(runLs, a...)
				var got []entryJSON
				if err := json.Unmarshal([]byte(out), &got); status != exitOK || err != nil {
					t.Fatalf("ls %q: status %d, %v\n%s%s", a, status, err, out, errOut)
				}
				if want := []entryJSON{{Kind: inspect.Mutex, Name: "idle", HeldBy: []string{}, Idle: true}}; all && !reflect.DeepEqual(got, want) || !all && len(got) > 0 {
					t.Errorf("ls %q = %+v; want the idle mutex with --all only", a, got)
				}
			}
			status, out, _ = runInspectCmd(runLs, "--redis", url, "--prefix", prefix, "r*")
			if want := "KIND NAME HELD BY WAITING|rate rate - 0|reentrant reentrant owner owner-1 0|rwmutex rwmutex " + self + " 1|"; status != exitOK || fieldLines(out) != want {
				t.Errorf("ls r*: status %d\n%s\nwant (fields) %s", status, out, want)
			}
			status, out, _ = runInspectCmd(runLs, "--prefix", prefix, "--kind", "once", "--redis", url)
			if want := "KIND NAME HELD BY WAITING|once once " + self + " 0|"; status != exitOK || fieldLines(out) != want {
				t.Errorf("ls --kind once: status %d\n%s\nwant (fields) %s", status, out, want)
			}
		})
	}
}

func TestInspectCommandStatuses(t *testing.T) {
	b := redistest.Open(t, redistest.Standalone)
	url := "redis://" + b.Addrs()[0]
	t.Setenv("DISTSYNC_REDIS_URL", "")
	for _, c := range []struct {
		what string
		f    func(context.Context, []string, io.Writer, io.Writer) int
		args []string
		want int
	}{
		{"help", runInspect, []string{"-h"}, exitOK},
		{"no Redis", runInspect, []string{"x"}, exitUsage},
		{"no NAME", runInspect, []string{"--redis", url}, exitUsage},
		{"unknown kind", runInspect, []string{"--redis", url, "--kind", "spinlock", "x"}, exitUsage},
		{"bad flag", runInspect, []string{"--redis", url, "--bogus", "x"}, exitUsage},
		{"bad URL", runInspect, []string{"--redis", "redis://[::1", "x"}, exitUsage},
		{"bad prefix", runInspect, []string{"--redis", url, "--prefix", "a{", "x"}, exitUsage},
		{"unreachable", runInspect, []string{"--redis", "127.0.0.1:1", "x"}, exitUnavailable},
		{"a name after --", runInspect, []string{"--redis", url, "--", "-x"}, exitOK},
		{"ls help", runLs, []string{"--help"}, exitOK},
		{"ls no Redis", runLs, nil, exitUsage},
		{"ls two patterns", runLs, []string{"--redis", url, "a", "b"}, exitUsage},
		{"ls bad pattern", runLs, []string{"--redis", url, "a["}, exitUsage},
		{"ls unreachable", runLs, []string{"--redis", "redis://127.0.0.1:1"}, exitUnavailable},
		{"ls", runLs, []string{"--redis", url, "--prefix", b.Prefix(t)}, exitOK},
	} {
		status, _, errOut := runInspectCmd(c.f, c.args...)
		if status != c.want {
			t.Errorf("%s: status %d, want %d; stderr:\n%s", c.what, status, c.want, errOut)
		}
		if c.want == exitUsage && errOut == "" {
			t.Errorf("%s: nothing said on stderr", c.what)
		}
	}
}

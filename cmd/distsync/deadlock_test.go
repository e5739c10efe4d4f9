//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/reentrant"
)

// inspect --deadlocks names every process and name of each cycle: two pods over mutexes, and
// three in a ring over reentrant mutexes; a plain queue is "no deadlock". JSON too.
func TestInspectDeadlocks(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Standalone)
	prefix := b.Prefix(t)
	url := "redis://" + b.Addrs()[0]
	ctx, cancel := context.WithCancel(context.Background())
	var blocked sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		done := make(chan struct{})
		go func() { blocked.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("a blocked Lock did not return within 30s of its context's end")
		}
	})
	pod := func(name string) *distsync.Handle {
		return redistest.Handle(t, b.Client(t), distsync.WithKeyPrefix(prefix), distsync.WithIdentity(name))
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	wait := func(lock func(context.Context) error) {
		blocked.Add(1)
		go func() { defer blocked.Done(); _ = lock(ctx) }()
	}
	// Mutexes: pod-a holds m1 and waits for m2, pod-b the reverse.
	a, bb := pod("pod-a"), pod("pod-b")
	for _, hold := range []struct {
		h     *distsync.Handle
		holds string
	}{{a, "m1"}, {bb, "m2"}} {
		m, _ := mutex.New(hold.h, hold.holds)
		must(m.Lock(ctx))
	}
	w1, _ := mutex.New(a, "m2")
	wait(w1.Lock)
	w2, _ := mutex.New(bb, "m1")
	wait(w2.Lock)
	// Reentrant mutexes in a ring of three owners, one process each.
	ring := []string{"r1", "r2", "r3"}
	var owners []reentrant.Owner
	var rpods []*distsync.Handle
	for i, n := range ring {
		h := pod(fmt.Sprintf("pod-r%d", i+1))
		o := reentrant.NewOwner()
		m, _ := reentrant.New(h, n)
		must(m.Lock(reentrant.WithOwner(ctx, o)))
		rpods, owners = append(rpods, h), append(owners, o)
	}
	for i := range ring {
		m, _ := reentrant.New(rpods[i], ring[(i+1)%len(ring)])
		o := owners[i]
		wait(func(ctx context.Context) error { return m.Lock(reentrant.WithOwner(ctx, o)) })
	}
	// A plain queue.
	q, _ := mutex.New(pod("pod-q1"), "queue")
	must(q.Lock(ctx))
	qw, _ := mutex.New(pod("pod-q2"), "queue")
	wait(qw.Lock)

	var got []deadlockJSON
	if !redistest.Eventually(20*time.Second, func() bool {
		status, out, _ := runInspectCmd(runInspect, "--redis", url, "--prefix", prefix, "--deadlocks", "--json")
		return status == exitOK && json.Unmarshal([]byte(out), &got) == nil && len(got) == 2
	}) {
		t.Fatalf("inspect --deadlocks --json: %+v; want two cycles", got)
	}
	var cycles []string
	for _, d := range got {
		var c []string
		for _, p := range d.Processes {
			c = append(c, fmt.Sprintf("%s>%s %s>%s", p.Identity, p.WaitsFor.Kind, p.WaitsFor.Name, p.WaitsFor.Holder))
		}
		// Each cycle from its smallest line, for comparison.
		at := slices.Index(c, slices.Min(c))
		cycles = append(cycles, strings.Join(append(c[at:], c[:at]...), " | "))
	}
	slices.Sort(cycles)
	want := []string{
		"pod-a>mutex m2>pod-b | pod-b>mutex m1>pod-a",
		"pod-r1>reentrant r2>pod-r2 | pod-r2>reentrant r3>pod-r3 | pod-r3>reentrant r1>pod-r1",
	}
	if !slices.Equal(cycles, want) {
		t.Errorf("inspect --deadlocks --json cycles:\n%s\nwant\n%s", strings.Join(cycles, "\n"), strings.Join(want, "\n"))
	}
	status, out, errOut := runInspectCmd(runInspect, "--redis", url, "--prefix", prefix, "--deadlocks")
	if status != exitOK || !strings.Contains(out, "deadlock of 2 processes:\n") || !strings.Contains(out, "deadlock of 3 processes:\n") ||
		!strings.Contains(out, `pod-a waits for mutex m2, held by pod-b`) {
		t.Errorf("inspect --deadlocks: status %d\n%s%s", status, out, errOut)
	}
	status, out, _ = runInspectCmd(runInspect, "--redis", url, "--prefix", prefix, "--deadlocks", "qu*")
	if status != exitOK || out != "no deadlock\n" {
		t.Errorf("inspect --deadlocks qu*: status %d, %q; want no deadlock", status, out)
	}
}

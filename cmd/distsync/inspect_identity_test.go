//go:build unix

package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/inspect"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/reentrant"
)

// inspect names holders and waiters by their Handles' identities: a column IDENTITY in the
// table (quoted where it does not print plainly, "-" for a reentrant owner's hold), the
// second after the row's role, a field
// "identity" in the JSON.
func TestInspectCommandShowsIdentities(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Standalone)
	prefix := b.Prefix(t)
	ctx := context.Background()
	const holderID, waiterID = "web-7:4242", "pod {x} \u00e9"
	pod := func(identity string) *distsync.Handle {
		return redistest.Handle(t, b.Client(t), distsync.WithKeyPrefix(prefix), distsync.WithFixedLease(time.Minute),
			distsync.WithIdentity(identity))
	}
	holder, waiter := pod(holderID), pod(waiterID)
	m, _ := mutex.New(holder, "jobs")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	mw, _ := mutex.New(waiter, "jobs")
	waiting := redistest.Async(wctx, mw.Lock)
	t.Cleanup(func() { cancel(); redistest.Await(t, waiting, 30*time.Second) })
	if !redistest.Eventually(20*time.Second, func() bool {
		r, err := inspect.Inspect(ctx, holder, inspect.Mutex, "jobs")
		return err == nil && len(r.Queue) == 1
	}) {
		t.Fatal("the waiter never queued")
	}
	r, _ := reentrant.New(holder, "jobs")
	if err := r.Lock(reentrant.WithOwner(ctx, "owner-1")); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + b.Addrs()[0]

	status, out, errOut := runInspectCmd(runInspect, "--redis", url, "--prefix", prefix, "jobs")
	if status != exitOK {
		t.Fatalf("inspect: status %d, stderr %s", status, errOut)
	}
	want := map[string]string{ // a table's row, by its first cell: its identity cell
		"holder":    holderID,
		"waiting 1": strconv.Quote(waiterID),
	}
	kind := ""
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && (f[0] == inspect.Mutex || f[0] == inspect.Reentrant):
			kind = f[0]
		case len(f) > 2 && f[0] == "IDENTITY":
			if !strings.Contains(line, "OWNER") {
				t.Errorf("header %q: no OWNER column", line)
			}
		case len(f) > 2 && kind == inspect.Reentrant && f[0] == "holder":
			if f[1] != "-" {
				t.Errorf("reentrant holder's row %q: identity %q, want -", line, f[1])
			}
		case len(f) > 2 && kind == inspect.Mutex:
			role := f[0]
			if role == "waiting" {
				role += " " + f[1]
			}
			if id, ok := want[role]; ok {
				if !strings.Contains(line, " "+id+" ") {
					t.Errorf("%s's row %q: no identity %s", role, line, id)
				}
				delete(want, role)
			}
		}
	}
	if len(want) != 0 {
		t.Errorf("no rows for %v in\n%s", want, out)
	}

	status, out, errOut = runInspectCmd(runInspect, "--redis", url, "--prefix", prefix, "--json", "jobs")
	if status != exitOK {
		t.Fatalf("inspect --json: status %d, stderr %s", status, errOut)
	}
	var got []nameJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 1 || len(got[0].Primitives) != 2 {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	mj, rj := got[0].Primitives[0], got[0].Primitives[1]
	if len(mj.Holders) != 1 || mj.Holders[0].Identity != holderID || len(mj.Queue) != 1 || mj.Queue[0].Identity != waiterID {
		t.Errorf("inspect --json: mutex %+v, want holder identity %q, waiter identity %q", mj, holderID, waiterID)
	}
	if len(rj.Holders) != 1 || rj.Holders[0].Identity != "" {
		t.Errorf("inspect --json: reentrant %+v, want one holder without identity", rj)
	}
	if !strings.Contains(out, `"identity": "web-7:4242"`) {
		t.Errorf("inspect --json: no field \"identity\" in\n%s", out)
	}
}

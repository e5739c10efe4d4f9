//go:build unix

package main

// This file: what inspect --json and ls --json print. Field names are lower snake case;
// durations are in ms, -1 for none.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/inspect"
)

type nameJSON struct {
	Name       string       `json:"name"`
	Primitives []reportJSON `json:"primitives"`
}

type reportJSON struct {
	Kind    string        `json:"kind"`
	Name    string        `json:"name"`
	Idle    bool          `json:"idle"`
	Fence   int64         `json:"fence"`
	Holders []holderJSON  `json:"holders"`
	Queue   []waiterJSON  `json:"queue"`
	Size    *int64        `json:"size,omitempty"`   // semaphore
	InUse   *int64        `json:"in_use,omitempty"` // semaphore
	Leader  *leaderJSON   `json:"leader,omitempty"` // election, while one leads
	Keys    []onceKeyJSON `json:"keys,omitempty"`   // once
	Counter *counterJSON  `json:"counter,omitempty"`
	With    []string      `json:"with,omitempty"`   // mutex, while held as one of a set: the others
	Bucket  *bucketJSON   `json:"bucket,omitempty"` // rate, while Redis keeps its bucket
}

// bucketJSON is a rate limiter's bucket. A setting not stored (each caller's own applies) is
// null; an infinite limit is "inf".
type bucketJSON struct {
	Tokens    float64 `json:"tokens"`
	Exact     bool    `json:"exact"` // tokens are now's, not the last write's
	UpdatedMs int64   `json:"updated_ms"`
	Limit     any     `json:"limit"`
	Burst     *int64  `json:"burst"`
	NextMs    int64   `json:"next_ms"`
}

type holderJSON struct {
	Owner       string `json:"owner"`
	Identity    string `json:"identity"`
	Handle      string `json:"handle"`
	Token       int64  `json:"token"`
	RemainingMs int64  `json:"remaining_ms"`
	Count       int64  `json:"count"`
	Shared      bool   `json:"shared"`
}

type waiterJSON struct {
	ID          string `json:"id"`
	Identity    string `json:"identity"`
	Handle      string `json:"handle"`
	RemainingMs int64  `json:"remaining_ms"`
	WaitedMs    int64  `json:"waited_ms"`
	Weight      int64  `json:"weight"`
	Shared      bool   `json:"shared"`
	Admitted    bool   `json:"admitted"`
	Value       string `json:"value"`
}

type leaderJSON struct {
	Value string `json:"value"`
	Term  int64  `json:"term"`
	Rev   int64  `json:"rev"`
}

type onceKeyJSON struct {
	Key    string      `json:"key"`
	Leader *holderJSON `json:"leader"`
	Kept   string      `json:"kept"`
	KeptMs int64       `json:"kept_ms"`
}

type counterJSON struct {
	Pending int64         `json:"pending"`
	Units   int64         `json:"units"`
	Round   int64         `json:"round"`
	Open    bool          `json:"open"`
	Lost    int64         `json:"lost"`
	Err     string        `json:"err"`
	Ended   []outcomeJSON `json:"ended"`
}

type outcomeJSON struct {
	Round int64  `json:"round"`
	Lost  int64  `json:"lost"`
	Err   string `json:"err"`
}

// deadlockJSON is one cycle of inspect --deadlocks --json: each process waits for the name
// that the next one holds, the last for one the first holds.
type deadlockJSON struct {
	Processes []waitJSON `json:"processes"`
}

type waitJSON struct {
	Identity string `json:"identity"`
	Handle   string `json:"handle"`
	WaitsFor struct {
		Kind   string `json:"kind"`
		Name   string `json:"name"`
		Holder string `json:"holder"` // the holding process's identity ("handle ID" if it has none): the next entry's
		Token  int64  `json:"token"`
	} `json:"waits_for"`
}

func toDeadlockJSON(d inspect.Deadlock) deadlockJSON {
	out := deadlockJSON{Processes: []waitJSON{}}
	for i, w := range d {
		next := d[(i+1)%len(d)]
		p := waitJSON{Identity: w.Identity, Handle: w.Handle}
		p.WaitsFor.Kind, p.WaitsFor.Name, p.WaitsFor.Holder, p.WaitsFor.Token = w.Kind, w.Name, processName(next.Identity, next.Handle), w.Holder.Token
		out.Processes = append(out.Processes, p)
	}
	return out
}

type entryJSON struct {
	Kind    string   `json:"kind"`
	Name    string   `json:"name"`
	HeldBy  []string `json:"held_by"` // holders' identities (a reentrant's: "owner OWNER")
	Waiting int      `json:"waiting"`
	With    []string `json:"with,omitempty"` // a mutex held as one of a set: the set's other names
	Idle    bool     `json:"idle,omitempty"` // listed with --all only: nobody holds, waits or has a bucket (idleEntry)
}

func ms(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

func holderToJSON(h distsync.Holder) holderJSON {
	return holderJSON{Owner: h.Owner, Identity: h.Identity, Handle: h.Handle, Token: h.Token, RemainingMs: ms(h.Remaining), Count: h.Count, Shared: h.Shared}
}

func toJSON(name string, rs []inspect.Report) nameJSON {
	out := nameJSON{Name: name, Primitives: []reportJSON{}}
	for _, r := range rs {
		j := reportJSON{Kind: r.Kind, Name: r.Name, Idle: r.Idle(), Fence: r.Fence, Holders: []holderJSON{}, Queue: []waiterJSON{}, With: r.With}
		for _, h := range r.Holders {
			j.Holders = append(j.Holders, holderToJSON(h))
		}
		for _, q := range r.Queue {
			j.Queue = append(j.Queue, waiterJSON{ID: q.ID, Identity: q.Identity, Handle: q.Handle, RemainingMs: ms(q.Remaining), WaitedMs: ms(q.Waited),
				Weight: q.Weight, Shared: q.Shared, Admitted: q.Admitted, Value: q.Value})
		}
		switch r.Kind {
		case inspect.Semaphore:
			j.Size, j.InUse = &r.Size, &r.InUse
		case inspect.Once:
			j.Keys = []onceKeyJSON{}
		}
		if l := r.Leader; l != nil {
			j.Leader = &leaderJSON{Value: l.Value, Term: l.Term, Rev: l.Rev}
		}
		for _, k := range r.Keys {
			kj := onceKeyJSON{Key: k.Key, Kept: k.Kept, KeptMs: ms(k.KeptFor)}
			if k.Leader != nil {
				h := holderToJSON(*k.Leader)
				kj.Leader = &h
			}
			if k.Kept == "" {
				kj.KeptMs = 0
			}
			j.Keys = append(j.Keys, kj)
		}
		if bk := r.Bucket; bk != nil {
			bj := &bucketJSON{Tokens: bk.Tokens, Exact: bk.Exact, UpdatedMs: ms(bk.Updated), NextMs: ms(bk.Next)}
			switch {
			case bk.LimitSet && math.IsInf(bk.Limit, 1):
				bj.Limit = "inf"
			case bk.LimitSet:
				bj.Limit = bk.Limit
			}
			if bk.BurstSet {
				bj.Burst = &bk.Burst
			}
			j.Bucket = bj
		}
		if ct := r.Counter; ct != nil {
			c := &counterJSON{Pending: ct.Pending, Units: ct.Units, Round: ct.Round, Open: ct.Open, Lost: ct.Lost, Err: ct.Err,
				Ended: []outcomeJSON{}}
			for _, o := range ct.Ended {
				c.Ended = append(c.Ended, outcomeJSON(o))
			}
			j.Counter = c
		}
		out.Primitives = append(out.Primitives, j)
	}
	return out
}

// writeJSON prints v, indented (or on one line), and returns the exit status.
func writeJSON(stdout, stderr io.Writer, v any, indent bool) int {
	enc := json.NewEncoder(stdout)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "distsync: %v\n", err)
		return exitUnavailable
	}
	return exitOK
}

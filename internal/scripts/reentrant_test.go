package scripts_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
)

// reentrant is a reentrant mutex's key set, beside the mutex's of env (same slot).
type reentrant struct {
	e                       *env
	lock, fence, ops, q, qx string
	prefix                  string
	keys                    []string
	ids                     int
}

func newReentrant(e *env) *reentrant {
	base := e.k.lock + ":r"
	r := &reentrant{e: e, lock: base, fence: base + ":fence", ops: base + ":ops", q: base + ":q", qx: base + ":qx", prefix: e.k.ch}
	r.keys = []string{r.lock, r.fence, r.ops, r.q, r.qx}
	return r
}

// lockAs runs reentrant_lock.lua for owner with request id (a new one if ""): lease 10 s,
// entry slack 5 s, expect '0'.
func (r *reentrant) lockAs(owner, id, waiter, flags, backup string, last int64) []int64 {
	r.e.t.Helper()
	if id == "" {
		r.ids++
		id = "id" + strconv.Itoa(r.ids)
	}
	v, err := scripts.ReentrantLock.Exec(context.Background(), r.e.c, r.keys,
		[]string{owner, id, "10000", "60000", "60000", "0", waiter, flags, "5000", r.prefix, r.e.k.pub, backup,
			strconv.FormatInt(last, 10)}).AsIntSlice()
	if err != nil {
		r.e.t.Fatalf("reentrant_lock: %v", err)
	}
	return v
}

// unlock gives back by holds of owner in the hold with token.
func (r *reentrant) unlock(owner string, by int, token int64) []int64 {
	r.e.t.Helper()
	r.ids++
	v, err := scripts.ReentrantUnlock.Exec(context.Background(), r.e.c, r.keys,
		[]string{owner, "u" + strconv.Itoa(r.ids), strconv.Itoa(by), "60000", r.prefix, r.e.k.pub,
			strconv.FormatInt(token, 10), windowArg, "60000"}).AsIntSlice()
	if err != nil {
		r.e.t.Fatalf("reentrant_unlock: %v", err)
	}
	return v
}

// abandon runs reentrant_abandon.lua for waiter: undo attempt id of owner (none if id is "").
func (r *reentrant) abandon(owner, id, waiter string, last int64, dequeue bool, grant int64) []int64 {
	r.e.t.Helper()
	d := "0"
	if dequeue {
		d = "1"
	}
	v, err := scripts.ReentrantAbandon.Exec(context.Background(), r.e.c, r.keys,
		[]string{owner, id, "60000", waiter, windowArg, "60000", r.prefix, r.e.k.pub, strconv.FormatInt(last, 10), d,
			strconv.FormatInt(grant, 10)}).AsIntSlice()
	if err != nil || len(v) != 2 {
		r.e.t.Fatalf("reentrant_abandon: %v, %v", v, err)
	}
	return v
}

func (r *reentrant) renew(owner string, token int64) int64 {
	r.e.t.Helper()
	v, err := scripts.ReentrantRenew.Exec(context.Background(), r.e.c, []string{r.lock, r.q, r.qx},
		[]string{"o:" + owner, "10000", strconv.FormatInt(token, 10), r.prefix, r.e.k.pub}).AsInt64()
	if err != nil {
		r.e.t.Fatalf("reentrant_renew: %v", err)
	}
	return v
}

// grant returns the grant the lock holds ("~<waiter>:<token>"), "" if none.
func (r *reentrant) grant() string {
	v, err := r.e.do(r.e.c.B().Hget().Key(r.lock).Field("g").Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return ""
	}
	if err != nil {
		r.e.t.Fatal(err)
	}
	return v
}

func (r *reentrant) order() string {
	ids, _ := r.e.do(r.e.c.B().Zrange().Key(r.q).Min("0").Max("-1").Build()).AsStrSlice()
	return strings.Join(ids, ",")
}

func (r *reentrant) fields() map[string]string {
	m, err := r.e.do(r.e.c.B().Hgetall().Key(r.lock).Build()).AsStrMap()
	if err != nil {
		r.e.t.Fatal(err)
	}
	return m
}

// The last Unlock hands a reentrant mutex to the oldest waiting process inside Redis: the lock
// becomes the grant alone, its process is told, the next two watch it; nobody else gets in
// while it lasts, and the grantee's head adopts it as its owner's hold, with the grant's token,
// telling the watchers.
func TestReentrantUnlockGrantsTheHead(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		r := newReentrant(e)
		held := r.lockAs("A", "", "", "00", "", 0)
		if held[0] != 1 || held[1] != 1 {
			t.Fatalf("lock of a free mutex = %v", held)
		}
		for i, w := range []string{"w1", "w2", "w3"} {
			got := r.lockAs("B"+w, "", w, "00", "", 0)
			first := int64(0)
			if i == 0 {
				first = 1
			}
			if got[0] != 0 || len(got) != 4 || got[2] != 0 || got[3] != first {
				t.Fatalf("lock by queued waiter %s = %v, want {0, pttl, 0, %v}", w, got, i == 0)
			}
		}
		if got := r.order(); got != "w1,w2,w3" {
			t.Fatalf("queue %s", got)
		}
		msgs := e.listen("w1", "w2", "w3")
		if got := r.lockAs("A", "", "", "00", "", 0); got[0] != 1 || got[1] != 2 {
			t.Fatalf("re-entry while others wait = %v, want {1, 2, token}", got)
		}
		if got := r.unlock("A", 2, held[2]); got[0] != 1 || got[1] != 0 {
			t.Fatalf("last unlock = %v", got)
		}
		g := r.grant()
		if !strings.HasPrefix(g, "~w1:") || len(r.fields()) != 1 {
			t.Fatalf("lock after the last Unlock = %v, want the grant to w1 alone", r.fields())
		}
		tok, _ := strconv.ParseInt(strings.TrimPrefix(g, "~w1:"), 10, 64)
		if tok <= held[2] {
			t.Fatalf("grant token %d not above the hold's %d", tok, held[2])
		}
		e.expect(msgs, "w1", "g "+strconv.FormatInt(tok, 10)+" w2,w3 "+windowArg+" w1", "w2", "w "+windowArg+" w2",
			"w3", "w "+strconv.Itoa(2*window)+" w3")
		rows, err := scripts.Holders.Exec(context.Background(), e.c, []string{r.lock}, []string{"hash"}).ToArray()
		if err != nil || len(rows) != 1 {
			t.Fatalf("holders.lua during the grant: %v, %v", rows, err)
		}
		if row, _ := rows[0].ToArray(); len(row) != 5 {
			t.Fatalf("holders.lua row %v", row)
		} else if owner, _ := row[0].ToString(); owner != g {
			t.Fatalf("holders.lua names %q during the grant, want %q", owner, g)
		} else if n, _ := row[3].AsInt64(); n != 0 {
			t.Fatalf("holders.lua counts %d holds for the grant, want 0", n)
		} else if tk, _ := row[2].AsInt64(); tk != tok {
			t.Fatalf("holders.lua gives the grant token %d, want %d", tk, tok)
		}
		if pttl, _ := e.do(e.c.B().Pttl().Key(r.lock).Build()).AsInt64(); pttl <= 0 || pttl > window {
			t.Fatalf("grant PTTL %d, want the %d ms window", pttl, window)
		}
		if got := r.lockAs("C", "", "", "00", "", 0); got[0] != 0 || got[2] != 1 {
			t.Fatalf("TryLock during a grant = %v, want {0, window, 1, 0}", got)
		}
		if got := r.lockAs("Bw2", "", "w2", "01", "", 0); got[0] != 0 || got[2] != 1 {
			t.Fatalf("the next waiter during a grant = %v", got)
		}
		if got := r.lockAs("D", "", "w1", "01", "w2,w3", tok); got[0] != 0 {
			t.Fatalf("a grant up to the process's last token was adopted: %v", got)
		}
		adopted := e.serverMs()
		got := r.lockAs("D", "", "w1", "01", "w2,w3", 0)
		if got[0] != 1 || got[1] != 1 || got[2] != tok {
			t.Fatalf("adopting the grant = %v, want {1, 1, %d}", got, tok)
		}
		e.expect(msgs, "w2", "c w2", "w3", "c w3")
		if f := r.fields(); len(f) != 3 || f["o:D"] != "1" || f["t"] != strconv.FormatInt(tok, 10) || f["a"] != "id"+strconv.Itoa(r.ids) {
			t.Fatalf("lock after the adoption = %v", f)
		}
		e.leaseLeft("after the adoption", r.lock, 10000, adopted)
		if got := r.order(); got != "w2,w3" {
			t.Fatalf("queue after the adoption = %s, want w2,w3", got)
		}
		// The owner of the hold, through another process, joins it: no waiting, no queueing.
		if got := r.lockAs("D", "", "w9", "00", "", 0); got[0] != 1 || got[1] != 2 {
			t.Fatalf("join of the owner's hold = %v", got)
		}
		if got := r.order(); got != "w2,w3" {
			t.Fatalf("queue after a join = %s, want w2,w3", got)
		}
		r.unlock("D", 2, tok)
		if g := r.grant(); !strings.HasPrefix(g, "~w2:") {
			t.Fatalf("lock = %v, want a grant to w2", r.fields())
		}
	})
}

// A process that takes its turn with more goroutines waiting goes to the tail; one whose
// owner joins a hold keeps its place.
func TestReentrantRequeueGoesToTheTail(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		r := newReentrant(e)
		held := r.lockAs("A", "", "", "00", "", 0)
		r.lockAs("B", "", "w1", "00", "", 0)
		r.lockAs("C", "", "w2", "00", "", 0)
		r.unlock("A", 1, held[2]) // grants to w1
		if got := r.lockAs("B", "", "w1", "11", "w2", 0); got[0] != 1 {
			t.Fatalf("adopt = %v", got)
		}
		if got := r.order(); got != "w2,w1" {
			t.Fatalf("queue after adopting with more waiting = %s, want w2,w1", got)
		}
		if got := r.lockAs("B", "", "w2", "11", "", 0); got[0] != 1 || got[1] != 2 {
			t.Fatalf("join = %v", got)
		}
		if got := r.order(); got != "w2,w1" {
			t.Fatalf("queue after a join with more waiting = %s, want w2,w1 (a join is not a turn)", got)
		}
		e.everyKeyExpires()
		for _, k := range r.keys {
			if ttl, _ := e.do(e.c.B().Pttl().Key(k).Build()).AsInt64(); ttl == -1 {
				t.Fatalf("key %s has no TTL", k)
			}
		}
	})
}

// A waiter that leaves takes its entry out of the queue and passes on a grant made to it;
// an undone attempt whose hold was its own passes the mutex on too.
func TestReentrantAbandonPassesOn(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		r := newReentrant(e)
		held := r.lockAs("A", "", "", "00", "", 0)
		r.lockAs("B", "", "w1", "00", "", 0)
		r.lockAs("C", "", "w2", "00", "", 0)
		r.lockAs("D", "", "w3", "00", "", 0)
		r.unlock("A", 1, held[2]) // grants to w1
		g := r.grant()
		tok, _ := strconv.ParseInt(strings.TrimPrefix(g, "~w1:"), 10, 64)
		// Others of w1's process still wait: nothing to dequeue, nothing passed on.
		if got := r.abandon("", "", "w1", 0, false, 0); got[1] != 0 || r.grant() != g {
			t.Fatalf("abandon without dequeue = %v, lock %v", got, r.fields())
		}
		if got := r.abandon("", "", "w1", 0, true, 0); got[1] != tok {
			t.Fatalf("abandon with dequeue = %v, want the grant %d passed on", got, tok)
		}
		if g := r.grant(); !strings.HasPrefix(g, "~w2:") {
			t.Fatalf("lock = %v, want a grant to w2", r.fields())
		}
		// w2 adopts with a request id whose reply is lost, and gives up: the undo passes the
		// mutex on to w3.
		got := r.lockAs("C", "lost", "w2", "01", "w3", 0)
		if got[0] != 1 {
			t.Fatalf("adopt = %v", got)
		}
		if got := r.abandon("C", "lost", "w2", 0, true, 0); got[0] != 1 || got[1] != 0 {
			t.Fatalf("undo of the adoption = %v, want {1, 0}", got)
		}
		if g := r.grant(); !strings.HasPrefix(g, "~w3:") {
			t.Fatalf("lock = %v, want a grant to w3", r.fields())
		}
		if r.order() != "" {
			t.Fatalf("queue %s, want empty", r.order())
		}
		// A voided attempt does nothing when it arrives.
		r.abandon("E", "late", "w4", 0, true, 0)
		if got := r.lockAs("E", "late", "w4", "00", "", 0); len(got) != 1 || got[0] != -1 {
			t.Fatalf("voided attempt = %v, want {-1}", got)
		}
		if r.order() != "" {
			t.Fatalf("a voided attempt queued: %s", r.order())
		}
	})
}

// A holder's renewal tells the first live waiter when the lease now ends; an Unlock with
// nobody waiting frees the mutex and tells nobody.
func TestReentrantRenewTellsTheHead(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		r := newReentrant(e)
		held := r.lockAs("A", "", "", "00", "", 0)
		if r.renew("A", held[2]) != 1 {
			t.Fatal("renewal of the hold failed")
		}
		r.lockAs("B", "", "dead", "00", "", 0)
		r.lockAs("C", "", "w2", "00", "", 0)
		e.do(e.c.B().Zadd().Key(r.qx).ScoreMember().ScoreMember(1, "dead").Build()) // its entry lapsed
		msgs := e.listen("dead", "w2")
		renewed := e.serverMs()
		if r.renew("A", held[2]) != 1 {
			t.Fatal("renewal of the hold failed")
		}
		select {
		case m := <-msgs:
			if m[0] != "w2" || !strings.HasPrefix(m[1], "x ") || !strings.HasSuffix(m[1], " w2") {
				t.Fatalf("renewal notice %q on %s's channel, want 'x <ms> w2' to w2", m[1], m[0])
			}
			// The 10 s lease, less what the server time moved in the script, no more than
			// since before it.
			ms, _ := strconv.ParseInt(strings.Fields(m[1])[1], 10, 64)
			if passed := e.serverMs() - renewed; ms < 10000-passed-1 || ms > 10000 {
				t.Fatalf("renewal notice %q, want the 10 s lease (less at most the %d ms since)", m[1], passed)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no renewal notice")
		}
		if r.renew("A", held[2]+1) != 0 || r.renew("Z", held[2]) != 0 {
			t.Fatal("a renewal of another hold succeeded")
		}
		e.do(e.c.B().Del().Key(r.q).Build())
		if got := r.unlock("A", 1, held[2]); got[0] != 1 || got[1] != 0 {
			t.Fatalf("unlock = %v", got)
		}
		if n, _ := e.do(e.c.B().Exists().Key(r.lock).Build()).AsInt64(); n != 0 {
			t.Fatalf("lock after the last Unlock with nobody waiting: %v", r.fields())
		}
	})
}

// The id of the request that made a hold lives in the hold ('a'), not in ops: a take writes
// nothing else. Sent again, the take finds its count and counts nothing; abandoned, it is
// undone (the mutex freed), even after re-entries; abandoned once its hold is gone, it undoes
// nothing, and a late copy of it does nothing.
func TestReentrantTakeKeepsItsIDInTheHold(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		r := newReentrant(e)
		held := r.lockAs("A", "take1", "", "00", "", 0)
		if held[0] != 1 || held[1] != 1 {
			t.Fatalf("lock of a free mutex = %v", held)
		}
		if n, _ := e.do(e.c.B().Exists().Key(r.ops).Build()).AsInt64(); n != 0 {
			t.Fatalf("a take wrote ops")
		}
		if again := r.lockAs("A", "take1", "", "00", "", 0); again[0] != 1 || again[1] != 1 || again[2] != held[2] {
			t.Fatalf("the take sent again = %v, want %v", again, held)
		}
		if re := r.lockAs("A", "re1", "", "00", "", 0); re[0] != 1 || re[1] != 2 {
			t.Fatalf("a re-entry = %v, want count 2", re)
		}
		// The take abandoned after the re-entry: one count goes, the re-entry's stays.
		if got := r.abandon("A", "take1", "x", 0, false, 0); got[0] != 1 {
			t.Fatalf("abandon of the take = %v, want it undone", got)
		}
		if f := r.fields(); f["o:A"] != "1" {
			t.Fatalf("lock after the take was undone = %v, want a count of 1", f)
		}
		if late := r.lockAs("A", "take1", "", "00", "", 0); late[0] != -1 {
			t.Fatalf("the abandoned take arriving late = %v, want {-1}", late)
		}
		// The re-entry abandoned too: the hold was its alone now, and the mutex is free.
		if got := r.abandon("A", "re1", "x", 0, false, 0); got[0] != 1 {
			t.Fatalf("abandon of the re-entry = %v, want it undone", got)
		}
		if f := r.fields(); len(f) != 0 {
			t.Fatalf("lock after every count was undone = %v, want none", f)
		}
		// A take whose hold was released is not undone by its abandon.
		held = r.lockAs("B", "take2", "", "00", "", 0)
		if got := r.unlock("B", 1, held[2]); got[0] != 1 {
			t.Fatalf("unlock = %v", got)
		}
		next := r.lockAs("C", "take3", "", "00", "", 0)
		if got := r.abandon("B", "take2", "x", 0, false, 0); got[0] != 0 {
			t.Fatalf("abandon of a take whose hold is gone = %v, want nothing undone", got)
		}
		if f := r.fields(); f["o:C"] != "1" || f["t"] != strconv.FormatInt(next[2], 10) {
			t.Fatalf("C's hold after B's old take was abandoned = %v", f)
		}
	})
}

package scripts_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
)

// semKeys returns a semaphore's keys in the slot of e's mutex, and the arguments of a call by
// id for n permits with a lease of ttl ms, ops kept opsTTL ms, and extra (lib/sem.lua).
func semKeys(e *env) (keys []string, args func(id string, n int, ttl, opsTTL int64, extra string) []string) {
	base := strings.TrimSuffix(e.k.lock, ":mutex") + ":semaphore"
	keys = []string{base, base + ":n", base + ":q", base + ":qx", base + ":qn", base + ":size", base + ":ops"}
	return keys, func(id string, n int, ttl, opsTTL int64, extra string) []string {
		return []string{id, strconv.Itoa(n), "4", strconv.FormatInt(ttl, 10), "60000", "3000", e.k.ch, e.k.pub,
			strconv.FormatInt(opsTTL, 10), extra}
	}
}

// The first take of a free semaphore gives its holder keys the taker's lease without reading
// their TTLs; a later take with a longer lease makes them live longer, one with a shorter
// lease never shortens them; a retry of a take finds it done (the holders read once serve
// both the count and that check), and a grant is adopted.
func TestSemaphoreTakeKeepsTheHoldersAlive(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		keys, args := semKeys(e)
		acquire := func(id string, ttl int64) []int64 {
			t.Helper()
			v, err := scripts.SemaphoreAcquire.Exec(context.Background(), e.c, keys, args(id, 1, ttl, 60000, "0")).AsIntSlice()
			if err != nil {
				t.Fatalf("acquire %s: %v", id, err)
			}
			return v
		}
		pttl := func(k string) int64 {
			t.Helper()
			v, err := e.do(e.c.B().Pttl().Key(k).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		lives := func(lo, hi int64, when string) {
			t.Helper()
			for _, k := range keys[:2] {
				if got := pttl(k); got < lo || got > hi {
					t.Fatalf("%s: PTTL %s = %d, want %d to %d", when, k, got, lo, hi)
				}
			}
		}
		if v := acquire("a", 300000); len(v) != 1 || v[0] != 1 {
			t.Fatalf("first take = %v, want {1}", v)
		}
		lives(290000, 300000, "after the first take")
		if v := acquire("a", 300000); len(v) != 1 || v[0] != 1 {
			t.Fatalf("retry of the take = %v, want {1}", v)
		}
		if n, err := e.do(e.c.B().Hget().Key(keys[1]).Field("a").Build()).ToString(); err != nil || n != "1" {
			t.Fatalf("a holds %q, %v after a retry of its take; want 1", n, err)
		}
		if v := acquire("b", 600000); len(v) != 1 || v[0] != 1 {
			t.Fatalf("second take = %v, want {1}", v)
		}
		lives(590000, 600000, "after a take with a longer lease")
		if v := acquire("c", 100000); len(v) != 1 || v[0] != 1 {
			t.Fatalf("third take = %v, want {1}", v)
		}
		lives(500000, 600000, "after a take with a shorter lease")
		// A grant to waiter g, which it could not take from its message, is adopted.
		now := e.serverMs()
		e.do(e.c.B().Zadd().Key(keys[0]).ScoreMember().ScoreMember(float64(now+60000), "~g").Build())
		e.do(e.c.B().Hset().Key(keys[1]).FieldValue().FieldValue("~g", "1").Build())
		if v := acquire("g", 300000); len(v) != 1 || v[0] != 2 {
			t.Fatalf("take of a grant = %v, want {2}", v)
		}
	})
}

// A request id recorded by a release is found by its retry, and entries older than the ops'
// retention are dropped by a later release, though not necessarily by the next one.
func TestOpsEntriesAreDroppedAfterTheirRetention(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		keys, args := semKeys(e)
		ops := keys[6]
		now := e.serverMs()
		for i := range 50 { // entries two minutes old, past a retention of one
			e.do(e.c.B().Zadd().Key(ops).ScoreMember().ScoreMember(float64(now-120000), "old"+strconv.Itoa(i)).Build())
		}
		old := func() int64 {
			n, err := e.do(e.c.B().Zcount().Key(ops).Min("-inf").Max(strconv.FormatInt(now-60000, 10)).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		calls := 0
		for ; calls < 500 && old() > 0; calls++ {
			id := "r" + strconv.Itoa(calls)
			if v, err := scripts.SemaphoreAcquire.Exec(context.Background(), e.c, keys, args("a", 1, 60000, 60000, "0")).AsIntSlice(); err != nil || v[0] != 1 {
				t.Fatalf("acquire: %v, %v", v, err)
			}
			for range 2 { // the release, then its retry, which finds it applied
				if v, err := scripts.SemaphoreRelease.Exec(context.Background(), e.c, keys, args("a", 1, 60000, 60000, id)).AsInt64(); err != nil || v != 1 {
					t.Fatalf("release %s = %v, %v; want 1", id, v, err)
				}
			}
		}
		if n := old(); n > 0 {
			t.Fatalf("%d entries past their retention left after %d releases", n, calls)
		}
		t.Logf("dropped after %d releases", calls)
	})
}

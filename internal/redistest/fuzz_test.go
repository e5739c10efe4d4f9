package redistest_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/distsync/distsync/internal/redistest"
)

// The fuzz harness writes each kind of foreign value as its doc says, and Snapshot tells them
// apart; Next gives a name of its own and counts only the commands that name it.
func TestFuzzRedisWritesAndCounts(t *testing.T) {
	t.Parallel()
	r := redistest.StartFuzz(t)
	name := r.Next()
	if other := r.Next(); other == name {
		t.Fatalf("Next returned %q twice", name)
	}
	name = r.Next()
	for _, c := range []struct {
		v    redistest.Foreign
		want string
	}{
		{redistest.Foreign{Kind: 0, Value: "x"}, "string x"},
		{redistest.Foreign{Kind: 1, Member: "f", Value: "v"}, "hash mapf:v"},
		{redistest.Foreign{Kind: 2, Member: "m", Score: math.NaN()}, "zset m 0"},
		{redistest.Foreign{Kind: 3, Value: "x"}, "list x"},
		{redistest.Foreign{Kind: 4, Value: "x", TTL: true}, "set x"},
	} {
		key := name + ":" + c.want[:strings.IndexByte(c.want, ' ')]
		r.Cleanup(t, key)
		if got := r.Snapshot(t, key); got != "none <nil>" {
			t.Fatalf("Snapshot of a new key: %s", got)
		}
		r.Write(t, key, c.v)
		// Brackets dropped: miniredis and Redis nest a zset's member-score pairs differently.
		if got := strings.NewReplacer("[", "", "]", "").Replace(r.Snapshot(t, key)); got != c.want {
			t.Errorf("Write(%+v): %s, want %s", c.v, got, c.want)
		}
		ttl, _ := r.Do(t, "PTTL", key).AsInt64()
		if c.v.TTL != (ttl > 0) {
			t.Errorf("Write(%+v): PTTL %d", c.v, ttl)
		}
	}
	if n := r.Counter.Total(); n != 0 {
		t.Fatalf("Counter counted %d commands of the test's own client", n)
	}

	ctx := context.Background()
	c := r.Counter
	_ = c.Do(ctx, c.B().Get().Key(name+":string").Build())
	_ = c.Do(ctx, c.B().Get().Key("other").Build())
	_ = c.DoMulti(ctx, c.B().Get().Key(name+":a").Build(), c.B().Get().Key("other").Build(), c.B().Get().Key(name+":b").Build())
	if n := c.Total(); n != 3 {
		t.Fatalf("Counter counted %d commands naming %q, want 3", n, name)
	}
	if r.H == nil || r.NowMs(t) <= 0 {
		t.Fatal("no Handle, or no server clock")
	}
}

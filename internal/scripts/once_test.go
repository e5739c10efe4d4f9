package scripts_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
)

// onceEnv runs the once scripts on one key, with a 10 s lease, keep -1 (a Once's done-marker)
// and a 30 s linger.
type onceEnv struct {
	t                                          *testing.T
	c                                          rueidis.Client
	lead, kept, res, fence, forgot, ch, pubCmd string
}

func newOnceEnv(t *testing.T, b *redistest.Backend) *onceEnv {
	c := b.Client(t)
	base := b.Prefix(t) + "{o}:once"
	return &onceEnv{t, c, base, base + ":kept", base + ":res:", base + ":fence", base + ":forgot", base + ":ch", b.Pub()}
}

func (e *onceEnv) begin(owner, waitedFor string) []rueidis.RedisMessage {
	e.t.Helper()
	v, err := scripts.OnceBegin.Exec(context.Background(), e.c, []string{e.lead, e.kept, e.res + waitedFor, e.res + owner, e.fence, e.forgot},
		[]string{owner, "10000", "60000"}).ToArray()
	if err != nil {
		e.t.Fatalf("begin: %v", err)
	}
	return v
}

// takeLead makes owner the leader and returns its token.
func (e *onceEnv) takeLead(owner string) int64 {
	e.t.Helper()
	r := e.begin(owner, "")
	if k, _ := r[0].ToString(); k != "l" {
		e.t.Fatalf("begin by %s: %v, want the lead", owner, r)
	}
	tok, _ := r[1].AsInt64()
	return tok
}

func (e *onceEnv) finish(owner, result string, token int64) int64 {
	e.t.Helper()
	n, err := scripts.OnceFinish.Exec(context.Background(), e.c, []string{e.lead, e.kept, e.res + owner, e.forgot},
		[]string{owner, result, "-1", "30000", e.ch, e.pubCmd, strconv.FormatInt(token, 10)}).AsInt64()
	if err != nil {
		e.t.Fatalf("finish: %v", err)
	}
	return n
}

func (e *onceEnv) forget() int64 {
	e.t.Helper()
	n, err := scripts.OnceForget.Exec(context.Background(), e.c, []string{e.lead, e.kept, e.forgot},
		[]string{"30000", e.ch, e.pubCmd}).AsInt64()
	if err != nil {
		e.t.Fatalf("forget: %v", err)
	}
	return n
}

func (e *onceEnv) exists(key string) bool {
	n, err := e.c.Do(context.Background(), e.c.B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		e.t.Fatal(err)
	}
	return n == 1
}

// A lead that Forget found leading keeps nothing when it finishes, and a later caller is told
// it is forgotten (with its token) until then; a lead that finished before the Forget has its
// kept result deleted by it. Whichever reaches Redis first, nothing kept survives the Forget.
func TestOnceForgetAndFinishInEitherOrder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newOnceEnv(t, b)

		// Finish first, then Forget.
		tok := e.takeLead("A")
		if e.finish("A", "v1", tok) < 0 || !e.exists(e.kept) {
			t.Fatal("a finished lead kept nothing")
		}
		if n := e.forget(); n != 0 || e.exists(e.kept) || e.exists(e.forgot) {
			t.Fatalf("Forget after the finish: %d, kept %v, mark %v; want 0, the kept result gone, no mark",
				n, e.exists(e.kept), e.exists(e.forgot))
		}

		// Forget first, then finish.
		tok = e.takeLead("B")
		if n := e.forget(); n != 1 {
			t.Fatalf("Forget during a lead = %d, want 1", n)
		}
		if ttl, _ := e.c.Do(context.Background(), e.c.B().Pttl().Key(e.forgot).Build()).AsInt64(); ttl <= 0 {
			t.Fatalf("the mark's PTTL is %d: it must expire", ttl)
		}
		w := e.begin("C", "")
		kind, _ := w[0].ToString()
		leader, _ := w[1].ToString()
		wtok, _ := w[3].AsInt64()
		forgotten, _ := w[4].AsInt64()
		if kind != "w" || leader != "B" || wtok != tok || forgotten != 1 {
			t.Fatalf("begin during a forgotten lead = %v; want {'w', B, pttl, %d, 1}", w, tok)
		}
		if e.finish("B", "v2", tok) < 0 {
			t.Fatal("the forgotten leader's finish found no lead")
		}
		if e.exists(e.kept) || e.exists(e.forgot) {
			t.Fatalf("after a forgotten lead's finish: kept %v, mark %v; want neither", e.exists(e.kept), e.exists(e.forgot))
		}
		if !e.exists(e.res + "B") {
			t.Fatal("the forgotten leader's result key is missing: the callers that waited for it read it there")
		}

		// A lead that Forget did not see is told apart: not forgotten, and kept.
		tok = e.takeLead("D")
		w = e.begin("E", "")
		if f, _ := w[4].AsInt64(); f != 0 {
			t.Fatalf("begin during a lead that no Forget saw = %v; want forgotten 0", w)
		}
		e.finish("D", "v3", tok)
		if !e.exists(e.kept) {
			t.Fatal("a lead that no Forget saw kept nothing")
		}
	})
}

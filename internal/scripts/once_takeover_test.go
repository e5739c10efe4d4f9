package scripts_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
)

// Two callers wait for a leader who dies. The first to look again takes over and finishes;
// the second, looking again after that (its message of the result still on its way), takes
// that result: fn does not run a third time. The result of a lead older than the one a caller
// waited for is not taken.
func TestOnceResultOfATakeoverIsTakenNotLedAgain(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newOnceEnv(t, b)
		last := e.res + "last"
		begin := func(owner, waitedFor string, floor int64) (string, string) {
			t.Helper()
			v, err := scripts.OnceBeginArgs{Lead: e.lead, Kept: e.kept, Res: e.res + waitedFor, Mine: e.res + owner,
				Fence: e.fence, Forgot: e.forgot, Last: last, Owner: owner, TTL: "10000", FenceTTL: "60000",
				Floor: strconv.FormatInt(floor, 10)}.Exec(context.Background(), e.c).ToArray()
			if err != nil {
				t.Fatalf("begin by %s: %v", owner, err)
			}
			kind, _ := v[0].ToString()
			second := ""
			if len(v) > 1 {
				second, _ = v[1].ToString()
			}
			return kind, second
		}
		finish := func(owner, result string, token int64) {
			t.Helper()
			err := scripts.OnceFinishArgs{Lead: e.lead, Kept: e.kept, Res: e.res + owner, Forgot: e.forgot, Last: last,
				Owner: owner, Result: result, Keep: "0", Linger: "30000", Channel: e.ch, Pub: e.pubCmd,
				Token: strconv.FormatInt(token, 10)}.Exec(context.Background(), e.c).Error()
			if err != nil {
				t.Fatalf("finish by %s: %v", owner, err)
			}
		}
		kind, tok := begin("dead", "", -1)
		if kind != "l" {
			t.Fatalf("the first caller: %q, want the lead", kind)
		}
		dead, _ := strconv.ParseInt(tok, 10, 64)
		// An older lead's result, from before the dead leader's: not to be taken.
		if err := e.c.Do(context.Background(), e.c.B().Set().Key(last).Value(strconv.FormatInt(dead-1, 10)+"\nvOld").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		// The dead leader's lease lapses.
		if err := e.c.Do(context.Background(), e.c.B().Del().Key(e.lead).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		kind, tok = begin("f1", "dead", dead)
		if kind != "l" {
			t.Fatalf("the first follower to look again: %q, want the lead", kind)
		}
		f1, _ := strconv.ParseInt(tok, 10, 64)
		finish("f1", "vNew", f1)
		if kind, res := begin("f2", "dead", dead); kind != "r" || res != "vNew" {
			t.Fatalf("the second follower, after the takeover finished: %q %q, want the takeover's result", kind, res)
		}
		// A caller that waited for no leader (or one after a Forget: floor above) takes nothing
		// from last: it leads.
		if kind, _ := begin("f3", "", f1+1); kind != "l" {
			t.Fatalf("a caller whose floor is above the last result: %q, want the lead", kind)
		}
	})
}

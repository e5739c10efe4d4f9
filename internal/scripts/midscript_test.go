package scripts_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2/server"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
)

// miniredis (the embedded server) expires a key by the time of each command that touches the
// database, the commands of a running script included; Redis judges expiry by the script's
// start. These tests stall one command of a script on miniredis to make a key expire in it.

// stallOnce makes miniredis b stall the next cmd (one of a script's calls too) for d: with
// answer, it answers TIME itself with the time of the moment, then stalls; without, it stalls,
// then runs the command. It returns the function that arms it.
func stallOnce(t *testing.T, b *redistest.Backend, cmd string, d time.Duration, answer bool) func() {
	var armed atomic.Bool
	b.Mini.Server().SetPreHook(func(c *server.Peer, name string, _ ...string) bool {
		if name != cmd || !armed.CompareAndSwap(true, false) {
			return false
		}
		if answer {
			ns := time.Now().UnixNano()
			c.WriteLen(2)
			c.WriteBulk(strconv.FormatInt(ns/1e9, 10))
			c.WriteBulk(strconv.FormatInt(ns/1e3%1e6, 10))
		}
		time.Sleep(d)
		return answer
	})
	t.Cleanup(func() { b.Mini.Server().SetPreHook(nil) })
	return func() { armed.Store(true) }
}

// A lease renewed while its key's TTL runs out between the script's GET and its PEXPIRE
// (miniredis expires keys between a script's commands; Redis never does): the renewal
// reported success for a key that was gone, hiding the loss. Now it reports the loss.
func TestExtendTellsAKeyGoneInTheScript(t *testing.T) {
	b := redistest.Open(t, redistest.Mini)
	c := b.Client(t)
	key := b.Prefix(t) + "{e}:lease"
	arm := stallOnce(t, b, "PEXPIRE", 600*time.Millisecond, false)
	if err := c.Do(context.Background(), c.B().Set().Key(key).Value("o1").Px(300*time.Millisecond).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	arm()
	v, err := scripts.Extend.Exec(context.Background(), c, []string{key}, []string{"s", "o1", "30000"}).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := c.Do(context.Background(), c.B().Exists().Key(key).Build()).AsInt64()
	if v != 0 || n != 0 {
		t.Fatalf("extend of a key that expired during the script: %d (want 0: lost), the key exists: %d", v, n)
	}
}

// Every other renewal (and a grant's confirmation) met the same: a lease whose key expired
// between the script's check of the owner and its PEXPIRE (PTTL in live_for, for a reentrant
// hold; ZADD for a share in a sorted set) was reported renewed. Each now reports the loss,
// and leaves no key behind.
func TestRenewalsTellAKeyGoneInTheScript(t *testing.T) {
	b := redistest.Open(t, redistest.Mini)
	c := b.Client(t)
	ctx := context.Background()
	p := b.Prefix(t) + "{r}:"
	lock := p + "lock"
	hold := func() { // a string lease of owner "o" with 300 ms left
		if err := c.Do(ctx, c.B().Set().Key(lock).Value("o").Px(300*time.Millisecond).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	share := func() { // a sorted set of one share, "o", with 300 ms left, as its key
		at := time.Now().Add(300 * time.Millisecond).UnixMilli() // miniredis's clock is this process's
		if err := c.Do(ctx, c.B().Zadd().Key(lock).ScoreMember().ScoreMember(float64(at), "o").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, c.B().Pexpire().Key(lock).Milliseconds(300).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		script  *scripts.Script
		stalled string
		setup   func()
		keys    []string
		args    []string
	}{
		{"mutex_renew", scripts.MutexRenew, "PEXPIRE", hold, []string{lock, p + "q", p + "qx"},
			[]string{"o", "30000", p + "ch", "PUBLISH"}},
		{"election_renew", scripts.ElectionRenew, "PEXPIRE", hold, []string{lock, p + "q", p + "qx", p + "values"},
			[]string{"o", "30000", p + "ch", "PUBLISH", p + "obs", "w1", "1"}},
		{"rwmutex_renew (write)", scripts.RWMutexRenew, "PEXPIRE", hold,
			[]string{lock, p + "r", p + "ww", p + "rq", p + "ra", p + "fence", p + "ops", p + "wo", p + "rel"},
			[]string{"w", "o", "", "0", "30000", "100", "100", "60000", "60000", p + "ch", "PUBLISH"}},
		{"mutex_confirm", scripts.MutexConfirm, "PEXPIRE", hold, []string{lock, p + "fence", p + "q", p + "qx"},
			[]string{"o", "30000", "w1", "0", "100", p + "ch", "PUBLISH", "", "300", "60000"}},
		{"reentrant_renew", scripts.ReentrantRenew, "PTTL", func() {
			if err := c.Do(ctx, c.B().Hset().Key(lock).FieldValue().FieldValue("o:o", "1").FieldValue("t", "7").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if err := c.Do(ctx, c.B().Pexpire().Key(lock).Milliseconds(300).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}, []string{lock, p + "q", p + "qx"}, []string{"o:o", "30000", "7", p + "ch", "PUBLISH"}},
		// Sorted sets of shares, owner -> expiry: the set expires after the ZSCORE, and the
		// ZADD made it again with the renewed share alone.
		{"extend (a sorted set of shares)", scripts.Extend, "ZADD", share, []string{lock}, []string{"z", "o", "30000"}},
		{"rwmutex_renew (read)", scripts.RWMutexRenew, "ZADD", share,
			[]string{p + "w", lock, p + "ww", p + "rq", p + "ra", p + "fence", p + "ops", p + "wo", p + "rel"},
			[]string{"r", "o", "", "0", "30000", "100", "100", "60000", "60000", p + "ch", "PUBLISH"}},
		{"semaphore_renew", scripts.SemaphoreRenew, "ZADD", share,
			[]string{lock, p + "n", p + "q", p + "qx", p + "qn", p + "size", p + "ops"},
			[]string{"o", "1", "2", "30000", "300", "100", p + "ch", "PUBLISH", "60000", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arm := stallOnce(t, b, tc.stalled, 600*time.Millisecond, false)
			tc.setup()
			arm()
			v, err := tc.script.Exec(ctx, c, tc.keys, tc.args).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			n, _ := c.Do(ctx, c.B().Exists().Key(lock).Build()).AsInt64()
			if v != 0 || n != 0 {
				t.Fatalf("renewal of a lease that expired during the script: %d (want 0: lost), the key exists: %d", v, n)
			}
		})
	}
}

package scripts_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/rueidis"

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

// clearPrefix deletes the keys under prefix p: each case of a table starts with no key of the last
// (a release record of owner "o", say).
func clearPrefix(t *testing.T, c rueidis.Client, p string) {
	t.Helper()
	keys, err := c.Do(context.Background(), c.B().Keys().Pattern(p+"*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := c.Do(context.Background(), c.B().Del().Key(k).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
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
// and leaves no key behind. So does a mutex's release, which reported such a lease released.
func TestLeaseScriptsTellAKeyGoneInTheScript(t *testing.T) {
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
		// A release, which reported a lease that ran out before it freed the lock as released.
		{"mutex_release", scripts.MutexRelease, "DEL", hold, []string{lock, p + "fence", p + "q", p + "qx", p + "rel"},
			[]string{"o", "300", "60000", p + "ch", "PUBLISH", "30000"}},
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
			clearPrefix(t, c, p)
			arm := stallOnce(t, b, tc.stalled, 600*time.Millisecond, false)
			tc.setup()
			arm()
			v, err := tc.script.Exec(ctx, c, tc.keys, tc.args).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			n, _ := c.Do(ctx, c.B().Exists().Key(lock).Build()).AsInt64()
			if v != 0 || n != 0 {
				t.Fatalf("%s of a lease that expired during the script: %d (want 0: lost), the key exists: %d", tc.name, v, n)
			}
		})
	}
}

// An acquisition that finds the caller's own hold (a retried take, a re-entry) and extends it
// met the same: with the hold's key expired after the script read it, the reply reported a
// claim that no key carried. Now the caller gets what it would get from the free mutex on
// Redis: the lock taken again with its key (fair), a re-entry refused or a look again at once
// (reentrant); never a hold without its key.
func TestAcquisitionsOfAnOwnHoldGoneInTheScript(t *testing.T) {
	b := redistest.Open(t, redistest.Mini)
	c := b.Client(t)
	ctx := context.Background()
	p := b.Prefix(t) + "{a}:"
	lock := p + "lock"
	do := func(cmd rueidis.Completed) {
		t.Helper()
		if err := c.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	// check fails if reply claims a hold that holds does not find.
	check := func(t *testing.T, reply []int64, holds func() bool) {
		t.Helper()
		if len(reply) > 0 && reply[0] == 1 && !holds() {
			t.Fatalf("reply %v claims a hold, and no key carries it", reply)
		}
	}
	t.Run("fair_acquire's retry of a take", func(t *testing.T) {
		const w = "p1/1"
		do(c.B().Set().Key(lock).Value(w).Px(300 * time.Millisecond).Build())
		arm := stallOnce(t, b, "PEXPIRE", 600*time.Millisecond, false)
		arm()
		reply, err := scripts.FairAcquire.Exec(ctx, c, []string{lock, p + "fence", p + "q", p + "qx"},
			[]string{w, "30000", "60000", "300", "0", p + "ch", "PUBLISH", "", "100"}).AsIntSlice()
		if err != nil {
			t.Fatal(err)
		}
		check(t, reply, func() bool {
			v, _ := c.Do(ctx, c.B().Get().Key(lock).Build()).ToString()
			return v == w
		})
	})
	reentrant := func(id, expect string) []string {
		return []string{"o", id, "30000", "60000", "60000", expect, "", "00", "100", p + "ch", "PUBLISH", "", "0"}
	}
	rkeys := []string{lock, p + "fence", p + "ops", p + "q", p + "qx"}
	hash := func() bool {
		n, _ := c.Do(ctx, c.B().Hexists().Key(lock).Field("o:o").Build()).AsInt64()
		return n == 1
	}
	lockOnce := func(t *testing.T, id string) []int64 {
		t.Helper()
		reply, err := scripts.ReentrantLock.Exec(ctx, c, rkeys, reentrant(id, "0")).AsIntSlice()
		if err != nil || len(reply) < 3 || reply[0] != 1 {
			t.Fatalf("lock: %v, %v", reply, err)
		}
		return reply
	}
	t.Run("reentrant_lock's retry of a lock", func(t *testing.T) {
		do(c.B().Del().Key(lock).Build())
		lockOnce(t, "r1")
		do(c.B().Pexpire().Key(lock).Milliseconds(300).Build())
		arm := stallOnce(t, b, "PEXPIRE", 600*time.Millisecond, false)
		arm()
		reply, err := scripts.ReentrantLock.Exec(ctx, c, rkeys, reentrant("r1", "0")).AsIntSlice()
		if err != nil {
			t.Fatal(err)
		}
		check(t, reply, hash)
	})
	for _, expect := range []string{"0", "token"} {
		t.Run("reentrant_lock's re-entry, expect "+expect, func(t *testing.T) {
			do(c.B().Del().Key(lock).Build())
			first := lockOnce(t, "r2"+expect)
			if expect == "token" {
				expect = strconv.FormatInt(first[2], 10)
			}
			do(c.B().Pexpire().Key(lock).Milliseconds(300).Build())
			arm := stallOnce(t, b, "HINCRBY", 600*time.Millisecond, false)
			arm()
			reply, err := scripts.ReentrantLock.Exec(ctx, c, rkeys, reentrant("r3"+expect, expect)).AsIntSlice()
			if err != nil {
				t.Fatal(err)
			}
			check(t, reply, func() bool {
				tok, _ := c.Do(ctx, c.B().Hget().Key(lock).Field("t").Build()).ToString()
				return hash() && tok != ""
			})
		})
	}
}

// The releases of the other primitives met the same: a hold whose key expired after the
// script read it was reported released, and a partial release (a reentrant hold given back
// by one, a semaphore's permits by some) wrote its count into a hash of its own, without a
// TTL, which then outlived every hold. Each now reports the loss and leaves no such key.
func TestReleasesTellAKeyGoneInTheScript(t *testing.T) {
	b := redistest.Open(t, redistest.Mini)
	c := b.Client(t)
	ctx := context.Background()
	p := b.Prefix(t) + "{l}:"
	do := func(cmds ...rueidis.Completed) {
		t.Helper()
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	expire := func(keys ...string) { // 300 ms left for each
		for _, k := range keys {
			do(c.B().Pexpire().Key(k).Milliseconds(300).Build())
		}
	}
	at := func() float64 { return float64(time.Now().Add(300 * time.Millisecond).UnixMilli()) }
	rkeys := []string{p + "rlock", p + "fence", p + "ops", p + "q", p + "qx"}
	wkeys := []string{p + "w", p + "r", p + "ww", p + "rq", p + "ra", p + "fence", p + "ops", p + "wo", p + "rel"}
	wargs := func(mode string) []string {
		return []string{mode, "o", "", "0", "30000", "100", "100", "60000", "60000", p + "ch", "PUBLISH"}
	}
	skeys := []string{p + "h", p + "n", p + "q", p + "qx", p + "qn", p + "size", p + "ops"}
	sargs := func(n, id string) []string {
		return []string{"o", n, "4", "30000", "300", "100", p + "ch", "PUBLISH", "60000", id}
	}
	for _, tc := range []struct {
		name    string
		stalled string
		setup   func()
		script  *scripts.Script
		keys    []string
		args    []string
		gone    []string // keys that must not exist after it
	}{
		{"reentrant_unlock, one of two holds", "HSET", func() {
			do(c.B().Hset().Key(p+"rlock").FieldValue().FieldValue("o:o", "2").FieldValue("t", "7").Build())
			expire(p + "rlock")
		}, scripts.ReentrantUnlock, rkeys, []string{"o", "u1", "1", "60000", p + "ch", "PUBLISH", "7", "300", "60000"},
			[]string{p + "rlock"}},
		{"reentrant_unlock, the last hold", "DEL", func() {
			do(c.B().Hset().Key(p+"rlock").FieldValue().FieldValue("o:o", "1").FieldValue("t", "7").Build())
			expire(p + "rlock")
		}, scripts.ReentrantUnlock, rkeys, []string{"o", "u2", "1", "60000", p + "ch", "PUBLISH", "7", "300", "60000"},
			[]string{p + "rlock"}},
		// With a waiter, the lock is passed on all the same (to a grant: lib/queue.lua), and
		// the release reports the loss.
		{"mutex_release, a waiter queued", "EXISTS", func() {
			do(c.B().Set().Key(p+"lock").Value("o").Px(300*time.Millisecond).Build(),
				c.B().Zadd().Key(p+"q").ScoreMember().ScoreMember(1, "w1").Build(),
				c.B().Zadd().Key(p+"qx").ScoreMember().ScoreMember(float64(time.Now().Add(time.Minute).UnixMilli()), "w1").Build())
		}, scripts.MutexRelease, []string{p + "lock", p + "fence", p + "q", p + "qx", p + "rel"},
			[]string{"o", "300", "60000", p + "ch", "PUBLISH", "30000"}, nil},
		{"reentrant_unlock, the last hold, a waiter queued", "EXISTS", func() {
			do(c.B().Hset().Key(p+"rlock").FieldValue().FieldValue("o:o", "1").FieldValue("t", "7").Build(),
				c.B().Zadd().Key(p+"q").ScoreMember().ScoreMember(1, "w1").Build(),
				c.B().Zadd().Key(p+"qx").ScoreMember().ScoreMember(float64(time.Now().Add(time.Minute).UnixMilli()), "w1").Build())
			expire(p + "rlock")
		}, scripts.ReentrantUnlock, rkeys, []string{"o", "u3", "1", "60000", p + "ch", "PUBLISH", "7", "300", "60000"}, nil},
		{"rwmutex_unlock, a write hold", "DEL", func() {
			do(c.B().Set().Key(p + "w").Value("o").Px(300 * time.Millisecond).Build())
		}, scripts.RWMutexUnlock, wkeys, wargs("w"), []string{p + "w"}},
		{"rwmutex_unlock, a read share", "ZREM", func() {
			do(c.B().Zadd().Key(p+"r").ScoreMember().ScoreMember(at(), "o").Build())
			expire(p + "r")
		}, scripts.RWMutexUnlock, wkeys, wargs("r"), []string{p + "r"}},
		{"semaphore_release, some permits", "HSET", func() {
			do(c.B().Zadd().Key(p+"h").ScoreMember().ScoreMember(at(), "o").Build(),
				c.B().Hset().Key(p+"n").FieldValue().FieldValue("o", "2").Build())
			expire(p+"h", p+"n")
		}, scripts.SemaphoreRelease, skeys, sargs("1", "s1"), []string{p + "h", p + "n"}},
		{"semaphore_release, every permit", "ZREM", func() {
			do(c.B().Zadd().Key(p+"h").ScoreMember().ScoreMember(at(), "o").Build(),
				c.B().Hset().Key(p+"n").FieldValue().FieldValue("o", "2").Build())
			expire(p+"h", p+"n")
		}, scripts.SemaphoreRelease, skeys, sargs("2", "s2"), []string{p + "h", p + "n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearPrefix(t, c, p)
			arm := stallOnce(t, b, tc.stalled, 600*time.Millisecond, false)
			tc.setup()
			arm()
			// A reply of 1 (or {1, count}) reports a release; 0 (or {0}) a loss.
			for try := range 2 { // the second: a retry of the same request reports the loss too
				r := tc.script.Exec(ctx, c, tc.keys, tc.args)
				v, err := r.AsInt64()
				if err != nil {
					var vs []int64
					if vs, err = r.AsIntSlice(); err == nil && len(vs) > 0 {
						v = vs[0]
					}
				}
				if err != nil || v != 0 {
					t.Fatalf("try %d: release of a hold that expired during the script: %d, %v (want 0: lost)", try+1, v, err)
				}
			}
			for _, k := range tc.gone {
				if n, _ := c.Do(ctx, c.B().Exists().Key(k).Build()).AsInt64(); n != 0 {
					ttl, _ := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
					t.Errorf("%s is left (PTTL %d)", k, ttl)
				}
			}
		})
	}
}

package scripts_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// stall makes miniredis stall one command, once armed.
type stall struct {
	armed atomic.Bool
	d     atomic.Int64 // how long (a time.Duration)
	at    atomic.Int64 // when it last stalled one (UnixNano)
}

// newStall makes miniredis b stall the next cmd after each arm (one of a script's calls too)
// for d: with answer, it answers TIME itself with the time of the moment, then stalls;
// without, it stalls, then runs the command.
func newStall(t *testing.T, b *redistest.Backend, cmd string, d time.Duration, answer bool) *stall {
	s := &stall{}
	s.d.Store(int64(d))
	b.Mini.InProcess().Server().SetPreHook(func(c *server.Peer, name string, _ ...string) bool {
		if name != cmd || !s.armed.CompareAndSwap(true, false) {
			return false
		}
		s.at.Store(time.Now().UnixNano())
		if answer {
			ns := time.Now().UnixNano()
			c.WriteLen(2)
			c.WriteBulk(strconv.FormatInt(ns/1e9, 10))
			c.WriteBulk(strconv.FormatInt(ns/1e3%1e6, 10))
		}
		time.Sleep(time.Duration(s.d.Load()))
		return answer
	})
	t.Cleanup(func() { b.Mini.InProcess().Server().SetPreHook(nil) })
	return s
}

func (s *stall) arm() { s.armed.Store(true) }

// fired reports whether the command was stalled since the last arm, and disarms.
func (s *stall) fired() bool { return !s.armed.Swap(false) }

// stallOnce is newStall, returning the function that arms it.
func stallOnce(t *testing.T, b *redistest.Backend, cmd string, d time.Duration, answer bool) func() {
	return newStall(t, b, cmd, d, answer).arm
}

// lapse is how long setup leaves the keys it makes, in a first try (see stalled).
const lapse = 300 * time.Millisecond

// stalled runs reset, setup, then run with miniredis stalling run's cmd for 2·m.lapse, past
// the lapse that setup leaves the keys it makes. It tries again (up to five times in all,
// each with a lapse twice the last) unless run sent cmd within the lapse of setup's start: on
// a busy machine a key may lapse before the script reads it, and the script then returns
// before cmd, having tested nothing, or goes another way, which may send cmd too (a
// semaphore_acquire that finds its own hold gone takes the permits anew, and its hold()
// sends the PTTL). Within the lapse, every key setup made was there for every command of the
// script before cmd, which therefore went the way the test means. The caller checks what the
// last run did.
func (m *midscript) stalled(t *testing.T, cmd string, reset, setup, run func()) {
	t.Helper()
	s := newStall(t, m.b, cmd, 2*lapse, false)
	var late []string
	for try := range 5 {
		m.lapse = lapse << try
		s.d.Store(int64(2 * m.lapse))
		reset()
		began := time.Now()
		setup()
		s.arm()
		run()
		if !s.fired() {
			late = append(late, fmt.Sprintf("lapse %v: cmd never sent", m.lapse))
			continue
		}
		if after := time.Unix(0, s.at.Load()).Sub(began); after >= m.lapse {
			late = append(late, fmt.Sprintf("lapse %v: cmd %v after the setup began", m.lapse, after.Round(time.Millisecond)))
			continue
		}
		return
	}
	t.Fatalf("no run of five reached the %s to stall within the lapse of its setup: %s", cmd, strings.Join(late, "; "))
}

// midscript is what the tables below share: a client of miniredis, and helpers to set keys
// under one prefix.
type midscript struct {
	t     *testing.T
	b     *redistest.Backend
	c     rueidis.Client
	ctx   context.Context
	p     string
	lapse time.Duration // how long the keys the helpers make live (see stalled)
}

func newMidscript(t *testing.T, tag string) *midscript {
	b := redistest.OpenInProcess(t) // the stalls hook into the server
	return &midscript{t: t, b: b, c: b.Client(t), ctx: context.Background(), p: b.Prefix(t) + "{" + tag + "}:", lapse: lapse}
}

func (m *midscript) do(cmds ...rueidis.Completed) {
	m.t.Helper()
	for _, r := range m.c.DoMulti(m.ctx, cmds...) {
		if err := r.Error(); err != nil {
			m.t.Fatal(err)
		}
	}
}

// expire leaves each key the lapse.
func (m *midscript) expire(keys ...string) {
	m.t.Helper()
	for _, k := range keys {
		m.do(m.c.B().Pexpire().Key(k).Milliseconds(m.lapse.Milliseconds()).Build())
	}
}

// lease makes key a string lease of owner, with the lapse left.
func (m *midscript) lease(key, owner string) {
	m.t.Helper()
	m.do(m.c.B().Set().Key(key).Value(owner).Px(m.lapse).Build())
}

// share makes key a sorted set of one share, member, whose lease and key end in the lapse.
func (m *midscript) share(key, member string) {
	m.t.Helper()
	at := float64(time.Now().Add(m.lapse).UnixMilli()) // miniredis's clock is this process's
	m.do(m.c.B().Zadd().Key(key).ScoreMember().ScoreMember(at, member).Build())
	m.expire(key)
}

// queued puts waiter w1 in the queue q, qx, its place live for a minute.
func (m *midscript) queued() {
	m.t.Helper()
	m.do(m.c.B().Zadd().Key(m.p+"q").ScoreMember().ScoreMember(1, "w1").Build(),
		m.c.B().Zadd().Key(m.p+"qx").ScoreMember().ScoreMember(float64(time.Now().Add(time.Minute).UnixMilli()), "w1").Build())
}

func (m *midscript) exists(key string) bool {
	n, _ := m.c.Do(m.ctx, m.c.B().Exists().Key(key).Build()).AsInt64()
	return n == 1
}

// ints reads a reply that is an integer or a list of them.
func ints(r rueidis.RedisResult) ([]int64, error) {
	if v, err := r.AsInt64(); err == nil {
		return []int64{v}, nil
	}
	return r.AsIntSlice()
}

// midscriptCase is a script run with one of its commands stalled, and what it must reply.
type midscriptCase struct {
	name    string
	stalled string // the command stalled
	setup   func()
	script  *scripts.Script
	keys    []string
	args    []string
	argf    func() []string    // args, if setup decides them
	want    func([]int64) bool // the reply
	gone    []string           // keys that must not exist after it
	retry   bool               // the same call again gives the same reply (a release's retry)
	after   func(t *testing.T) // more to check
}

func (m *midscriptCase) run(t *testing.T, mt *midscript) {
	// The helpers of mt (setup's) fail this subtest, not its parent, which FailNow must not be
	// called on from here.
	parent := mt.t
	mt.t = t
	defer func() { mt.t = parent }()
	var reply []int64
	var err error
	args := m.args
	mt.stalled(t, m.stalled, func() { clearPrefix(t, mt.c, mt.p) }, func() {
		m.setup()
		if m.argf != nil {
			args = m.argf()
		}
	}, func() {
		reply, err = ints(m.script.Exec(mt.ctx, mt.c, m.keys, args))
	})
	if err != nil || !m.want(reply) {
		t.Fatalf("with its key expired in the script: %v, %v", reply, err)
	}
	if m.retry {
		reply, err = ints(m.script.Exec(mt.ctx, mt.c, m.keys, args))
		if err != nil || !m.want(reply) {
			t.Fatalf("retried: %v, %v", reply, err)
		}
	}
	for _, k := range m.gone {
		if mt.exists(k) {
			ttl, _ := mt.c.Do(mt.ctx, mt.c.B().Pttl().Key(k).Build()).AsInt64()
			t.Errorf("%s is left (PTTL %d)", k, ttl)
		}
	}
	if m.after != nil {
		m.after(t)
	}
}

func is(want ...int64) func([]int64) bool {
	return func(got []int64) bool { return slices.Equal(got, want) }
}

// clearPrefix deletes the keys under prefix p: each case of a table starts with no key of the
// last (a release record of owner "o", say).
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

// A lease renewed while its key's TTL ran out between the script's check of the owner and
// its PEXPIRE (PTTL in live_for, for a hash; ZADD for a share in a sorted set) was reported
// renewed, hiding the loss: extend.lua, every primitive's renewal, and a grant's
// confirmation. Each now reports the loss, and leaves no key behind.
func TestLeaseScriptsTellAKeyGoneInTheScript(t *testing.T) {
	t.Parallel()
	m := newMidscript(t, "r")
	p, lock := m.p, m.p+"lock"
	hold := func() { m.lease(lock, "o") }
	share := func() { m.share(lock, "o") }
	hash := func() { // a reentrant hold of owner "o", token 7
		m.do(m.c.B().Hset().Key(lock).FieldValue().FieldValue("o:o", "1").FieldValue("t", "7").Build())
		m.expire(lock)
	}
	lost := is(0)
	for _, tc := range []midscriptCase{
		{name: "extend (a string)", stalled: "PEXPIRE", setup: hold, script: scripts.Extend,
			keys: []string{lock}, args: []string{"s", "o", "30000"}},
		{name: "extend (a hash)", stalled: "PTTL", setup: hash, script: scripts.Extend,
			keys: []string{lock}, args: []string{"h", "o:o", "30000", "7"}},
		{name: "mutex_renew", stalled: "PEXPIRE", setup: hold, script: scripts.MutexRenew,
			keys: []string{lock, p + "q", p + "qx"}, args: []string{"o", "30000", p + "ch", "PUBLISH"}},
		{name: "election_renew", stalled: "PEXPIRE", setup: hold, script: scripts.ElectionRenew,
			keys: []string{lock, p + "q", p + "qx", p + "values"}, args: []string{"o", "30000", p + "ch", "PUBLISH", p + "obs", "w1", "1"}},
		{name: "rwmutex_renew (write)", stalled: "PEXPIRE", setup: hold, script: scripts.RWMutexRenew,
			keys: []string{lock, p + "r", p + "ww", p + "rq", p + "ra", p + "fence", p + "ops", p + "wo", p + "rel"},
			args: []string{"w", "o", "", "0", "30000", "100", "100", "60000", "60000", p + "ch", "PUBLISH"}},
		{name: "reentrant_renew", stalled: "PTTL", setup: hash, script: scripts.ReentrantRenew, keys: []string{lock, p + "q", p + "qx"}, args: []string{"o:o", "30000", "7", p + "ch", "PUBLISH"}},
		// Sorted sets of shares, owner -> expiry: the set expires after the ZSCORE, and the
		// ZADD made it again with the renewed share alone.
		{name: "extend (a sorted set of shares)", stalled: "ZADD", setup: share, script: scripts.Extend,
			keys: []string{lock}, args: []string{"z", "o", "30000"}},
		{name: "rwmutex_renew (read)", stalled: "ZADD", setup: share, script: scripts.RWMutexRenew,
			keys: []string{p + "w", lock, p + "ww", p + "rq", p + "ra", p + "fence", p + "ops", p + "wo", p + "rel"},
			args: []string{"r", "o", "", "0", "30000", "100", "100", "60000", "60000", p + "ch", "PUBLISH"}},
		{name: "semaphore_renew", stalled: "ZADD", setup: share, script: scripts.SemaphoreRenew,
			keys: []string{lock, p + "n", p + "q", p + "qx", p + "qn", p + "size", p + "ops"},
			args: []string{"o", "1", "2", "30000", "300", "100", p + "ch", "PUBLISH", "60000", ""}},
		// A grant's confirmation: lost, and the free lock handed on to the waiter queued.
		{name: "mutex_confirm", stalled: "PEXPIRE", setup: func() { hold(); m.queued() }, script: scripts.MutexConfirm,
			keys: []string{lock, p + "fence", p + "q", p + "qx"},
			args: []string{"o", "30000", "w0", "0", "100", p + "ch", "PUBLISH", "", windowArg, "60000"},
			after: func(t *testing.T) {
				if g, _ := m.c.Do(m.ctx, m.c.B().Get().Key(lock).Build()).ToString(); !strings.HasPrefix(g, "~w1:") {
					t.Errorf("the lock is %q, want a grant to the waiter w1", g)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.want = lost
			if tc.after == nil {
				tc.gone = []string{lock}
			}
			tc.run(t, m)
		})
	}
}

// An acquisition that finds the caller's own hold (a retried take, a re-entry, an adopted
// grant) met the same: with the hold's key expired after the script read it, the reply
// reported a claim that no key carried, or made a key of its own without a TTL. Now each
// does what Redis would with the key gone: fair takes the free lock again, with its key; a
// reentrant re-entry of a token is refused ({-2}), and another call, or a semaphore's, looks
// again at once; an undone reentrant attempt leaves no hash behind.
func TestAcquisitionsOfAnOwnHoldGoneInTheScript(t *testing.T) {
	t.Parallel()
	m := newMidscript(t, "a")
	p, lock := m.p, m.p+"lock"
	const w = "p1/1"
	rkeys := []string{lock, p + "fence", p + "ops", p + "q", p + "qx"}
	rargs := func(id, expect string) []string {
		return []string{"o", id, "30000", "60000", "60000", expect, "", "00", "100", p + "ch", "PUBLISH", "", "0"}
	}
	ids := 0
	id := func() string { ids++; return "r" + strconv.Itoa(ids) } // a new request id
	// held locks the reentrant mutex with request id, as owner "o", and leaves it 300 ms; it
	// returns the hold's token.
	held := func(id string) int64 {
		m.t.Helper()
		reply, err := scripts.ReentrantLock.Exec(m.ctx, m.c, rkeys, rargs(id, "0")).AsIntSlice()
		if err != nil || len(reply) < 3 || reply[0] != 1 {
			m.t.Fatalf("lock: %v, %v", reply, err)
		}
		m.expire(lock)
		return reply[2]
	}
	var retried, token string
	look := is(0, 0, 0, 0) // not held; the lock ends in 0 ms: look again at once
	for _, tc := range []midscriptCase{
		{name: "fair_acquire's retry of a take", stalled: "PEXPIRE",
			setup:  func() { m.lease(lock, w) },
			script: scripts.FairAcquire, keys: []string{lock, p + "fence", p + "q", p + "qx"},
			args: []string{w, "30000", "60000", "300", "0", p + "ch", "PUBLISH", "", "100"},
			want: func(r []int64) bool { return len(r) == 2 && r[0] == 1 && r[1] > 0 },
			after: func(t *testing.T) {
				v, _ := m.c.Do(m.ctx, m.c.B().Get().Key(lock).Build()).ToString()
				ttl, _ := m.c.Do(m.ctx, m.c.B().Pttl().Key(lock).Build()).AsInt64()
				if v != w || ttl < 10000 {
					t.Errorf("the lock is %q, PTTL %d: want the taker's, with its lease", v, ttl)
				}
			}},
		{name: "reentrant_lock's retry of a lock", stalled: "PEXPIRE", setup: func() { retried = id(); held(retried) },
			script: scripts.ReentrantLock, keys: rkeys, argf: func() []string { return rargs(retried, "0") },
			want: look, gone: []string{lock}},
		{name: "reentrant_lock's re-entry", stalled: "HINCRBY", setup: func() { held(id()) },
			script: scripts.ReentrantLock, keys: rkeys, args: rargs("again", "0"), want: look, gone: []string{lock}},
		{name: "reentrant_lock's re-entry, expired after its count", stalled: "HGET", setup: func() { held(id()) },
			script: scripts.ReentrantLock, keys: rkeys, args: rargs("again", "0"), want: look, gone: []string{lock}},
		{name: "reentrant_lock's re-entry of a token", stalled: "HINCRBY", setup: func() { token = strconv.FormatInt(held(id()), 10) },
			script: scripts.ReentrantLock, keys: rkeys, argf: func() []string { return rargs(id(), token) },
			want: is(-2), gone: []string{lock}},
		{name: "reentrant_abandon's undo of a counted attempt", stalled: "HSET", setup: func() {
			held(id())
			m.do(m.c.B().Hincrby().Key(lock).Field("o:o").Increment(1).Build(), // the attempt, counted
				m.c.B().Zadd().Key(p+"ops").ScoreMember().ScoreMember(float64(time.Now().UnixMilli()), "undo").Build())
			m.expire(lock)
		}, script: scripts.ReentrantAbandon, keys: rkeys,
			args: []string{"o", "undo", "60000", "w9", "300", "60000", p + "ch", "PUBLISH", "0", "0", "0"},
			want: is(1, 0), gone: []string{lock}},
		{name: "semaphore_acquire's retry of a take", stalled: "PTTL", setup: func() {
			m.share(p+"h", "w1")
			m.do(m.c.B().Hset().Key(p+"n").FieldValue().FieldValue("w1", "2").Build())
			m.expire(p + "n")
		}, script: scripts.SemaphoreAcquire, keys: []string{p + "h", p + "n", p + "q", p + "qx", p + "qn", p + "size", p + "ops"},
			args: []string{"w1", "2", "4", "30000", "300", "100", p + "ch", "PUBLISH", "60000", "0"},
			want: is(0, 0, 0), gone: []string{p + "h", p + "n"}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, m) })
	}
}

// The releases met the same: a hold whose key expired after the script read it was reported
// released, and a partial release (a reentrant hold given back by one, a semaphore's permits
// by some) wrote its count into a hash of its own, without a TTL, which then outlived every
// hold. Each now reports the loss, also to a retry of the same request, and leaves no such
// key; a release that passes the lock on to a waiter still does.
func TestReleasesTellAKeyGoneInTheScript(t *testing.T) {
	t.Parallel()
	m := newMidscript(t, "l")
	p := m.p
	rkeys := []string{p + "rlock", p + "fence", p + "ops", p + "q", p + "qx"}
	rargs := func(id string) []string {
		return []string{"o", id, "1", "60000", p + "ch", "PUBLISH", "7", windowArg, "60000"}
	}
	reentrant := func(count string) func() {
		return func() {
			m.do(m.c.B().Hset().Key(p+"rlock").FieldValue().FieldValue("o:o", count).FieldValue("t", "7").Build())
			m.expire(p + "rlock")
		}
	}
	granted := func(t *testing.T, key, field string) { // the waiter queued got the lock
		var g string
		if field == "" {
			g, _ = m.c.Do(m.ctx, m.c.B().Get().Key(key).Build()).ToString()
		} else {
			g, _ = m.c.Do(m.ctx, m.c.B().Hget().Key(key).Field(field).Build()).ToString()
		}
		if !strings.HasPrefix(g, "~w1:") {
			t.Errorf("the lock is %q, want a grant to the waiter w1", g)
		}
	}
	wkeys := []string{p + "w", p + "r", p + "ww", p + "rq", p + "ra", p + "fence", p + "ops", p + "wo", p + "rel"}
	wargs := func(mode string) []string {
		return []string{mode, "o", "", "0", "30000", "100", "100", "60000", "60000", p + "ch", "PUBLISH"}
	}
	skeys := []string{p + "h", p + "n", p + "q", p + "qx", p + "qn", p + "size", p + "ops"}
	sargs := func(n, id string) []string {
		return []string{"o", n, "4", "30000", "300", "100", p + "ch", "PUBLISH", "60000", id}
	}
	permits := func() {
		m.share(p+"h", "o")
		m.do(m.c.B().Hset().Key(p+"n").FieldValue().FieldValue("o", "2").Build())
		m.expire(p + "n")
	}
	for _, tc := range []midscriptCase{
		{name: "mutex_release", stalled: "DEL",
			setup:  func() { m.lease(p+"lock", "o") },
			script: scripts.MutexRelease, keys: []string{p + "lock", p + "fence", p + "q", p + "qx", p + "rel"},
			args: []string{"o", windowArg, "60000", p + "ch", "PUBLISH", "30000"}, want: is(0), gone: []string{p + "lock"}},
		// With a waiter, the lock is passed on all the same (a grant: lib/queue.lua).
		// (The holder's value marked as waited for, as the waiter's queueing does.)
		{name: "mutex_release, a waiter queued", stalled: "ZRANGE", setup: func() {
			m.lease(p+"lock", "o+")
			m.queued()
		}, script: scripts.MutexRelease, keys: []string{p + "lock", p + "fence", p + "q", p + "qx", p + "rel"},
			args: []string{"o", windowArg, "60000", p + "ch", "PUBLISH", "30000"}, want: is(0),
			after: func(t *testing.T) { granted(t, p+"lock", "") }},
		{name: "reentrant_unlock, one of two holds", stalled: "HSET", setup: reentrant("2"),
			script: scripts.ReentrantUnlock, keys: rkeys, args: rargs("u1"), want: is(0), gone: []string{p + "rlock"}},
		{name: "reentrant_unlock, the last hold", stalled: "DEL", setup: reentrant("1"),
			script: scripts.ReentrantUnlock, keys: rkeys, args: rargs("u2"), want: is(0), gone: []string{p + "rlock"}},
		{name: "reentrant_unlock, the last hold, a waiter queued", stalled: "EXISTS",
			setup:  func() { reentrant("1")(); m.queued() },
			script: scripts.ReentrantUnlock, keys: rkeys, args: rargs("u3"), want: is(0),
			after: func(t *testing.T) { granted(t, p+"rlock", "g") }},
		{name: "rwmutex_unlock, a write hold", stalled: "DEL",
			setup:  func() { m.lease(p+"w", "o") },
			script: scripts.RWMutexUnlock, keys: wkeys, args: wargs("w"), want: is(0), gone: []string{p + "w"}},
		{name: "rwmutex_unlock, a read share", stalled: "ZREM", setup: func() { m.share(p+"r", "o") },
			script: scripts.RWMutexUnlock, keys: wkeys, args: wargs("r"), want: is(0), gone: []string{p + "r"}},
		{name: "semaphore_release, some permits", stalled: "HSET", setup: permits,
			script: scripts.SemaphoreRelease, keys: skeys, args: sargs("1", "s1"), want: is(0), gone: []string{p + "h", p + "n"}},
		{name: "semaphore_release, every permit", stalled: "ZREM", setup: permits,
			script: scripts.SemaphoreRelease, keys: skeys, args: sargs("2", "s2"), want: is(0), gone: []string{p + "h", p + "n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.retry = true
			tc.run(t, m)
		})
	}
}

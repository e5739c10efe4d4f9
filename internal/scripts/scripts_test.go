package scripts_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// window is the hand-off window the tests give the scripts: how long a grant lasts unless its
// waiter confirms or adopts it (and a reader's admission lasts, and how long the next waiters
// watch it). Long, so that the grant is still there for the calls a test makes after the
// release on a busy machine; well short of the 10 s lease, so that a grant's TTL and a
// confirmed lease's tell apart.
const window = 5000

var windowArg = strconv.Itoa(window)

// mutexKeys is a mutex's key set under a test prefix.
type mutexKeys struct {
	lock, fence, q, qx, ch string
	pub                    string
}

func newKeys(t *testing.T, b *redistest.Backend, c rueidis.Client) mutexKeys {
	base := b.Prefix(t) + "{m}:mutex"
	return mutexKeys{base, base + ":fence", base + ":q", base + ":qx", base + ":ch", b.Pub()}
}

type env struct {
	t *testing.T
	b *redistest.Backend
	c rueidis.Client
	k mutexKeys
}

func setup(t *testing.T, b *redistest.Backend) *env {
	c := b.Client(t)
	return &env{t, b, c, newKeys(t, b, c)}
}

// acquire runs mutex_acquire.lua: ttl 10 s, requeue as given, entry slack 5 s.
func (e *env) acquire(owner, waiter string, requeue bool) []int64 {
	e.t.Helper()
	flags := "010" // queued
	if requeue {
		flags = "110"
	}
	return e.acquireWith(owner, waiter, flags, "", "0")
}

// own returns the owner value the mutex scripts get for a test's name o: shaped as distsync
// makes them ('<handle id>:<sequence>'), which a waiter marks as waited for (lib/queue.lua).
// A grant ('~...'), a fair waiter id (with a '/') and "" are left as they are.
func own(o string) string {
	if o == "" || strings.HasPrefix(o, "~") || strings.ContainsAny(o, ":/") {
		return o
	}
	return "h:" + o
}

func (e *env) acquireWith(owner, waiter, flags, backup, last string) []int64 {
	e.t.Helper()
	owner = own(owner)
	v, err := scripts.MutexAcquire.Exec(context.Background(), e.c, []string{e.k.lock, e.k.fence, e.k.q, e.k.qx},
		[]string{owner, "10000", "60000", waiter, flags, "5000", e.k.ch, e.k.pub, backup, last}).AsIntSlice()
	if err != nil {
		e.t.Fatalf("acquire: %v", err)
	}
	return v
}

func (e *env) release(owner string) int64 {
	e.t.Helper()
	owner = own(owner)
	v, err := scripts.MutexRelease.Exec(context.Background(), e.c, []string{e.k.lock, e.k.fence, e.k.q, e.k.qx, e.k.lock + ":rel"},
		[]string{owner, windowArg, "60000", e.k.ch, e.k.pub, "10000"}).AsInt64()
	if err != nil {
		e.t.Fatalf("release: %v", err)
	}
	return v
}

func (e *env) confirm(owner, waiter string, requeue bool, backup string) int64 {
	e.t.Helper()
	r := "0"
	if requeue {
		r = "1"
	}
	v, err := scripts.MutexConfirm.Exec(context.Background(), e.c, []string{e.k.lock, e.k.fence, e.k.q, e.k.qx},
		[]string{owner, "10000", waiter, r, "5000", e.k.ch, e.k.pub, backup, windowArg, "60000"}).AsInt64()
	if err != nil {
		e.t.Fatalf("confirm: %v", err)
	}
	return v
}

// leave runs mutex_leave.lua for waiter ("": none of its process left, nothing to dequeue).
func (e *env) leave(waiter, owner string, last int64) int64 {
	e.t.Helper()
	dequeue := "1"
	if waiter == "" {
		waiter, dequeue = "nobody", "0"
	}
	return e.leaveArgs(waiter, owner, last, dequeue, 0)
}

func (e *env) leaveArgs(waiter, owner string, last int64, dequeue string, grant int64) int64 {
	e.t.Helper()
	owner = own(owner)
	v, err := scripts.MutexLeave.Exec(context.Background(), e.c, []string{e.k.lock, e.k.fence, e.k.q, e.k.qx},
		[]string{waiter, owner, windowArg, "60000", e.k.ch, e.k.pub, "60000", strconv.FormatInt(last, 10), dequeue,
			strconv.FormatInt(grant, 10)}).AsIntSlice()
	if err != nil || len(v) != 2 {
		e.t.Fatalf("leave: %v, %v", v, err)
	}
	return v[0]
}

// grantee returns the waiter and token of the grant the lock holds, or "" if it holds none.
func (e *env) grantee() (string, int64) {
	v := e.get(e.k.lock)
	if !strings.HasPrefix(v, "~") {
		return "", 0
	}
	w, tok, _ := strings.Cut(v[1:], ":")
	n, _ := strconv.ParseInt(tok, 10, 64)
	return w, n
}

// listen subscribes to the channels of the given waiters and returns what arrives on them.
func (e *env) listen(waiters ...string) chan [2]string {
	e.t.Helper()
	out := make(chan [2]string, 16)
	c := e.b.Client(e.t)
	for _, w := range waiters {
		ch := e.k.ch + ":" + w
		cmd := c.B().Subscribe().Channel(ch).Build()
		if e.b.Sharded() {
			cmd = c.B().Ssubscribe().Channel(ch).Build()
		}
		ready := make(chan struct{})
		ctx := rueidis.WithOnSubscriptionHook(context.Background(), func(rueidis.PubSubSubscription) { close(ready) })
		go func() {
			_ = c.Receive(ctx, cmd, func(m rueidis.PubSubMessage) { out <- [2]string{strings.TrimPrefix(m.Channel, e.k.ch+":"), m.Message} })
		}()
		<-ready
	}
	return out
}

// expect waits for the given (waiter, message) pairs, in any order: each waiter's channel has
// its own subscription, and they are not ordered with each other.
func (e *env) expect(msgs chan [2]string, pairs ...string) {
	e.t.Helper()
	want := map[[2]string]bool{}
	for i := 0; i+1 < len(pairs); i += 2 {
		want[[2]string{pairs[i], pairs[i+1]}] = true
	}
	for len(want) > 0 {
		select {
		case m := <-msgs:
			if !want[m] {
				e.t.Fatalf("unexpected message %q on %s's channel; still waiting for %v", m[1], m[0], want)
			}
			delete(want, m)
		case <-time.After(20 * time.Second):
			e.t.Fatalf("messages not received: %v", want)
		}
	}
}

func (e *env) do(cmd rueidis.Completed) rueidis.RedisResult {
	return e.c.Do(context.Background(), cmd)
}

func (e *env) get(key string) string {
	v, err := e.do(e.c.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return ""
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// everyKeyExpires fails if a key of the mutex lives without a TTL.
func (e *env) everyKeyExpires() {
	e.t.Helper()
	for _, k := range []string{e.k.lock, e.k.fence, e.k.q, e.k.qx} {
		if ttl, _ := e.do(e.c.B().Pttl().Key(k).Build()).AsInt64(); ttl == -1 {
			e.t.Fatalf("key %s has no TTL", k)
		}
	}
}

// serverMs returns the server's clock in ms.
func (e *env) serverMs() int64 {
	e.t.Helper()
	tm, err := e.do(e.c.B().Time().Build()).AsStrSlice()
	if err != nil || len(tm) != 2 {
		e.t.Fatalf("TIME: %v, %v", tm, err)
	}
	s, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	return s*1000 + us/1000
}

// leaseLeft fails unless the PTTL of key is what a lease of ttl ms, set by a call that ran
// after the server time since (ms), can have left now: no more than ttl, no less than ttl
// less the server time that passed since (a loaded machine can put seconds between two
// calls).
func (e *env) leaseLeft(what, key string, ttl, since int64) {
	e.t.Helper()
	pttl, err := e.do(e.c.B().Pttl().Key(key).Build()).AsInt64()
	passed := e.serverMs() - since
	if err != nil || pttl > ttl || pttl < ttl-passed-1 {
		e.t.Fatalf("PTTL %d (%v) %s, want the %d ms lease less the %d ms since", pttl, err, what, ttl, passed)
	}
}

// mark is what quiet publishes.
const mark = "mark"

// quiet fails if a message came on the channel of any of waiters (msgs listens to them)
// before a mark it publishes on each: one channel's messages come in the order Redis
// published them, so a message a script published is read before a mark published after
// it. The mark is published by a script over a key of the mutex's slot, on the node where
// its scripts run, as they publish.
func (e *env) quiet(msgs chan [2]string, what string, waiters ...string) {
	e.t.Helper()
	pending := map[string]bool{}
	for _, w := range waiters {
		pending[w] = true
		err := e.do(e.c.B().Eval().Script("return redis.call(ARGV[1], ARGV[2], ARGV[3])").Numkeys(1).Key(e.k.lock).
			Arg(e.k.pub, e.k.ch+":"+w, mark).Build()).Error()
		if err != nil {
			e.t.Fatalf("publishing a mark: %v", err)
		}
	}
	for len(pending) > 0 {
		select {
		case m := <-msgs:
			if m[1] != mark {
				e.t.Fatalf("%s published %q on %s's channel", what, m[1], m[0])
			}
			delete(pending, m[0])
		case <-time.After(20 * time.Second):
			e.t.Fatalf("marks not received on the channels of %v", pending)
		}
	}
}

func TestAcquireRelease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		before := e.serverMs()
		got := e.acquire("o1", "w1", false)
		if got[0] != 1 {
			t.Fatalf("acquire on a free mutex = %v", got)
		}
		if now := time.Now().UnixMicro(); got[1] < now-int64(time.Minute/time.Microsecond) {
			t.Fatalf("token %d does not follow the server clock (%d)", got[1], now)
		}
		if v := e.get(e.k.lock); v != own("o1") {
			t.Fatalf("lock = %q", v)
		}
		e.everyKeyExpires()
		// The lock's 10 s lease, less the server time since the first acquire ran.
		second := e.acquire("o2", "w2", false)
		if passed := e.serverMs() - before; second[0] != 0 || second[1] > 10000 || second[1] < 10000-passed-1 || second[2] != 0 {
			t.Fatalf("acquire of a held mutex = %v, want {0, 10000 less the %d ms since, 0}", second, passed)
		}
		e.everyKeyExpires()
		if e.release("o2") != 0 {
			t.Fatal("release by a non-owner succeeded")
		}
		if e.release("o1") != 1 {
			t.Fatal("release by the owner failed")
		}
		// w2 was queued: the lock is now granted to it, with the next token, for the window.
		w, tok := e.grantee()
		if w != "w2" || tok <= got[1] {
			t.Fatalf("after release, lock = %q, want a grant to w2 with a token above %d", e.get(e.k.lock), got[1])
		}
		if ttl, _ := e.do(e.c.B().Pttl().Key(e.k.lock).Build()).AsInt64(); ttl <= 0 || ttl > window {
			t.Fatalf("grant TTL %d ms, want the %d ms window", ttl, window)
		}
		if n, _ := e.do(e.c.B().Zcard().Key(e.k.q).Build()).AsInt64(); n != 0 {
			t.Fatalf("the grantee is still queued (%d entries)", n)
		}
	})
}

// A release grants the lock to the head of the queue and tells only it, and asks the next in
// line to watch; nobody else can take the lock meanwhile; the grantee's confirm extends the
// grant to its lease and tells the watcher.
func TestGrantGoesToTheHeadOnly(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		e.acquire("o1", "", false)
		e.acquire("o2", "w2", false)
		e.acquire("o3", "w3", false)
		msgs := e.listen("w2", "w3")
		e.release("o1")
		_, tok := e.grantee()
		e.expect(msgs, "w2", "g "+strconv.FormatInt(tok, 10)+" w3 "+windowArg+" w2", "w3", "w "+windowArg+" w3")
		if got := e.acquireWith("o4", "", "000", "", "0"); got[0] != 0 || got[2] != 1 {
			t.Fatalf("TryLock during a grant = %v, want {0, window, 1}", got)
		}
		if got := e.acquire("o5", "w3", false); got[0] != 0 || got[2] != 1 {
			t.Fatalf("acquire by the next waiter during a grant = %v", got)
		}
		owner := "~w2:" + strconv.FormatInt(tok, 10)
		confirmed := e.serverMs()
		if e.confirm(owner, "w2", false, "w3") != 1 {
			t.Fatal("confirm by the grantee failed")
		}
		e.expect(msgs, "w3", "c w3")
		e.leaseLeft("after the confirm", e.k.lock, 10000, confirmed)
		if e.confirm("~w2:1", "w2", false, "") != 0 {
			t.Fatal("confirm of a grant that is not held succeeded")
		}
		// w3 is next.
		e.release(owner)
		if w, _ := e.grantee(); w != "w3" {
			t.Fatalf("lock = %q, want a grant to w3", e.get(e.k.lock))
		}
	})
}

// A grant whose message was missed is adopted by its waiter's next attempt, unless the
// attempt says that the process took that grant already.
func TestGrantIsAdoptedOnce(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		e.acquire("o1", "", false)
		e.acquire("o2", "w2", false)
		e.release("o1")
		_, tok := e.grantee()
		last := strconv.FormatInt(tok, 10)
		if got := e.acquireWith("o3", "w2", "011", "", last); got[0] != 0 {
			t.Fatalf("an attempt adopted a grant its process had taken: %v", got)
		}
		if got := e.acquireWith("o4", "w2", "011", "", "0"); got[0] != 1 || got[1] != tok {
			t.Fatalf("adopting the grant = %v, want {1, %d}", got, tok)
		}
		if v := e.get(e.k.lock); v != own("o4") {
			t.Fatalf("lock = %q after adoption", v)
		}
	})
}

// A fencing token is one above the last even when the server clock is behind it.
func TestTokenNeverGoesBack(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		const ahead = int64(5_000_000_000_000_000) // far past the current clock in µs
		e.do(e.c.B().Set().Key(e.k.fence).Value(strconv.FormatInt(ahead, 10)).Build())
		got := e.acquire("o1", "", false)
		if got[1] != ahead+1 {
			t.Fatalf("token %d, want %d", got[1], ahead+1)
		}
		e.acquire("x", "w", false)
		e.release("o1") // grants to w, with the next token
		if _, tok := e.grantee(); tok != ahead+2 {
			t.Fatalf("grant token %d, want %d", tok, ahead+2)
		}
		if v := e.get(e.k.fence); v != strconv.FormatInt(ahead+2, 10) {
			t.Fatalf("fence stored as %q (exponent notation would lose digits)", v)
		}
	})
}

// Requeue keeps a process queued (at the tail) after it takes the lock, for its other
// goroutines: on acquiring, and on confirming a grant.
func TestRequeueGoesToTheTail(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		e.acquire("o1", "w1", false)
		e.acquire("x", "w2", false)
		e.acquire("x", "w3", false)
		e.release("o1") // grants to w2
		_, tok := e.grantee()
		if e.confirm("~w2:"+strconv.FormatInt(tok, 10), "w2", true, "w3") != 1 {
			t.Fatal("confirm failed")
		}
		order := func() string {
			ids, _ := e.do(e.c.B().Zrange().Key(e.k.q).Min("0").Max("-1").Build()).AsStrSlice()
			return strings.Join(ids, ",")
		}
		if got := order(); got != "w3,w2" {
			t.Fatalf("queue after a requeue = %v, want w3,w2", got)
		}
		e.release("~w2:" + strconv.FormatInt(tok, 10)) // grants to w3
		_, tok3 := e.grantee()
		if got := e.acquireWith("o3", "w3", "111", "", "0"); got[0] != 1 || got[1] != tok3 {
			t.Fatalf("adopt with requeue = %v", got)
		}
		if got := order(); got != "w2,w3" {
			t.Fatalf("queue after a requeue = %v, want w2,w3", got)
		}
		e.everyKeyExpires()
	})
}

// A confirm that arrives after its holder already released (they travel on different
// connections) requeues the holder's other waiters and, the lock being free, hands it on.
func TestLateConfirmHandsTheFreeLockOn(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		e.acquire("o1", "", false)
		e.acquire("x", "w2", false)
		e.release("o1") // grants to w2, whose process has more goroutines waiting
		_, tok := e.grantee()
		owner := "~w2:" + strconv.FormatInt(tok, 10)
		e.release(owner) // released before the confirm: nobody queued, the lock is freed
		if v := e.get(e.k.lock); v != "" {
			t.Fatalf("lock = %q", v)
		}
		if e.confirm(owner, "w2", true, "") != 0 {
			t.Fatal("confirm of a released grant succeeded")
		}
		if w, tok2 := e.grantee(); w != "w2" || tok2 <= tok {
			t.Fatalf("after the late confirm, lock = %q, want a new grant to w2", e.get(e.k.lock))
		}
	})
}

// A queued waiter whose entry lapsed (its process stopped re-checking) is skipped.
func TestDeadWaitersAreSkipped(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		e.acquire("o1", "", false)
		e.acquire("x", "dead", false)
		e.acquire("x", "alive", false)
		e.do(e.c.B().Zadd().Key(e.k.qx).ScoreMember().ScoreMember(1, "dead").Build()) // lapsed long ago
		e.release("o1")
		if w, _ := e.grantee(); w != "alive" {
			t.Fatalf("lock = %q, want a grant to the live waiter", e.get(e.k.lock))
		}
		if n, _ := e.do(e.c.B().Zcard().Key(e.k.q).Build()).AsInt64(); n != 0 {
			t.Fatalf("%d entries left in the queue", n)
		}
		_, tok := e.grantee()
		e.acquire("x", "dead2", false)
		e.do(e.c.B().Zadd().Key(e.k.qx).ScoreMember().ScoreMember(1, "dead2").Build())
		e.release("~alive:" + strconv.FormatInt(tok, 10))
		if v := e.get(e.k.lock); v != "" {
			t.Fatalf("with only dead waiters, lock = %q after release, want free", v)
		}
	})
}

// An attempt voided by leave fails when it arrives late, even on a free lock; an attempt that
// ran before leave is undone and passed on; a grant to a waiter that leaves is passed on unless
// one of its process's goroutines took it (its token is not above the process's last).
func TestLeaveVoidsOrPassesOn(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		if e.leave("", "late", 0) != 0 {
			t.Fatal("leave of an attempt that had not run passed something on")
		}
		if got := e.acquire("late", "", false); got[0] != 0 {
			t.Fatalf("a voided attempt acquired: %v", got)
		}
		if v := e.get(e.k.lock); v != "" {
			t.Fatalf("lock = %q after a voided attempt", v)
		}
		e.everyKeyExpires()

		e.acquire("early", "w1", false)
		e.acquire("x", "w2", false)
		if e.leave("", "early", 0) != 1 {
			t.Fatal("leave did not pass on the lock an abandoned attempt took")
		}
		_, tok := e.grantee()
		if e.leave("", "", 0) != 0 {
			t.Fatal("leave without a waiter or an owner passed something on")
		}
		if e.leave("w2", "", tok) != 0 {
			t.Fatal("leave passed on a grant one of the waiter's goroutines holds (token up to its last)")
		}
		if w, _ := e.grantee(); w != "w2" {
			t.Fatalf("lock = %q, want the grant to w2 untouched", e.get(e.k.lock))
		}
		if e.leave("w2", "", tok-1) != 1 {
			t.Fatal("leave did not pass on a grant to the departing waiter that none of its goroutines took")
		}
		if v := e.get(e.k.lock); v != "" {
			t.Fatalf("lock = %q, want free", v)
		}
		if n, _ := e.do(e.c.B().Zscore().Key(e.k.qx).Member("!~w2:" + strconv.FormatInt(tok, 10)).Build()).AsFloat64(); n != 0 {
			t.Fatal("leave voided a grant")
		}
	})
}

// A leave that passes on a grant to its waiter still voids the attempt it did not wait for:
// arriving late, on a lock the pass-on left free, the attempt must not take it. A grant named
// by its exact token is passed on only while the lock is that grant.
func TestLeavePassingOnAGrantStillVoidsTheAttempt(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		e.acquire("x", "", false)
		e.acquire("y", "w1", false) // queued
		e.release("x")              // granted to w1
		if w, _ := e.grantee(); w != "w1" {
			t.Fatalf("lock = %q, want a grant to w1", e.get(e.k.lock))
		}
		if e.leave("w1", "late", 0) != 1 {
			t.Fatal("leave did not pass on the grant")
		}
		if got := e.acquire("late", "", false); got[0] != 0 {
			t.Fatalf("the attempt the leave did not wait for took the free lock: %v", got)
		}
		if v := e.get(e.k.lock); v != "" {
			t.Fatalf("lock = %q, want free", v)
		}

		e.acquire("x2", "", false)
		e.acquire("y2", "w2", false)
		e.release("x2")
		_, tok := e.grantee()
		if e.leaveArgs("w2", "", 0, "0", tok-1) != 0 {
			t.Fatal("leave passed on a grant whose token it did not name")
		}
		if e.leaveArgs("w2", "", tok, "0", tok) != 1 {
			t.Fatal("leave did not pass on the grant it named")
		}
	})
}

// The uncontended take of a mutex (SET NX, then the token) looks for a void mark only when the
// fence is marked for one: a leave that voids an attempt marks the fence (a '0' before its
// token, the same integer to every reader). While the void mark lives, the fence keeps the
// mark through other takes and hand-offs, tokens keep increasing, and the voided attempt, late
// on a free lock, takes nothing and hands out no token. Once no void mark is live, the next
// take drops the mark.
func TestVoidMarkOnTheFence(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		take := func(owner string) []int64 { return e.acquireWith(owner, "", "000", "", "0") } // the fast path
		token := func(what string, got []int64) int64 {
			t.Helper()
			if len(got) != 2 || got[0] != 1 {
				t.Fatalf("%s: %v, want acquired", what, got)
			}
			return got[1]
		}
		fence := func() (string, int64) {
			t.Helper()
			v := e.get(e.k.fence)
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("fence %q is not an integer: %v", v, err)
			}
			return v, n
		}
		first := token("first take", take("o1"))
		if v, _ := fence(); strings.HasPrefix(v, "0") {
			t.Fatalf("fence %q marked before any void", v)
		}
		e.release("o1")
		if e.leave("", "late", 0) != 0 {
			t.Fatal("leave of an attempt that had not run passed something on")
		}
		if v, n := fence(); !strings.HasPrefix(v, "0") || n != first {
			t.Fatalf("fence %q after the void, want %d marked with a leading 0", v, first)
		}
		second := token("a take while the void lives", take("o2"))
		if second <= first {
			t.Fatalf("token %d after %d", second, first)
		}
		e.release("o2")
		if v, n := fence(); !strings.HasPrefix(v, "0") || n != second {
			t.Fatalf("fence %q after a take while the void lives, want %d, still marked", v, second)
		}
		e.acquire("o3", "", false)
		e.acquire("x", "w1", false) // queued
		e.release("o3")             // granted to w1: a token handed out inside Redis
		_, granted := e.grantee()
		if v, n := fence(); !strings.HasPrefix(v, "0") || n != granted || granted <= second {
			t.Fatalf("fence %q after a hand-off with token %d (last %d), want it, still marked", v, granted, second)
		}
		e.leave("w1", "", 0) // passes the grant on: free
		before := e.get(e.k.fence)
		if got := take("late"); got[0] != 0 {
			t.Fatalf("the voided attempt took the free lock: %v", got)
		}
		if v := e.get(e.k.lock); v != "" {
			t.Fatalf("lock = %q after the voided attempt", v)
		}
		if v := e.get(e.k.fence); v != before {
			t.Fatalf("fence %q after the voided attempt, want %q as it was", v, before)
		}
		// The void mark lapses: the next take drops the fence's mark.
		e.do(e.c.B().Zadd().Key(e.k.qx).ScoreMember().ScoreMember(1, "!"+own("late")).Build())
		_, last := fence()
		next := token("a take after the void lapsed", take("o4"))
		if v, n := fence(); strings.HasPrefix(v, "0") || n != next || next <= last {
			qx, _ := e.do(e.c.B().Zrange().Key(e.k.qx).Min("0").Max("-1").Withscores().Build()).ToAny()
			t.Fatalf("fence %q after a take with token %d (last %d), want it unmarked; qx %v", v, next, last, qx)
		}
		e.release("o4")
	})
}

// The uncontended release deletes the lock without looking at the queue: a holder's value gets
// a '+' after it when a waiter queues behind it (or when it takes the lock with others queued),
// and only then does the release hand the lock on. A renewal and a leave know the marked value
// as the holder's; a value not shaped as distsync's is never marked; a release of an unmarked
// hold, taken while only a lapsed entry was queued, frees the lock.
func TestWaitedForMark(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		take := func(owner string) []int64 { return e.acquireWith(owner, "", "000", "", "0") } // the fast path
		renew := func(owner string) int64 {
			t.Helper()
			v, err := scripts.MutexRenew.Exec(context.Background(), e.c, []string{e.k.lock, e.k.q, e.k.qx},
				[]string{own(owner), "10000", e.k.ch, e.k.pub}).AsInt64()
			if err != nil {
				t.Fatalf("renew: %v", err)
			}
			return v
		}
		if got := take("o1"); got[0] != 1 {
			t.Fatalf("take of a free lock = %v", got)
		}
		if v := e.get(e.k.lock); v != own("o1") {
			t.Fatalf("lock = %q with nobody waiting, want %q unmarked", v, own("o1"))
		}
		if got := e.acquire("x", "w1", false); got[0] != 0 {
			t.Fatalf("acquire of a held lock = %v", got)
		}
		if v := e.get(e.k.lock); v != own("o1")+"+" {
			t.Fatalf("lock = %q with a waiter queued, want %q marked", v, own("o1")+"+")
		}
		if renew("o1") != 1 {
			t.Fatal("the holder's renewal failed on its marked value")
		}
		if e.release("o1") != 1 {
			t.Fatal("the release of the marked hold failed")
		}
		if w, _ := e.grantee(); w != "w1" {
			t.Fatalf("lock = %q after the release of a marked hold, want a grant to w1", e.get(e.k.lock))
		}
		e.leave("w1", "", 0) // passes the grant on: free, nobody queued

		// A hold taken while only a lapsed entry is queued is not marked; its release frees
		// the lock (the entry's waiter stopped re-checking).
		e.do(e.c.B().Zadd().Key(e.k.q).ScoreMember().ScoreMember(1, "dead").Build())
		e.do(e.c.B().Zadd().Key(e.k.qx).ScoreMember().ScoreMember(1, "dead").Build())
		if got := take("o2"); got[0] != 1 {
			t.Fatalf("take = %v", got)
		}
		if e.release("o2") != 1 {
			t.Fatal("the release of an unmarked hold failed")
		}
		if v := e.get(e.k.lock); v != "" {
			t.Fatalf("lock = %q after the release of an unmarked hold, want free", v)
		}

		// A leave that finds the attempt it gave up on holding the lock, marked, passes it on.
		if got := take("o3"); got[0] != 1 {
			t.Fatalf("take = %v", got)
		}
		e.acquire("y", "w2", false) // queued: marks o3's hold
		if e.leave("", "o3", 0) != 1 {
			t.Fatal("leave did not pass on the marked lock its abandoned attempt took")
		}
		if w, _ := e.grantee(); w != "w2" {
			t.Fatalf("lock = %q, want a grant to w2", e.get(e.k.lock))
		}
		e.leave("w2", "", 0)

		// Someone else's value is never marked.
		e.do(e.c.B().Set().Key(e.k.lock).Value("someone").Px(10 * time.Second).Build())
		e.acquire("z", "w3", false)
		if v := e.get(e.k.lock); v != "someone" {
			t.Fatalf("lock = %q after a waiter queued behind a foreign value, want it untouched", v)
		}
	})
}

// A release retried after its reply was lost knows it went through (rel), while one that finds
// the lock lost meanwhile (gone without its release: Redis restarted empty, say) reports it.
func TestRetriedReleaseTellsAReleaseFromALoss(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		e.acquire("a", "", false)
		first := e.release("a")
		retry := e.release("a")
		if first != 1 || retry != 1 {
			t.Fatal("a release, and its retry, must both report it released")
		}
		e.acquire("b", "", false)
		e.do(e.c.B().Del().Key(e.k.lock).Build()) // lost without a release
		if e.release("b") != 0 {
			t.Fatal("a release of a lock lost meanwhile reported it released")
		}
	})
}

// The record of releases keeps the last 16 at least (a retry after 15 other releases of the
// name finds its own), and never more than 31 (it is cut back to 16 when it reaches 32).
func TestReleaseRecordKeepsSixteenToThirtyOne(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		hold := func(owner string) {
			e.acquire(owner, "", false)
			if e.release(owner) != 1 {
				t.Fatalf("release of %s: not released", owner)
			}
		}
		rel := e.k.lock + ":rel"
		for i := range 100 {
			hold(fmt.Sprintf("o%d", i))
			n, _ := e.do(e.c.B().Llen().Key(rel).Build()).AsInt64()
			if want := min(i+1, 16); n < int64(want) || n > 31 {
				t.Fatalf("after %d releases the record holds %d, want %d to 31", i+1, n, want)
			}
			if i >= 15 && e.release(fmt.Sprintf("o%d", i-15)) != 1 {
				t.Fatalf("the retried release of o%d, after 15 others, was reported lost", i-15)
			}
		}
	})
}

func TestExtend(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		e.acquire("o1", "", false)
		ext := func(owner string) int64 {
			v, err := scripts.Extend.Exec(context.Background(), e.c, []string{e.k.lock}, []string{"s", own(owner), "30000"}).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		if ext("other") != 0 {
			t.Fatal("extend by a non-owner succeeded")
		}
		if ext("o1") != 1 {
			t.Fatal("extend by the owner failed")
		}
		if ttl, _ := e.do(e.c.B().Pttl().Key(e.k.lock).Build()).AsInt64(); ttl <= 10000 {
			t.Fatalf("PTTL %d after extending to 30 s", ttl)
		}
		e.release("o1")
		if ext("o1") != 0 {
			t.Fatal("extend of a released lock succeeded")
		}
	})
}

// DoMulti falls back to EVAL for scripts the server does not know.
func TestDoMultiLoadsMissingScripts(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		if b.Name != redistest.Mini {
			for _, c := range b.Nodes(t) {
				c.Do(context.Background(), c.B().ScriptFlush().Build())
			}
		}
		e.acquire("o1", "", false)
		res := scripts.DoMulti(context.Background(), e.c, []scripts.Call{
			{Script: scripts.Extend, Keys: []string{e.k.lock}, Args: []string{"s", own("o1"), "10000"}},
			{Script: scripts.Extend, Keys: []string{e.k.lock}, Args: []string{"s", "nope", "10000"}},
		})
		for i, want := range []int64{1, 0} {
			if v, err := res[i].AsInt64(); err != nil || v != want {
				t.Fatalf("call %d = %v, %v; want %d", i, v, err, want)
			}
		}
	})
}

// fairAcquire runs fair_acquire.lua for waiter w on e's keys: ttl 10 s, waiter lease 30 s
// (a waiter's place lives that long unless renewed: long, for a loaded machine's stalls).
func (e *env) fairAcquire(w string, try bool) []int64 {
	e.t.Helper()
	t := "0"
	if try {
		t = "1"
	}
	v, err := scripts.FairAcquire.Exec(context.Background(), e.c, []string{e.k.lock, e.k.fence, e.k.q, e.k.qx},
		[]string{w, "10000", "60000", "30000", t, e.k.ch, e.k.pub, "", "5000"}).AsIntSlice()
	if err != nil {
		e.t.Fatalf("fair acquire: %v", err)
	}
	return v
}

// A fair lock goes in arrival order; a waiter that leaves while the lock is being handed to it
// passes it on to the next waiter (not into a void), and a late attempt of a waiter that left
// does nothing.
func TestFairHandOffRacingWithLeave(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		if got := e.fairAcquire("p/holder", false); got[0] != 1 {
			t.Fatalf("fair acquire of a free lock = %v", got)
		}
		for _, w := range []string{"p/a", "q/b", "p/c"} {
			if got := e.fairAcquire(w, false); got[0] != 0 {
				t.Fatalf("fair acquire of a held lock by %s = %v", w, got)
			}
		}
		if got := e.fairAcquire("q/try", true); got[0] != 0 {
			t.Fatalf("TryLock overtook the queue: %v", got)
		}
		msgs := e.listen("p", "q")
		e.release("p/holder")
		w, tok := e.grantee()
		if w != "p/a" {
			t.Fatalf("the lock was granted to %q, want the first waiter p/a", w)
		}
		// The next two watch the grant: the backup for a window, the next for two.
		e.expect(msgs, "p", "g "+strconv.FormatInt(tok, 10)+" q/b,p/c "+windowArg+" p/a", "q", "w "+windowArg+" q/b",
			"p", "w "+strconv.Itoa(2*window)+" p/c")
		// p/a gives up just as the grant reaches it: the lock goes on to q/b.
		v, err := scripts.FairLeave.Exec(context.Background(), e.c, []string{e.k.lock, e.k.fence, e.k.q, e.k.qx},
			[]string{"p/a", windowArg, "60000", e.k.ch, e.k.pub, "60000"}).AsInt64()
		if err != nil || v != 1 {
			t.Fatalf("fair leave of the grantee = %v, %v; want the lock passed on", v, err)
		}
		w2, tok2 := e.grantee()
		if w2 != "q/b" || tok2 <= tok {
			t.Fatalf("after the grantee left, lock = %q, want a grant to q/b", e.get(e.k.lock))
		}
		e.expect(msgs, "q", "g "+strconv.FormatInt(tok2, 10)+" p/c "+windowArg+" q/b", "p", "w "+windowArg+" p/c")
		// A late attempt of the waiter that left does nothing.
		if got := e.fairAcquire("p/a", false); got[0] != -1 {
			t.Fatalf("late attempt of a waiter that left = %v, want {-1}", got)
		}
		if n, _ := e.do(e.c.B().Zscore().Key(e.k.q).Member("p/a").Build()).ToString(); n != "" {
			t.Fatal("the waiter that left is queued again")
		}
		e.everyKeyExpires()
	})
}

// A fair lock's late attempt of a waiter that left does nothing on the fast path too (a free
// lock, nobody queued), where it looks for its void mark only because fair_leave.lua marked
// the fence; a take of another waiter goes on, with a larger token.
func TestFairVoidedAttemptOnTheFastPath(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		first := e.fairAcquire("p/a", false)
		if first[0] != 1 {
			t.Fatalf("fair acquire of a free lock = %v", first)
		}
		e.release("p/a")
		v, err := scripts.FairLeave.Exec(context.Background(), e.c, []string{e.k.lock, e.k.fence, e.k.q, e.k.qx},
			[]string{"p/late", windowArg, "60000", e.k.ch, e.k.pub, "60000"}).AsInt64()
		if err != nil || v != 0 {
			t.Fatalf("fair leave of a waiter that held nothing = %v, %v", v, err)
		}
		before := e.get(e.k.fence)
		if !strings.HasPrefix(before, "0") {
			t.Fatalf("fence %q after the leave, want it marked with a leading 0", before)
		}
		if got := e.fairAcquire("p/late", false); got[0] != -1 {
			t.Fatalf("late attempt of a waiter that left, on a free lock = %v, want {-1}", got)
		}
		if l, f := e.get(e.k.lock), e.get(e.k.fence); l != "" || f != before {
			t.Fatalf("lock %q, fence %q after the voided attempt; want free and %q", l, f, before)
		}
		if got := e.fairAcquire("q/b", false); got[0] != 1 || got[1] <= first[1] {
			t.Fatalf("fair acquire of another waiter = %v, want held with a token above %d", got, first[1])
		}
	})
}

// An undo of a reentrant Lock attempt that was counted in a hold that has since expired does
// not take a count away from the owner's new hold.
func TestReentrantUndoSparesALaterHold(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		r := newReentrant(e)
		lock := r.lock
		acquire := func(id string) []int64 {
			t.Helper()
			return r.lockAs("owner", id, "", "00", "", 0)
		}
		abandon := func(id string) int64 {
			t.Helper()
			return r.abandon("owner", id, "w", 0, false, 0)[0]
		}
		count := func() string { v, _ := e.do(e.c.B().Hget().Key(lock).Field("o:owner").Build()).ToString(); return v }
		if got := acquire("a1"); got[0] != 1 {
			t.Fatalf("acquire = %v", got)
		}
		e.do(e.c.B().Del().Key(lock).Build()) // the hold expires
		time.Sleep(5 * time.Millisecond)
		if got := acquire("a2"); got[0] != 1 || got[1] != 1 {
			t.Fatalf("acquire of a new hold = %v", got)
		}
		if v := abandon("a1"); v != 0 {
			t.Fatalf("undo of an attempt counted in an expired hold = %d, want 0 (nothing undone)", v)
		}
		if c := count(); c != "1" {
			t.Fatalf("the new hold's count is %q after the undo, want 1", c)
		}
		if got := acquire("a3"); got[1] != 2 {
			t.Fatalf("re-entry = %v", got)
		}
		if v := abandon("a3"); v != 1 || count() != "1" {
			t.Fatalf("undo of a re-entry of the current hold = %d, count %q; want 1, 1", v, count())
		}
	})
}

// A semaphore holder's renewal tells the head of the queue when its request would fit if no
// holder renewed again: the holders' leases run out in order, each giving back its permits,
// and the request fits at the expiry of the holder that makes up what it lacks (not the
// earliest, not the last). The head's own attempt is told the same. Nobody waiting, nothing
// is published; a lapsed hold is not renewed. The leases are a minute or two long, and the
// times told are checked against the server times read around each call: a loaded machine
// can put seconds between two calls.
func TestSemaphoreRenewalTellsTheHeadWhenItFits(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		base := strings.TrimSuffix(e.k.lock, ":mutex") + ":semaphore" // the mutex's slot: its channel is ours
		keys := []string{base, base + ":n", base + ":q", base + ":qx", base + ":qn", base + ":size", base + ":ops"}
		args := func(id string, n int) []string {
			return []string{id, strconv.Itoa(n), "4", "300000", "60000", "3000", e.k.ch, e.k.pub, "60000", "0"}
		}
		renew := func(owner string) int64 {
			t.Helper()
			v, err := scripts.SemaphoreRenew.Exec(context.Background(), e.c, keys, args(owner, 0)).AsInt64()
			if err != nil {
				t.Fatalf("renew %s: %v", owner, err)
			}
			return v
		}
		now := e.serverMs()
		// Size 4, all held: a (1 permit, 60 s left), b (2, 120 s), c (1, 30 s; it renews, for
		// 5 minutes).
		for _, h := range []struct {
			owner string
			n     int
			left  int64
		}{{"a", 1, 60000}, {"b", 2, 120000}, {"c", 1, 30000}} {
			e.do(e.c.B().Zadd().Key(keys[0]).ScoreMember().ScoreMember(float64(now+h.left), h.owner).Build())
			e.do(e.c.B().Hset().Key(keys[1]).FieldValue().FieldValue(h.owner, strconv.Itoa(h.n)).Build())
		}
		e.do(e.c.B().Set().Key(keys[5]).Value("4").Build())
		msgs := e.listen("p")
		if renew("c") != 1 {
			t.Fatal("renewal of a live hold failed")
		}
		e.quiet(msgs, "a renewal nobody waits behind", "p")
		// expiry returns the bounds of what a call that ran between the server times before
		// and after says is left of the lease that ends at end.
		expiry := func(end, before, after int64) (lo, hi int64) { return end - after - 1, end - before + 1 }
		// The head wants 3: a's and b's permits make them up, at b's expiry, which the script
		// counts from its own clock.
		before := e.serverMs()
		v, err := scripts.SemaphoreAcquire.Exec(context.Background(), e.c, keys, args("p/w", 3)).AsIntSlice()
		lo, hi := expiry(now+120000, before, e.serverMs())
		if err != nil || len(v) != 3 || v[0] != 0 || v[2] != 1 || v[1] < lo || v[1] > hi {
			t.Fatalf("the head's attempt = %v, %v; want {0, b's expiry: %d to %d, 1}", v, err, lo, hi)
		}
		fit := func(lo, hi int64, what string) {
			t.Helper()
			select {
			case m := <-msgs:
				f := strings.Fields(m[1])
				if m[0] != "p" || len(f) != 3 || f[0] != "x" || f[2] != "p/w" {
					t.Fatalf("message %q on %s's channel, want x <ms> p/w", m[1], m[0])
				}
				if ms, err := strconv.ParseInt(f[1], 10, 64); err != nil || ms < lo || ms > hi {
					t.Fatalf("the head was told %q: its request fits in %s, %d to %d ms", m[1], what, lo, hi)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the head was not told")
			}
		}
		before = e.serverMs()
		if renew("c") != 1 {
			t.Fatal("renewal failed")
		}
		lo, hi = expiry(now+120000, before, e.serverMs())
		fit(lo, hi, "b's expiry")
		// b releases: with its two permits back, a's makes up the third, at a's expiry.
		before = e.serverMs()
		if v, err := scripts.SemaphoreRelease.Exec(context.Background(), e.c, keys, append(args("b", 2)[:9], "r1")).AsInt64(); err != nil || v != 1 {
			t.Fatalf("release of b = %v, %v", v, err)
		}
		lo, hi = expiry(now+60000, before, e.serverMs())
		fit(lo, hi, "a's expiry, after b released")
		// A holder whose lease ran out is not renewed.
		e.do(e.c.B().Zadd().Key(keys[0]).ScoreMember().ScoreMember(float64(now-1), "gone").Build())
		if renew("gone") != 0 {
			t.Fatal("a lapsed hold was renewed")
		}
	})
}

// A rwmutex hold's renewal tells the waiters it keeps out when it now ends: a write hold, every
// waiting reader ('x <ttl> *' on the readers' channel) and the first waiting writer ('x <ttl>
// <waiter>' on the writers'); a read share, the first waiting writer, with the last share's
// end. The attempts of those waiters say they will be told (told = 1); a writer behind another
// writer's turn is not.
func TestRWMutexRenewalTellsTheWaiters(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := setup(t, b)
		base := strings.TrimSuffix(e.k.lock, ":mutex") + ":rwmutex" // the mutex's slot: its channel is ours
		keys := []string{base, base + ":r", base + ":ww", base + ":rq", base + ":ra", base + ":fence", base + ":ops", base + ":wo", base + ":rel"}
		args := func(mode, owner, waiter string) []string {
			return []string{mode, owner, waiter, "0", "10000", "5000", windowArg, "60000", "60000", e.k.ch, e.k.pub}
		}
		lock := func(mode, owner, waiter string) []int64 {
			t.Helper()
			v, err := scripts.RWMutexLock.Exec(context.Background(), e.c, keys, args(mode, owner, waiter)).AsIntSlice()
			if err != nil {
				t.Fatalf("lock %s %s: %v", mode, owner, err)
			}
			return v
		}
		renew := func(mode, owner string) int64 {
			t.Helper()
			v, err := scripts.RWMutexRenew.Exec(context.Background(), e.c, keys, args(mode, owner, "")).AsInt64()
			if err != nil {
				t.Fatalf("renew %s %s: %v", mode, owner, err)
			}
			return v
		}
		msgs := e.listen("r", "w")
		if v := lock("w", "w1", ""); v[0] != 1 {
			t.Fatalf("Lock of a free rwmutex = %v", v)
		}
		renewed := e.serverMs()
		if renew("w", "w1") != 1 {
			t.Fatal("renewal of the write hold failed")
		}
		e.quiet(msgs, "a renewal nobody waits behind", "r", "w")
		for _, c := range []struct {
			mode, waiter string
			told         int64
		}{{"r", "R", 1}, {"w", "W", 1}, {"w", "W2", 0}} {
			// The 10 s lease, less the server time since the renewal.
			v := lock(c.mode, "o-"+c.waiter, c.waiter)
			if passed := e.serverMs() - renewed; len(v) != 3 || v[0] != 0 || v[1] > 10000 || v[1] < 10000-passed-1 || v[2] != c.told {
				t.Fatalf("attempt of %s behind the write hold = %v, want {0, 10000 less the %d ms since, %d}", c.waiter, v, passed, c.told)
			}
		}
		if renew("w", "w1") != 1 {
			t.Fatal("renewal of the write hold failed")
		}
		e.expect(msgs, "r", "x 10000 *", "w", "x 10000 W")
		v, err := scripts.RWMutexUnlock.Exec(context.Background(), e.c, keys, args("w", "w1", "")).AsInt64()
		if err != nil || v != 1 {
			t.Fatalf("Unlock = %v, %v", v, err)
		}
		e.expect(msgs, "r", "r", "w", "w")
		// The admitted reader gets in, ahead of the writers, and tells the first when its share ends.
		shared := e.serverMs()
		if v := lock("r", "r1", "R"); v[0] != 1 {
			t.Fatalf("RLock of the admitted reader = %v", v)
		}
		e.expect(msgs, "w", "x 10000 W")
		first := lock("w", "o-W", "W")
		if passed := e.serverMs() - shared; len(first) != 3 || first[0] != 0 || first[1] > 10000 || first[1] < 10000-passed-1 || first[2] != 1 {
			t.Fatalf("the first writer behind a share = %v, want {0, 10000 less the %d ms since, 1}", first, passed)
		}
		if renew("r", "r1") != 1 {
			t.Fatal("renewal of the share failed")
		}
		e.expect(msgs, "w", "x 10000 W")
		if renew("r", "nobody") != 0 || renew("w", "w1") != 0 {
			t.Fatal("a hold that is not there was renewed")
		}
	})
}

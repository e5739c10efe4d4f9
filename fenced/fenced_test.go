package fenced_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/fenced"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var bg = context.Background()

func newValue(t *testing.T, h *distsync.Handle, name string) *fenced.Value {
	t.Helper()
	v, err := fenced.New(h, name)
	if err != nil {
		t.Fatalf("fenced.New(%q): %v", name, err)
	}
	return v
}

// keyOf is the key of the value name, for names without braces or '%'.
func keyOf(prefix, name string) string { return prefix + "{" + name + "}:fenced" }

func set(t *testing.T, v *fenced.Value, token int64, value string) bool {
	t.Helper()
	ok, err := v.Set(bg, token, value)
	if err != nil {
		t.Fatalf("Set(%d, %q): %v", token, value, err)
	}
	return ok
}

func del(t *testing.T, v *fenced.Value, token int64) bool {
	t.Helper()
	ok, err := v.Delete(bg, token)
	if err != nil {
		t.Fatalf("Delete(%d): %v", token, err)
	}
	return ok
}

// is fails the test unless v holds value (ok set as want) with token.
func is(t *testing.T, v *fenced.Value, wantValue string, wantToken int64, wantOK bool) {
	t.Helper()
	value, token, ok, err := v.Get(bg)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if value != wantValue || token != wantToken || ok != wantOK {
		t.Fatalf("Get = %q, %d, %v; want %q, %d, %v", value, token, ok, wantValue, wantToken, wantOK)
	}
}

func pttl(t *testing.T, b *redistest.Backend, key string) time.Duration {
	t.Helper()
	ms, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Pttl().Key(key).Build() }).AsInt64()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return time.Duration(ms) * time.Millisecond
}

// A write with a token below the largest accepted is refused and changes nothing; an equal or
// larger token is accepted.
func TestStaleTokenIsRefused(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		p := b.Pod(t, b.Prefix(t))
		v := newValue(t, p.H, "balance")
		is(t, v, "", 0, false)
		if !set(t, v, 100, "a") {
			t.Fatal("first Set refused")
		}
		if set(t, v, 99, "stale") {
			t.Fatal("Set with a smaller token accepted")
		}
		is(t, v, "a", 100, true)
		if !set(t, v, 100, "b") {
			t.Fatal("Set with an equal token refused: one holder writes several times")
		}
		is(t, v, "b", 100, true)
		if !set(t, v, 101, "c") {
			t.Fatal("Set with a larger token refused")
		}
		if set(t, v, 100, "stale") {
			t.Fatal("the previous holder's token accepted after a larger one")
		}
		is(t, v, "c", 101, true)
	})
}

// Tokens are compared exactly over the whole int64 range: by their digits, not as Lua numbers
// (doubles, which round above 2^53), and 9 is below 10.
func TestTokensAreComparedExactly(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		p := b.Pod(t, b.Prefix(t))
		small := newValue(t, p.H, "small")
		set(t, small, 10, "ten")
		if set(t, small, 9, "nine") {
			t.Fatal("token 9 accepted after 10")
		}
		is(t, small, "ten", 10, true)

		v := newValue(t, p.H, "big")
		const two53 = int64(1) << 53
		for _, c := range []struct {
			token int64
			want  bool
		}{
			{two53 + 1, true}, {two53, false}, {two53 + 2, true}, {two53 + 1, false},
			{math.MaxInt64 - 1, true}, {math.MaxInt64 - 2, false}, {math.MaxInt64, true},
			{math.MaxInt64 - 1, false}, {math.MaxInt64, true},
		} {
			if got := set(t, v, c.token, strconv.FormatInt(c.token, 10)); got != c.want {
				t.Fatalf("Set(%d) = %v, want %v", c.token, got, c.want)
			}
		}
		is(t, v, strconv.FormatInt(math.MaxInt64, 10), math.MaxInt64, true)
	})
}

// Delete takes the same check, removes the value and keeps the token, with the fence retention
// as TTL, so that a stale holder cannot write after it; a Set brings the value back for good.
func TestDeleteKeepsTheToken(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := b.Pod(t, prefix, distsync.WithFenceRetention(time.Hour))
		v := newValue(t, p.H, "doc")
		key := keyOf(prefix, "doc")
		set(t, v, 10, "a")
		if d := pttl(t, b, key); d != -time.Millisecond {
			t.Fatalf("a stored value has PTTL %v, want none", d)
		}
		if del(t, v, 9) {
			t.Fatal("Delete with a smaller token accepted")
		}
		is(t, v, "a", 10, true)
		if !del(t, v, 20) {
			t.Fatal("Delete with a larger token refused")
		}
		is(t, v, "", 20, false)
		if d := pttl(t, b, key); d <= 59*time.Minute || d > time.Hour {
			t.Fatalf("after Delete the token record has PTTL %v, want the fence retention (1h)", d)
		}
		if set(t, v, 15, "stale") {
			t.Fatal("stale Set after Delete accepted")
		}
		if del(t, v, 15) {
			t.Fatal("stale Delete after Delete accepted")
		}
		is(t, v, "", 20, false)
		if !del(t, v, 20) {
			t.Fatal("Delete with an equal token refused")
		}
		if !set(t, v, 20, "b") {
			t.Fatal("Set with the Delete's token refused")
		}
		is(t, v, "b", 20, true)
		if d := pttl(t, b, key); d != -time.Millisecond {
			t.Fatalf("a value set after Delete has PTTL %v, want none", d)
		}

		// A Delete of a value never set records its token all the same.
		fresh := newValue(t, p.H, "fresh")
		if !del(t, fresh, 5) {
			t.Fatal("Delete of a value never set refused")
		}
		if set(t, fresh, 4, "stale") {
			t.Fatal("Set below the token of a Delete of a value never set accepted")
		}
		is(t, fresh, "", 5, false)
	})
}

// A Delete never shortens the life of a token record, and the record is gone after the
// retention: the value then accepts any token, as one never set.
func TestTokenRecordLivesForTheRetention(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		long := b.Pod(t, prefix, distsync.WithFenceRetention(time.Hour)).H
		short := b.Pod(t, prefix, distsync.WithFenceRetention(300*time.Millisecond)).H

		del(t, newValue(t, long, "x"), 50)
		del(t, newValue(t, short, "x"), 60)
		if d := pttl(t, b, keyOf(prefix, "x")); d <= 59*time.Minute {
			t.Fatalf("a Delete with a shorter retention cut the record's PTTL to %v", d)
		}

		v := newValue(t, short, "y")
		del(t, v, 50)
		if !redistest.Eventually(5*time.Second, func() bool { return len(b.Keys(t, keyOf(prefix, "y"))) == 0 }) {
			t.Fatalf("the token record outlived its 300 ms retention: PTTL %v", pttl(t, b, keyOf(prefix, "y")))
		}
		is(t, v, "", 0, false)
		if !set(t, v, 1, "new") {
			t.Fatal("Set refused after the token record expired")
		}
		is(t, v, "new", 1, true)
	})
}

// The end-to-end case fencing is for: holder A's lease runs out, B takes the lock and writes,
// then A's late write, with its old token, is refused.
func TestLateWriteOfALostHolderIsRefused(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		pa, pb := b.Pod(t, prefix), b.Pod(t, prefix)
		// A's lease is short, but long enough for its acquisition's reply: one that came after
		// it would be given back and Lock would try again (see mutex).
		ma, err := mutex.New(pa.H, "account:7", distsync.WithFixedLease(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		mb, err := mutex.New(pb.H, "account:7")
		if err != nil {
			t.Fatal(err)
		}
		va, vb := newValue(t, pa.H, "account:7"), newValue(t, pb.H, "account:7")

		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		defer cancel()
		la, err := ma.LockLease(ctx)
		if err != nil {
			t.Fatalf("A: Lock: %v", err)
		}
		if !set(t, va, la.Token(), "from A") {
			t.Fatal("A's write under its lease refused")
		}
		<-la.Done() // A's fixed lease runs out while A is "paused"

		lb, err := mb.LockLease(ctx)
		if err != nil {
			t.Fatalf("B: Lock: %v", err)
		}
		if lb.Token() <= la.Token() {
			t.Fatalf("B's token %d not above A's %d", lb.Token(), la.Token())
		}
		if !set(t, vb, lb.Token(), "from B") {
			t.Fatal("B's write refused")
		}
		if set(t, va, la.Token(), "late from A") {
			t.Fatal("A's late write, with its old token, accepted")
		}
		if del(t, va, la.Token()) {
			t.Fatal("A's late Delete, with its old token, accepted")
		}
		is(t, vb, "from B", lb.Token(), true)
		if err := ma.Unlock(bg); !errors.Is(err, distsync.ErrLost) {
			t.Errorf("A: Unlock after the loss = %v, want ErrLost", err)
		}
		if err := mb.Unlock(bg); err != nil {
			t.Errorf("B: Unlock: %v", err)
		}
	})
}

// Writers racing with tokens in any order: the value ends with the largest token, and with the
// value written with it.
func TestConcurrentWritersEndWithTheLargestToken(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		const pods, writers, writes = 3, 4, 25
		tokens := rand.Perm(pods * writers * writes)
		var wg sync.WaitGroup
		errs := make(chan error, pods*writers)
		for p := range pods {
			v := newValue(t, b.Pod(t, prefix).H, "race")
			for w := range writers {
				mine := tokens[(p*writers+w)*writes:][:writes]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, tok := range mine {
						token := int64(tok) + 1
						if _, err := v.Set(bg, token, strconv.FormatInt(token, 10)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		max := int64(len(tokens))
		is(t, newValue(t, b.Pod(t, prefix).H, "race"), strconv.FormatInt(max, 10), max, true)
	})
}

// Bad input returns ErrInvalid and sends nothing; refused and failed writes change nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := b.Pod(t, prefix)
		if _, err := fenced.New(nil, "x"); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New(nil handle) = %v, want ErrInvalid", err)
		}
		if _, err := fenced.New(p.H, ""); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("New(empty name) = %v, want ErrInvalid", err)
		}
		v := newValue(t, p.H, "x")
		for _, token := range []int64{0, -1, math.MinInt64} {
			if ok, err := v.Set(bg, token, "bad"); ok || !errors.Is(err, distsync.ErrInvalid) {
				t.Errorf("Set(%d) = %v, %v; want false, ErrInvalid", token, ok, err)
			}
			if ok, err := v.Delete(bg, token); ok || !errors.Is(err, distsync.ErrInvalid) {
				t.Errorf("Delete(%d) = %v, %v; want false, ErrInvalid", token, ok, err)
			}
		}
		cancelled, cancel := context.WithCancel(bg)
		cancel()
		if ok, err := v.Set(cancelled, 1, "late"); ok || !errors.Is(err, context.Canceled) {
			t.Errorf("Set with a cancelled context = %v, %v; want false, context.Canceled", ok, err)
		}
		if n := p.Client.Total(); n != 0 {
			t.Errorf("bad input sent %d commands to Redis", n)
		}
		if keys := b.Keys(t, prefix); len(keys) != 0 {
			t.Errorf("bad input left keys %v", keys)
		}

		set(t, v, 7, "good")
		if _, err := v.Set(bg, 0, "bad"); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("Set(0) = %v, want ErrInvalid", err)
		}
		if _, err := v.Delete(bg, -7); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("Delete(-7) = %v, want ErrInvalid", err)
		}
		is(t, v, "good", 7, true)
		_, err := v.Set(bg, 0, "")
		if want := `fenced "x": set: invalid argument: token must be positive, got 0`; err == nil || err.Error() != want {
			t.Errorf("Set(0) = %v, want %s", err, want)
		}
	})
}

// Values are any bytes; an empty value is a value, not an absent one; names with braces and
// binary bytes keep to one key, in the name's slot.
func TestValuesAndNames(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := b.Pod(t, prefix)
		names := []string{"}{", "{x}", "\x00\xff\n", "a%7Bb", "orders:42"}
		for i, name := range names {
			v := newValue(t, p.H, name)
			if v.Name() != name {
				t.Fatalf("Name() = %q, want %q", v.Name(), name)
			}
			value := string([]byte{0, byte(i), 0xff}) + name
			set(t, v, int64(i+1), value)
			is(t, v, value, int64(i+1), true)
		}
		if keys := b.Keys(t, prefix); len(keys) != len(names) {
			t.Fatalf("%d names made keys %v", len(names), keys)
		}
		empty := newValue(t, p.H, "empty")
		set(t, empty, 3, "")
		is(t, empty, "", 3, true)
	})
}

// On a closed Handle every call returns ErrClosed.
func TestClosedHandle(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Mini)
	p := b.Pod(t, b.Prefix(t))
	v := newValue(t, p.H, "x")
	if err := p.H.Close(bg); err != nil {
		t.Fatal(err)
	}
	before := p.Client.Total()
	if _, err := v.Set(bg, 1, "a"); !errors.Is(err, distsync.ErrClosed) {
		t.Errorf("Set = %v, want ErrClosed", err)
	}
	if _, err := v.Delete(bg, 1); !errors.Is(err, distsync.ErrClosed) {
		t.Errorf("Delete = %v, want ErrClosed", err)
	}
	if _, _, _, err := v.Get(bg); !errors.Is(err, distsync.ErrClosed) {
		t.Errorf("Get = %v, want ErrClosed", err)
	}
	if n := p.Client.Total() - before; n != 0 {
		t.Errorf("calls on a closed Handle sent %d commands", n)
	}
}

// A token field that holds no token (someone else wrote the key) is an error, and no write
// goes over it.
func TestForeignTokenIsAnError(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		p := b.Pod(t, prefix)
		for _, junk := range []string{"junk", "", "0", "-5", "007", "1.5", "9223372036854775808", "9999999999999999999", "99999999999999999999"} {
			key := keyOf(prefix, "foreign")
			b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Hset().Key(key).FieldValue().FieldValue("value", "theirs").FieldValue("token", junk).Build()
			})
			v := newValue(t, p.H, "foreign")
			if ok, err := v.Set(bg, math.MaxInt64, "mine"); ok || err == nil {
				t.Errorf("Set over token %q = %v, %v; want an error", junk, ok, err)
			}
			if ok, err := v.Delete(bg, math.MaxInt64); ok || err == nil {
				t.Errorf("Delete over token %q = %v, %v; want an error", junk, ok, err)
			}
			if _, _, _, err := v.Get(bg); err == nil {
				t.Errorf("Get over token %q: no error", junk)
			}
			got, err := b.Do(t, func(c rueidis.Client) rueidis.Completed {
				return c.B().Hgetall().Key(key).Build()
			}).AsStrMap()
			if err != nil || got["value"] != "theirs" || got["token"] != junk || len(got) != 2 {
				t.Errorf("after writes over token %q the key holds %v, %v", junk, got, err)
			}
		}

		// A key of another type.
		key := keyOf(prefix, "string")
		b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Set().Key(key).Value("theirs").Build() })
		v := newValue(t, p.H, "string")
		if ok, err := v.Set(bg, 1, "mine"); ok || err == nil {
			t.Errorf("Set over a string key = %v, %v; want an error", ok, err)
		}
		if ok, err := v.Delete(bg, 1); ok || err == nil {
			t.Errorf("Delete over a string key = %v, %v; want an error", ok, err)
		}
		if _, _, _, err := v.Get(bg); err == nil {
			t.Error("Get over a string key: no error")
		}
		if got, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Get().Key(key).Build() }).ToString(); got != "theirs" || err != nil {
			t.Errorf("after writes over a string key it holds %q, %v", got, err)
		}
	})
}

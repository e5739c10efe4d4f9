package semaphore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distsync/distsync/internal/redistest"
)

// fuzzSize is the size of the fuzzed semaphore.
const fuzzSize = 3

// FuzzSemaphoreForeign writes a foreign value under one of a semaphore's keys (lib/sem.lua:
// h, n, q, qx, qn, size), or a foreign holder (h member + n count: part 6) or a foreign
// waiter (q + qx + qn: part 7) with a fuzzed count; then, with flags&4, runs Acquire(1)
// with a short ctx; then TryAcquire(1) size+1 times; then releases what it got. For parts
// 0-5 kind is that of a string, a hash field, a zset member (score), a list or a set element
// (value, member); flags&1 gives the key a TTL.
//
// What is correct:
//   - The semaphore never hands out more than its size because of a foreign value: if this
//     test got permits, they and the foreign holds in Redis afterwards that are real holds
//     (a live lease in h and a count that is an integer >= 1 in n) are at most the size. A
//     count that is junk (negative, zero, fractional, not a number) is no hold, and must not
//     make room for more permits either.
//   - A junk value may make a call fail with an error; a size other than the caller's is
//     ErrSizeMismatch; nothing panics.
//   - An Acquire that waits issues a bounded number of commands (no polling).
func FuzzSemaphoreForeign(f *testing.F) {
	r := redistest.StartFuzz(f)
	for _, s := range []struct {
		part, kind    uint8
		member, value string
		score         float64
		flags         uint8
	}{
		{6, 0, "foreign", "1", 0, 4},
		{6, 0, "foreign", "3", 0, 4},
		{6, 0, "foreign", "3", math.Inf(1), 4},
		{6, 0, "foreign", "-5", 0, 0},
		{6, 0, "foreign", "0", 0, 0},
		{6, 0, "foreign", "0.5", 0, 0},
		{6, 0, "foreign", "abc", 0, 0},
		{6, 0, "foreign", "nan", 0, 0},
		{6, 0, "foreign", "-inf", 0, 0},
		{1, 1, "orphan", "-5", 0, 1},
		{1, 1, "orphan", "2", 0, 1},
		{1, 0, "", "x", 0, 1},
		{0, 2, "foreign", "", math.Inf(1), 4},
		{0, 2, "foreign", "", 1e300, 4},
		{7, 0, "foreign/1", "1", 0, 4},
		{6, 0, "pod%3A7.AAECAwQFBgcICQoL:1", "2", 0, 4}, // ids with an identity
		{7, 0, "pod%3A7.AAECAwQFBgcICQoL:1/pod%3A7.AAECAwQFBgcICQoL:2", "1", 0, 4},
		{6, 0, "~pod%3A7.AAECAwQFBgcICQoL:1/pod%3A7.AAECAwQFBgcICQoL:2", "3", 0, 4},
		{7, 0, "foreign/1", "-3", 0, 4},
		{7, 0, "foreign/1", "0", 0, 4},
		{7, 0, "foreign/1", "abc", 0, 4},
		{7, 0, "foreign/1", "2.5", 0, 4},
		{4, 1, "w", "-1", 0, 4},
		{2, 2, "w", "", 1, 4},
		{3, 2, "w", "", math.Inf(1), 4},
		{5, 0, "", "3", 0, 1 | 4},
		{5, 0, "", "2", 0, 1 | 4},
		{5, 0, "", "abc", 0, 1 | 4},
		{5, 0, "", "0x3", 0, 4},
		{5, 0, "", "3.5", 0, 4},
		{5, 1, "f", "v", 0, 4},
	} {
		f.Add(s.part, s.kind, s.member, s.value, s.score, s.flags)
	}
	f.Fuzz(func(t *testing.T, part, kind uint8, member, value string, score float64, flags uint8) {
		name := r.Next()
		s, err := New(r.H, name, fuzzSize)
		if err != nil {
			t.Fatal(err)
		}
		r.Cleanup(t, s.keys...)
		ctx := context.Background()
		var got int64
		defer func() {
			if got > 0 {
				_ = s.Release(ctx, got)
			}
		}()
		fv := redistest.Foreign{Kind: kind % 5, Member: member, Value: value, Score: score, TTL: flags&1 != 0}
		h, n, q, qx, qn, size := s.keys[0], s.keys[1], s.keys[2], s.keys[3], s.keys[4], s.keys[5]
		switch part % 8 {
		case 6: // a holder, with a lease of a minute (or of +inf)
			exp := strconv.FormatInt(r.NowMs(t)+60000, 10)
			if math.IsInf(score, 1) {
				exp = "+inf"
			}
			r.Do(t, "ZADD", h, exp, member)
			r.Do(t, "HSET", n, member, value)
		case 7: // a waiter
			s := score
			if math.IsNaN(s) {
				s = 0
			}
			exp := strconv.FormatInt(r.NowMs(t)+60000, 10)
			r.Do(t, "ZADD", q, strconv.FormatFloat(s, 'g', -1, 64), member)
			r.Do(t, "ZADD", qx, exp, member)
			r.Do(t, "HSET", qn, member, value)
		default:
			r.Write(t, []string{h, n, q, qx, qn, size}[part%8], fv)
		}

		if flags&4 != 0 {
			n0 := r.Counter.Total()
			actx, cancel := context.WithTimeout(ctx, acquireWait)
			err := s.Acquire(actx, 1)
			cancel()
			sent := r.Counter.Total() - n0
			switch {
			case err == nil:
				got++
			case sent > maxWaitCommands:
				t.Fatalf("Acquire sent %d commands in %v: polling (%s)", sent, acquireWait, state(t, r, s))
			}
		}
		for range fuzzSize + 1 {
			if ok, _ := s.TryAcquire(ctx, 1); ok {
				got++
			}
		}
		if others := foreignHolds(t, r, s); got > 0 && got+others > fuzzSize {
			t.Fatalf("%d permits handed out to the test and %d held by others, of %d: %s", got, others, fuzzSize, state(t, r, s))
		}
	})
}

// foreignHolds returns the permits that holders other than s's hold in Redis: live leases
// with a count that is an integer >= 1.
func foreignHolds(t *testing.T, r *redistest.FuzzRedis, s *Semaphore) int64 {
	t.Helper()
	now := r.NowMs(t)
	counts, err := r.Raw.Do(context.Background(), r.Raw.B().Hgetall().Key(s.keys[1]).Build()).AsStrMap()
	if err != nil {
		return 0 // not a hash: no holds
	}
	var sum int64
	for o, v := range counts {
		if strings.HasPrefix(o, s.proc+"/") || strings.HasPrefix(o, "~"+s.proc+"/") {
			continue
		}
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil || c < 1 || strconv.FormatInt(c, 10) != v {
			continue
		}
		at, err := r.Raw.Do(context.Background(), r.Raw.B().Zscore().Key(s.keys[0]).Member(o).Build()).AsFloat64()
		if err == nil && at > float64(now) {
			sum += c
		}
	}
	return sum
}

func state(t *testing.T, r *redistest.FuzzRedis, s *Semaphore) string {
	t.Helper()
	var b strings.Builder
	for i, part := range []string{"h", "n", "q", "qx", "qn", "size"} {
		fmt.Fprintf(&b, "%s: %s; ", part, r.Snapshot(t, s.keys[i]))
	}
	return b.String()
}

const (
	// acquireWait bounds an Acquire that waits behind a foreign value.
	acquireWait = 25 * time.Millisecond
	// maxWaitCommands bounds the commands an Acquire may send while it waits acquireWait: an
	// attempt, another after subscribing, the clean-up, and slack. Polling at a 1 ms backstop
	// sends several times that.
	maxWaitCommands = 6
)

package once

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
)

// FuzzGroupForeign writes a foreign value under one of a once key's Redis keys
// (internal/scripts/once_begin.lua), then runs Group.Do with a short ctx:
//
//	part 0  lead                 the leader's claim
//	part 1  kept                 a kept result
//	part 2  res:                 the result key begin reads while it knows no leader
//	part 3  res:L, lead = L      the result of a leader L that holds the lead
//	part 4  a PUBLISH of value on the key's channel, lead = L with fencing token 7, while Do
//	        waits
//
// kind (parts 0-3) makes it a string, a hash field, a zset member, a list or a set element;
// flags&1 gives it a TTL; flags&4 marks L forgotten (a Forget ran during its lead: parts 3
// and 4); flags&8 runs a Group[string] (String codec) instead of a Group[int] (JSON).
//
// What is correct (a result is the status byte 'v', 'e', 'p' or 'g' and a payload):
//   - lead: someone leads; Do waits for them and ends with its ctx (an error matching both
//     ErrNotAcquired and DeadlineExceeded), fn does not run.
//   - kept, res:, res:L: a string there is a result: Do returns without running fn, with
//     exactly what decode makes of it, never another value: the codec's value for 'v' and a
//     payload the codec reads; else an error matching ErrCodec, ErrLeaderFailed, ErrPanicked
//     or ErrGoexit. (An empty string and '!' in a res key are not results, see
//     once_begin.lua; nor is res:L if L is forgotten.)
//   - a published "<token>\n<result>" with a result and a token of at least L's (above it,
//     if L is forgotten) is the same; any other message makes Do look again (and wait on).
//   - A value of another type is an error; nothing panics; fn runs only where nobody leads
//     and no result is there; a Do that waits issues a bounded number of commands.
func FuzzGroupForeign(f *testing.F) {
	r := redistest.StartFuzz(f)
	for _, s := range []struct {
		part, kind uint8
		value      string
		flags      uint8
	}{
		{0, 0, "L", 1}, {0, 0, "", 1}, {0, 0, "L", 0}, {0, 1, "x", 1}, {0, 3, "x", 1},
		{1, 0, "v42", 1}, {1, 0, "v\"x\"", 1}, {1, 0, "vjunk", 1}, {1, 0, "v", 0}, {1, 0, "", 1}, {1, 0, "eboom", 1},
		{1, 0, "pboom", 1}, {1, 0, "x", 1}, {1, 0, "!", 1}, {1, 0, "vnull", 0}, {1, 0, "v42", 8}, {1, 1, "x", 1},
		{2, 0, "v7", 1}, {2, 0, "", 1}, {2, 0, "!", 1}, {2, 0, "vjunk", 1}, {2, 2, "x", 1},
		{3, 0, "v7", 1}, {3, 0, "!", 1}, {3, 0, "", 1}, {3, 0, "ejunk", 8}, {3, 1, "x", 1},
		{4, 0, "L\nv5", 0}, {4, 0, "L\n", 0}, {4, 0, "L", 0}, {4, 0, "\nvjunk", 0}, {4, 0, "x\n\n", 8}, {4, 0, "L\nzz", 0},
		{4, 0, "7\nv5", 0}, {4, 0, "8\nvjunk", 0}, {4, 0, "6\nv5", 0}, {4, 0, "7\n", 0}, {4, 0, "7\n\n", 8}, {4, 0, "f", 0},
		{4, 0, "7\nv5", 4}, {4, 0, "8\nv5", 4}, {3, 0, "v7", 5},
	} {
		f.Add(s.part, s.kind, s.value, s.flags)
	}
	f.Fuzz(func(t *testing.T, part, kind uint8, value string, flags uint8) {
		name := r.Next()
		if flags&8 != 0 {
			fuzzGroup(t, r, name, part, kind, value, flags, "forty-two")
		} else {
			fuzzGroup(t, r, name, part, kind, value, flags, 42)
		}
	})
}

func fuzzGroup[T comparable](t *testing.T, r *redistest.FuzzRedis, name string, part, kind uint8, value string, flags uint8, fnVal T) {
	g, err := NewGroup[T](r.H, name, distsync.WithLeaseTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ks, err := g.keys("k")
	if err != nil {
		t.Fatal(err)
	}
	const leader = "L"
	r.Cleanup(t, ks.lead, ks.kept, ks.resPrefix, ks.resPrefix+leader, ks.fence, ks.forgot)
	fv := redistest.Foreign{Kind: kind % 5, Value: value, Member: value, Score: 1, TTL: flags&1 != 0}
	part %= 5
	switch part {
	case 0:
		r.Write(t, ks.lead, fv)
	case 1:
		r.Write(t, ks.kept, fv)
	case 2:
		r.Write(t, ks.resPrefix, fv)
	case 3, 4:
		r.Do(t, "SET", ks.lead, leader, "PX", "60000")
		r.Do(t, "SET", ks.fence, "7", "PX", "60000")
		if flags&4 != 0 {
			r.Do(t, "SET", ks.forgot, leader, "PX", "60000")
		}
		if part == 3 {
			r.Write(t, ks.resPrefix+leader, fv)
		}
	}

	// What the value means.
	isResult := false // a result is there (or was published)
	stored := ""
	switch {
	case part == 1 && fv.Kind == 0:
		isResult, stored = true, value
	case part == 2 && fv.Kind == 0, part == 3 && fv.Kind == 0 && flags&4 == 0:
		isResult, stored = value != "" && value != "!", value
	case part == 4:
		tok, after, ok := strings.Cut(value, "\n")
		n, err := strconv.ParseInt(tok, 10, 64)
		floor := int64(7)
		if flags&4 != 0 {
			floor = 8
		}
		isResult, stored = ok && err == nil && n >= floor && after != "", after
	}
	// A forgotten L's res:L is never read: what is there, of any type, does not matter.
	wrongType := part <= 3 && fv.Kind != 0 && (part != 3 || flags&4 == 0)
	// Nobody leads and no result is there only with a res: key that holds no result.
	leads := part == 2 && !wrongType && !isResult

	var ran atomic.Int32
	fn := func(context.Context) (T, error) { ran.Add(1); return fnVal, nil }
	// Only a Do that waits for a leader runs into its ctx: the others get a long one, so that
	// a slow machine does not turn their result into a timeout.
	wait := 5 * time.Second
	if !wrongType && !isResult && !leads {
		wait = doWait
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	n0 := r.Counter.Total()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	var returned atomic.Bool
	go func() {
		v, err, _ := g.Do(ctx, "k", fn)
		returned.Store(true)
		done <- result{v, err}
	}()
	if part == 4 {
		// Publish once Do listens, however long a loaded machine takes it to (a message sent
		// before would reach nobody), or once it has returned (its ctx ended: a short one, for
		// a message that is no result).
		for subscribers(t, r, ks.channel) == 0 && !returned.Load() && ctx.Err() == nil {
			time.Sleep(100 * time.Microsecond)
		}
		r.Do(t, "PUBLISH", ks.channel, value)
	}
	res := <-done
	v, err := res.v, res.err
	sent := r.Counter.Total() - n0

	switch {
	case wrongType:
		if err == nil || ran.Load() != 0 {
			t.Fatalf("Do with a %d-kind value in part %d: %v, %v; fn ran %d times", fv.Kind, part, v, err, ran.Load())
		}
	case isResult:
		want, werr := g.decode("k", stored)
		if ran.Load() != 0 {
			t.Fatalf("Do ran fn with result %q there", stored)
		}
		switch {
		case werr == nil && (err != nil || v != want):
			t.Fatalf("Do with result %q there: %v, %v; want %v", stored, v, err, want)
		case werr != nil && err == nil:
			t.Fatalf("Do with result %q there: %v, nil; want an error (%v)", stored, v, werr)
		case werr != nil && !errors.Is(err, ErrCodec) && !errors.Is(err, ErrLeaderFailed) && !errors.Is(err, ErrPanicked) &&
			!errors.Is(err, ErrGoexit):
			t.Fatalf("Do with result %q there: %v; want ErrCodec, ErrLeaderFailed, ErrPanicked or ErrGoexit", stored, err)
		}
	case leads:
		if err != nil || v != fnVal || ran.Load() != 1 {
			t.Fatalf("Do with nobody leading (part %d %q): %v, %v; fn ran %d times", part, value, v, err, ran.Load())
		}
	default: // someone leads: Do waits until its ctx ends
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distsync.ErrNotAcquired) || ran.Load() != 0 {
			t.Fatalf("Do with a leader (part %d %q): %v, %v; fn ran %d times", part, value, v, err, ran.Load())
		}
		if sent > maxWaitCommands {
			t.Fatalf("Do sent %d commands in %v waiting for a leader (part %d %q): polling", sent, doWait, part, value)
		}
	}
}

// subscribers returns how many clients listen on channel.
func subscribers(t *testing.T, r *redistest.FuzzRedis, channel string) int64 {
	t.Helper()
	m, _ := r.Raw.Do(context.Background(), r.Raw.B().PubsubNumsub().Channel(channel).Build()).AsIntMap()
	return m[channel]
}

const (
	// doWait bounds a Do that waits for a foreign leader.
	doWait = 25 * time.Millisecond
	// maxWaitCommands bounds the commands a Do may send while it waits doWait: a begin,
	// another after subscribing, and slack. Polling at a 1 ms backstop sends several times
	// that.
	maxWaitCommands = 6
)

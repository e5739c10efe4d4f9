package mutex

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/distsync/distsync/internal/waitq"
)

// fuzzWaiters are the waiter ids of the Mutexes whose parse is fuzzed: the shape of
// core.NewID before identities, and now, with an escaped identity ("pod:7 {x}/,~%") before
// the handle id's last '.'.
var fuzzWaiters = []string{fuzzWaiter, fuzzIdentityWaiter}

const (
	fuzzWaiter         = "AAECAwQFBgcICQoL:1"
	fuzzIdentityWaiter = "pod%3A7%20%7Bx%7D%2F%2C%7E%25.AAECAwQFBgcICQoL:1"
)

// FuzzParse feeds a Mutex's parse any payload, as a foreign PUBLISH on its channel
// (<prefix>{<name>}:mutex:ch:<waiter>) would.
//
// What the scripts publish on that channel (internal/scripts/lib/queue.lua, tell) ends with
// the id of the waiter the channel belongs to; <n> and <ms> are integers >= 1 written the way
// Lua writes them (no sign, no leading zero):
//
//	g <n> <backup> <ms> <waiter>   the lock is granted to the waiter as '~<waiter>:<n>'
//	w <ms> <waiter>                watch a grant to another waiter
//	c <waiter>                     the watched grant was confirmed
//
// Property: parse never panics; Granted comes only from a grant of exactly that form for this
// Mutex's waiter, with the owner value the grant has in Redis ('~<waiter>:<n>', as
// lib/queue.lua writes it) and a window that did not overflow; Watch and Confirmed likewise
// only from their exact forms for this waiter; anything else is Recheck or Ignore. A Granted
// from garbage makes Lock return success without a round trip, holding an owner value that
// is not the lock's in Redis.
func FuzzParse(f *testing.F) {
	w, iw := fuzzWaiter, fuzzIdentityWaiter
	for _, seed := range []string{
		// What the scripts publish to a waiter whose id carries an identity.
		"g 1712345678901234 web%3A1.BBECAwQFBgcICQoL:7 500 " + iw,
		"g 1712345678901234 web%3A1.BBECAwQFBgcICQoL:7,x.CBECAwQFBgcICQoL:2 500 " + iw,
		"w 500 " + iw, "c " + iw, "c " + w, "w 500 " + w, "g 5 b 500 " + w + " " + iw,
		// What the scripts publish.
		"g 1712345678901234 BBECAwQFBgcICQoL:7 500 " + w,
		"g 1712345678901234  500 " + w,
		"w 500 " + w,
		"c " + w,
		// Garbage.
		"", " ", "g", "w", "c", "c ", "c other", "c " + w + " x",
		"g 5 b 500 other", "g 5 b 500", "g +5 b 500 " + w, "g 05 b 500 " + w, "g -5 b 500 " + w,
		"g 0 b 500 " + w, "g 5 b -1 " + w, "g 5 b 0 " + w, "g 5 b 9223372036855 " + w, "g 5 b 18446744074709 " + w,
		"w 500 other", "w -1 " + w, "w 9223372036855 " + w, "w 500",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		for _, w := range fuzzWaiters {
			checkParse(t, &single{waiter: w}, p)
		}
	})
}

// checkParse checks the property of FuzzParse for m's parse of p.
func checkParse(t *testing.T, m *single, p string) {
	w := m.waiter
	sig := m.parse(p)
	switch sig.Kind {
	case waitq.Granted:
		g := sig.Grant
		ms := int64(g.Window / time.Millisecond)
		if back := fmt.Sprintf("g %d %s %d %s", g.Token, g.Backup, ms, w); back != p || g.Window != time.Duration(ms)*time.Millisecond {
			t.Fatalf("parse(%q) = Granted %+v: not a grant the scripts publish to this waiter (that grant reads %q)", p, g, back)
		}
		if g.Token < 1 || ms < 1 {
			t.Fatalf("parse(%q) = Granted %+v: token or window below 1", p, g)
		}
		if want := "~" + w + ":" + strconv.FormatInt(g.Token, 10); g.Owner != want {
			t.Fatalf("parse(%q) = Granted with owner %q; the grant in Redis is %q", p, g.Owner, want)
		}
	case waitq.Watch:
		ms := int64(sig.Window / time.Millisecond)
		if back := fmt.Sprintf("w %d %s", ms, w); back != p || sig.Window != time.Duration(ms)*time.Millisecond || ms < 1 {
			t.Fatalf("parse(%q) = Watch %v: not a watch the scripts publish to this waiter", p, sig.Window)
		}
	case waitq.Extended:
		ms := int64(sig.Window / time.Millisecond)
		if back := fmt.Sprintf("x %d %s", ms, w); back != p || sig.Window != time.Duration(ms)*time.Millisecond || ms < 1 {
			t.Fatalf("parse(%q) = Extended %v: not a renewal notice the scripts publish to this waiter", p, sig.Window)
		}
	case waitq.Confirmed:
		if p != "c "+w {
			t.Fatalf("parse(%q) = Confirmed: not a confirm the scripts publish to this waiter", p)
		}
	case waitq.Recheck, waitq.Ignore:
	default:
		t.Fatalf("parse(%q): unknown kind %d", p, sig.Kind)
	}
}

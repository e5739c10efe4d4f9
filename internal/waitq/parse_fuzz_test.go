package waitq

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// FuzzParseQueued feeds ParseQueued any payload, as a foreign PUBLISH on a fair lock's or a
// semaphore's process channel would.
//
// What the scripts publish (internal/scripts/lib/queue.lua and lib/sem.lua) is, with <n> and
// <ms> integers >= 1 written the way Lua writes them (no sign, no leading zero) and ids
// without spaces:
//
//	g <n> <backup> <ms> <id>   a grant ("" backup for a semaphore: two spaces)
//	w <ms> <id>                watch a grant
//	c <id>                     the watched grant was confirmed
//	x <ms> <id>                the lease waited behind was renewed (mutex head)
//
// Property: ParseQueued never panics; the waiter id it returns is the payload's last
// space-separated field; Granted, Watch, Confirmed and Extended come only from a payload of exactly
// that form (re-formatting the signal gives the payload back, the numbers are >= 1 and the
// window did not overflow time.Duration); anything else is Recheck or Ignore. A Granted from
// garbage would make a fair waiter or a semaphore take a grant that Redis never made.
func FuzzParseQueued(f *testing.F) {
	for _, seed := range []string{
		// What the scripts publish.
		"g 1712345678901234 p1/c2 500 p1/c1",
		"g 1712345678901234  500 p1/c1",
		"g 2  3000 p1/c1",
		"w 500 p1/c1",
		"c p1/c1",
		"x 10000 p1",
		// The same, with ids that carry an identity (escaped: no space, '/', ',' or ':'
		// before the handle id's last '.').
		"g 1712345678901234 pod%3A7.AAECAwQFBgcICQoL:2/pod%3A7.AAECAwQFBgcICQoL:5,web%2F1.BAECAwQFBgcICQoL:1/web%2F1.BAECAwQFBgcICQoL:3 500 pod%3A7.AAECAwQFBgcICQoL:2/pod%3A7.AAECAwQFBgcICQoL:4",
		"g 7  500 %7B%7D%7E%25%20.AAECAwQFBgcICQoL:1/%7B%7D%7E%25%20.AAECAwQFBgcICQoL:2",
		"w 500 caf%C3%A9.AAECAwQFBgcICQoL:1/caf%C3%A9.AAECAwQFBgcICQoL:9",
		"c h%3A1.AAECAwQFBgcICQoL:1/h%3A1.AAECAwQFBgcICQoL:2",
		"x 10000 h%3A1.AAECAwQFBgcICQoL:1",
		// Garbage.
		"", " ", "g", "w", "c", "c ", "x y", "g 1 b 500", "g 1 b 500 id extra",
		"g +5 b 500 id", "g 05 b 500 id", "g -5 b 500 id", "g 0 b 500 id",
		"g 5 b -1 id", "g 5 b 0 id", "g 5 b +500 id", "g 5 b 9223372036855 id", "g 5 b 18446744074709 id",
		"g 5 b 1e3 id", "g 9223372036854775808 b 500 id",
		"w -1 id", "w 0 id", "w 9223372036855 id", "w +1 id", "w 1",
		"c a b", "g\x00 1 b 500 id", "g 1 b 500 \xff",
		"x -1 id", "x 0 id", "x 9223372036855 id", "x +1 id", "x 1", "x 1 0 0",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		to, sig := ParseQueued(p)
		if want := p[strings.LastIndexByte(p, ' ')+1:]; to != want {
			t.Fatalf("ParseQueued(%q): waiter %q, want the last field %q", p, to, want)
		}
		switch sig.Kind {
		case Granted:
			ms := int64(sig.Grant.Window / time.Millisecond)
			if sig.Grant.Window != time.Duration(ms)*time.Millisecond {
				t.Fatalf("ParseQueued(%q): window %v is not whole milliseconds", p, sig.Grant.Window)
			}
			if back := fmt.Sprintf("g %d %s %d %s", sig.Grant.Token, sig.Grant.Backup, ms, to); back != p {
				t.Fatalf("ParseQueued(%q) = Granted %+v: not a grant the scripts publish (that grant reads %q)", p, sig.Grant, back)
			}
			if sig.Grant.Token < 1 || ms < 1 {
				t.Fatalf("ParseQueued(%q) = Granted %+v: token or window below 1", p, sig.Grant)
			}
			if sig.Grant.Owner != "" {
				t.Fatalf("ParseQueued(%q) = Granted with owner %q: the primitive makes the owner", p, sig.Grant.Owner)
			}
		case Watch:
			ms := int64(sig.Window / time.Millisecond)
			if back := fmt.Sprintf("w %d %s", ms, to); back != p || sig.Window != time.Duration(ms)*time.Millisecond || ms < 1 {
				t.Fatalf("ParseQueued(%q) = Watch %v: not a watch the scripts publish (that watch reads %q)", p, sig.Window, back)
			}
		case Extended:
			ms := int64(sig.Window / time.Millisecond)
			if back := fmt.Sprintf("x %d %s", ms, to); back != p || sig.Window != time.Duration(ms)*time.Millisecond || ms < 1 {
				t.Fatalf("ParseQueued(%q) = Extended %v: not a renewal notice the scripts publish (that notice reads %q)", p, sig.Window, back)
			}
		case Confirmed:
			if p != "c "+to || to == "" {
				t.Fatalf("ParseQueued(%q) = Confirmed: not a confirm the scripts publish", p)
			}
		case Recheck, Ignore:
		default:
			t.Fatalf("ParseQueued(%q): unknown kind %d", p, sig.Kind)
		}
	})
}

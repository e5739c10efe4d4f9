package core

import (
	"strings"
	"testing"
)

// idHandle returns a handle whose id carries identity, as NewHandle makes it, without a client.
func idHandle(identity string) *Handle {
	return &Handle{Config: Config{Identity: identity}, id: escapeIdentity(identity) + ".AAECAwQFBgcICQoL"}
}

// What every script and parser of ids gives a meaning to never appears in a handle id: the
// identity is escaped (see idSafe).
const idSeparators = ":/, ~{}\t\r\n\x00"

// checkIdentityID checks that identity round-trips through the ids of a handle that has it.
func checkIdentityID(t *testing.T, identity string) {
	t.Helper()
	h := idHandle(identity)
	if strings.ContainsAny(h.ID(), idSeparators) {
		t.Fatalf("handle id %q of identity %q holds a separator", h.ID(), identity)
	}
	if strings.LastIndexByte(h.ID(), '.') != len(h.ID())-randomIDLen-1 {
		t.Fatalf("handle id %q of identity %q: the last '.' does not start the random part", h.ID(), identity)
	}
	owner := h.NewID()
	for _, id := range []string{h.ID(), owner, "~" + owner + ":12", owner + "/" + h.NewID()} {
		if got := IdentityOf(id); got != identity {
			t.Fatalf("IdentityOf(%q) = %q, want %q", id, got, identity)
		}
		if id != h.ID() && HandleOf(id) != h.ID() {
			t.Fatalf("HandleOf(%q) = %q, want %q", id, HandleOf(id), h.ID())
		}
	}
}

func TestIdentityRoundTripsThroughIDs(t *testing.T) {
	t.Parallel()
	for _, identity := range []string{
		"web-1", "host:4242", "a", "pod/with/slashes", "a,b", "50%", "~tilde", "{tag}", "sp ace",
		"tab\tnl\n", "caf\u00e9 \u65e5\u672c", "dot.ted.", ".", "%41", "\x00\xff",
		strings.Repeat("\xff", MaxIdentity), strings.Repeat("a", MaxIdentity),
	} {
		checkIdentityID(t, identity)
	}
	if got := escapeIdentity("host:42/a b"); got != "host%3A42%2Fa%20b" {
		t.Errorf("escapeIdentity = %q", got)
	}
}

// Ids written before identities ('<random>:<n>', '<random>:<n>/<random>:<m>', grants) carry
// none; nor does what this package never writes.
func TestIdentityOfOldIDsIsEmpty(t *testing.T) {
	t.Parallel()
	for _, id := range []string{
		"AAECAwQFBgcICQoL", "AAECAwQFBgcICQoL:1", "AAECAwQFBgcICQoL:1/AAECAwQFBgcICQoL:2",
		"~AAECAwQFBgcICQoL:1:55", "~AAECAwQFBgcICQoL:1/AAECAwQFBgcICQoL:2", "", "~", ":", "x:y.z",
		"bad%zz.AAECAwQFBgcICQoL:1", "lower%3a.AAECAwQFBgcICQoL:1", "safe%41.AAECAwQFBgcICQoL:1",
		"short%4.AAECAwQFBgcICQoL", "raw\xff.AAECAwQFBgcICQoL:1",
	} {
		if got := IdentityOf(id); got != "" {
			t.Errorf("IdentityOf(%q) = %q, want \"\"", id, got)
		}
	}
}

func TestCheckIdentity(t *testing.T) {
	t.Parallel()
	for identity, ok := range map[string]bool{
		"": false, "a": true, strings.Repeat("x", MaxIdentity): true, strings.Repeat("x", MaxIdentity+1): false,
		DefaultIdentity(): true,
	} {
		if err := checkIdentity(identity); (err == nil) != ok {
			t.Errorf("checkIdentity(%q) = %v, want ok %v", identity, err, ok)
		}
	}
}

// NewID makes one allocation, the string's own, even for the longest id: an identity of
// MaxIdentity bytes that all escape, and a counter at its largest.
func TestNewIDAllocatesOnce(t *testing.T) {
	h := idHandle(strings.Repeat("\xff", MaxIdentity))
	if len(h.ID()) != maxIDLen {
		t.Fatalf("id of %d bytes, want maxIDLen %d", len(h.ID()), maxIDLen)
	}
	h.seq.Store(^uint64(0) - 1000)
	if n := testing.AllocsPerRun(100, func() { _ = h.NewID() }); n != 1 {
		t.Errorf("NewID: %v allocations, want 1", n)
	}
}

// FuzzIdentity: any identity MaxIdentity bytes long or shorter round-trips through a
// handle's ids, whose handle id holds no separator.
func FuzzIdentity(f *testing.F) {
	for _, s := range []string{"web-1", "host:4242", "a/b,c d~{}%", "caf\u00e9", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, identity string) {
		if checkIdentity(identity) != nil {
			return
		}
		checkIdentityID(t, identity)
	})
}

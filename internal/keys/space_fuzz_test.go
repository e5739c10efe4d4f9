package keys_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/keys"
)

// kinds are the primitive kinds and parts the library makes keys of.
var kinds = map[string][]string{
	"mutex":     {"fence", "q", "qx"},
	"reentrant": {"fence", "ops"},
	"rwmutex":   {"r", "ww", "rq", "ra", "fence", "ops"},
	"fair":      {"fence", "q", "qx"},
	"semaphore": {"n", "q", "qx", "qn", "size", "ops"},
	"once":      {"kept", "res"},
}

// waiterID has the shape of core.Handle.NewID: base64url, ':', base36.
const waiterID = "AAECAwQFBgcICQoL:1z"

// FuzzSpace checks the key layout (docs/design.md, "Keys and channels") for any prefix and names, through
// the path every primitive's New takes (core.Handle.Space, over keys.New).
//
// Property: Space never panics. For a prefix with a brace, or an empty name, it returns an
// error matching distsync.ErrInvalid (core.ErrInvalid), and keys.New an error too. Otherwise
// every key of the primitive (its key, each part, the channel and every waiter channel) is in
// the one hash slot of its name, whatever bytes the name holds ('{', '}', '%', binary, long);
// the name's escape has no brace and reverses to the name; and two different (prefix, name)
// pairs of one kind share no key nor channel.
func FuzzSpace(f *testing.F) {
	f.Add("distsync:", "orders:42", "distsync:", "orders:43")
	f.Add("distsync:", "{", "distsync:", "%7B")
	f.Add("distsync:", "}", "distsync:", "%7D")
	f.Add("distsync:", "%", "distsync:", "%25")
	f.Add("", "x", "x", "")
	f.Add("a{", "x", "a", "{x")
	f.Add("}", "x", "", "}x")
	f.Add("p:", "a}b{c", "p:", "a%7Db%7Bc")
	f.Add("p:", "\x00\xff", "p:\x00", "\xff")
	f.Add("", "{}", "{", "}")
	f.Add("p", ":q", "p:", "q")
	f.Add("distsync:", strings.Repeat("{}%", 1<<10), "distsync:", strings.Repeat("}{%", 1<<10))
	f.Fuzz(func(t *testing.T, p1, n1, p2, n2 string) {
		for kind, parts := range kinds {
			a, ok1 := space(t, p1, kind, n1)
			b, ok2 := space(t, p2, kind, n2)
			if !ok1 || !ok2 {
				continue
			}
			ka, kb := all(a, parts), all(b, parts)
			same := p1 == p2 && n1 == n2
			for i := range ka {
				if (ka[i] == kb[i]) != same {
					t.Fatalf("%s: prefix %q name %q -> %q; prefix %q name %q -> %q", kind, p1, n1, ka[i], p2, n2, kb[i])
				}
			}
			if !same && shared(ka, kb) {
				t.Fatalf("%s: prefix %q name %q and prefix %q name %q share a key: %q / %q", kind, p1, n1, p2, n2, ka, kb)
			}
		}
		for _, n := range []string{n1, n2} {
			esc := keys.Escape(n)
			if strings.ContainsAny(esc, "{}") || unescape(esc) != n {
				t.Fatalf("Escape(%q) = %q: has a brace or does not reverse", n, esc)
			}
		}
	})
}

// A name of megabytes (the fuzzer's inputs stay small) is encoded like any other.
func TestSpaceOfAHugeName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{strings.Repeat("{", 1<<20), strings.Repeat("}%{\x00", 1<<17)} {
		h := &core.Handle{Config: core.Config{Prefix: "distsync:"}}
		s, err := h.Space("mutex", name, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		esc := keys.Escape(name)
		for _, k := range []string{s.Key(), s.Part("q"), s.Channel() + ":" + waiterID} {
			if hashTag(k) != esc {
				t.Fatalf("a %d-byte name: a key hashes on something else than its escape", len(name))
			}
		}
		if unescape(esc) != name {
			t.Fatalf("a %d-byte name: Escape does not reverse", len(name))
		}
	}
}

// space returns the key space of (prefix, kind, name) and whether there is one, checking the
// error cases and the slot of every key.
func space(t *testing.T, prefix, kind, name string) (keys.Space, bool) {
	t.Helper()
	h := &core.Handle{Config: core.Config{Prefix: prefix}}
	s, err := h.Space(kind, name, time.Second)
	_, kerr := keys.New(prefix, kind, name)
	bad := name == "" || strings.ContainsAny(prefix, "{}")
	switch {
	case bad && (err == nil || kerr == nil):
		t.Fatalf("prefix %q name %q accepted: %v / %v", prefix, name, err, kerr)
	case bad && !errors.Is(err, core.ErrInvalid):
		t.Fatalf("prefix %q name %q: %v, want an error matching ErrInvalid", prefix, name, err)
	case bad:
		return s, false
	case err != nil || kerr != nil:
		t.Fatalf("prefix %q name %q refused: %v / %v", prefix, name, err, kerr)
	}
	if (s == keys.Space{}) {
		t.Fatalf("prefix %q name %q: empty space", prefix, name)
	}
	if tag := "{" + keys.Escape(name) + "}"; !strings.HasPrefix(s.Key(), prefix+tag) {
		t.Fatalf("prefix %q name %q: key %q does not start with the prefix and the tag %q", prefix, name, s.Key(), tag)
	}
	// Keys with the same hash tag are in the same slot; comparing tags is that check, and
	// cheaper than a CRC of every key for a long name. The slot is computed for one of them.
	want := hashTag(s.Key())
	if want != keys.Escape(name) {
		t.Fatalf("prefix %q name %q: key %q hashes on %q", prefix, name, s.Key(), want)
	}
	for _, k := range all(s, kinds[kind]) {
		if got := hashTag(k); got != want {
			t.Fatalf("prefix %q name %q: %q hashes on %q, %q on %q", prefix, name, s.Key(), want, k, got)
		}
	}
	if k := s.Part("q"); len(k) < 1<<12 && keys.Slot(k) != keys.Slot(s.Channel()+":"+waiterID) {
		t.Fatalf("prefix %q name %q: %q and its channels in different slots", prefix, name, k)
	}
	return s, true
}

// hashTag is the part of key that Redis Cluster hashes: what lies between the first '{' and
// the first '}' after it, if that is not empty; else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// all lists every key and channel of s.
func all(s keys.Space, parts []string) []string {
	out := []string{s.Key(), s.Channel(), s.Channel() + ":" + waiterID, s.Channel() + ":r", s.Channel() + ":w"}
	for _, p := range parts {
		out = append(out, s.Part(p), s.Part(p)+":"+waiterID)
	}
	return out
}

func shared(a, b []string) bool {
	seen := make(map[string]bool, len(a))
	for _, k := range a {
		seen[k] = true
	}
	for _, k := range b {
		if seen[k] {
			return true
		}
	}
	return false
}

func unescape(s string) string {
	return strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}").Replace(s)
}

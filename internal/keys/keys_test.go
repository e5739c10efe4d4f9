package keys

import (
	"strings"
	"testing"
)

func TestSlotMatchesRedis(t *testing.T) {
	t.Parallel()
	// Values from CLUSTER KEYSLOT on Redis 7.0.
	for key, want := range map[string]int{"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "{}foo": 9500} {
		if got := Slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func unescape(s string) string {
	return strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}").Replace(s)
}

// Every key and the channel of a primitive land in one slot, whatever its name, and names
// never share keys.
func FuzzKeysShareOneSlot(f *testing.F) {
	for _, seed := range []string{"x", "}", "{", "}{", "{}", "a}b{c", "{x}", "%7B", "%", "\x00\xff", "orders:42", "}x{y}"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		s, err := New("distsync:", "mutex", name)
		if name == "" {
			if err == nil {
				t.Fatal("empty name accepted")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		want := Slot(s.Key())
		for _, k := range []string{s.Part("fence"), s.Part("q"), s.Part("qx"), s.Channel() + ":waiter{1}"} {
			if got := Slot(k); got != want {
				t.Fatalf("name %q: %q in slot %d, %q in slot %d", name, s.Key(), want, k, got)
			}
		}
		if esc := Escape(name); strings.ContainsAny(esc, "{}") || unescape(esc) != name {
			t.Fatalf("Escape(%q) = %q: not reversible or still has braces", name, esc)
		}
	})
}

func TestBadPrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"a{", "}", "{x}"} {
		if _, err := New(p, "mutex", "x"); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
}

// Parse reads back the kind and the name of every key New makes, braces and percents
// included, and refuses what New never makes.
func TestParseReadsBackNew(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "orders:42", "{x}", "%7B", "a}b{c", "100%"} {
		s, err := New("p:", "mutex", name)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{s.Key(), s.Part("fence"), s.Channel()} {
			if kind, got, ok := Parse("p:", k); !ok || kind != "mutex" || got != name {
				t.Errorf("Parse(%q) = %q, %q, %v; want mutex, %q", k, kind, got, ok, name)
			}
		}
	}
	for _, k := range []string{"p:{}:mutex", "p:{a{b}:mutex", "p:{%7X}:mutex", "q:{a}:mutex", "p:{a}"} {
		if kind, name, ok := Parse("p:", k); ok {
			t.Errorf("Parse(%q) = %q, %q; want not a key of New's", k, kind, name)
		}
	}
}

package keys_test

import (
	"strings"
	"testing"

	"github.com/distsync/distsync/internal/keys"
)

func TestSlotMatchesRedis(t *testing.T) {
	t.Parallel()
	// Values from CLUSTER KEYSLOT on Redis 7.0.
	for key, want := range map[string]int{"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "{}foo": 9500} {
		if got := keys.Slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// Every key and the channel of a primitive land in one slot, whatever its name, and names
// never share keys.
func FuzzKeysShareOneSlot(f *testing.F) {
	for _, seed := range []string{"x", "}", "{", "}{", "{}", "a}b{c", "{x}", "%7B", "%", "\x00\xff", "orders:42", "}x{y}"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		s, err := keys.New("distsync:", "mutex", name)
		if name == "" {
			if err == nil {
				t.Fatal("empty name accepted")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		want := keys.Slot(s.Key())
		for _, k := range []string{s.Part("fence"), s.Part("q"), s.Part("qx"), s.Channel() + ":waiter{1}"} {
			if got := keys.Slot(k); got != want {
				t.Fatalf("name %q: %q in slot %d, %q in slot %d", name, s.Key(), want, k, got)
			}
		}
		if esc := keys.Escape(name); strings.ContainsAny(esc, "{}") || unescape(esc) != name {
			t.Fatalf("keys.Escape(%q) = %q: not reversible or still has braces", name, esc)
		}
	})
}

func TestBadPrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"a{", "}", "{x}"} {
		if _, err := keys.New(p, "mutex", "x"); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
}

// keys.Parse reads back the kind and the name of every key keys.New makes, braces and percents
// included, and refuses what keys.New never makes.
func TestParseReadsBackNew(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "orders:42", "{x}", "%7B", "a}b{c", "100%"} {
		s, err := keys.New("p:", "mutex", name)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{s.Key(), s.Part("fence"), s.Channel()} {
			if kind, got, ok := keys.Parse("p:", k); !ok || kind != "mutex" || got != name {
				t.Errorf("keys.Parse(%q) = %q, %q, %v; want mutex, %q", k, kind, got, ok, name)
			}
		}
	}
	for _, k := range []string{"p:{}:mutex", "p:{a{b}:mutex", "p:{%7X}:mutex", "q:{a}:mutex", "p:{a}"} {
		if kind, name, ok := keys.Parse("p:", k); ok {
			t.Errorf("keys.Parse(%q) = %q, %q; want not a key of keys.New's", k, kind, name)
		}
	}
}

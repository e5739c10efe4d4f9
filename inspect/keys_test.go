package inspect

import (
	"testing"

	"github.com/distsync/distsync/internal/keys"
)

func TestGlobMatchesAsRedisDoes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"*", "a/b:c", true}, {"a*", "a", true}, {"a*b", "axxb", true},
		{"a*b", "axxbx", false}, {"*b*b", "abxb", true}, {"*b*b", "ab", false},
		{"?", "", false}, {"?", "x", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"[abc]", "b", true}, {"[abc]", "d", false}, {"[^abc]", "d", true}, {"[^abc]", "a", false},
		{"[a-c]x", "bx", true}, {"[c-a]x", "bx", true}, {"[a-c]x", "dx", false}, {"[a-]", "-", true},
		{`\*`, "*", true}, {`\*`, "a", false}, {`[\]]`, "]", true}, {`a\[`, "a[", true},
		{"orders:*", "orders:42", true}, {"orders:*", "order", false},
		{"*****x", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaay", false},
	} {
		if err := checkGlob(c.p); err != nil {
			t.Errorf("checkGlob(%q) = %v", c.p, err)
		}
		if got := match(c.p, c.s); got != c.want {
			t.Errorf("match(%q, %q) = %v, want %v", c.p, c.s, got, c.want)
		}
	}
	for _, p := range []string{"[", "a[bc", `a\`, `[\]`} {
		if checkGlob(p) == nil {
			t.Errorf("checkGlob(%q) = nil, want an error", p)
		}
	}
}

// parseKey reads back the kind and name of every key keys.New makes, for names that need
// escaping too, and nothing else.
func TestParseKeyReversesTheLayout(t *testing.T) {
	t.Parallel()
	const prefix = "p:"
	for _, name := range []string{"x", "a:b", "{", "}{", "%7B", "a{b}%c", "\x00\xff", onceName("g:1", "k{}")} {
		for kind, parts := range layout {
			s, err := keys.New(prefix, kind, name)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range append([]string{s.Key()}, s.Part(parts[len(parts)-1]), s.Part("res")+":x:1") {
				gk, gn, ok := parseKey(prefix, k)
				if !ok || gk != kind || gn != name {
					t.Errorf("parseKey(%q) = %q, %q, %v; want %q, %q", k, gk, gn, ok, kind, name)
				}
			}
		}
	}
	for _, k := range []string{"p:x", "p:{x}", "p:{x}:", "p:{x}:fenced", "p:{x}:mutexes", "q:{x}:mutex",
		"p:{}:mutex", "p:{a%7b}:mutex", "p:{a%}:mutex", "p:{a{b}:mutex"} {
		if kind, name, ok := parseKey(prefix, k); ok {
			t.Errorf("parseKey(%q) = %q, %q; want no primitive's", k, kind, name)
		}
	}
	if g, k, ok := splitOnce(onceName("g:1", "k{}")); !ok || g != "g:1" || k != "k{}" {
		t.Errorf("splitOnce = %q, %q, %v", g, k, ok)
	}
	for _, n := range []string{"", "x", "0::", "3:ab", "03:abc:", "3:abcd:", "-1:a:"} {
		if g, k, ok := splitOnce(n); ok {
			t.Errorf("splitOnce(%q) = %q, %q; want not a once key name", n, g, k)
		}
	}
}

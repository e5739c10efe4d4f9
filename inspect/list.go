package inspect

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/keys"
	"github.com/distsync/distsync/internal/sweep"
)

// List returns every primitive that has keys under the Handle's key prefix and whose name
// matches pattern, sorted by name, then kind in the order of [Kinds]. pattern is a glob as
// Redis's SCAN takes it, matched against the whole name: '*' matches any run of bytes, '?'
// one byte, "[abc]", "[a-c]" and "[^abc]" one byte of a set, and '\' quotes the next byte;
// "" matches every name. A once group is listed under its own name, not its keys'.
//
// It SCANs every node the Handle's client knows (every master of a Cluster), so it costs
// O(keys under the prefix), and writes nothing. Keys under the prefix that belong to no
// primitive of [Kinds] (a fenced.Value's, say) are left out. A primitive written or deleted
// while List runs may or may not be listed. It returns an error matching
// [distsync.ErrInvalid] for a nil Handle or a malformed pattern (an unclosed '[', a trailing
// '\'), and Redis's error, wrapped, if a SCAN fails.
func List(ctx context.Context, h *distsync.Handle, pattern string) ([]Entry, error) {
	c, err := open(h)
	if err != nil {
		return nil, err
	}
	if err := checkGlob(pattern); err != nil {
		return nil, fmt.Errorf("inspect: %w: pattern %q: %v", distsync.ErrInvalid, pattern, err)
	}
	prefix := c.Config.Prefix
	seen := make(map[Entry]bool)
	err = sweep.Scan(ctx, c.Raw, prefix+"{", func(batch []string) error {
		for _, k := range batch {
			kind, name, ok := parseKey(prefix, k)
			if !ok {
				continue
			}
			if kind == Once {
				if name, _, ok = splitOnce(name); !ok {
					continue
				}
			}
			if pattern == "" || match(pattern, name) {
				seen[Entry{Kind: kind, Name: name}] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("inspect: list: %w", err)
	}
	order := make(map[string]int)
	for i, k := range Kinds() {
		order[k] = i
	}
	out := make([]Entry, 0, len(seen))
	for e := range seen {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(order[a.Kind], order[b.Kind]))
	})
	return out, nil
}

// parseKey returns the kind and the name of the primitive whose key key is (for once, a
// key's name, "<len(group)>:<group>:<key>"); ok is false for a key that is no primitive's of
// a known kind.
func parseKey(prefix, key string) (kind, name string, ok bool) {
	kind, name, ok = keys.Parse(prefix, key)
	if _, known := layout[kind]; !ok || !known {
		return "", "", false
	}
	return kind, name, true
}

// checkGlob reports a malformed glob pattern: an unclosed '[' or a trailing '\'.
func checkGlob(p string) error {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i++; i == len(p) {
				return fmt.Errorf("trailing '\\'")
			}
		case '[':
			n := class(p[i:])
			if n < 0 {
				return fmt.Errorf("'[' without ']'")
			}
			i += n - 1
		}
	}
	return nil
}

// class returns the length of the set "[...]" that p starts with, -1 if it is not closed.
func class(p string) int {
	for i := 1; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case ']':
			return i + 1
		}
	}
	return -1
}

// match reports whether s matches the glob pattern p (checked by checkGlob). A '*' is
// retried from the last one only, so a match costs O(len(p) * len(s)) at most.
func match(p, s string) bool {
	pi, si := 0, 0
	star, from := -1, 0 // the last '*' seen in p, and where in s its run ends now
	for si < len(s) {
		if pi < len(p) {
			if p[pi] == '*' {
				star, from = pi, si
				pi++
				continue
			}
			if n, ok := one(p[pi:], s[si]); ok {
				pi += n
				si++
				continue
			}
		}
		if star < 0 {
			return false
		}
		from++ // let the last '*' take one byte more
		pi, si = star+1, from
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// one matches byte c against the token p starts with (not '*'): it returns the token's length
// and whether c matches it.
func one(p string, c byte) (int, bool) {
	switch p[0] {
	case '?':
		return 1, true
	case '\\':
		return 2, p[1] == c
	case '[':
		n := class(p)
		set := p[1 : n-1]
		neg := strings.HasPrefix(set, "^")
		if neg {
			set = set[1:]
		}
		in := false
		for i := 0; i < len(set); i++ {
			switch {
			case set[i] == '\\' && i+1 < len(set):
				i++
				in = in || set[i] == c
			case i+2 < len(set) && set[i+1] == '-':
				lo, hi := min(set[i], set[i+2]), max(set[i], set[i+2])
				in = in || lo <= c && c <= hi
				i += 2
			default:
				in = in || set[i] == c
			}
		}
		return n, in != neg
	}
	return 1, p[0] == c
}

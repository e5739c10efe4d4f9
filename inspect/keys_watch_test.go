package inspect_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/inspect"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/once"
)

// Keys names every key a primitive writes (but a once call's result keys, which Keys leaves
// out): after a mutex hold and a Once's run, each key Redis has under the name is among
// them, for its kind and for kind "".
func TestKeysNameWhatThePrimitivesWrite(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		prefix := b.Prefix(t)
		h := b.Handle(t, b.Client(t), distsync.WithKeyPrefix(prefix))
		m, _ := mutex.New(h, "k")
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		o, _ := once.NewOnce(h, "k")
		if err := o.Do(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		all, err := inspect.Keys(h, "", "k")
		if err != nil {
			t.Fatal(err)
		}
		mk, _ := inspect.Keys(h, inspect.Mutex, "k")
		for _, k := range b.Keys(t, prefix) {
			if strings.Contains(k, ":once:res:") {
				continue
			}
			if !slices.Contains(all, k) {
				t.Errorf("key %q is not among Keys(\"\", k) (%d keys)", k, len(all))
			}
			if kind, _, _ := cut(k, prefix); kind == inspect.Mutex && !slices.Contains(mk, k) {
				t.Errorf("key %q is not among Keys(mutex, k) = %q", k, mk)
			}
		}
		_ = m.Unlock(ctx)
	})
}

// cut returns the kind part of a key of the layout <prefix>{<name>}:<kind>[:<part>].
func cut(key, prefix string) (kind string, rest string, ok bool) {
	for i := len(prefix); i < len(key); i++ {
		if key[i] == '}' && i+2 < len(key) {
			rest = key[i+2:]
			for j := 0; j < len(rest); j++ {
				if rest[j] == ':' {
					return rest[:j], rest[j+1:], true
				}
			}
			return rest, "", true
		}
	}
	return "", "", false
}

// Bad input to Keys is an error matching ErrInvalid, and nothing is sent.
func TestKeysBadInput(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Mini)
	h := b.Handle(t, b.Client(t))
	for _, tc := range []struct {
		h          *distsync.Handle
		kind, name string
	}{{nil, inspect.Mutex, "n"}, {h, "lock", "n"}, {h, inspect.Mutex, ""}, {h, "", ""}} {
		if _, err := inspect.Keys(tc.h, tc.kind, tc.name); !errors.Is(err, distsync.ErrInvalid) {
			t.Errorf("Keys(%v, %q, %q) = %v, want ErrInvalid", tc.h != nil, tc.kind, tc.name, err)
		}
	}
}

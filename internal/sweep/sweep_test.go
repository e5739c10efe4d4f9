package sweep_test

import (
	"context"
	"errors"
	"testing"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/sweep"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// DeleteKeys reaches every master and no other key: keys spread over every slot range, next
// to keys that the prefix would match as an unescaped glob.
func TestDeleteKeysReachesEveryMasterAndNoOtherKey(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		c := b.Client(t)
		base := b.Prefix(t)
		prefix := base + `a*?[b]\:`
		others := []string{base + "aZZb:k", base + "a*?[b]", base[:len(base)-1]}
		var mine []string
		for i := range 64 {
			mine = append(mine, prefix+"{k"+string(rune('a'+i%26))+string(rune('a'+i/26))+"}")
		}
		for _, k := range append(mine, others...) {
			if err := c.Do(context.Background(), c.B().Set().Key(k).Value("v").Build()).Error(); err != nil {
				t.Fatalf("SET %s: %v", k, err)
			}
		}
		n, err := sweep.DeleteKeys(context.Background(), c, prefix)
		if err != nil || n != len(mine) {
			t.Errorf("DeleteKeys = %d, %v; want %d, nil", n, err, len(mine))
		}
		if left := b.Keys(t, prefix); len(left) > 0 {
			t.Errorf("keys left under the prefix: %q", left)
		}
		for _, k := range others {
			if n, err := c.Do(context.Background(), c.B().Exists().Key(k).Build()).AsInt64(); err != nil || n != 1 {
				t.Errorf("DeleteKeys touched %q, not under its prefix: EXISTS = %d, %v", k, n, err)
			}
		}
	})
}

// Scan reaches every master and passes no other key; an error of f ends it.
func TestScanReachesEveryMasterAndNoOtherKey(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		c := b.Client(t)
		base := b.Prefix(t)
		prefix := base + `a*?[b]\:`
		others := []string{base + "aZZb:k", base + "a*?[b]", base[:len(base)-1]}
		mine := make(map[string]bool)
		for i := range 64 {
			mine[prefix+"{k"+string(rune('a'+i%26))+string(rune('a'+i/26))+"}"] = true
		}
		var all []string
		for k := range mine {
			all = append(all, k)
		}
		for _, k := range append(all, others...) {
			if err := c.Do(context.Background(), c.B().Set().Key(k).Value("v").Build()).Error(); err != nil {
				t.Fatalf("SET %s: %v", k, err)
			}
		}
		seen := make(map[string]bool)
		err := sweep.Scan(context.Background(), c, prefix, func(keys []string) error {
			for _, k := range keys {
				if !mine[k] {
					t.Errorf("Scan passed %q, not under its prefix", k)
				}
				seen[k] = true
			}
			return nil
		})
		if err != nil || len(seen) != len(mine) {
			t.Errorf("Scan saw %d keys, %v; want %d, nil", len(seen), err, len(mine))
		}
		stop := errors.New("stop")
		calls := 0
		err = sweep.Scan(context.Background(), c, prefix, func([]string) error { calls++; return stop })
		if !errors.Is(err, stop) || calls != 1 {
			t.Errorf("Scan with a failing f: %v after %d calls, want f's error after 1", err, calls)
		}
	})
}

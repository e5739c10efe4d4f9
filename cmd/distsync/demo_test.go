//go:build unix

package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// demoURL returns the --redis value for backend b.
func demoURL(b *redistest.Backend) string {
	addrs := b.Addrs()
	url := "redis://" + addrs[0]
	for i, a := range addrs[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		url += sep + "addr=" + a
	}
	return url
}

// keepKey writes a key of the test's own, as a user's key next to the demo's, and returns a
// check that it is still there.
func keepKey(t *testing.T, b *redistest.Backend) func() {
	key := b.Prefix(t) + "users-key"
	if err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Set().Key(key).Value("v").Build() }).Error(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
	return func() {
		t.Helper()
		if n, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Exists().Key(key).Build() }).AsInt64(); err != nil || n != 1 {
			t.Errorf("the demo touched a key not its own: EXISTS %s = %d, %v", key, n, err)
		}
	}
}

func TestDemoLeavesNoKeys(t *testing.T) {
	t.Parallel()
	for _, name := range []string{redistest.Standalone, redistest.ClusterB} {
		t.Run(name, func(t *testing.T) {
			b := redistest.Open(t, name)
			stillThere := keepKey(t, b)
			var out strings.Builder
			cfg, err := parseDemo([]string{"--redis", demoURL(b), "--pods", "2", "--goroutines", "2", "--rounds", "5"})
			if err != nil {
				t.Fatal(err)
			}
			if err := demo(context.Background(), cfg, &out); err != nil {
				t.Fatalf("demo: %v\n%s", err, out.String())
			}
			for _, want := range []string{
				"acquisitions:     20 ",
				"overlaps:         none: never more than one holder at a time",
				"fencing tokens:   strictly increasing",
				"keys left:        none (deleted the run's ",
			} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			if strings.Contains(out.String(), "deleted the run's 0,") {
				t.Errorf("the demo deleted no key: the fencing counter at least should have been there\n%s", out.String())
			}
			if keys := b.Keys(t, "distsync-demo:"); len(keys) > 0 {
				t.Errorf("the demo left keys behind: %q", keys)
			}
			stillThere()
		})
	}
}

func TestDemoInterruptedLeavesNoKeys(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Standalone)
	stillThere := keepKey(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		cfg, err := parseDemo([]string{"--redis", demoURL(b), "--pods", "2", "--goroutines", "2", "--rounds", "1000000"})
		if err != nil {
			done <- err
			return
		}
		done <- demo(ctx, cfg, &strings.Builder{})
	}()
	// Interrupt the demo once it has keys in Redis: a lock taken, a fencing counter.
	for deadline := time.Now().Add(10 * time.Second); len(b.Keys(t, "distsync-demo:")) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the demo wrote no key in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("interrupted demo returned %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not return 30 s after its context was cancelled")
	}
	if keys := b.Keys(t, "distsync-demo:"); len(keys) > 0 {
		t.Errorf("the interrupted demo left keys behind: %q", keys)
	}
	stillThere()
}

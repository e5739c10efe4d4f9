//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
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

// demoRoot starts the key prefix of every demo (distsync-demo:<random>:).
const demoRoot = "distsync-demo:"

// demoServer is a Redis that a test runs demos on, with no other test's demo on it. A demo
// picks its own key prefix, which it tells only when it ends well: on a server where demos of
// other tests run too, a test cannot tell its demo's keys from theirs (a demo still running
// elsewhere left keys "behind"; an interrupt went out once another demo had written a key).
type demoServer struct {
	url     string
	c       rueidis.Client
	userKey string          // a key of the test's own, as a user's key next to the demo's
	keys    func() []string // every key under demoRoot
}

// ownDemoServer starts a redis-server for t alone.
func ownDemoServer(t *testing.T) demoServer {
	t.Helper()
	p := redistest.StartRedis(t)
	c := p.Client(t)
	return demoServer{url: "redis://" + p.Addr(), c: c, userKey: "users-key", keys: func() []string {
		t.Helper()
		keys, err := c.Do(context.Background(), c.B().Keys().Pattern(demoRoot+"*").Build()).AsStrSlice()
		if err != nil {
			t.Fatalf("KEYS %s*: %v", demoRoot, err)
		}
		return keys
	}}
}

// clusterDemoServer is the harness's shared Cluster, on which no other test of this package
// runs a demo.
func clusterDemoServer(t *testing.T) demoServer {
	t.Helper()
	b := redistest.Open(t, redistest.ClusterB)
	return demoServer{url: demoURL(b), c: b.Client(t), userKey: b.Prefix(t) + "users-key",
		keys: func() []string { return b.Keys(t, demoRoot) }}
}

// keepKey writes s.userKey and returns a check that it is still there.
func (s demoServer) keepKey(t *testing.T) func() {
	t.Helper()
	ctx := context.Background()
	if err := s.c.Do(ctx, s.c.B().Set().Key(s.userKey).Value("v").Build()).Error(); err != nil {
		t.Fatalf("SET %s: %v", s.userKey, err)
	}
	return func() {
		t.Helper()
		if n, err := s.c.Do(ctx, s.c.B().Exists().Key(s.userKey).Build()).AsInt64(); err != nil || n != 1 {
			t.Errorf("the demo touched a key not its own: EXISTS %s = %d, %v", s.userKey, n, err)
		}
	}
}

// noKeysLeft fails t if a demo left a key on s; how the demo ended is said in the error.
func (s demoServer) noKeysLeft(t *testing.T, how string) {
	t.Helper()
	if keys := s.keys(); len(keys) > 0 {
		t.Errorf("the demo (%s) left keys behind: %q", how, keys)
	}
}

func TestDemoLeavesNoKeys(t *testing.T) {
	t.Parallel()
	for _, name := range []string{redistest.Standalone, redistest.ClusterB} {
		t.Run(name, func(t *testing.T) {
			var s demoServer
			if name == redistest.Standalone {
				s = ownDemoServer(t)
			} else {
				s = clusterDemoServer(t)
			}
			stillThere := s.keepKey(t)
			cfg, err := parseDemo([]string{"--redis", s.url, "--pods", "2", "--goroutines", "2", "--rounds", "5"})
			if err != nil {
				t.Fatal(err)
			}
			redistest.Retry(t, 3, func() error {
				var out strings.Builder
				err := demo(context.Background(), cfg, &out)
				s.noKeysLeft(t, fmt.Sprintf("ended with %v", err)) // ended by an error too
				if errors.Is(err, distsync.ErrLost) {
					// A hand-off is confirmed within distsync.DefaultHandoffWindow, or lost:
					// a loaded machine can stall the demo past it.
					return fmt.Errorf("demo: %w", err)
				}
				if err != nil {
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
				return nil
			})
			stillThere()
		})
	}
}

func TestDemoInterruptedLeavesNoKeys(t *testing.T) {
	t.Parallel()
	s := ownDemoServer(t)
	stillThere := s.keepKey(t)
	cfg, err := parseDemo([]string{"--redis", s.url, "--pods", "2", "--goroutines", "2", "--rounds", "1000000"})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Retry(t, 3, func() error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := redistest.Async(ctx, func(ctx context.Context) error { return demo(ctx, cfg, &strings.Builder{}) })
		// Interrupt the demo once it has keys in Redis: a lock taken, a fencing counter.
		var ended *redistest.Returned
		if !redistest.Eventually(cliLimit, func() bool {
			select {
			case r := <-done:
				ended = &r
				return true
			default:
				return len(s.keys()) > 0
			}
		}) {
			t.Fatalf("the demo wrote no key in %v", cliLimit)
		}
		if ended != nil {
			s.noKeysLeft(t, fmt.Sprintf("ended with %v", ended.Err))
			if errors.Is(ended.Err, distsync.ErrLost) {
				return fmt.Errorf("the demo ended before the interrupt: %w", ended.Err) // see TestDemoLeavesNoKeys
			}
			t.Fatalf("the demo ended before the interrupt: %v", ended.Err)
		}
		cancel()
		err := redistest.Await(t, done, cliLimit).Err
		s.noKeysLeft(t, "interrupted")
		if !errors.Is(err, context.Canceled) {
			if errors.Is(err, distsync.ErrLost) {
				return fmt.Errorf("the demo ended by a loss as it was interrupted: %w", err)
			}
			t.Errorf("interrupted demo returned %v, want context.Canceled", err)
		}
		return nil
	})
	stillThere()
}

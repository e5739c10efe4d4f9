package redistest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// The harness learns the binary's version from its --version and writes only the
// configuration that version takes: Redis 6.2 stops at start on enable-debug-command and
// cluster-port, which came with 7.0.
func TestConfigFollowsTheBinaryVersion(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		out  string
		want Version
	}{
		{"Redis server v=6.2.16 sha=00000000:0 malloc=libc bits=64 build=1cb2d30b30c0a1d5", Version{6, 2, 16}},
		{"Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=e08dbad3e06f3fb", Version{7, 0, 15}},
		{"Valkey server v=8.0.1 sha=00000000:1 malloc=libc bits=64 build=302baf62584bdd15", Version{8, 0, 1}},
	} {
		bin := filepath.Join(t.TempDir(), "server")
		if err := os.WriteFile(bin, []byte("#!/bin/sh\necho '"+c.out+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		v, err := binVersion(bin)
		// A file this process just wrote can be busy for an instant: another goroutine's fork
		// may hold its descriptor until that child execs (golang.org/issue/22315).
		for i := 0; i < 50 && errors.Is(err, syscall.ETXTBSY); i++ {
			time.Sleep(20 * time.Millisecond)
			v, err = binVersion(bin)
		}
		if err != nil || v != c.want {
			t.Errorf("binVersion(%q) = %v, %v; want %v", c.out, v, err, c.want)
		}
	}
	has := func(conf []string, directive string) bool {
		return slices.ContainsFunc(conf, func(l string) bool { return strings.HasPrefix(l, directive+" ") })
	}
	old := serverConfig(Version{6, 2, 16}, 12000, true)
	if has(old, "enable-debug-command") || has(old, "cluster-port") {
		t.Errorf("6.2 config %q has a 7.0 directive", old)
	}
	for _, v := range []Version{{7, 0, 15}, {8, 0, 1}} {
		conf := serverConfig(v, 12000, true)
		if !has(conf, "enable-debug-command") || !slices.Contains(conf, "cluster-port 22000") {
			t.Errorf("%v config %q lacks enable-debug-command or cluster-port 22000", v, conf)
		}
		if conf := serverConfig(v, 12000, false); has(conf, "cluster-port") {
			t.Errorf("%v standalone config %q has cluster-port", v, conf)
		}
	}
}

// The binary the harness runs (DISTSYNC_REDIS_SERVER; redis-server on PATH by default) starts,
// standalone and as a cluster node, is the version the harness read, and takes DEBUG (the
// fault tests' DEBUG SLEEP) from a local client.
func TestHarnessStartsTheServerItRuns(t *testing.T) {
	RequireRedis(t)
	want, err := ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	for _, cluster := range []bool{false, true} {
		s, err := startServer(cluster)
		if err != nil {
			t.Fatalf("start (cluster %v) of v%v: %v", cluster, want, err)
		}
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			s.Stop()
			t.Fatal(err)
		}
		ctx := context.Background()
		info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
		if err != nil || !strings.Contains(info, "redis_version:") {
			t.Errorf("INFO server: %v %q", err, info)
		}
		// Valkey reports its own version beside the Redis one it is compatible with.
		if !strings.Contains(info, "_version:"+want.String()+"\r\n") {
			t.Errorf("server started is not v%v: %q", want, info)
		}
		if err := c.Do(ctx, c.B().Arbitrary("DEBUG", "SLEEP").Args("0").Build()).Error(); err != nil {
			t.Errorf("DEBUG SLEEP 0 on v%v: %v", want, err)
		}
		c.Close()
		s.Stop()
	}
}

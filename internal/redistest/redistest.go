// Package redistest is the test harness of distsync: it starts what a test needs and tears it
// down. Three backends:
//
//   - "miniredis": an embedded miniredis per test (TTLs follow the real clock);
//   - "redis": one real redis-server per test binary, on a free loopback port;
//   - "cluster": one 3-master Redis Cluster per test binary, from the same redis-server.
//
// Real servers are started on first use and stopped by [Main] (and killed with the test
// binary if it dies). When redis-server is not on PATH, the tests that need it are skipped
// with a message, unless the environment variable DISTSYNC_REQUIRE_REDIS is set to 1, which
// turns the skip into a failure (CI sets it).
//
// Tests isolate themselves by key prefix ([Backend.Prefix]), not by server.
package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
)

// EnvRequire names the environment variable that, set to 1, makes a missing redis-server a
// test failure instead of a skip.
const EnvRequire = "DISTSYNC_REQUIRE_REDIS"

// Backend names.
const (
	Mini       = "miniredis"
	Standalone = "redis"
	ClusterB   = "cluster"
)

// All lists every backend, in the order Each runs them.
var All = []string{Mini, Standalone, ClusterB}

var (
	standaloneOnce sync.Once
	standalone     *Server
	standaloneErr  error
	clusterOnce    sync.Once
	cluster        *Cluster
	clusterErr     error
	prefixSeq      atomic.Int64
)

// Main runs the tests of a package and stops the servers they started. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if standalone != nil {
		standalone.Stop()
	}
	if cluster != nil {
		cluster.Stop()
	}
	os.Exit(code)
}

// Backend is one Redis a test talks to.
type Backend struct {
	Name    string
	Mini    *miniredis.Miniredis // for "miniredis"
	Server  *Server              // for "redis"
	Cluster *Cluster             // for "cluster"
	tb      testing.TB

	embedded *embedded.Server
}

// Each runs f as a subtest on every backend.
func Each(t *testing.T, f func(t *testing.T, b *Backend)) {
	t.Helper()
	for _, name := range All {
		t.Run(name, func(t *testing.T) { f(t, Open(t, name)) })
	}
}

// Open returns the backend called name, starting it if needed.
func Open(tb testing.TB, name string) *Backend {
	tb.Helper()
	b := &Backend{Name: name, tb: tb}
	switch name {
	case Mini:
		srv, err := embedded.Start()
		if err != nil {
			tb.Fatalf("miniredis: %v", err)
		}
		tb.Cleanup(srv.Close)
		b.embedded = srv
		b.Mini = srv.Miniredis()
	case Standalone:
		requireBinaries(tb)
		standaloneOnce.Do(func() { standalone, standaloneErr = startServer(false) })
		if standaloneErr != nil {
			tb.Fatalf("start redis-server: %v", standaloneErr)
		}
		b.Server = standalone
	case ClusterB:
		requireBinaries(tb)
		clusterOnce.Do(func() { cluster, clusterErr = startCluster() })
		if clusterErr != nil {
			tb.Fatalf("start cluster: %v", clusterErr)
		}
		b.Cluster = cluster
	default:
		tb.Fatalf("redistest: unknown backend %q", name)
	}
	return b
}

func requireBinaries(tb testing.TB) {
	tb.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv(EnvRequire) == "1" {
				tb.Fatalf("%s not found on PATH and %s=1: %v", bin, EnvRequire, err)
			}
			tb.Skipf("%s not found on PATH (install redis-server, or set %s=1 to fail instead of skipping)", bin, EnvRequire)
		}
	}
}

// Addrs returns the addresses a client connects to.
func (b *Backend) Addrs() []string {
	switch b.Name {
	case Mini:
		return []string{b.Mini.Addr()}
	case Standalone:
		return []string{b.Server.Addr()}
	default:
		return b.Cluster.Addrs()
	}
}

// ClientOption returns the rueidis options for a client of this backend.
func (b *Backend) ClientOption() rueidis.ClientOption {
	if b.Name == Mini {
		return b.embedded.ClientOption()
	}
	return rueidis.ClientOption{InitAddress: b.Addrs()}
}

// Client returns a new rueidis client (one simulated pod), closed when the test ends.
func (b *Backend) Client(tb testing.TB) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(b.ClientOption())
	if err != nil {
		tb.Fatalf("rueidis.NewClient: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Prefix returns a key prefix no other test uses, for distsync.WithKeyPrefix.
func (b *Backend) Prefix(tb testing.TB) string {
	name := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(tb.Name())
	return fmt.Sprintf("t%d.%s:", prefixSeq.Add(1), name)
}

// Handle returns a distsync handle on client, closed when the test ends (before the client).
func (b *Backend) Handle(tb testing.TB, client rueidis.Client, opts ...distsync.Option) *distsync.Handle {
	tb.Helper()
	return Handle(tb, client, opts...)
}

// Handle returns a distsync handle on client, closed when tb ends (before the client, if the
// client was made for tb too).
func Handle(tb testing.TB, client rueidis.Client, opts ...distsync.Option) *distsync.Handle {
	tb.Helper()
	h, err := distsync.New(client, opts...)
	if err != nil {
		tb.Fatalf("distsync.New: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Close(ctx)
	})
	return h
}

// Nodes returns one single-node client per master, for commands that must reach every node.
// The test closes them; they are closed at its end too.
func (b *Backend) Nodes(tb testing.TB) []rueidis.Client {
	tb.Helper()
	cs := b.nodes(tb)
	for _, c := range cs {
		tb.Cleanup(c.Close)
	}
	return cs
}

func (b *Backend) nodes(tb testing.TB) []rueidis.Client {
	tb.Helper()
	var out []rueidis.Client
	for _, addr := range b.Addrs() {
		opt := b.ClientOption()
		opt.InitAddress = []string{addr}
		opt.ForceSingleClient = true
		opt.DisableCache = true
		c, err := rueidis.NewClient(opt)
		if err != nil {
			tb.Fatalf("rueidis.NewClient(%s): %v", addr, err)
		}
		out = append(out, c)
	}
	return out
}

// Keys returns every key that starts with prefix, on every node.
func (b *Backend) Keys(tb testing.TB, prefix string) []string {
	tb.Helper()
	if b.Name == Mini {
		var out []string
		for _, k := range b.Mini.Keys() {
			if strings.HasPrefix(k, prefix) {
				out = append(out, k)
			}
		}
		return out
	}
	var out []string
	for _, c := range b.nodes(tb) {
		var cursor uint64
		for i := 0; i < 100000; i++ {
			e, err := c.Do(context.Background(), c.B().Scan().Cursor(cursor).Match(escapeGlob(prefix)+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				c.Close()
				tb.Fatalf("SCAN: %v", err)
			}
			out = append(out, e.Elements...)
			cursor = e.Cursor
			if cursor == 0 {
				break
			}
		}
		c.Close()
	}
	return out
}

func escapeGlob(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s)
}

// Channels returns the pub/sub channels with subscribers whose names match the glob pattern,
// on all nodes (plain and sharded pub/sub together).
func (b *Backend) Channels(tb testing.TB, pattern string) []string {
	tb.Helper()
	if b.Name == Mini {
		return b.Mini.PubSubChannels(pattern)
	}
	var out []string
	for _, c := range b.nodes(tb) {
		for _, cmd := range []rueidis.Completed{
			c.B().PubsubChannels().Pattern(pattern).Build(),
			c.B().PubsubShardchannels().Pattern(pattern).Build(),
		} {
			chs, err := c.Do(context.Background(), cmd).AsStrSlice()
			if err != nil {
				c.Close()
				tb.Fatalf("PUBSUB: %v", err)
			}
			out = append(out, chs...)
		}
		c.Close()
	}
	return out
}

// Subscribers returns the number of subscribers of a channel on all nodes (plain and
// sharded pub/sub counted together).
func (b *Backend) Subscribers(tb testing.TB, channel string) int64 {
	tb.Helper()
	if b.Name == Mini {
		return int64(b.Mini.PubSubNumSub(channel)[channel])
	}
	var n int64
	for _, c := range b.nodes(tb) {
		for _, cmd := range []rueidis.Completed{
			c.B().PubsubNumsub().Channel(channel).Build(),
			c.B().PubsubShardnumsub().Channel(channel).Build(),
		} {
			m, err := c.Do(context.Background(), cmd).AsIntMap()
			if err != nil {
				c.Close()
				tb.Fatalf("PUBSUB: %v", err)
			}
			n += m[channel]
		}
		c.Close()
	}
	return n
}

// Do runs one command on the node that owns key, for a test's own reads and writes.
func (b *Backend) Do(tb testing.TB, cmd func(c rueidis.Client) rueidis.Completed) rueidis.RedisResult {
	tb.Helper()
	opt := b.ClientOption()
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatalf("rueidis.NewClient: %v", err)
	}
	defer c.Close()
	return c.Do(context.Background(), cmd(c))
}

// KillPubSub drops every subscription connection of every client. On miniredis, which has no
// CLIENT KILL, it restarts the server (data kept), which drops every connection: the same
// fault for a subscriber, plus a reconnect for everyone else.
func (b *Backend) KillPubSub(tb testing.TB) {
	tb.Helper()
	if b.Name == Mini {
		b.Mini.Close()
		if err := b.Mini.Restart(); err != nil {
			tb.Fatalf("miniredis restart: %v", err)
		}
		return
	}
	for _, c := range b.nodes(tb) {
		if err := c.Do(context.Background(), c.B().ClientKill().TypePubsub().Build()).Error(); err != nil {
			c.Close()
			tb.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
		}
		c.Close()
	}
}

// KeysWithoutTTL returns the keys under prefix that would live for ever.
func (b *Backend) KeysWithoutTTL(tb testing.TB, prefix string) []string {
	tb.Helper()
	var out []string
	for _, k := range b.Keys(tb, prefix) {
		pttl, err := b.Do(tb, func(c rueidis.Client) rueidis.Completed { return c.B().Pttl().Key(k).Build() }).AsInt64()
		if err != nil {
			tb.Fatalf("PTTL %s: %v", k, err)
		}
		if pttl == -1 {
			out = append(out, k)
		}
	}
	return out
}

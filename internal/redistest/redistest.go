// Package redistest is the test harness of distsync: it starts what a test needs and tears it
// down. Three backends:
//
//   - "miniredis": a miniredis per test (TTLs follow the real clock), each in a process of the
//     test binary's own (see [MiniServer]), on a free loopback port;
//   - "redis": one real redis-server per test binary, on a free loopback port;
//   - "cluster": one 3-master Redis Cluster per test binary, from the same redis-server.
//
// The real backends run redis-server and redis-cli from PATH by default, or Valkey or any
// other build named by the variables under Binaries below.
//
// Real servers are started on first use and stopped by [Main] (and killed with the test
// binary if it dies). When redis-server or redis-cli is not on PATH, the tests that need them
// are skipped with a message, unless the environment variable DISTSYNC_REQUIRE_REDIS is set
// to 1, which turns the skip into a failure (CI sets it).
//
// Tests isolate themselves by key prefix ([Backend.Prefix]), not by server.
//
// # Binaries
//
// Every server the harness starts (standalone, cluster node, replica, Sentinel) is run from
// one binary, and every cluster is created with one CLI; both are chosen by environment
// variables, read each time a server is started ([ServerBin], [CLIBin]):
//
//   - DISTSYNC_REDIS_SERVER: the server binary, an absolute path or a name looked up on PATH;
//     redis-server on PATH when unset or empty. Sentinels are this binary run with
//     --sentinel, so no third binary is needed (valkey-server --sentinel is Valkey's
//     Sentinel).
//   - DISTSYNC_REDIS_CLI: the CLI that runs --cluster create, likewise; redis-cli on PATH when
//     unset or empty.
//
// For example, the whole suite against Valkey (.ci/valkey builds it and prints its bin
// directory):
//
//	bin=$(.ci/valkey)
//	DISTSYNC_REQUIRE_REDIS=1 DISTSYNC_REDIS_SERVER=$bin/valkey-server \
//		DISTSYNC_REDIS_CLI=$bin/valkey-cli go test -race ./...
//
// A relative path with a slash is refused (tests run in their package's directory, so it
// would resolve differently in each). A variable that is set but names no executable fails
// the tests that need it, whatever DISTSYNC_REQUIRE_REDIS says: a binary asked for by name is
// never skipped silently. Because the variables are read with os.Getenv while the tests run,
// go test's result cache keys on them: changing one reruns the tests that start servers.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/testrun"
)

// EnvRequire names the environment variable that, set to 1, makes a missing redis-server a
// test failure instead of a skip.
const EnvRequire = "DISTSYNC_REQUIRE_REDIS"

// Environment variables naming the binaries the harness runs; see the package
// documentation.
const (
	EnvServer = "DISTSYNC_REDIS_SERVER" // server binary; redis-server on PATH by default
	EnvCLI    = "DISTSYNC_REDIS_CLI"    // CLI binary; redis-cli on PATH by default
)

// ServerBin returns the path of the server binary every server of the harness is started
// from ($DISTSYNC_REDIS_SERVER, else redis-server on PATH); Sentinels are it run with
// --sentinel. It reads the environment on every call, never at init, so that go test's cache
// records the variable.
func ServerBin() (string, error) { return lookBin(EnvServer, "redis-server") }

// CLIBin returns the path of the CLI the harness creates clusters with
// ($DISTSYNC_REDIS_CLI, else redis-cli on PATH).
func CLIBin() (string, error) { return lookBin(EnvCLI, "redis-cli") }

// errBinarySet marks a binary named by its environment variable that cannot be run: a
// failure, never a skip.
var errBinarySet = errors.New("named by the environment")

func lookBin(env, def string) (string, error) {
	name := os.Getenv(env)
	if name == "" {
		p, err := exec.LookPath(def)
		if err != nil {
			return "", fmt.Errorf("%s not found on PATH and %s not set: %w", def, env, err)
		}
		return p, nil
	}
	if strings.ContainsRune(name, '/') && !filepath.IsAbs(name) {
		return "", fmt.Errorf("%s=%q: %w, but a relative path: give an absolute path or a name on PATH", env, name, errBinarySet)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s=%q: %w, but cannot be run: %w", env, name, errBinarySet, err)
	}
	return p, nil
}

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

// Main runs the tests of a package and stops the servers they started, then prints the
// package's line: what it ran on and what it skipped (internal/testrun). Call it from
// TestMain. Unless -test.parallel is given, [testrun.DefaultParallel] tests run at once; a
// test that needs a shared server or the process to itself does not call t.Parallel.
//
// When the server binaries are there, the shared redis-server and Cluster start at once, in
// the background, while the first tests run on miniredis.
func Main(m *testing.M) {
	WatchStalls()
	if haveBinaries() {
		go standaloneOnce.Do(startStandalone)
		go clusterOnce.Do(startSharedCluster)
	}
	code := testrun.Run(m, describe)
	StopMini()
	// Wait for a start still under way, so that what it started is stopped too.
	standaloneOnce.Do(func() {})
	clusterOnce.Do(func() {})
	if standalone != nil {
		standalone.Stop()
	}
	if cluster != nil {
		cluster.Stop()
	}
	testrun.Exit(code)
}

// MainLong is [Main] for a package of the long tier (internal/testrun): without
// DISTSYNC_LONG=1 it runs none of its tests and says so in its line; what names the suite.
func MainLong(m *testing.M, what string) { testrun.MainLong(m, what, Main) }

func startStandalone()    { standalone, standaloneErr = startServer(false) }
func startSharedCluster() { cluster, clusterErr = startCluster(nil) }

// Backend is one Redis a test talks to.
type Backend struct {
	Name    string
	Mini    *MiniServer // for "miniredis"
	Server  *Server     // for "redis"
	Cluster *Cluster    // for "cluster"
	tb      testing.TB
}

// Each runs f as a subtest on every backend, the three in parallel (each test isolates itself
// by key prefix, and each backend is a server of its own). They run once the calling test's
// function has returned, so that function must do nothing after Each that they need.
func Each(t *testing.T, f func(t *testing.T, b *Backend)) {
	t.Helper()
	each(t, All, f)
}

func each(t *testing.T, names []string, f func(t *testing.T, b *Backend)) {
	t.Helper()
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, Open(t, name))
		})
	}
}

// Open returns the backend called name, starting it if needed.
func Open(tb testing.TB, name string) *Backend {
	tb.Helper()
	b := &Backend{Name: name, tb: tb}
	switch name {
	case Mini:
		srv, err := startMini()
		if err != nil {
			tb.Fatalf("miniredis: %v", err)
		}
		tb.Cleanup(srv.stop)
		b.Mini = srv
	case Standalone:
		requireBinaries(tb)
		standaloneOnce.Do(startStandalone)
		if standaloneErr != nil {
			tb.Fatalf("start redis-server: %v", standaloneErr)
		}
		b.Server = standalone
	case ClusterB:
		requireBinaries(tb)
		clusterOnce.Do(startSharedCluster)
		if clusterErr != nil {
			tb.Fatalf("start cluster: %v", clusterErr)
		}
		b.Cluster = cluster
	default:
		tb.Fatalf("redistest: unknown backend %q", name)
	}
	noteBackend(tb, name)
	return b
}

func requireBinaries(tb testing.TB) {
	tb.Helper()
	for _, look := range []func() (string, error){ServerBin, CLIBin} {
		if _, err := look(); err != nil {
			if errors.Is(err, errBinarySet) {
				tb.Fatalf("redistest: %v", err)
			}
			if os.Getenv(EnvRequire) == "1" {
				tb.Fatalf("redistest: %v, and %s=1", err, EnvRequire)
			}
			skip(tb, reasonNoRedis, fmt.Sprintf("redistest: %v (install redis-server, or set %s and %s, or set %s=1 to fail instead of skipping)",
				err, EnvServer, EnvCLI, EnvRequire))
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
		// As embedded.Server.ClientOption: miniredis has no client-side caching and no
		// commands on a subscribed RESP3 connection, and it answers CLUSTER SLOTS.
		return lean(rueidis.ClientOption{InitAddress: b.Addrs(), DisableCache: true, AlwaysRESP2: true, ForceSingleClient: true})
	}
	// A standalone server is told to be one, as miniredis is: rueidis would find that out
	// too, after it has tried it as a Cluster (a 16384-slot table allocated and dropped).
	return lean(rueidis.ClientOption{InitAddress: b.Addrs(), ForceSingleClient: b.Name == Standalone})
}

// lean returns opt with the per-connection buffers a test needs. rueidis's defaults (two
// 0.5 MiB buffers and a ring of 1024 pending commands on every connection) are made for
// throughput; under -race a client with them costs ~8 ms of CPU to make, most of it writing
// the buffers' race shadow, and the tests make thousands of clients (a fifth of a
// primitive's test CPU). Nothing a test asserts depends on them: a command longer than the
// buffer is written through it, and a full ring makes the next command wait its turn.
func lean(opt rueidis.ClientOption) rueidis.ClientOption {
	opt.ReadBufferEachConn, opt.WriteBufferEachConn = 1<<14, 1<<14
	opt.RingScaleEachConn = 8
	return opt
}

// Client returns a new rueidis client (one simulated pod), closed when the test ends. Its
// connections are named after the test (see KillPubSub).
func (b *Backend) Client(tb testing.TB) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(b.testOption(tb))
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
// client was made for tb too). Its version check may take a minute: a test's premise is a
// server that answers, not one that answers within New's 5 s on a machine busy with other
// work (two suites at once met a Cluster node 10 s late).
func Handle(tb testing.TB, client rueidis.Client, opts ...distsync.Option) *distsync.Handle {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := distsync.NewWithContext(ctx, client, opts...)
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

// Keys returns every key that starts with prefix, on every node, sorted, each once.
func (b *Backend) Keys(tb testing.TB, prefix string) []string {
	tb.Helper()
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
	// SCAN's order depends on the hash table's layout, and it may return a key twice (while
	// the table is resized).
	slices.Sort(out)
	return slices.Compact(out)
}

func escapeGlob(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s)
}

// Channels returns the pub/sub channels with subscribers whose names match the glob pattern,
// on all nodes (plain and, where the server has it, sharded pub/sub together).
func (b *Backend) Channels(tb testing.TB, pattern string) []string {
	tb.Helper()
	var out []string
	for _, c := range b.nodes(tb) {
		cmds := []rueidis.Completed{c.B().PubsubChannels().Pattern(pattern).Build()}
		if b.Sharded() {
			cmds = append(cmds, c.B().PubsubShardchannels().Pattern(pattern).Build())
		}
		for _, cmd := range cmds {
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

// LeftChannels returns the pub/sub channels matching the glob pattern that are still
// subscribed for distsync once nobody waits: on a real server, every one Redis has; on
// miniredis, those the notifiers of hs still hold. Over RESP2, which miniredis speaks, rueidis
// keeps a subscription on a connection of its own, and when its command connection breaks (a
// command's ctx deadline passed in flight) it replaces that one and leaves the subscription's
// where it was: an UNSUBSCRIBE cannot reach it, and the notifier ends its side of it
// (pubsub.Notifier.unsubscribe). What rueidis left on that connection is none of distsync's.
func (b *Backend) LeftChannels(tb testing.TB, pattern string, hs ...*distsync.Handle) []string {
	tb.Helper()
	chans := b.Channels(tb, pattern)
	if b.Name != Mini {
		return chans
	}
	held := map[string]bool{}
	for _, h := range hs {
		c, err := api.Core(h, "redistest")
		if err != nil {
			tb.Fatal(err)
		}
		for _, name := range c.Notifier.Names() {
			held[name] = true
		}
	}
	var out []string
	for _, ch := range chans {
		if held[ch] {
			out = append(out, ch)
		}
	}
	return out
}

// Subscribers returns the number of subscribers of a channel on all nodes (plain and, where
// the server has it, sharded pub/sub counted together).
func (b *Backend) Subscribers(tb testing.TB, channel string) int64 {
	tb.Helper()
	var n int64
	for _, c := range b.nodes(tb) {
		cmds := []rueidis.Completed{c.B().PubsubNumsub().Channel(channel).Build()}
		if b.Sharded() {
			cmds = append(cmds, c.B().PubsubShardnumsub().Channel(channel).Build())
		}
		for _, cmd := range cmds {
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

// testOption is ClientOption for a client of tb: on a real server, its connections are named
// after tb, so that KillPubSub can find them among other tests'.
func (b *Backend) testOption(tb testing.TB) rueidis.ClientOption {
	opt := b.ClientOption()
	if b.Name != Mini {
		opt.ClientName = clientName(tb)
	}
	return opt
}

// clientName is the connection name of tb's clients: its name, with what CLIENT SETNAME
// refuses (spaces, control and non-ASCII characters) replaced.
func clientName(tb testing.TB) string {
	return "test:" + strings.Map(func(r rune) rune {
		if r <= ' ' || r > '~' {
			return '_'
		}
		return r
	}, tb.Name())
}

// KillPubSub drops every subscription connection of the clients made for the test (and its
// subtests) by Client, ClientVia, Pod and PodVia, server side (CLIENT KILL), and fails the
// test if it found none. Other tests' subscriptions on the shared servers are left alone, so
// that a test that kills may run in parallel. On miniredis, which has no CLIENT KILL, it
// restarts the test's own server (data kept), which drops every connection: the same fault
// for a subscriber, plus a reconnect for everyone else.
func (b *Backend) KillPubSub(tb testing.TB) {
	tb.Helper()
	if b.Name == Mini {
		if err := b.Mini.restart(); err != nil {
			tb.Fatalf("miniredis restart: %v", err)
		}
		return
	}
	name, killed := clientName(tb), 0
	for _, c := range b.nodes(tb) {
		killed += killNamed(tb, c, name)
		c.Close()
	}
	if killed == 0 {
		tb.Fatalf("KillPubSub: no subscription connection of %s to kill", name)
	}
}

// killNamed kills, on the node c, the subscription connections named name or after one of its
// subtests, and returns how many.
func killNamed(tb testing.TB, c rueidis.Client, name string) int {
	tb.Helper()
	ctx := context.Background()
	list, err := c.Do(ctx, c.B().ClientList().TypePubsub().Build()).ToString()
	if err != nil {
		tb.Fatalf("CLIENT LIST TYPE pubsub: %v", err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimPrefix(list, "txt:"), "\n") { // a RESP3 verbatim string
		var id int64 = -1
		named := false
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "id":
				id, _ = strconv.ParseInt(v, 10, 64)
			case "name":
				named = v == name || strings.HasPrefix(v, name+"/")
			}
		}
		if !named || id < 0 {
			continue
		}
		// A connection that closed since the list was read is no longer there to kill.
		k, err := c.Do(ctx, c.B().ClientKill().Id(id).Build()).AsInt64()
		if err != nil {
			tb.Fatalf("CLIENT KILL ID %d: %v", id, err)
		}
		n += int(k)
	}
	return n
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

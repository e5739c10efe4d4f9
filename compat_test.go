package distsync_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/inspect"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/mutex"
)

// An Unlock wakes a waiter in another process by pub/sub on every server distsync supports:
// sharded pub/sub on a Cluster that has it (Redis 7.0+, Valkey), plain pub/sub elsewhere,
// a Redis 6.2 Cluster included (it has no SPUBLISH: a script calling it failed at the first
// Unlock, and every waiter stalled until its backstop). The lease is long, so only the
// message can wake the waiter in time. The hand-off window is long too: a hold taken by
// hand-off has only the window until its confirm reaches Redis, which a loaded machine can
// delay past the default half second (the waiter's Unlock then finds the hold lapsed).
func TestUnlockWakesWaiterOnEveryServer(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		// The lease is a minute: a waiter woken within 20 s of the Unlock was woken by the
		// message, whatever the machine's load.
		long := []distsync.Option{distsync.WithLeaseTTL(time.Minute), distsync.WithHandoffWindow(20 * time.Second)}
		ma, err := mutex.New(b.Pod(t, prefix).H, "handoff", long...)
		if err != nil {
			t.Fatal(err)
		}
		mb, err := mutex.New(b.Pod(t, prefix).H, "handoff", long...)
		if err != nil {
			t.Fatal(err)
		}
		for round := range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			if err := ma.Lock(ctx); err != nil {
				t.Fatalf("round %d: a Lock: %v", round, err)
			}
			got := make(chan error, 1)
			go func() { got <- mb.Lock(ctx) }()
			// Subscribed, on the kind of channel the server has (the previous round's
			// subscription may linger a while, then go, before the waiter's new one).
			if !redistest.Eventually(20*time.Second, func() bool { return subscribed(t, b, escape(prefix)+"*") }) {
				t.Fatalf("round %d: the waiter never subscribed", round)
			}
			began := time.Now()
			if err := ma.Unlock(ctx); err != nil {
				t.Fatalf("round %d: Unlock: %v", round, err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("round %d: waiter's Lock: %v", round, err)
				}
				t.Logf("round %d: waiter woke %v after Unlock", round, time.Since(began).Round(time.Microsecond))
			case <-time.After(20 * time.Second):
				t.Fatalf("round %d: the waiter was not woken within 20 s of Unlock (lease 1 min)", round)
			}
			if err := mb.Unlock(ctx); err != nil {
				t.Fatalf("round %d: waiter's Unlock: %v", round, err)
			}
		}
	})
}

// subscribed reports whether a channel matching pattern is subscribed on b, sharded on a
// Cluster with sharded pub/sub, plain elsewhere; a plain channel on a Cluster with sharded
// pub/sub fails t.
func subscribed(t *testing.T, b *redistest.Backend, pattern string) bool {
	t.Helper()
	if b.Name == redistest.Mini {
		return len(b.Channels(t, pattern)) > 0
	}
	var plain, sharded int
	for _, c := range b.Nodes(t) {
		chs, err := c.Do(context.Background(), c.B().PubsubChannels().Pattern(pattern).Build()).AsStrSlice()
		if err != nil {
			t.Fatalf("PUBSUB CHANNELS: %v", err)
		}
		plain += len(chs)
		if b.Sharded() {
			chs, err := c.Do(context.Background(), c.B().PubsubShardchannels().Pattern(pattern).Build()).AsStrSlice()
			if err != nil {
				t.Fatalf("PUBSUB SHARDCHANNELS: %v", err)
			}
			sharded += len(chs)
		}
	}
	if b.Sharded() {
		if plain != 0 {
			t.Fatalf("%d plain channels subscribed on a Cluster with sharded pub/sub; want sharded only", plain)
		}
		return sharded > 0
	}
	return plain > 0
}

func escape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s)
}

// fakeServer answers just enough of the protocol for rueidis to connect (no HELLO: RESP2)
// and for New to ask INFO server, reporting info as the reply (an ACL's refusal if info is
// empty). It stops when the test ends.
func fakeServer(t *testing.T, info string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go serveFake(conn, info)
		}
	}()
	return l.Addr().String()
}

func serveFake(conn net.Conn, info string) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		var reply string
		switch strings.ToUpper(args[0]) {
		case "PING":
			reply = "+PONG\r\n"
		case "INFO":
			reply = "$" + strconv.Itoa(len(info)) + "\r\n" + info + "\r\n"
			if info == "" {
				reply = "-NOPERM this user has no permissions to run the 'info' command\r\n"
			}
		default:
			reply = fmt.Sprintf("-ERR unknown command '%s'\r\n", args[0])
		}
		if _, err := conn.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad command header %q", line)
	}
	args := make([]string, n)
	for i := range args {
		if line, err = r.ReadString('\n'); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return nil, fmt.Errorf("bad bulk header %q", line)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

func fakeClient(t *testing.T, info string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{fakeServer(t, info)},
		ForceSingleClient: true, DisableCache: true, DisableRetry: true})
	if err != nil {
		t.Fatalf("rueidis.NewClient to the fake server: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// A server older than Redis 6.2 is refused by New, with an error that names the version
// found and the version needed; 6.2 and later, and Valkey (which reports redis_version
// 7.2.4), are taken.
func TestNewRefusesAnOldServer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		info string
		ok   bool
		want string
	}{
		{"# Server\r\nredis_version:6.0.20\r\nredis_mode:standalone\r\n", false, "Redis 6.0.20; distsync needs Redis 6.2 or later, or Valkey 7.2 or later"},
		{"# Server\r\nredis_version:5.0.14\r\n", false, "Redis 5.0.14; distsync needs Redis 6.2"},
		{"# Server\r\nredis_version:6.2.0\r\n", true, ""},
		{"# Server\r\nredis_version:7.4.1\r\n", true, ""},
		{"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n", true, ""},
		{"# Server\r\nredis_version:7.0.0\r\nserver_name:valkey\r\nvalkey_version:6.9.9\r\n", true, ""},
	} {
		h, err := distsync.New(fakeClient(t, c.info))
		switch {
		case c.ok && err != nil:
			t.Errorf("New on %q = %v, want a Handle", c.info, err)
		case !c.ok && (!errors.Is(err, distsync.ErrUnsupported) || !strings.Contains(err.Error(), c.want) || h != nil):
			t.Errorf("New on %q = %v, %v; want ErrUnsupported saying %q", c.info, h, err, c.want)
		case !c.ok:
			t.Logf("New on %s: %v", strings.Fields(c.info)[2], err)
		}
		if h != nil {
			_ = h.Close(context.Background())
		}
	}
}

// The embedded miniredis, whose INFO has no server section, is taken as supported (with plain
// pub/sub); so is a server that refuses INFO.
func TestNewTakesServersThatDoNotSayTheirVersion(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := distsync.New(c)
	if err != nil {
		t.Fatalf("New on miniredis: %v", err)
	}
	_ = h.Close(context.Background())

	// INFO refused, as Redis refuses it to an ACL user without it.
	h, err = distsync.New(fakeClient(t, ""))
	if err != nil {
		t.Fatalf("New on a server that refuses INFO: %v", err)
	}
	_ = h.Close(context.Background())
}

// A server that cannot be reached when New asks its version: New returns, within the bound
// it was given, an error that says so (and is not ErrUnsupported); it hands out no Handle
// whose pub/sub it could not choose.
func TestNewOnAnUnreachableServer(t *testing.T) {
	t.Parallel()
	redistest.Retry(t, 3, func() error {
		srv, err := embedded.Start()
		if err != nil {
			t.Fatal(err)
		}
		c, err := srv.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		srv.Close() // the server goes away after the client connected

		const bound = 300 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		began := time.Now()
		h, err := distsync.NewWithContext(ctx, c)
		ended := time.Now()
		if err == nil || h != nil || errors.Is(err, distsync.ErrUnsupported) || !strings.Contains(err.Error(), "cannot learn the server's version") {
			t.Fatalf("NewWithContext on a stopped server = %v, %v; want an error saying the version could not be learned", h, err)
		}
		t.Logf("NewWithContext: %v after %v", err, ended.Sub(began).Round(time.Millisecond))
		// By its ctx's deadline, give or take what a loaded machine stalls this process.
		if err := redistest.Late(fmt.Sprintf("NewWithContext with a %v context returned", bound), ended.Sub(began)-bound,
			2*time.Second-bound, began, ended); err != nil {
			return err
		}

		began = time.Now()
		if _, err := distsync.New(c); err == nil {
			t.Fatal("New on a stopped server succeeded")
		}
		ended = time.Now()
		return redistest.Late(fmt.Sprintf("New, bounded by DefaultServerCheckTimeout (%v), returned", distsync.DefaultServerCheckTimeout),
			ended.Sub(began)-distsync.DefaultServerCheckTimeout, 2*time.Second, began, ended)
	})
}

// evictScripts runs n distinct scripts with EVAL on every node of b: Redis 7.4 keeps at most
// 500 scripts loaded by EVAL and evicts the least recently used, distsync's among them, so
// that their next EVALSHA meets NOSCRIPT. Earlier versions keep every script.
func evictScripts(t *testing.T, nodes []rueidis.Client) {
	t.Helper()
	mark := strconv.FormatInt(time.Now().UnixNano(), 36)
	for _, c := range nodes {
		for batch := range 6 {
			cmds := make(rueidis.Commands, 0, 100)
			for i := range 100 {
				src := fmt.Sprintf("return '%s-%d-%d'", mark, batch, i)
				cmds = append(cmds, c.B().Eval().Script(src).Numkeys(0).Build())
			}
			for _, r := range c.DoMulti(context.Background(), cmds...) {
				if err := r.Error(); err != nil {
					t.Fatalf("EVAL: %v", err)
				}
			}
		}
	}
}

// loadedOn reports whether any node still has one of the scripts.
func loadedOn(t *testing.T, nodes []rueidis.Client, scripts ...*scripts.Script) bool {
	t.Helper()
	for _, c := range nodes {
		for _, s := range scripts {
			ok, err := c.Do(context.Background(), c.B().ScriptExists().Sha1(s.SHA()).Build()).AsIntSlice()
			if err != nil {
				t.Fatalf("SCRIPT EXISTS: %v", err)
			}
			if ok[0] == 1 {
				return true
			}
		}
	}
	return false
}

// noScripts returns how many NOSCRIPT errors the nodes replied (INFO errorstats, Redis 7.0+;
// 0 where there is none).
func noScripts(t *testing.T, nodes []rueidis.Client) int {
	t.Helper()
	n := 0
	for _, c := range nodes {
		info, err := c.Do(context.Background(), c.B().Info().Section("errorstats").Build()).ToString()
		if err != nil {
			t.Fatalf("INFO errorstats: %v", err)
		}
		for line := range strings.Lines(info) {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_NOSCRIPT:count="); ok {
				k, _ := strconv.Atoi(rest)
				n += k
			}
		}
	}
	return n
}

// Scripts evicted from the server's cache (Redis 7.4 evicts scripts loaded by EVAL) are sent
// again, on every path: an acquire and a release (EVALSHA, then EVAL), the renewals of a held
// lease (batched EVALSHA in one pipeline per node), and, with WithReplicaAck, the script and
// WAIT sent together on one connection. No NOSCRIPT reaches the caller; no lease is lost.
func TestEvictedScriptsAreLoadedAgain(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		if b.Name == redistest.Mini {
			t.Skip("miniredis keeps every script and has no SCRIPT EXISTS eviction to test")
		}
		prefix := b.Prefix(t)
		pod := func() *distsync.Handle { return b.Pod(t, prefix).H }
		evictedScenario(t, b.Nodes(t), "evicted", pod, pod)
	})
}

// TestEvictedScriptsAreLoadedAgainWithReplicaAck is TestEvictedScriptsAreLoadedAgain with
// WithReplicaAck: the script and WAIT sent together on one connection. On servers of its
// own, so it runs in parallel with the rest.
func TestEvictedScriptsAreLoadedAgainWithReplicaAck(t *testing.T) {
	t.Parallel()
	redistest.RequireRedis(t)
	primary, _ := replicated(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{primary.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ack := distsync.WithReplicaAck(1, 2*time.Second)
	handle := func() *distsync.Handle { return handleOn(t, c, ack) }
	evictedScenario(t, []rueidis.Client{c}, "evicted", handle, handle)
}

// evictedScenario runs the scenario of TestEvictedScriptsAreLoadedAgain on the mutex name,
// through handles from a and b, evicting the scripts from nodes at every step, up to three
// times (each on a name of its own) while a loaded machine holds the renewals up for the
// lease's length.
func evictedScenario(t *testing.T, nodes []rueidis.Client, name string, a, b func() *distsync.Handle) {
	t.Helper()
	v, err := redistest.ServerVersion()
	evicts := err == nil && v.AtLeast(7, 4)
	check := func(t *testing.T, nodes []rueidis.Client) {
		t.Helper()
		// The eviction is LRU: a script the handles run during the 600 others (a waiter's
		// re-check at a late renewal's lease end, on a loaded machine) is kept by that run.
		// Flood again, a few times, before concluding that the server does not evict.
		gone := false
		for try := 0; try < 3 && !gone; try++ {
			evictScripts(t, nodes)
			gone = !loadedOn(t, nodes, scripts.MutexAcquire, scripts.MutexRelease)
			if !evicts {
				break
			}
		}
		if evicts && !gone {
			t.Fatalf("Redis %v kept distsync's scripts after three floods of 600 others: this test tests nothing", v)
		}
		t.Logf("scripts evicted: %v", gone)
	}
	{
		attempt := 0
		// A lease of 1 s at first, twice as long at each next attempt: a loaded machine that
		// holds the renewals up for a lease loses the short ones first.
		redistest.RetryScaled(t, 3, time.Second, func(ttl time.Duration) error {
			attempt++
			name := name + strconv.Itoa(attempt)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			before := noScripts(t, nodes)
			defer func() {
				met := noScripts(t, nodes) - before
				t.Logf("NOSCRIPT replies met and recovered from: %d", met)
				if evicts && met == 0 && !t.Failed() {
					t.Errorf("no NOSCRIPT met on Redis %v: the eviction was not exercised", v)
				}
			}()
			opts := []distsync.Option{distsync.WithLeaseTTL(ttl), distsync.WithHandoffWindow(10 * time.Second)}
			ha := a()
			ma, err := mutex.New(ha, name, opts...)
			if err != nil {
				t.Fatal(err)
			}
			mb, err := mutex.New(b(), name, opts...)
			if err != nil {
				t.Fatal(err)
			}
			check(t, nodes)
			lease, err := ma.LockLease(ctx)
			if err != nil {
				t.Fatalf("Lock after eviction: %v", err)
			}
			for range 3 { // renewals every third of the lease, one at least after each eviction
				check(t, nodes)
				time.Sleep(ttl / 2)
			}
			select {
			case <-lease.Done():
				// As a renewal that met NOSCRIPT and was not sent again would; or a loaded
				// machine held the renewals up for the lease's length.
				return fmt.Errorf("lease lost while its scripts were evicted: %v", lease.Err())
			default:
			}
			got := redistest.Async(ctx, mb.Lock)
			// The waiter queued (its attempt found the lock held) before the eviction and the
			// Unlock, which hands the lock to it.
			var seen inspect.Report
			var seenErr error
			if !redistest.Eventually(10*time.Second, func() bool {
				seen, seenErr = inspect.Inspect(ctx, ha, inspect.Mutex, name)
				return seenErr == nil && len(seen.Queue) == 1
			}) {
				select {
				case r := <-got:
					t.Fatalf("the waiter's Lock returned unqueued: %v", r.Err)
				default:
				}
				t.Fatalf("the waiter was not queued within 10s: last inspection %+v, %v; goroutines:\n%s",
					seen, seenErr, redistest.LibraryStacks())
			}
			check(t, nodes)
			if err := ma.Unlock(ctx); errors.Is(err, distsync.ErrLost) {
				return fmt.Errorf("Unlock after eviction: %v", err) // as the lease above
			} else if err != nil {
				t.Fatalf("Unlock after eviction: %v", err)
			}
			if r := redistest.Await(t, got, 20*time.Second); r.Err != nil {
				t.Fatalf("waiter's Lock after eviction: %v", r.Err)
			}
			check(t, nodes)
			if err := mb.Unlock(ctx); errors.Is(err, distsync.ErrLost) {
				// Its hold, handed to it, lapsed: its confirm did not reach Redis within the
				// hand-off window, or its renewals within the lease, on a loaded machine; or
				// they met NOSCRIPT and were not sent again.
				return fmt.Errorf("waiter's Unlock after eviction: %v", err)
			} else if err != nil {
				t.Fatalf("waiter's Unlock after eviction: %v", err)
			}
			return nil
		})
	}
}

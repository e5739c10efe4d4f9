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
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
)

// An Unlock wakes a waiter in another process by pub/sub on every server distsync supports:
// sharded pub/sub on a Cluster that has it (Redis 7.0+, Valkey), plain pub/sub elsewhere,
// a Redis 6.2 Cluster included (it has no SPUBLISH: a script calling it failed at the first
// Unlock, and every waiter stalled until its backstop). The lease is long, so only the
// message can wake the waiter in time.
func TestUnlockWakesWaiterOnEveryServer(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		ma, err := mutex.New(b.Pod(t, prefix).H, "handoff", distsync.WithLeaseTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		mb, err := mutex.New(b.Pod(t, prefix).H, "handoff", distsync.WithLeaseTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for round := range 3 {
			if err := ma.Lock(ctx); err != nil {
				t.Fatalf("round %d: a Lock: %v", round, err)
			}
			got := make(chan error, 1)
			go func() { got <- mb.Lock(ctx) }()
			if !redistest.Eventually(5*time.Second, func() bool { return len(b.Channels(t, escape(prefix)+"*")) > 0 }) {
				t.Fatalf("round %d: the waiter never subscribed", round)
			}
			if b.Name != redistest.Mini {
				checkPubSubKind(t, b, escape(prefix)+"*")
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
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: the waiter was not woken within 5 s of Unlock (lease 30 s)", round)
			}
			if err := mb.Unlock(ctx); err != nil {
				t.Fatalf("round %d: waiter's Unlock: %v", round, err)
			}
		}
	})
}

// checkPubSubKind checks that the channels matching pattern are subscribed with the pub/sub
// distsync must use on b: sharded where the server has it on a Cluster, plain elsewhere.
func checkPubSubKind(t *testing.T, b *redistest.Backend, pattern string) {
	t.Helper()
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
	if b.Sharded() && (sharded == 0 || plain != 0) {
		t.Errorf("%d sharded and %d plain channels subscribed on a Cluster with sharded pub/sub; want sharded only", sharded, plain)
	}
	if !b.Sharded() && plain == 0 {
		t.Errorf("no plain channel subscribed on %s without sharded pub/sub", b.Name)
	}
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

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	h, err := distsync.NewWithContext(ctx, c)
	took := time.Since(began)
	if err == nil || h != nil || errors.Is(err, distsync.ErrUnsupported) || !strings.Contains(err.Error(), "cannot learn the server's version") {
		t.Fatalf("NewWithContext on a stopped server = %v, %v; want an error saying the version could not be learned", h, err)
	}
	if took > 2*time.Second {
		t.Errorf("NewWithContext took %v with a 300 ms context", took)
	}
	t.Logf("NewWithContext: %v after %v", err, took.Round(time.Millisecond))

	began = time.Now()
	if _, err := distsync.New(c); err == nil {
		t.Fatal("New on a stopped server succeeded")
	}
	if took := time.Since(began); took > distsync.DefaultServerCheckTimeout+2*time.Second {
		t.Errorf("New took %v, more than DefaultServerCheckTimeout (%v)", took, distsync.DefaultServerCheckTimeout)
	}
}

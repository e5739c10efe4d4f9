package deploytest

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
)

func TestMain(m *testing.M) {
	redistest.MainLong(m, "deployments: ACL users, TLS, script flushes, server swaps")
}

// userClient returns a function making clients of addrs as u, with rueidis's defaults
// (client-side caching on, as a user's client has it).
func userClient(u *redistest.User, opt rueidis.ClientOption) func(t *testing.T) rueidis.Client {
	return func(t *testing.T) rueidis.Client { return u.Client(t, opt) }
}

// rules returns the rules of the lines of docs/acl.md named, for prefix.
func rules(t *testing.T, prefix string, names ...string) []string {
	var out []string
	for _, name := range names {
		out = append(out, redistest.ACLRules(t, name, prefix)...)
	}
	return out
}

// noDenials fails t if the servers refused u anything. CLIENT SETINFO is let through: rueidis
// sends it at connect and ignores a refusal, and the doc's lines leave it out because older
// servers refuse its name (docs/acl.md; redistest.Denial.SetInfo).
func noDenials(t *testing.T, u *redistest.User) {
	t.Helper()
	var refused []string
	for _, d := range u.Denials(t) {
		if !d.SetInfo(t) {
			refused = append(refused, d.String())
		}
	}
	if len(refused) > 0 {
		t.Errorf("the servers refused the user of docs/acl.md: %v", refused)
	}
}

// The user of docs/acl.md's lines runs every primitive on a standalone primary with a replica
// (WithReplicaAck included) and on a 3-master Cluster, and the servers refuse it nothing.
func TestACLUserRunsEveryPrimitive(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		primary := redistest.StartRedis(t)
		replica := redistest.StartRedis(t, "replicaof 127.0.0.1 "+port(primary.Addr()))
		waitReplicas(t, primary, 1)
		prefix := "acl.standalone:"
		u := redistest.CreateUser(t, []rueidis.Client{primary.Client(t), replica.Client(t)},
			rules(t, prefix, "library", "inspect", "replicaack")...)
		pass{prefix: prefix, client: userClient(u, rueidis.ClientOption{InitAddress: []string{primary.Addr()}}), acks: 1}.run(t)
		noDenials(t, u)
	})
	t.Run("cluster", func(t *testing.T) {
		b := redistest.Open(t, redistest.ClusterB)
		prefix := b.Prefix(t)
		u := redistest.CreateUser(t, b.Nodes(t), rules(t, prefix, "library", "cluster", "inspect")...)
		pass{prefix: prefix, client: userClient(u, rueidis.ClientOption{InitAddress: b.Addrs()})}.run(t)
		noDenials(t, u)
	})
}

// With Sentinel: the data nodes' user of docs/acl.md's lines and the Sentinels' own user of
// its Sentinel line run every primitive, with a replica ack, and nothing is refused.
func TestACLUserThroughSentinel(t *testing.T) {
	s := redistest.StartSentinel(t, 1)
	prefix := "acl.sentinel:"
	single := func(addrs ...string) []rueidis.Client {
		var out []rueidis.Client
		for _, a := range addrs {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, ForceSingleClient: true, DisableCache: true})
			if err != nil {
				t.Fatalf("rueidis.NewClient(%s): %v", a, err)
			}
			t.Cleanup(c.Close)
			out = append(out, c)
		}
		return out
	}
	data := []string{s.Primary().Addr()}
	for _, r := range s.Replicas() {
		data = append(data, r.Addr())
	}
	u := redistest.CreateUser(t, single(data...), rules(t, prefix, "library", "inspect", "replicaack", "sentinel-data")...)
	su := redistest.CreateUser(t, single(s.SentinelAddrs()...), redistest.ACLRules(t, "sentinel", prefix)...)
	opt := s.ClientOption()
	opt.DisableCache = false
	opt.Sentinel.Username, opt.Sentinel.Password = su.Name, su.Password
	// What Sentinel changes is how the client finds the primary and follows it: a waiting
	// and a hand-off of the mutex, the election's observer and the replica ack show it.
	pass{prefix: prefix, client: userClient(u, opt), acks: 1, only: []string{"mutex", "election", "replicaack"}}.run(t)
	noDenials(t, u)
	noDenials(t, su)
}

// A user missing one permission of docs/acl.md's library line gets, from the call that needs
// it, an error that names what is missing, at once: not a retry until the context ends.
func TestACLMissingPermissionIsNamed(t *testing.T) {
	b := redistest.Open(t, redistest.Standalone)
	admin := b.Nodes(t)
	library := func(prefix string) []string { return rules(t, prefix, "library") }
	without := func(rules []string, drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(rules), func(r string) bool { return slices.Contains(drop, r) })
	}
	replace := func(rules []string, old, new string) []string {
		out := slices.Clone(rules)
		out[slices.Index(out, old)] = new
		return out
	}
	for _, c := range []struct {
		name string
		// rules makes the user's rules from the library line's for the test's prefix.
		rules func(prefix string) []string
		// flush empties the script cache first, so that the script is sent with EVAL.
		flush bool
		// contended: another user holds the mutex, so that Lock waits (subscribes).
		contended bool
		// unlock: the user locks and unlocks with a waiter queued; the Unlock is to fail.
		unlock bool
		opts   []distsync.Option
		want   []string // each must be in the error
	}{
		{name: "evalsha", rules: func(p string) []string { return without(library(p), "+evalsha") },
			want: []string{"evalsha", "NOPERM"}},
		{name: "eval", rules: func(p string) []string { return without(library(p), "+eval") }, flush: true,
			want: []string{"'eval'", "NOPERM"}},
		{name: "keys", rules: func(p string) []string { return replace(library(p), "~"+p+"*", "~other:*") },
			want: []string{"EVALSHA", "mutex_acquire.lua", "NOPERM", "keys"}},
		{name: "time", rules: func(p string) []string { return without(library(p), "+time") },
			want: []string{"mutex_acquire.lua", "calling TIME"}},
		{name: "subscribe", rules: func(p string) []string { return without(library(p), "+subscribe") }, contended: true,
			want: []string{"subscribe", "NOPERM"}},
		{name: "channels", rules: func(p string) []string { return replace(library(p), "&"+p+"*", "&other:*") }, contended: true,
			want: []string{"SUBSCRIBE", "NOPERM", "channels"}},
		{name: "publish", rules: func(p string) []string { return without(library(p), "+publish") }, unlock: true,
			want: []string{"PUBLISH"}},
		{name: "wait", rules: func(p string) []string { return library(p) }, opts: []distsync.Option{distsync.WithReplicaAck(1, time.Second)},
			want: []string{"'wait'", "NOPERM"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := b.Prefix(t)
			u := redistest.CreateUser(t, admin, c.rules(prefix)...)
			if c.flush {
				for _, n := range admin {
					must(t, "SCRIPT FLUSH", n.Do(context.Background(), n.B().ScriptFlush().Build()).Error())
				}
			}
			opts := append([]distsync.Option{distsync.WithKeyPrefix(prefix)}, c.opts...)
			client := userClient(u, b.ClientOption())(t)
			h := redistest.Handle(t, client, opts...)
			m, err := mutex.New(h, "orders")
			must(t, "mutex.New", err)
			other := func() *mutex.Mutex {
				m, err := mutex.New(redistest.Handle(t, b.Client(t), distsync.WithKeyPrefix(prefix)), "orders")
				must(t, "mutex.New", err)
				return m
			}
			if c.contended {
				must(t, "Lock by another user", other().Lock(context.Background()))
			}
			// The bound: far above the milliseconds a refusal takes, far below the context,
			// whose end would mean the call waited for nothing.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			began := time.Now()
			err = m.Lock(ctx)
			if c.unlock {
				must(t, "Lock", err)
				o := other()
				w := start(func() error { return o.Lock(ctx) })
				queued(t, redistest.Handle(t, b.Client(t), distsync.WithKeyPrefix(prefix)), "mutex", "orders", 1)
				began = time.Now()
				err = m.Unlock(ctx)
				defer func() {
					// The release Redis refused is not retried in the background: the one
					// refusal is all ACL LOG has once the lease it was for is over.
					w.wait(t, "the waiter's Lock (woken by its backstop)")
					var n int64
					for _, d := range u.Denials(t) {
						if d.Object == "publish" {
							n += d.Count
						}
					}
					if n != 1 {
						t.Errorf("%d refusals of PUBLISH in ACL LOG, want 1: %v", n, u.Denials(t))
					}
				}()
			}
			took := time.Since(began)
			if err == nil {
				t.Fatalf("succeeded without the permission")
			}
			if ctx.Err() != nil || took > 20*time.Second {
				t.Fatalf("failed after %v: %v; want Redis's refusal at once", took, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
		})
	}
	t.Run("client-tracking", func(t *testing.T) {
		prefix := b.Prefix(t)
		u := redistest.CreateUser(t, admin, slices.DeleteFunc(library(prefix), func(r string) bool { return r == "+client|tracking" })...)
		_, err := rueidis.NewClient(u.Option(b.ClientOption()))
		// Redis 7.0 and later name the subcommand (client|tracking); 6.2 names the command and
		// rueidis the command it sent (CLIENT TRACKING ON OPTIN).
		if err == nil || !strings.Contains(err.Error(), "client|tracking") && !strings.Contains(err.Error(), "CLIENT TRACKING") {
			t.Fatalf("rueidis.NewClient with caching, without +client|tracking = %v, want an error naming client|tracking", err)
		}
	})
}

// Every command a script calls is allowed by docs/acl.md's library line (the publish command,
// which scripts are given, by the library line's +publish and the Cluster line's +spublish):
// a script that calls a new command fails this test until the doc lists it.
func TestACLDocAllowsEveryScriptCommand(t *testing.T) {
	allowed := map[string]bool{}
	for _, r := range rules(t, "distsync:", "library", "cluster") {
		allowed[strings.TrimPrefix(r, "+")] = true
	}
	call := regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'`)
	files, _ := filepath.Glob("../scripts/*.lua")
	lib, _ := filepath.Glob("../scripts/lib/*.lua")
	files = append(files, lib...)
	if len(files) < 10 {
		t.Fatalf("found %d scripts", len(files))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		must(t, "read", err)
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			if name := strings.ToLower(m[1]); !allowed[name] {
				t.Errorf("%s calls %s, which docs/acl.md's library line does not allow", filepath.Base(f), name)
			}
		}
	}
	for _, pub := range []string{"publish", "spublish"} {
		if !allowed[pub] {
			t.Errorf("docs/acl.md allows no %s", pub)
		}
	}
}

func port(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// waitReplicas waits until p has n replicas online.
func waitReplicas(t *testing.T, p *redistest.Proc, n int) {
	t.Helper()
	c := p.Client(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Do(context.Background(), c.B().Info().Section("replication").Build()).ToString()
		if err == nil && strings.Count(info, "state=online") >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d replicas not online after 30 s: %v %s", n, err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An election observer, whose Observe returns no error, logs Redis's refusal of its reads at
// Warn, naming the command, rather than retrying it at Debug in silence. (A refused
// subscription the notifier logs at Warn for every waiter.)
func TestACLRefusedObserverWarns(t *testing.T) {
	b := redistest.Open(t, redistest.Standalone)
	prefix := b.Prefix(t)
	u := redistest.CreateUser(t, b.Nodes(t), slices.DeleteFunc(rules(t, prefix, "library"), func(r string) bool { return r == "+evalsha" })...)
	var log redistest.Buffer
	h := redistest.Handle(t, userClient(u, b.ClientOption())(t), distsync.WithKeyPrefix(prefix),
		distsync.WithLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	e, err := election.New(h, "observed")
	must(t, "election.New", err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = e.Observe(ctx)
	if !redistest.Eventually(passLimit, func() bool { return strings.Contains(log.String(), "'evalsha'") }) {
		t.Fatalf("no warning naming EVALSHA logged; the log:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "level=WARN") {
		t.Errorf("the refusal is not logged at Warn:\n%s", log.String())
	}
}

// A hold whose renewals Redis refuses (an ACL without PEXPIRE, which taking a free mutex does
// not need) ends at its deadline, as one that cannot reach Redis does, and its loss names
// the refusal: the holder is told why, not only that its deadline passed.
func TestACLRenewalRefusedIsNamed(t *testing.T) {
	b := redistest.Open(t, redistest.Standalone)
	prefix := b.Prefix(t)
	u := redistest.CreateUser(t, b.Nodes(t), slices.DeleteFunc(rules(t, prefix, "library"), func(r string) bool { return r == "+pexpire" })...)
	h := redistest.Handle(t, userClient(u, b.ClientOption())(t), distsync.WithKeyPrefix(prefix), distsync.WithLeaseTTL(time.Second))
	m, err := mutex.New(h, "renewed")
	must(t, "mutex.New", err)
	l, err := m.LockLease(context.Background())
	must(t, "Lock", err)
	select {
	case <-l.Done():
	case <-time.After(passLimit):
		t.Fatalf("the lease outlived its deadline with every renewal refused")
	}
	if err := l.Err(); !errors.Is(err, distsync.ErrLost) || !strings.Contains(err.Error(), "PEXPIRE") {
		t.Errorf("lease ended with %v; want a loss naming PEXPIRE", err)
	}
	t.Logf("the lease ended: %v", l.Err())
}

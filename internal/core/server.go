package core

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/rueidis"
)

// The oldest servers distsync runs on. Valkey reports the Redis version it is compatible with
// (redis_version, 7.2.4 for Valkey 7.2 and 8), which is what is compared.
const (
	MinRedis  = "6.2"
	MinValkey = "7.2"
	// ShardedSince is the first Redis version with sharded pub/sub (SSUBSCRIBE, SPUBLISH).
	ShardedSince = "7.0"
)

// Server is what a Handle learned, once, of the servers it runs on.
type Server struct {
	// Name and Version describe the oldest node: "Redis" "6.2.16", "Valkey" "8.0.1". Both
	// are empty when a node did not say (INFO refused, or a server such as the embedded
	// miniredis whose INFO has no server section).
	Name, Version string
	// Compat is the node's redis_version: its own for Redis, the Redis version it is
	// compatible with for Valkey. Empty when unknown.
	Compat string
	// Addr is the address of that node on a Cluster, empty otherwise.
	Addr string
	// Sharded: the client is a Cluster client and every node has sharded pub/sub (Redis
	// 7.0+). Otherwise the notifier and the scripts use plain SUBSCRIBE and PUBLISH, which a
	// Cluster broadcasts to every node over its bus.
	Sharded bool
}

// String describes the server: "Redis 6.2.16 at 127.0.0.1:7000", or "a server that does not
// report its version".
func (s Server) String() string {
	if s.Version == "" {
		return "a server that does not report its version"
	}
	out := s.Name + " " + s.Version
	if s.Name != "Redis" && s.Compat != "" && s.Compat != s.Version {
		out += " (redis_version " + s.Compat + ")"
	}
	if s.Addr != "" {
		out += " at " + s.Addr
	}
	return out
}

// ProbeServer asks every node of client for its version (INFO server: one round trip, to every
// node of a Cluster at once) and returns what the Handle must know: the oldest version, and
// whether sharded pub/sub can be used. A node older than MinRedis gives an error matching
// ErrUnsupported that names the version found and the version needed. A node that answers
// INFO server with an error (an ACL without INFO, the embedded miniredis) leaves the version
// unknown: it is taken as supported, and plain pub/sub is used, which works on every version.
// Any other error (Redis unreachable before ctx ends) is returned as it is.
func ProbeServer(ctx context.Context, client rueidis.Client) (Server, error) {
	cluster := client.Mode() == rueidis.ClientModeCluster
	nodes := map[string]rueidis.Client{"": client}
	if cluster {
		nodes = client.Nodes()
	}
	type answer struct {
		addr, info string
		err        error
	}
	answers := make([]answer, 0, len(nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for addr, c := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
			mu.Lock()
			answers = append(answers, answer{addr, info, err})
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(answers, func(i, j int) bool { return answers[i].addr < answers[j].addr })

	var oldest Server
	unknown := len(answers) == 0
	for _, a := range answers {
		if a.err != nil {
			if _, refused := rueidis.IsRedisErr(a.err); refused {
				unknown = true
				continue
			}
			if a.addr != "" {
				return Server{}, fmt.Errorf("INFO server on %s: %w", a.addr, a.err)
			}
			return Server{}, fmt.Errorf("INFO server: %w", a.err)
		}
		s := ParseInfo(a.info)
		if s.Compat == "" {
			unknown = true
			continue
		}
		s.Addr = a.addr
		if !AtLeast(s.Compat, MinRedis) {
			return s, fmt.Errorf("%w: %v; distsync needs Redis %s or later, or Valkey %s or later",
				ErrUnsupported, s, MinRedis, MinValkey)
		}
		if oldest.Compat == "" || !AtLeast(s.Compat, oldest.Compat) {
			oldest = s
		}
	}
	if unknown {
		return Server{}, nil
	}
	oldest.Sharded = cluster && AtLeast(oldest.Compat, ShardedSince)
	return oldest, nil
}

// ParseInfo reads the reply of INFO server: the server's name and version (valkey_version and
// server_name for Valkey) and its redis_version. Fields it cannot find are left empty.
func ParseInfo(info string) Server {
	var s Server
	var name, valkey string
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "redis_version":
			s.Compat = v
		case "valkey_version":
			valkey = v
		case "server_name":
			name = v
		}
	}
	switch {
	case valkey != "" || strings.EqualFold(name, "valkey"):
		s.Name, s.Version = "Valkey", valkey
		if s.Version == "" {
			s.Version = s.Compat
		}
	case s.Compat != "":
		s.Name, s.Version = "Redis", s.Compat
	}
	return s
}

// AtLeast reports whether version v ("6.2.16") is want ("6.2") or later, comparing numeric
// fields in order; a field missing or not a number counts as 0.
func AtLeast(v, want string) bool {
	a, b := strings.Split(v, "."), strings.Split(want, ".")
	for i := range max(len(a), len(b)) {
		x, y := field(a, i), field(b, i)
		if x != y {
			return x > y
		}
	}
	return true
}

func field(f []string, i int) int {
	if i >= len(f) {
		return 0
	}
	n, _ := strconv.Atoi(f[i])
	return n
}

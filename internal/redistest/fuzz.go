package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
)

// EnvFuzzRedis names the environment variable that points the foreign-value fuzz targets
// ([StartFuzz]) at a real Redis (host:port) instead of an embedded miniredis. The test may
// change that Redis' whole keyspace.
const EnvFuzzRedis = "DISTSYNC_FUZZ_REDIS"

// FuzzRedis is the Redis of the foreign-value fuzz targets (FuzzMutexForeign,
// FuzzReentrantForeign, FuzzSemaphoreForeign, FuzzGroupForeign): one per fuzz process, an
// embedded miniredis, or the Redis at $DISTSYNC_FUZZ_REDIS ([EnvFuzzRedis]), with one Handle
// (H) on a counted client (Counter), under a key prefix of its own and a lease TTL of 2 s.
//
// Every input gets a name of its own ([FuzzRedis.Next]), so that clean-ups a previous input
// left running in the background cannot touch it, and Counter counts only the commands that
// name it.
type FuzzRedis struct {
	// Raw is the test's own client, for foreign writes and reads; its commands are not counted.
	Raw rueidis.Client
	// Counter is the client under H.
	Counter *KeyCounter
	// H is the Handle the primitives under test are made on.
	H *distsync.Handle

	srv *embedded.Server
	pfx string
	seq atomic.Int64
}

// StartFuzz starts the Redis of a fuzz target (or connects to $DISTSYNC_FUZZ_REDIS) and
// arranges for everything to be closed when tb ends. It fails tb if anything does not start.
func StartFuzz(tb testing.TB) *FuzzRedis {
	r := &FuzzRedis{}
	var b [4]byte
	_, _ = rand.Read(b[:])
	r.pfx = "fz" + hex.EncodeToString(b[:]) + ":"
	opt := rueidis.ClientOption{InitAddress: []string{os.Getenv(EnvFuzzRedis)}, DisableCache: true}
	if opt.InitAddress[0] == "" {
		srv, err := embedded.Start()
		if err != nil {
			tb.Fatal(err)
		}
		r.srv, opt = srv, srv.ClientOption()
	}
	var err error
	if r.Raw, err = rueidis.NewClient(opt); err != nil {
		tb.Fatal(err)
	}
	hc, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatal(err)
	}
	r.Counter = &KeyCounter{Client: hc}
	if r.H, err = distsync.New(r.Counter, distsync.WithKeyPrefix(r.pfx), distsync.WithLeaseTTL(2*time.Second)); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.H.Close(ctx)
		hc.Close()
		r.Raw.Close()
		if r.srv != nil {
			r.srv.Close()
		}
	})
	return r
}

// Next starts an input: it returns a name no input had before ("i<n>z"), empties the
// embedded server (a real Redis is left as it is), and resets Counter to count the commands
// that name it.
func (r *FuzzRedis) Next() string {
	if r.srv != nil {
		r.srv.Miniredis().FlushAll()
	}
	name := "i" + strconv.FormatInt(r.seq.Add(1), 10) + "z"
	r.Counter.Reset(name)
	return name
}

// Cleanup deletes keys when t is done (they may have no TTL).
func (r *FuzzRedis) Cleanup(t testing.TB, keys ...string) {
	t.Cleanup(func() { r.Do(t, append([]string{"DEL"}, keys...)...) })
}

// Do sends cmd on Raw and fails t on an error other than a nil reply.
func (r *FuzzRedis) Do(t testing.TB, cmd ...string) rueidis.RedisResult {
	t.Helper()
	res := r.Raw.Do(context.Background(), r.Raw.B().Arbitrary(cmd...).Build())
	if err := res.Error(); err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("%q: %v", cmd, err)
	}
	return res
}

// Foreign is a value the library did not write.
type Foreign struct {
	Kind          uint8 // 0 string, 1 hash field, 2 zset member, 3 list element, 4 set member
	Member, Value string
	Score         float64
	TTL           bool // a TTL of a minute; else none
}

// Write puts v under key, after what is there: SET key Value (kind 0), HSET key Member Value
// (1), ZADD key Score Member (2; a NaN score is written as 0, since Redis refuses NaN), RPUSH
// key Value (3), SADD key Value (any other kind); then, with TTL, PEXPIRE key 60000. A command
// the key's type refuses fails t.
func (r *FuzzRedis) Write(t testing.TB, key string, v Foreign) {
	t.Helper()
	switch v.Kind {
	case 0:
		r.Do(t, "SET", key, v.Value)
	case 1:
		r.Do(t, "HSET", key, v.Member, v.Value)
	case 2:
		s := v.Score
		if math.IsNaN(s) {
			s = 0 // Redis refuses NaN
		}
		r.Do(t, "ZADD", key, strconv.FormatFloat(s, 'g', -1, 64), v.Member)
	case 3:
		r.Do(t, "RPUSH", key, v.Value)
	default:
		r.Do(t, "SADD", key, v.Value)
	}
	if v.TTL {
		r.Do(t, "PEXPIRE", key, "60000")
	}
}

// Snapshot describes key's type and contents (not its TTL), so that two snapshots are equal
// when the key was left as it was: "<type> <contents>", "none <nil>" for a missing key.
func (r *FuzzRedis) Snapshot(t testing.TB, key string) string {
	t.Helper()
	typ, _ := r.Do(t, "TYPE", key).ToString()
	var v any
	switch typ {
	case "string":
		v, _ = r.Do(t, "GET", key).ToString()
	case "hash":
		v, _ = r.Do(t, "HGETALL", key).AsStrMap()
	case "zset":
		v, _ = r.Do(t, "ZRANGE", key, "0", "-1", "WITHSCORES").ToAny()
	case "list":
		v, _ = r.Do(t, "LRANGE", key, "0", "-1").AsStrSlice()
	case "set":
		v, _ = r.Do(t, "SMEMBERS", key).AsStrSlice()
	}
	return fmt.Sprintf("%s %v", typ, v)
}

// NowMs returns the server's clock (TIME) in ms.
func (r *FuzzRedis) NowMs(t testing.TB) int64 {
	t.Helper()
	tm, _ := r.Do(t, "TIME").AsStrSlice()
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	return sec*1000 + us/1000
}

// KeyCounter is a rueidis.Client that counts the commands (Do, DoMulti) with an argument that
// contains a tag, the current input's name, which is in every key of the input; so background
// work left by earlier inputs is not counted against this one. Pub/sub commands (Receive) are
// not counted.
type KeyCounter struct {
	rueidis.Client
	mu  sync.Mutex
	tag string
	n   int
}

func (c *KeyCounter) count(cmd rueidis.Completed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range cmd.Commands() {
		if c.tag != "" && strings.Contains(s, c.tag) {
			c.n++
			return
		}
	}
}

// Reset starts counting the commands that name tag, from 0. An empty tag counts nothing.
func (c *KeyCounter) Reset(tag string) {
	c.mu.Lock()
	c.tag, c.n = tag, 0
	c.mu.Unlock()
}

// Total returns the number of commands counted since Reset.
func (c *KeyCounter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Do implements rueidis.Client.
func (c *KeyCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.count(cmd)
	return c.Client.Do(ctx, cmd)
}

// DoMulti implements rueidis.Client.
func (c *KeyCounter) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for _, cmd := range multi {
		c.count(cmd)
	}
	return c.Client.DoMulti(ctx, multi...)
}

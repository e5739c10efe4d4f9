package mutex_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/mutex"
)

// benchClient returns a client on the Redis at $DISTSYNC_BENCH_REDIS (host:port), or on an
// embedded one: allocations are the client's either way; times mean something only on a real
// redis-server (bench/ compares those with the peers).
func benchClient(b *testing.B) rueidis.Client {
	b.Helper()
	opt := rueidis.ClientOption{InitAddress: []string{os.Getenv("DISTSYNC_BENCH_REDIS")}, DisableCache: true}
	if opt.InitAddress[0] == "" {
		srv, err := embedded.Start()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(srv.Close)
		opt = srv.ClientOption()
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

// BenchmarkLockUnlock is one goroutine's uncontended Lock+Unlock: its allocations
// (-benchmem) are the client's cost of a hold.
func BenchmarkLockUnlock(b *testing.B) { lockUnlock(b) }

// BenchmarkLockUnlockIdentity is BenchmarkLockUnlock with the default identity, a 1-byte one
// and the longest (64 bytes that all escape: 192 bytes in every owner value and waiter id),
// for what the identity carried in the ids costs a hold.
func BenchmarkLockUnlockIdentity(b *testing.B) {
	for _, c := range []struct {
		name string
		opts []distsync.Option
	}{
		{"default", nil},
		{"1B", []distsync.Option{distsync.WithIdentity("a")}},
		{"64B-escaped", []distsync.Option{distsync.WithIdentity(strings.Repeat("\u00e9", distsync.MaxIdentityLen/2))}},
	} {
		b.Run(c.name, func(b *testing.B) { lockUnlock(b, c.opts...) })
	}
}

func lockUnlock(b *testing.B, opts ...distsync.Option) {
	c := benchClient(b)
	h, err := distsync.New(c, append([]distsync.Option{distsync.WithKeyPrefix("distsync-gobench:")}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close(context.Background()) })
	m, err := mutex.New(h, "bench")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFloor is the least an owner-checked lease lock does with rueidis, for comparison
// with BenchmarkLockUnlock in the same run: SET NX PX, then an EVALSHA compare-and-delete.
func BenchmarkFloor(b *testing.B) {
	c := benchClient(b)
	del := rueidis.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, c.B().Set().Key("distsync-gobench:floor").Value("me").Nx().Px(10*time.Second).Build()).Error(); err != nil {
			b.Fatal(err)
		}
		if err := del.Exec(ctx, c, []string{"distsync-gobench:floor"}, []string{"me"}).Error(); err != nil {
			b.Fatal(err)
		}
	}
}

package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// A cut is clean: what the client wrote before Cut has run in Redis when Cut returns, and
// nothing of it runs afterwards (a cut-off waiter must not take a lock handed out after the
// cut), and the client gets no reply.
func TestCutLeavesNothingToRunLater(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		key := b.Prefix(t) + "{cut}:n"
		for round := range 20 {
			net := redistest.NewNetwork()
			c := b.ClientVia(t, net)
			ctx := context.Background()
			if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			// Keep the connection busy with increments, in long pipelines from several goroutines,
			// then cut it in the middle of them: Redis has many of them still to read.
			const writers, batch = 4, 5000
			done := make(chan int, writers)
			for range writers {
				go func() {
					cmds := make(rueidis.Commands, batch)
					for i := range cmds {
						cmds[i] = c.B().Incr().Key(key).Build()
					}
					acked := 0
					for _, r := range c.DoMulti(ctx, cmds...) {
						if r.Error() == nil {
							acked++
						}
					}
					done <- acked
				}()
			}
			time.Sleep(time.Duration(1+round%5) * time.Millisecond)
			net.Cut()
			read := func() int64 {
				n, err := b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Get().Key(key).Build() }).AsInt64()
				if err != nil && !rueidis.IsRedisNil(err) {
					t.Fatal(err)
				}
				return n
			}
			at := read()
			acked := 0
			for range writers {
				acked += <-done
			}
			time.Sleep(50 * time.Millisecond)
			if later := read(); later != at {
				t.Fatalf("round %d: %d increments ran after Cut returned (%d before)", round, later-at, at)
			}
			if int64(acked) > at {
				t.Fatalf("round %d: %d increments acknowledged, %d ran", round, acked, at)
			}
			b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(key).Build() })
			c.Close()
		}
	})
}

package scripts_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2/server"

	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
)

// miniredis (the embedded server) expires a key by the time of each command that touches the
// database, the commands of a running script included; Redis judges expiry by the script's
// start. These tests stall one command of a script on miniredis to make a key expire in it.

// stallOnce makes miniredis b stall the next cmd (one of a script's calls too) for d: with
// answer, it answers TIME itself with the time of the moment, then stalls; without, it stalls,
// then runs the command. It returns the function that arms it.
func stallOnce(t *testing.T, b *redistest.Backend, cmd string, d time.Duration, answer bool) func() {
	var armed atomic.Bool
	b.Mini.Server().SetPreHook(func(c *server.Peer, name string, _ ...string) bool {
		if name != cmd || !armed.CompareAndSwap(true, false) {
			return false
		}
		if answer {
			ns := time.Now().UnixNano()
			c.WriteLen(2)
			c.WriteBulk(strconv.FormatInt(ns/1e9, 10))
			c.WriteBulk(strconv.FormatInt(ns/1e3%1e6, 10))
		}
		time.Sleep(d)
		return answer
	})
	t.Cleanup(func() { b.Mini.Server().SetPreHook(nil) })
	return func() { armed.Store(true) }
}

// A lease renewed while its key's TTL runs out between the script's GET and its PEXPIRE
// (miniredis expires keys between a script's commands; Redis never does): the renewal
// reported success for a key that was gone, hiding the loss. Now it reports the loss.
func TestExtendTellsAKeyGoneInTheScript(t *testing.T) {
	b := redistest.Open(t, redistest.Mini)
	c := b.Client(t)
	key := b.Prefix(t) + "{e}:lease"
	arm := stallOnce(t, b, "PEXPIRE", 600*time.Millisecond, false)
	if err := c.Do(context.Background(), c.B().Set().Key(key).Value("o1").Px(300*time.Millisecond).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	arm()
	v, err := scripts.Extend.Exec(context.Background(), c, []string{key}, []string{"s", "o1", "30000"}).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := c.Do(context.Background(), c.B().Exists().Key(key).Build()).AsInt64()
	if v != 0 || n != 0 {
		t.Fatalf("extend of a key that expired during the script: %d (want 0: lost), the key exists: %d", v, n)
	}
}

package pubsub_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distsync/distsync/internal/pubsub"
	"github.com/distsync/distsync/internal/redistest"
)

// A subscription Redis refuses (ACL: the command, or the channel) ends Subscribe with Redis's
// error, naming the command, instead of leaving the caller to wait for a confirmation that
// never comes (it retried for ever, and a Lock waited until its context ended).
func TestSubscribeRefusedByACL(t *testing.T) {
	t.Parallel()
	redistest.EachServer(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		for _, c := range []struct {
			what  string
			rules []string
			want  string
		}{
			{"no subscribe command", []string{"~*", "&*", "+@all", "-subscribe", "-ssubscribe"}, "subscribe"},
			{"no channel", []string{"~*", "resetchannels", "&other:*", "+@all"}, "SUBSCRIBE"},
		} {
			t.Run(strings.ReplaceAll(c.what, " ", "_"), func(t *testing.T) {
				opt := b.ClientOption()
				opt.DisableCache = true
				client := redistest.CreateUser(t, b.Nodes(t), c.rules...).Client(t, opt)
				n := pubsub.New(client, b.Sharded(), nil)
				defer n.Close(context.Background())
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				began := time.Now()
				_, err := n.Subscribe(ctx, prefix+"{x}:ch", newListener())
				took := time.Since(began)
				if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "NOPERM") {
					t.Fatalf("Subscribe = %v after %v, want Redis's NOPERM error naming %s at once", err, took, c.want)
				}
				if took > 20*time.Second {
					t.Errorf("Subscribe took %v to fail", took)
				}
				t.Logf("Subscribe failed after %v: %v", took.Round(time.Millisecond), err)
				if n := n.Channels(); n != 0 {
					t.Errorf("%d channels held after the refusal, want 0", n)
				}
			})
		}
	})
}

package scripts_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/rediserr"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/internal/scripts"
)

// An ACL's refusal names what the script ran: before Redis 7.2, Redis's own error for a
// command refused inside a script names neither the command nor the key, only the line. The
// error still reads as Redis's (rediserr.As), not as a connection error to retry.
func TestACLRefusalNamesTheCommand(t *testing.T) {
	t.Parallel()
	redistest.EachServer(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		for _, c := range []struct {
			what  string
			rules []string
			want  []string
		}{
			{"no TIME", []string{"~*", "&*", "+@all", "-time"}, []string{"mutex_acquire.lua, line ", "calling TIME"}},
			{"no key", []string{"~other:*", "&*", "+@all"}, []string{"EVALSHA/EVAL mutex_acquire.lua", prefix + "{m}:mutex", "NOPERM"}},
			{"no EVALSHA", []string{"~*", "&*", "+@all", "-evalsha"}, []string{"'evalsha'", "NOPERM"}},
		} {
			t.Run(strings.ReplaceAll(c.what, " ", "_"), func(t *testing.T) {
				opt := b.ClientOption()
				opt.DisableCache = true
				client := redistest.CreateUser(t, b.Nodes(t), c.rules...).Client(t, opt)
				base := prefix + "{m}:mutex"
				acquire := scripts.MutexAcquireArgs{Keys: scripts.MutexKeys{Lock: base, Fence: base + ":fence", Q: base + ":q", QX: base + ":qx"},
					Owner: "o", TTL: "10000", FenceTTL: "60000", Flags: "000", Slack: "5000", Prefix: base + ":ch", Pub: "PUBLISH", Last: "0"}
				for how, run := range map[string]func() error{
					"Exec": func() error { return acquire.Exec(context.Background(), client).Error() },
					"DoMulti": func() error {
						return scripts.DoMulti(context.Background(), client, []scripts.Call{acquire.Call()})[0].Error()
					},
				} {
					err := run()
					if err == nil {
						t.Fatalf("%s: the script ran", how)
					}
					for _, w := range c.want {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("%s: error %q does not name %q", how, err, w)
						}
					}
					if _, ok := rediserr.As(err); !ok {
						t.Errorf("%s: %v does not read as Redis's error", how, err)
					}
					// The key the refused script may have set lives for its lease only.
					b.Do(t, func(c rueidis.Client) rueidis.Completed { return c.B().Del().Key(base).Build() })
				}
			})
		}
	})
}

package redistest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Describe returns what Redis holds under keys, for a test's failure message: the server's
// clock, then one line per key with its type, contents and PTTL in ms ("none" for a key that
// does not exist). Errors are written in place of what they hid; it never fails the test.
func Describe(c rueidis.Client, keys ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	now, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	fmt.Fprintf(&b, "server TIME %v %v", now, err)
	for _, key := range keys {
		typ, err := c.Do(ctx, c.B().Type().Key(key).Build()).ToString()
		if err != nil || typ == "none" {
			fmt.Fprintf(&b, "\n  %s: none %v", key, err)
			continue
		}
		var v any
		switch typ {
		case "string":
			v, err = c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
		case "hash":
			v, err = c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
		case "zset":
			v, err = c.Do(ctx, c.B().Zrange().Key(key).Min("0").Max("-1").Withscores().Build()).AsZScores()
		case "list":
			v, err = c.Do(ctx, c.B().Lrange().Key(key).Start(0).Stop(-1).Build()).AsStrSlice()
		}
		pttl, perr := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
		fmt.Fprintf(&b, "\n  %s: %s %v (err %v), pttl %d (err %v)", key, typ, v, err, pttl, perr)
	}
	return b.String()
}

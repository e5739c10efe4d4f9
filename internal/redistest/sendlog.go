package redistest

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// SendLog is a rueidis.Client that notes when each command that matches is sent, for a test
// that times a waiter's attempts, whatever the round trips took.
type SendLog struct {
	rueidis.Client
	match func(cmd []string) bool
	mu    sync.Mutex
	at    []time.Time
}

// NewSendLog returns a SendLog of c that notes the commands match accepts (a
// [ScriptCall], say).
func NewSendLog(c rueidis.Client, match func(cmd []string) bool) *SendLog {
	return &SendLog{Client: c, match: match}
}

func (c *SendLog) note(cmds ...rueidis.Completed) {
	for _, cmd := range cmds {
		if c.match(cmd.Commands()) {
			c.mu.Lock()
			c.at = append(c.at, time.Now())
			c.mu.Unlock()
		}
	}
}

// Do implements rueidis.Client.
func (c *SendLog) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.note(cmd)
	return c.Client.Do(ctx, cmd)
}

// DoMulti implements rueidis.Client.
func (c *SendLog) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.note(multi...)
	return c.Client.DoMulti(ctx, multi...)
}

// Sent returns how many commands that match were sent.
func (c *SendLog) Sent() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at)
}

// Last returns when the last command that matches was sent before t (the zero time if none
// was).
func (c *SendLog) Last(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var last time.Time
	for _, at := range c.at {
		if at.Before(t) {
			last = at
		}
	}
	return last
}

// Package counting wraps a rueidis client to count the commands sent through it, for tests,
// the demo and the benchmarks.
package counting

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Client is a rueidis.Client that counts the commands sent through it, by name. rueidis'
// own health-check PINGs do not go through it, so they are not counted (a PING is
// the client's, not the library's).
type Client struct {
	rueidis.Client
	mu     sync.Mutex
	counts map[string]int
	log    []Sent
	multis []int // sizes of the DoMulti calls (pipelines)
}

// Sent is one counted command.
type Sent struct {
	At   time.Time
	Name string
}

// New wraps c.
func New(c rueidis.Client) *Client {
	return &Client{Client: c, counts: make(map[string]int)}
}

func (c *Client) count(cmd rueidis.Completed) {
	name := cmd.Commands()[0]
	c.mu.Lock()
	c.counts[name]++
	c.log = append(c.log, Sent{At: time.Now(), Name: name})
	c.mu.Unlock()
}

// Total returns the number of commands counted so far.
func (c *Client) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.log)
}

// Since returns the commands counted at or after t.
func (c *Client) Since(t time.Time) []Sent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Sent
	for _, s := range c.log {
		if !s.At.Before(t) {
			out = append(out, s)
		}
	}
	return out
}

// Counts returns a copy of the counts by command name.
func (c *Client) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// Reset forgets everything counted so far.
func (c *Client) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = make(map[string]int)
	c.log, c.multis = nil, nil
}

// Pipelines returns the number of commands in each DoMulti call so far.
func (c *Client) Pipelines() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.multis...)
}

// Do implements rueidis.Client.
func (c *Client) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.count(cmd)
	return c.Client.Do(ctx, cmd)
}

// DoMulti implements rueidis.Client.
func (c *Client) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for _, cmd := range multi {
		c.count(cmd)
	}
	c.mu.Lock()
	c.multis = append(c.multis, len(multi))
	c.mu.Unlock()
	return c.Client.DoMulti(ctx, multi...)
}

// Receive implements rueidis.Client.
func (c *Client) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	c.count(subscribe)
	return c.Client.Receive(ctx, subscribe, fn)
}

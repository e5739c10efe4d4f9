// Package counting wraps a rueidis client to count the commands sent through it, for tests,
// the demo and the benchmarks.
package counting

import (
	"context"
	"slices"
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
	gen    int   // bumped by Reset: a reply to a command counted before it is not noted
	multis []int // sizes of the DoMulti calls (pipelines)
}

// Sent is one counted command.
type Sent struct {
	At   time.Time
	Name string
	Took time.Duration // from At to its reply (0 until the reply came)
}

// New wraps c.
func New(c rueidis.Client) *Client {
	return &Client{Client: c, counts: make(map[string]int)}
}

// count counts cmds, sent together, and returns the place of the first in the log, for replied.
func (c *Client) count(cmds ...rueidis.Completed) (i, gen int) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	i = len(c.log)
	for _, cmd := range cmds {
		name := cmd.Commands()[0]
		c.counts[name]++
		c.log = append(c.log, Sent{At: now, Name: name})
	}
	return i, c.gen
}

// replied notes that the commands counted from place i on, n of them, have their replies.
func (c *Client) replied(i, n, gen int) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	for j := i; j < i+n; j++ {
		c.log[j].Took = max(now.Sub(c.log[j].At), time.Nanosecond)
	}
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

// Slowest returns the longest round trip of the commands sent from from to to; a command
// still waiting for its reply counts as long as it has waited. A test whose premise is that
// Redis answered in time (a waiter's re-check reached Redis before its entry lapsed) reads it,
// as it reads how long its own process stalled: a busy Redis is load too.
func (c *Client) Slowest(from, to time.Time) time.Duration {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var worst time.Duration
	for _, s := range c.log {
		if s.At.Before(from) || s.At.After(to) {
			continue
		}
		took := s.Took
		if took == 0 {
			took = now.Sub(s.At)
		}
		worst = max(worst, took)
	}
	return worst
}

// Busy returns how long, between from and to, at least one command sent through c was
// waiting for its reply (the union of their round trips, clipped to the window; a command
// still waiting counts until now). Something that waits on a chain of round trips (a re-check,
// then a confirm) is late by their sum on a busy Redis, not by the longest of them.
func (c *Client) Busy(from, to time.Time) time.Duration {
	now := time.Now()
	c.mu.Lock()
	type span struct{ a, b time.Time }
	var spans []span
	for _, s := range c.log {
		end := s.At.Add(s.Took)
		if s.Took == 0 {
			end = now
		}
		a, b := maxTime(s.At, from), minTime(end, to)
		if a.Before(b) {
			spans = append(spans, span{a, b})
		}
	}
	c.mu.Unlock()
	slices.SortFunc(spans, func(x, y span) int { return x.a.Compare(y.a) })
	var total time.Duration
	var cur span
	for i, s := range spans {
		switch {
		case i == 0:
			cur = s
		case s.a.After(cur.b):
			total += cur.b.Sub(cur.a)
			cur = s
		case s.b.After(cur.b):
			cur.b = s.b
		}
	}
	if len(spans) > 0 {
		total += cur.b.Sub(cur.a)
	}
	return total
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
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
	c.gen++
}

// Pipelines returns the number of commands in each DoMulti call so far.
func (c *Client) Pipelines() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.multis...)
}

// Do implements rueidis.Client.
func (c *Client) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	i, gen := c.count(cmd)
	defer c.replied(i, 1, gen)
	return c.Client.Do(ctx, cmd)
}

// DoMulti implements rueidis.Client.
func (c *Client) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	first, gen := c.count(multi...)
	c.mu.Lock()
	c.multis = append(c.multis, len(multi))
	c.mu.Unlock()
	defer c.replied(first, len(multi), gen)
	return c.Client.DoMulti(ctx, multi...)
}

// Receive implements rueidis.Client.
func (c *Client) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	// It lasts as long as the subscription: it has no round trip of its own.
	i, gen := c.count(subscribe)
	c.replied(i, 1, gen)
	return c.Client.Receive(ctx, subscribe, fn)
}

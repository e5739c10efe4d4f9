package waitgroup

// How a WaitGroup talks to Redis: requests that Redis applies once, and the listener of the
// group's channel.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/pubsub"
	"github.com/distsync/distsync/internal/rediserr"
	"github.com/distsync/distsync/internal/scripts"
)

// run runs one waitgroup script once.
func (wg *WaitGroup) run(ctx context.Context, s *scripts.Script, id string, delta int64, extra string) rueidis.RedisResult {
	return scripts.WaitGroupArgs{Keys: wg.keys, ID: id, Delta: strconv.FormatInt(delta, 10), TTL: core.Ms(wg.ttl),
		Expiry: core.Ms(wg.expiry), Keep: strconv.Itoa(keepRounds), Channel: wg.channel, Pub: wg.c.Pub,
		OpsTTL: core.Ms(min(opsTTL, wg.expiry)), Extra: extra}.Exec(ctx, wg.c.Client, s)
}

// apply runs s, a request that adds to the group (waitgroup_add.lua with delta > 0, or
// waitgroup_join.lua), under request id, retrying a connection error a few times: Redis
// applies an id once. If no attempt is answered (ctx ended, or Redis is unreachable), an
// attempt may still reach Redis: waitgroup_void.lua then settles it, so that apply returns
// its true outcome: applied (reply {1}), or not and never to be. Only if that cannot reach
// Redis either does apply return with the outcome unknown, the Handle voiding the request in
// the background.
func (wg *WaitGroup) apply(ctx context.Context, s *scripts.Script, id string, delta int64, extra string) ([]int64, error) {
	var v []int64
	err := core.RetryNow(ctx, func() (err error) {
		v, err = wg.run(ctx, s, id, delta, extra).AsIntSlice()
		return err
	})
	if _, redisErr := rediserr.As(err); err == nil || redisErr && !core.Transient(err) {
		return v, err // answered: applied or refused
	}
	state := atomic.Int64{}
	state.Store(-1)
	wg.c.Undo(fmt.Sprintf("waitgroup %q: voiding an unanswered request", wg.name), opsTTL, func(ctx context.Context) error {
		applied, err := wg.run(ctx, scripts.WaitGroupVoid, id, delta, extra).AsInt64()
		if err == nil {
			state.CompareAndSwap(-1, applied)
		}
		return err
	})
	switch state.Load() {
	case 1:
		return []int64{1, 0}, nil
	case 0:
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("not applied: %w", err)
	}
	return nil, fmt.Errorf("outcome unknown (if it was not applied, it will not be): %w", err)
}

// listener receives the group's channel: it keeps the latest round's message.
type listener struct {
	pubsub.Resubs
	signal chan struct{}
	mu     sync.Mutex
	round  string // of the latest message
	msg    string // its outcome
}

func (l *listener) Message(p string) {
	round, o, ok := strings.Cut(p, "\n")
	if !ok {
		return
	}
	l.mu.Lock()
	if l.round == "" || newer(round, l.round) {
		l.round, l.msg = round, o
	}
	l.mu.Unlock()
	select {
	case l.signal <- struct{}{}:
	default: // a wake-up is already pending
	}
}

func (l *listener) last() (round, outcome string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.round, l.msg
}

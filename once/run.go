package once

// This file: the run of one call (the lead taken or a leader followed, the result shared and
// kept).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/pubsub"
	"github.com/distsync/distsync/internal/rediserr"
	"github.com/distsync/distsync/internal/scripts"
)

// run is the call of key in this process: it waits for a result in Redis, or leads.
//
// ctx is the call's, not a caller's: it ends when no caller in this process waits any more
// (Do cancels it), so a result it cuts short reaches nobody. Those results match
// [distsync.ErrNotAcquired] all the same, as a caller's own cancelled wait does.
func (g *Group[T]) run(ctx context.Context, c *call[T], key string, fn func(context.Context) (T, error)) {
	defer g.end(c, key)
	// For the Handle's observer, the call acquires the lead: it reports the lead it takes
	// (and its hold), or, not acquired, the result of another leader (Err nil) or its error.
	obs := g.c.Begin(ctx, g.kind, g.name, 1, false)
	led, followed := false, false
	defer func() {
		switch {
		case led:
		case c.shared:
			obs.Done(nil, nil)
		default:
			obs.Done(nil, c.err)
		}
	}()
	if err := g.c.Enter(); err != nil {
		c.err = g.wrap(key, err)
		return
	}
	defer g.c.Exit()
	ks, err := g.keys(key)
	if err != nil {
		c.err = err
		return
	}
	// A kept result, or the lead, needs no subscription: check first, and subscribe (then
	// check again: a result published in between would reach nobody) only to wait.
	l := &listener{ch: make(chan string, 4)}
	sub := g.c.Notifier.Attach(ks.channel, l) // free if the channel is subscribed already
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()

	w := waiting{floor: -1} // no published result to take yet: look again instead
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for backoff := 10 * time.Millisecond; ; {
		resub := l.Next() // before the check: a re-subscription after it means look again
		owner := g.c.NewID()
		sent := time.Now()
		reply, err := g.begin(ctx, ks, owner, &w)
		if err != nil {
			if core.RetryAfter(ctx, &backoff, err) {
				continue
			}
			c.err = g.failed(ctx, key, err)
			return
		}
		kind, _ := reply[0].ToString()
		switch kind {
		case "k", "r":
			res, _ := reply[1].ToString()
			c.val, c.err = g.decode(key, res)
			c.shared = true
			return
		case "l":
			lease, err := g.holdLead(ks, owner, sent, reply)
			if errors.Is(err, core.ErrLate) {
				continue // the lead came too late to use and was given up: look again
			} else if err != nil {
				c.err = g.wrap(key, err) // the Handle closed: fn must not run uncoordinated
				return
			}
			obs.Once(leadEvent(w.leader != ""))
			led = true
			obs.Done(lease, nil)
			g.lead(c, ks, key, owner, lease, fn, ctx, sub != nil)
			return
		case "w":
			w.follow(reply)
			if !followed {
				followed = true
				obs.Once(core.EventOnceFollower)
			}
			if sub == nil {
				if sub, err = g.c.Notifier.Subscribe(ctx, ks.channel, l); err != nil {
					c.err = g.failed(ctx, key, err)
					return
				}
				continue
			}
			pttl, _ := reply[2].AsInt64()
			timer.Reset(core.Backstop(time.Duration(pttl)*time.Millisecond, g.ttl))
		default:
			c.err = g.wrap(key, core.Unexpected(scripts.OnceBegin, kind))
			return
		}
		if g.await(ctx, c, key, l, resub, timer, &w) {
			return
		}
	}
}

// begin runs once_begin.lua for the call, as owner, with what it may take (w). If the script
// may have run without its reply reaching the call (a cancelled ctx does not cancel a command
// Redis received), it gives up the lead the script may have given it, in the background.
func (g *Group[T]) begin(ctx context.Context, ks keyset, owner string, w *waiting) ([]rueidis.RedisMessage, error) {
	begin := scripts.OnceBeginArgs{Lead: ks.lead, Kept: ks.kept, Res: ks.resPrefix + w.leader, Mine: ks.resPrefix + owner,
		Fence: ks.fence, Forgot: ks.forgot, Last: ks.last, Owner: owner, TTL: core.Ms(g.ttl), FenceTTL: core.Ms(g.fenceTTL()),
		Floor: strconv.FormatInt(w.floor, 10)}
	reply, err := begin.Exec(ctx, g.c.Client).ToArray()
	if _, redisErr := rediserr.As(err); err != nil && !redisErr {
		g.c.Undo("giving up an unused lead", g.ttl, func(ctx context.Context) error {
			return g.finish(ctx, ks, owner, "", 0, 0)
		})
	}
	return reply, err
}

// failed is the call's error when it gives up: it could not look (begin) or subscribe to
// wait, and will not try again.
func (g *Group[T]) failed(ctx context.Context, key string, err error) error {
	switch {
	case errors.Is(err, pubsub.ErrClosed):
		return g.wrap(key, distsync.ErrClosed)
	case ctx.Err() != nil:
		return g.notAcquired(key, ctx.Err())
	default:
		return g.wrap(key, err)
	}
}

// waiting is what a call that waits may take: the result key of leader (its result, if the
// call missed its message), and published results whose fencing token is at least floor (-1:
// none; look again instead). A leader that Forget found leading is waited for, but its result
// is not taken (leader is "" then, and floor is above its token), unless the call waited for
// it before the Forget (joined is that leader): its callers came before the Forget. Tokens
// tell the results apart: a message that comes with a smaller one is an older lead's
// (published before this call looked, and delivered late), which may predate a Forget.
type waiting struct {
	leader string
	floor  int64
	joined string
}

// follow reads once_begin.lua's reply that the call waits: {'w', leader, pttl, token,
// forgotten}.
func (w *waiting) follow(reply []rueidis.RedisMessage) {
	w.leader, _ = reply[1].ToString()
	w.floor = -1
	if len(reply) <= 4 {
		return
	}
	w.floor, _ = reply[3].AsInt64()
	switch forgotten, _ := reply[4].AsInt64(); {
	case forgotten != 1 || w.leader == w.joined:
		w.joined = w.leader
	default:
		w.leader = "" // it led when Forget ran: its result predates the Forget
		if w.floor >= 0 {
			w.floor++ // a later leader's result is newer
		}
	}
}

// end takes the finished call c out of the calls of key, and tells its callers.
func (g *Group[T]) end(c *call[T], key string) {
	g.mu.Lock()
	if g.calls[key] == c {
		delete(g.calls, key)
	}
	c.out = c.shared || c.joined > 1 // nobody joins once the call is out of the map
	g.mu.Unlock()
	c.cancel()
	close(c.done)
}

// leadEvent is the observer's event of a lead taken: a takeover if the call waited for a
// leader whose result it would have taken.
func leadEvent(takeover bool) uint8 {
	if takeover {
		return core.EventOnceTakeover
	}
	return core.EventOnceLeader
}

// holdLead starts the lease of the lead once_begin.lua gave the call ({'l', token}). The lease
// keeps the fence key (the lead's token, which waiters compare results with) and a Forget's
// mark alive as long as the lead.
func (g *Group[T]) holdLead(ks keyset, owner string, sent time.Time, reply []rueidis.RedisMessage) (*core.Lease, error) {
	var token int64
	if len(reply) > 1 {
		token, _ = reply[1].AsInt64()
	}
	return g.c.Hold(core.LeaseSpec{Key: ks.lead, Owner: owner, Kind: "s", Keep: []string{ks.fence, ks.forgot},
		TTL: g.ttl, Renew: g.renew, Sent: sent, Token: token,
		Release: func(ctx context.Context, _ *core.Lease) error { return g.finish(ctx, ks, owner, "", 0, token) }})
}

// await waits, for a call that follows a leader, until it must look again (false): a message
// it may not take, a re-subscription, the backstop. It returns true once the call has its
// result or error in c: a result it may take, its ctx ended, or the Handle closed.
func (g *Group[T]) await(ctx context.Context, c *call[T], key string, l *listener, resub <-chan struct{}, timer *time.Timer, w *waiting) bool {
	for {
		select {
		case m := <-l.ch:
			if m == forgetNotice {
				if w.leader != "" {
					// A Forget marked the leader this call waits for and may take the
					// result of: its callers came before the Forget and get that result;
					// later ones must not join it.
					g.detach(c, key)
				}
				continue
			}
			// "<token>\n<result>": a result this call may take, from the leader it waits for
			// or a later one (who took over after a lost lease), or anything else: a lead
			// given up ("<token>\n"), an older result, or one the call must not take. Then it
			// looks again.
			tok, res, ok := strings.Cut(m, "\n")
			n, err := strconv.ParseInt(tok, 10, 64)
			if !ok || err != nil || res == "" || w.floor < 0 || n < w.floor {
				return false
			}
			c.val, c.err = g.decode(key, res)
			c.shared = true
			return true
		case <-resub:
			return false
		case <-timer.C:
			return false // the backstop: a lease that lapses publishes nothing
		case <-ctx.Done():
			c.err = g.notAcquired(key, ctx.Err())
			return true
		case <-g.c.Done():
			c.err = g.wrap(key, distsync.ErrClosed)
			return true
		}
	}
}

// lead runs fn as the key's leader, under lease, and shares its result.
func (g *Group[T]) lead(c *call[T], ks keyset, key, owner string, lease *core.Lease, fn func(context.Context) (T, error), callCtx context.Context, subscribed bool) {
	fctx, cancel := lease.Bind(context.WithoutCancel(callCtx))
	var (
		val      T
		err      error
		panicked any
		returned bool
	)
	// fn ends in one of three ways: it returns; it panics, recovered below; or it calls
	// runtime.Goexit, which no recover stops: this goroutine ends once its deferred calls have
	// run. So the result is shared by a deferred call, which runs in all three: a Goexit must
	// neither leave the lead held (renewed, so that every later call waits on it) nor tell the
	// callers that fn succeeded. recover returns nil for a Goexit (and, since Go 1.21, a
	// *runtime.PanicNilError for panic(nil)): fn did not return and nothing was recovered.
	defer func() {
		cancel()
		g.share(c, ks, key, owner, lease, val, err, panicked, !returned && panicked == nil, subscribed)
	}()
	defer func() {
		if r := recover(); r != nil {
			panicked = r
		}
	}()
	val, err = fn(fctx)
	returned = true
}

// share ends the lead of a call whose fn has ended, with fn's results: val and err if it
// returned, the value it panicked with, or goexit if it called runtime.Goexit.
func (g *Group[T]) share(c *call[T], ks keyset, key, owner string, lease *core.Lease, val T, err error, panicked any, goexit bool, subscribed bool) {
	// Err reads the lease's deadline now: a leader whose process was frozen past it learns of
	// the loss here, even if the renewal loop has not run since it resumed.
	if lerr := lease.Stop(); lerr != nil {
		// The lead was lost (or the Handle closed) while fn ran: another process may lead now,
		// and may have run fn at the same time. This process's callers are told; the others
		// are not (another leader's result, or a re-check, reaches them), and the lead is given
		// up if Redis still has it.
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		_ = g.finish(rctx, ks, owner, "", 0, lease.Token())
		rcancel()
		if goexit {
			err = ErrGoexit // for want of an error of fn's
		}
		g.lostLead(c, key, val, err, panicked, lerr)
		return
	}

	var res string
	switch {
	case goexit:
		res = "g"
		err = ErrGoexit
	case panicked != nil:
		res = "p" + fmt.Sprint(panicked)
	case err != nil:
		res = "e" + err.Error()
	default:
		b, eerr := g.codec.Encode(val)
		switch {
		case eerr != nil:
			err = fmt.Errorf("once %q: key %q: %w: encode: %v", g.name, key, ErrCodec, eerr)
			res = "e" + err.Error()
		case len(b) > g.maxSize:
			err = fmt.Errorf("once %q: key %q: %w: %d bytes encoded, limit %d", g.name, key, ErrTooLarge, len(b), g.maxSize)
			res = "e" + err.Error()
		default:
			res = "v" + string(b)
		}
	}
	keep := time.Duration(0)
	if err == nil && panicked == nil || err != nil && g.keepErrors && !goexit {
		keep = g.keep
	}
	// A call that Forget detached keeps nothing, even if its lead began after the Forget
	// reached Redis (the Forget's mark, which once_finish.lua reads, covers the others).
	g.mu.Lock()
	if c.forgot {
		keep = 0
	}
	g.mu.Unlock()
	// Publish the result, retrying a lost connection a few times: the waiters would otherwise
	// wait for the lease to lapse and run fn again.
	var n int64
	ferr := core.RetryNow(context.Background(), func() (err error) {
		fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer fcancel()
		n, err = g.finishN(fctx, ks, owner, res, keep, lease.Token())
		return err
	})
	if ferr != nil {
		g.c.Log().Warn("distsync: once: could not share a result (waiters will take over when the lead lapses)",
			"group", g.name, "key", key, "err", ferr)
	}
	if ferr == nil && n < 0 {
		// Redis no longer had this lead when the result came (it lapsed: the process or Redis
		// stalled): nothing was shared or kept, and another leader may be running fn.
		lerr := fmt.Errorf("%w: the lead was gone from Redis when fn returned", distsync.ErrLost)
		lease.End(lerr)
		g.lostLead(c, key, val, err, panicked, lerr)
		return
	}
	lease.End(distsync.ErrReleased)
	if goexit {
		err = g.wrap(key, err) // fn's own error goes to its process's callers as it is
	}
	c.val, c.err, c.panicked = val, err, panicked
	own := int64(0)
	if subscribed {
		own = 1 // this process's own subscription is one of those the result reached
	}
	c.shared = n > own
}

// lostLead ends a call whose lead was lost while fn ran: its callers get fn's value with an
// error matching [distsync.ErrLost] (and fn's own error, if any), since another process may
// have run fn at the same time; a panic still panics.
func (g *Group[T]) lostLead(c *call[T], key string, val T, err error, panicked any, lost error) {
	e := fmt.Errorf("%w: the lead was lost while fn ran, so another process may have run it too", lost)
	if err != nil {
		e = errors.Join(e, err)
	}
	c.val, c.err, c.panicked = val, g.wrap(key, e), panicked
}

// finish runs once_finish.lua for the lead of owner, whose fencing token is token (0 if not
// known: a lead given up before its reply came); res "" gives the lead up without a result.
func (g *Group[T]) finish(ctx context.Context, ks keyset, owner, res string, keep time.Duration, token int64) error {
	_, err := g.finishN(ctx, ks, owner, res, keep, token)
	return err
}

// linger is how long a leader's result key outlives its lead: longer than any waiter's
// backstop.
func (g *Group[T]) linger() time.Duration { return 2*g.ttl + time.Second }

func (g *Group[T]) finishN(ctx context.Context, ks keyset, owner, res string, keep time.Duration, token int64) (int64, error) {
	keepArg := core.Ms(keep)
	if keep < 0 {
		keepArg = "-1"
	}
	return scripts.OnceFinishArgs{Lead: ks.lead, Kept: ks.kept, Res: ks.resPrefix + owner, Forgot: ks.forgot, Last: ks.last,
		Owner: owner, Result: res, Keep: keepArg, Linger: core.Ms(g.linger()), Channel: ks.channel, Pub: g.c.Pub,
		Token: strconv.FormatInt(token, 10)}.Exec(ctx, g.c.Client).AsInt64()
}

// decode turns a shared result into Do's results.
func (g *Group[T]) decode(key, res string) (T, error) {
	var zero T
	if res == "" {
		return zero, fmt.Errorf("once %q: key %q: %w: empty result", g.name, key, ErrCodec)
	}
	switch res[0] {
	case 'v':
		v, err := g.codec.Decode([]byte(res[1:]))
		if err != nil {
			return zero, fmt.Errorf("once %q: key %q: %w: decode: %v", g.name, key, ErrCodec, err)
		}
		return v, nil
	case 'p':
		return zero, fmt.Errorf("once %q: key %q: %w: %s", g.name, key, ErrPanicked, res[1:])
	case 'g':
		return zero, fmt.Errorf("once %q: key %q: %w", g.name, key, ErrGoexit)
	}
	return zero, fmt.Errorf("once %q: key %q: %w: %s", g.name, key, ErrLeaderFailed, res[1:])
}

// Package once is x/sync/singleflight and sync.Once across processes, on Redis: one
// computation per key at a time among every process that shares a Redis, its result shared
// with every caller that waited for it — the cure for a cache stampede, where a hot entry
// expires and a thousand requests on twenty pods would each load it from the database.
//
// A [Group] runs a function once per key while a call for that key is in flight anywhere.
// The first caller to reach Redis leads: it holds a lease on the key (renewed by the Handle)
// and runs the function; every other caller, in any process, waits — without polling —
// and gets the leader's result, published once to every waiting process. Within one
// process, concurrent callers of a key share one call, so only one goroutine per process
// talks to Redis for it. If the leader dies or loses its lease before it publishes, one
// waiter takes over within the lease, and the rest wait for it. [WithKeep] keeps a
// successful result for a while, so that callers within that window get it without any
// call at all.
//
// A [Once] is sync.Once across processes: its function runs until it succeeds once, after
// which every Do returns at once, in every process, until [Once.Reset]. [OnceFunc],
// [OnceValue] and [OnceValues] are sync's functions of those names across processes, with a
// context and an error: the first success is kept in Redis, a failure is retried.
package once

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/internal/pubsub"
	"github.com/distsync/distsync/internal/scripts"
)

// The errors of a call that another process led, that could not be shared, or that ended in
// runtime.Goexit. Test with [errors.Is]; the leader's message follows the sentinel.
var (
	// ErrLeaderFailed: the function returned an error in the process that ran it.
	ErrLeaderFailed = errors.New("the call failed in the process that ran it")
	// ErrPanicked: the function panicked in the process that ran it. (In that process, the
	// callers of Do panic too, as with singleflight.)
	ErrPanicked = errors.New("the call panicked in the process that ran it")
	// ErrGoexit: the function called [runtime.Goexit] (t.FailNow in a test, say): it neither
	// returned nor panicked. Every caller that waited for the call, in every process, gets an
	// error matching it; nothing is kept, and the next call runs the function again.
	ErrGoexit = errors.New("the call ended in runtime.Goexit")
	// ErrTooLarge: the encoded result is larger than the Group's limit ([WithMaxValueSize]).
	ErrTooLarge = errors.New("result too large to share")
	// ErrCodec: the result could not be encoded or decoded.
	ErrCodec = errors.New("codec failed")
)

// DefaultMaxValueSize is the largest encoded result a Group shares by default: 4 MiB. A
// result travels to every waiting process in one publish and is stored in one string; much
// larger values belong in a store of their own, with the Group sharing their address.
const DefaultMaxValueSize = 4 << 20

// Result holds the results of Do, for DoChan.
type Result[T any] struct {
	Val    T
	Err    error
	Shared bool
}

// fenceTTL is how long a key's last fencing token is kept after its last lead. A Once keeps
// it for the Handle's fence retention, as a lock does. A Group may see a new key on every call
// (a cache), and a fence key for each, kept for days, would outnumber its results: it keeps a
// key's token for two leases, the keep period and a minute (at most the retention). After
// that the next token comes from the server clock, which is larger unless the clock stepped
// back by more than the time since the last lead.
func (g *Group[T]) fenceTTL() time.Duration {
	if g.keep < 0 {
		return g.c.Config.FenceTTL
	}
	return min(g.c.Config.FenceTTL, 2*g.ttl+g.keep+time.Minute)
}

// Group runs calls once per key across processes. Make it with [NewGroup]; it is safe for
// concurrent use and must not be copied.
type Group[T any] struct {
	c          *core.Handle
	kind       string // kind.Group, or the kind of the Once, OnceValue... it serves
	name       string
	ttl        time.Duration
	renew      bool          // false: a fixed lease (distsync.WithFixedLease)
	keep       time.Duration // 0: not kept; < 0: until deleted
	keepErrors bool
	maxSize    int
	codec      Codec[T]

	mu    sync.Mutex
	calls map[string]*call[T]
}

// call is one in-flight call of a key in this process.
type call[T any] struct {
	done     chan struct{}
	val      T
	err      error
	panicked any
	shared   bool // the result went to another process, or came from one
	out      bool // Do's shared: shared, or more than one local caller
	joined   int  // local callers that joined
	waiting  int  // local callers still waiting
	forgot   bool // a Forget detached the call: its result is not kept; guarded by the Group's mu
	cancel   context.CancelFunc
}

// options are the settings of once's own options; the shared ones ([distsync.WithLeaseTTL],
// [distsync.WithFixedLease]) are in core.Settings.
type options struct {
	keep       time.Duration
	keepErrors bool
	maxSize    int
	codec      any
}

// option returns an Option of this package, for the kinds listed.
func option(name string, set func(o *options), kinds ...string) distsync.Option {
	return api.Option(core.ExtOpt(name, kinds, set))
}

// WithKeep keeps each successful result in Redis for d after it is computed: callers of the
// key within d get it at once, from any process, without running fn (the cache-stampede
// protection); the first caller after d, or after [Group.Forget], runs fn again. d must be
// positive. By default a result goes only to the callers that waited for it.
//
// Applies to: NewGroup.
func WithKeep(d time.Duration) distsync.Option {
	return option("WithKeep", func(o *options) { o.keep = d }, kind.Group)
}

// WithKeepErrors keeps failed results too, for the WithKeep period: callers within it get the
// leader's error (matching [ErrLeaderFailed]) without running fn. By default errors are not
// kept, so the next caller tries again.
//
// Applies to: NewGroup, with WithKeep.
func WithKeepErrors() distsync.Option {
	return option("WithKeepErrors", func(o *options) { o.keepErrors = true }, kind.Group)
}

// WithMaxValueSize sets the largest encoded result shared with other callers (default
// [DefaultMaxValueSize]). A larger result is an error matching [ErrTooLarge] for every caller.
//
// Applies to: NewGroup, OnceValue, OnceValues.
func WithMaxValueSize(n int) distsync.Option {
	return option("WithMaxValueSize", func(o *options) { o.maxSize = n }, kind.Group, kind.OnceValue)
}

// WithCodec sets how results are encoded. Its type parameter must be the result's. The
// default is [JSON], except for []byte ([Bytes]) and string ([String]).
//
// Applies to: NewGroup, OnceValue (not OnceValues, which stores its pair as JSON).
func WithCodec[T any](c Codec[T]) distsync.Option {
	return option("WithCodec", func(o *options) { o.codec = c }, kind.Group, kind.OnceValue)
}

// settings applies opts for a primitive of kind called name, and returns the package's own
// settings with the others.
func settings(h *distsync.Handle, kind, name string, opts []distsync.Option) (*core.Handle, core.Settings, *options, error) {
	c, err := api.Core(h, "once")
	if err != nil {
		return nil, core.Settings{}, nil, err
	}
	o := &options{maxSize: DefaultMaxValueSize}
	set, err := c.Settings(kind, name, core.Unwrap(opts), o)
	return c, set, o, err
}

// NewGroup returns the Group called name. It sends nothing to Redis. Its options are
// [WithKeep], [WithKeepErrors], [WithMaxValueSize], [WithCodec], and [distsync.WithLeaseTTL]
// or [distsync.WithFixedLease] for the leader's lease (a fixed one ends the lead, and fn's
// context, that long after fn started). It returns an error matching [distsync.ErrInvalid]
// for an empty name, a non-positive duration or size, a codec of another type, or an option
// that does not apply to a Group.
func NewGroup[T any](h *distsync.Handle, name string, opts ...distsync.Option) (*Group[T], error) {
	c, set, o, err := settings(h, kind.Group, name, opts)
	if err != nil {
		return nil, err
	}
	if o.keep < 0 {
		return nil, fmt.Errorf("once %q: %w: keep must be positive, got %v", name, distsync.ErrInvalid, o.keep)
	}
	return newGroup[T](c, kind.Group, name, set.LeaseTTL, !set.Fixed, *o)
}

func newGroup[T any](c *core.Handle, kind, name string, ttl time.Duration, renew bool, o options) (*Group[T], error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("once %q: %w: "+format, append([]any{name, distsync.ErrInvalid}, a...)...)
	}
	switch {
	case name == "":
		return nil, bad("empty name")
	case o.keep == 0 && o.keepErrors:
		return nil, bad("WithKeepErrors needs WithKeep")
	case o.maxSize <= 0:
		return nil, bad("max value size must be positive, got %d", o.maxSize)
	}
	g := &Group[T]{c: c, kind: kind, name: name, ttl: ttl, renew: renew, keep: o.keep, keepErrors: o.keepErrors, maxSize: o.maxSize,
		codec: defaultCodec[T](), calls: make(map[string]*call[T])}
	if o.codec != nil {
		codec, ok := o.codec.(Codec[T])
		if !ok {
			return nil, bad("codec %T does not encode the Group's type", o.codec)
		}
		g.codec = codec
	}
	return g, nil
}

// Do runs fn for key and returns its results, making sure that only one call for key runs at
// a time across every process of the Group: a caller that comes while a call is in flight, in
// this process or another, waits for it and gets its results. shared reports whether the
// results went to more than one caller.
//
// fn runs in the caller's process only if that process leads the key. Its context carries the
// values of the first local caller's ctx, not its deadline or cancellation (other callers,
// in other processes too, wait for the result), and the lead's lease, which
// [distsync.LeaseFromContext] returns (its deadline; its fencing token, larger than every
// earlier lead's of the key: a Group keeps a key's last token for two leases, its keep period
// and a minute, and later tokens follow the server clock). It ends, with the
// lease's error as its cause, when the lead is lost — the lease could not be renewed, or a
// fixed lease ([distsync.WithFixedLease]) ran out, so another process may take over — or when
// the Handle closes.
//
// ctx bounds the caller's wait: if it ends first, Do returns an error matching both
// [distsync.ErrNotAcquired] and ctx.Err(), and the call goes on for the others. Callers in
// other processes get fn's error as one matching [ErrLeaderFailed] with its message; callers
// in the leader's process get the error itself. If fn panics, Do panics in every caller in
// its process, as singleflight does; callers in other processes get an error matching
// [ErrPanicked]. If fn calls [runtime.Goexit], every caller, in every process, gets an error
// matching [ErrGoexit], and the lead is given up at once.
func (g *Group[T]) Do(ctx context.Context, key string, fn func(ctx context.Context) (T, error)) (v T, err error, shared bool) {
	c, err := g.join(ctx, key, fn)
	if err != nil {
		return v, err, false
	}
	return g.wait(ctx, key, c)
}

// DoChan is like Do but returns a channel that receives the results when they are ready; it
// is not closed. The call is joined (or started) before DoChan returns, as singleflight's
// DoChan does: a Do or DoChan for key after it joins the same call. A panic in fn is
// delivered as an error matching [ErrPanicked] (rather than crash a goroutine the caller does
// not own); a cancelled wait, as an error matching both [distsync.ErrNotAcquired] and
// ctx.Err().
func (g *Group[T]) DoChan(ctx context.Context, key string, fn func(ctx context.Context) (T, error)) <-chan Result[T] {
	ch := make(chan Result[T], 1)
	c, err := g.join(ctx, key, fn)
	if err != nil {
		ch <- Result[T]{Err: err}
		return ch
	}
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- Result[T]{Err: fmt.Errorf("%w: %v", ErrPanicked, r), Shared: true}
			}
		}()
		v, err, shared := g.wait(ctx, key, c)
		ch <- Result[T]{v, err, shared}
	}()
	return ch
}

// join returns the call of key in this process that the caller joins, started with fn if
// there is none, or the error of a caller whose ctx has ended or whose Handle is closed.
func (g *Group[T]) join(ctx context.Context, key string, fn func(ctx context.Context) (T, error)) (*call[T], error) {
	if err := ctx.Err(); err != nil {
		return nil, g.notAcquired(key, err)
	}
	if g.c.Closed() {
		return nil, g.wrap(key, distsync.ErrClosed)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.calls[key]
	if c == nil {
		c = &call[T]{done: make(chan struct{})}
		var cctx context.Context
		cctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
		g.calls[key] = c
		go g.run(cctx, c, key, fn)
	}
	c.joined++
	c.waiting++
	return c, nil
}

// wait waits for the results of c, a call of key the caller joined, until ctx ends.
func (g *Group[T]) wait(ctx context.Context, key string, c *call[T]) (v T, err error, shared bool) {
	select {
	case <-c.done:
		if c.panicked != nil {
			panic(c.panicked)
		}
		return c.val, c.err, c.out
	case <-ctx.Done():
		g.mu.Lock()
		c.waiting--
		if c.waiting == 0 {
			c.cancel() // nobody here waits any more (a call this process leads goes on)
			if g.calls[key] == c {
				delete(g.calls, key) // a new caller starts afresh rather than join a cancelled wait
			}
		}
		g.mu.Unlock()
		return v, g.notAcquired(key, ctx.Err()), false
	}
}

// Forget forgets key, as singleflight's Forget does, across processes: a call of key that
// starts after Forget never gets the result of a call that was in flight when Forget ran, nor
// a result kept ([WithKeep]) from before it. It waits for that call's lead to end if it must
// (two leaders of a key never run at once), then runs fn or gets the result of a call that
// began after the Forget. The callers that had joined the call in flight still get its
// result, but that result is not kept, whichever of its end and the Forget reaches Redis
// first: Forget is for data that changed.
//
// A Do joins the call of its own process that is in flight, if any. In this process, Forget
// detaches that call before it returns, so the next Do starts a call. In another process, a
// call that waits for the forgotten one is detached when the Forget's notice (a pub/sub
// message) reaches that process; a call that process leads itself is not (a leader does not
// listen), and callers that join it there get its result until it ends.
//
// Forget returns Redis's error (the call in this process is detached all the same); ctx
// bounds the round trip.
func (g *Group[T]) Forget(ctx context.Context, key string) error {
	g.mu.Lock()
	if c := g.calls[key]; c != nil {
		c.forgot = true
		delete(g.calls, key)
	}
	g.mu.Unlock()
	ks, err := g.keys(key)
	if err != nil {
		return err
	}
	err = scripts.OnceForgetArgs{Lead: ks.lead, Kept: ks.kept, Forgot: ks.forgot,
		Linger: core.Ms(g.linger()), Channel: ks.channel, Pub: g.c.Pub}.Exec(ctx, g.c.Client).Error()
	if err != nil {
		return fmt.Errorf("once %q: forget %q: %w", g.name, key, err)
	}
	return nil
}

// detach stops new callers from joining c, the call of key, after a Forget: its result is
// not kept.
func (g *Group[T]) detach(c *call[T], key string) {
	g.mu.Lock()
	c.forgot = true
	if g.calls[key] == c {
		delete(g.calls, key)
	}
	g.mu.Unlock()
}

// keyset is the keys of one key of a Group.
type keyset struct {
	lead, kept, resPrefix, fence, forgot, channel string
	last                                          string // a result key too: res:last (no owner value is "last")
}

func (g *Group[T]) keys(key string) (keyset, error) {
	// The length prefix keeps (group, key) pairs apart: "a:b"+"c" is not "a"+"b:c".
	ks, err := g.c.Keys(kind.Space(g.kind), strconv.Itoa(len(g.name))+":"+g.name+":"+key)
	if err != nil {
		return keyset{}, fmt.Errorf("once %q: %w", g.name, err)
	}
	return keyset{lead: ks.Key(), kept: ks.Part("kept"), resPrefix: ks.Part("res") + ":", fence: ks.Part("fence"),
		forgot: ks.Part("forgot"), last: ks.Part("res") + ":last", channel: ks.Channel()}, nil
}

func (g *Group[T]) wrap(key string, err error) error {
	return fmt.Errorf("once %q: key %q: %w", g.name, key, err)
}

// notAcquired is the error of a wait that ctx ended (its error is err) before the call had a
// result: it matches both [distsync.ErrNotAcquired] and err, as every primitive's does.
func (g *Group[T]) notAcquired(key string, err error) error {
	return g.wrap(key, fmt.Errorf("%w: %w", distsync.ErrNotAcquired, err))
}

// forgetNotice is the message once_forget.lua publishes when it marks a leader forgotten.
const forgetNotice = "f"

// listener receives a key's channel.
type listener struct {
	pubsub.Resubs
	ch chan string
}

func (l *listener) Message(p string) {
	select {
	case l.ch <- p:
	default: // a result is already waiting to be read
	}
}

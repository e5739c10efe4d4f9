// Package rate is golang.org/x/time/rate's Limiter across processes, on Redis: at most limit
// events per second, with bursts of at most burst, among every process that uses the same
// name. Its methods are x/time/rate's, with a ctx and an error wherever Redis is asked, and
// its [Limit] is x/time/rate's, so code moves over by changing the constructor.
//
// The limiter is a token bucket, x/time/rate's arithmetic in one Redis hash: tokens refill at
// limit per second up to burst, a reservation takes its tokens at once (below zero if need
// be) and waits until the bucket would have had them. Every decision is one script that reads
// Redis's clock (TIME); no client's clock takes part in it. So the limit holds across
// processes whatever their clocks say, and in any interval the events allowed are at most
// limit × its length + burst.
//
// [Limiter.Wait] polls nothing and wakes no herd: it reserves its tokens in Redis (one script
// call) and sleeps on a timer until its time to act; n waiters wake n times, each at its own
// moment. A Wait that ends early (ctx, or the Handle closing) gives its reservation back
// before it returns, as x/time/rate's does, so the tokens that later reservations did not
// count on are not lost. A Wait whose ctx deadline comes before its time to act fails at once
// and takes nothing.
//
// Where the settings live. Each process sends its own limit and burst (the constructor's)
// with every decision, and they apply while Redis has no other. [Limiter.SetLimit] and
// [Limiter.SetBurst] store a limit or burst in the bucket's hash, which then overrides every
// process's own, from the next decision of each; and each process learns the values in force
// from the replies ([Limiter.Limit], [Limiter.Burst]). Without stored settings the bucket's
// key expires when the bucket would be full again (a full bucket and a missing one are the
// same). With them, it lives [SettingsRetention] after the limiter's last use, and at least
// until it would be full; after that the processes' own values apply again. A zero limit
// never refills the bucket: its key expires SettingsRetention after the last use, and its
// tokens come back then.
//
// Precision. A reservation's time to act is decided by Redis's clock and becomes a local
// time when the reply arrives: the caller acts late by up to the reply's one-way latency,
// never early. A call whose reply is lost (the connection dropped) may have taken its tokens:
// the limiter errs towards fewer events, never more.
package rate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	xrate "golang.org/x/time/rate"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/internal/scripts"
)

// Limit is x/time/rate's Limit: events per second. A zero Limit allows no events but the
// burst's.
type Limit = xrate.Limit

// Inf is the infinite rate limit: it allows every event, whatever the burst.
const Inf = xrate.Inf

// InfDuration is the delay of a Reservation that is not OK.
const InfDuration = xrate.InfDuration

// Every converts a minimum time interval between events to a Limit, as x/time/rate.Every.
func Every(interval time.Duration) Limit { return xrate.Every(interval) }

// SettingsRetention is how long a limit or burst stored by [Limiter.SetLimit] or
// [Limiter.SetBurst] outlives the limiter's last use: a week, so that a weekly job finds the
// settings it left, and so that a name nobody uses any more leaves nothing in Redis for long.
// A bucket that would take longer than that to fill up again (a tiny or zero limit) expires
// then too, and starts full.
const SettingsRetention = 7 * 24 * time.Hour

// The errors of a Limiter, wrapped with its name.
var (
	// ErrExceedsBurst: WaitN asked for more tokens than the burst, which it could never get.
	ErrExceedsBurst = errors.New("n exceeds the burst")
	// ErrWouldExceedDeadline: WaitN's tokens would come after its ctx's deadline, so it took
	// none. The error also matches [distsync.ErrNotAcquired] and context.DeadlineExceeded.
	ErrWouldExceedDeadline = errors.New("wait would exceed the context's deadline")
)

// Limiter controls how frequently events may happen across every process that uses the same
// name on the same Redis. Make it with [NewLimiter]; it is safe for concurrent use.
type Limiter struct {
	p              core.Prim
	c              *core.Handle // p.H
	key            string
	limit0, burst0 string // the constructor's, sent with every call

	mu    sync.Mutex
	limit Limit // in force, as the last reply said
	burst int
}

// NewLimiter returns the Limiter called name, allowing events up to limit per second with
// bursts of at most burst, unless [Limiter.SetLimit] or [Limiter.SetBurst] stored other
// values for name (see the package doc). It sends nothing to Redis. It returns an error
// matching [distsync.ErrInvalid] for an empty name, a negative or NaN limit, a negative burst,
// or an option that does not apply (a Limiter has no options of its own yet; those that apply
// to every primitive have no effect on it).
func NewLimiter(h *distsync.Handle, name string, limit Limit, burst int, opts ...distsync.Option) (*Limiter, error) {
	p, _, ks, err := api.Setup(h, kind.Rate, name, opts, nil)
	if err != nil {
		return nil, err
	}
	if err := checkLimit(limit); err != nil {
		return nil, p.Wrap(err)
	}
	if err := checkBurst(burst); err != nil {
		return nil, p.Wrap(err)
	}
	return &Limiter{p: p, c: p.H, key: ks.Key(), limit0: formatLimit(limit), burst0: strconv.Itoa(burst),
		limit: limit, burst: burst}, nil
}

func checkLimit(limit Limit) error {
	if math.IsNaN(float64(limit)) || limit < 0 {
		return fmt.Errorf("%w: limit must be at least 0, got %v", distsync.ErrInvalid, float64(limit))
	}
	return nil
}

func checkBurst(burst int) error {
	if burst < 0 || int64(burst) > 1<<53 {
		return fmt.Errorf("%w: burst must be from 0 to 2^53, got %d", distsync.ErrInvalid, burst)
	}
	return nil
}

func checkN(n int) error {
	if n < 0 {
		return fmt.Errorf("%w: n must be at least 0, got %d", distsync.ErrInvalid, n)
	}
	return nil
}

// Name returns the name the Limiter was made with.
func (l *Limiter) Name() string { return l.p.Name }

// Limit returns the limit in force as this process last learned it: from the reply of its
// last call to Redis (every method that takes a ctx), or the constructor's before any. Another
// process's SetLimit is seen here after this process's next call.
func (l *Limiter) Limit() Limit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// Burst returns the burst in force as this process last learned it, as [Limiter.Limit] does.
// The burst is the most tokens one call can take, unless the limit is Inf.
func (l *Limiter) Burst() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.burst
}

// Allow is AllowN(ctx, 1).
func (l *Limiter) Allow(ctx context.Context) (bool, error) { return l.AllowN(ctx, 1) }

// AllowN reports whether n events may happen now, taking their tokens if so: use it to drop
// or skip events over the rate. It returns false, taking nothing, if the tokens are not there
// now (as Redis's clock has it). It returns an error matching [distsync.ErrInvalid], sending
// nothing, if n < 0, and Redis's error if the call fails (then the tokens may have been taken:
// the limiter errs towards fewer events).
func (l *Limiter) AllowN(ctx context.Context, n int) (bool, error) {
	if err := checkN(n); err != nil {
		return false, l.p.Wrap(err)
	}
	r, code, err := l.call(ctx, n, "0")
	if err != nil {
		l.report(ctx, core.EventRefused, n, 0, err)
		return false, err
	}
	allowed := code == ok && r.ok
	if allowed {
		l.report(ctx, core.EventAllowed, n, 0, nil)
	} else {
		l.report(ctx, core.EventRefused, n, 0, nil)
	}
	return allowed, nil
}

// Reserve is ReserveN(ctx, 1).
func (l *Limiter) Reserve(ctx context.Context) (*Reservation, error) { return l.ReserveN(ctx, 1) }

// ReserveN takes n tokens now and returns a Reservation that says how long the caller must
// wait before the n events may happen ([Reservation.Delay]); the limiter counts them from
// then on, whether or not the caller acts, unless it calls [Reservation.Cancel]. The
// Reservation is not OK (and took nothing) if n exceeds the burst, or if the limit is zero and
// the bucket lacks the tokens (they would never come). It returns an error matching
// [distsync.ErrInvalid], sending nothing, if n < 0, and Redis's error if the call fails.
func (l *Limiter) ReserveN(ctx context.Context, n int) (*Reservation, error) {
	if err := checkN(n); err != nil {
		return nil, l.p.Wrap(err)
	}
	r, _, err := l.call(ctx, n, "inf")
	switch {
	case err != nil:
		l.report(ctx, core.EventRefused, n, 0, err)
	case !r.ok:
		l.report(ctx, core.EventRefused, n, 0, nil)
	default:
		r.decided(ctx)
	}
	return r, err
}

// Wait is WaitN(ctx, 1).
func (l *Limiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// WaitN blocks until the limiter permits n events, or ctx is done. It reserves the tokens in
// Redis (one script call) and sleeps until their time to act. On success it returns nil.
//
// It fails at once, taking nothing: with an error matching [ErrExceedsBurst] if n exceeds
// the burst (unless the limit is Inf); with one matching [ErrWouldExceedDeadline] (and
// [distsync.ErrNotAcquired] and context.DeadlineExceeded) if the tokens would come after
// ctx's deadline; with one matching [distsync.ErrInvalid], sending nothing, if n < 0. If ctx
// ends while it sleeps, or while its reservation is on its way (WaitN reads the reply first),
// it gives the reservation back ([Reservation.Cancel]) and then returns
// an error matching both [distsync.ErrNotAcquired] and ctx.Err(); if the Handle closes, the
// same with [distsync.ErrClosed]. If the limit is zero and the tokens are not there, it waits
// for ctx, as x/time/rate's does. Connection errors are retried (a lost reply may have taken
// tokens that nobody uses); other Redis errors are returned.
func (l *Limiter) WaitN(ctx context.Context, n int) (err error) {
	if err := checkN(n); err != nil {
		return l.p.Wrap(err)
	}
	var r *Reservation
	if l.c.Observed() {
		// Every return but a granted one is a refusal (the grant reported itself, and a
		// reservation given back reports that).
		defer func() {
			if r == nil || !r.ok {
				l.report(ctx, core.EventRefused, n, 0, err)
			}
		}()
	}
	if err := ctx.Err(); err != nil {
		return l.p.NotAcquired(err)
	}
	if err := l.c.Enter(); err != nil {
		return l.p.Wrap(err)
	}
	defer l.c.Exit()
	var code byte
	for backoff := 10 * time.Millisecond; ; {
		maxWait := "inf"
		if dl, ok := ctx.Deadline(); ok {
			maxWait = strconv.FormatInt(max(0, time.Until(dl).Microseconds()), 10)
		}
		var err error
		if r, code, err = l.reserveFor(ctx, n, maxWait); err == nil {
			break
		}
		if ctx.Err() != nil || !core.RetryAfter(ctx, &backoff, err) {
			return l.p.Fail(ctx, "wait", err)
		}
	}
	if err := ctx.Err(); err != nil && code == ok {
		// Cancelled while the reservation was on its way: reported as made, then given back.
		r.decided(ctx)
		l.giveBack(ctx, r, err)
		return l.p.NotAcquired(err)
	}
	switch code {
	case ok:
		r.decided(ctx)
	case exceedsBurst:
		return l.p.Errorf("%w: WaitN(%d) with a burst of %d", ErrExceedsBurst, n, l.Burst())
	case tooLate:
		return l.p.Errorf("%w: WaitN(%d): %w: %w", distsync.ErrNotAcquired, n, ErrWouldExceedDeadline, context.DeadlineExceeded)
	case never: // a zero limit: x/time/rate's Wait sleeps until ctx ends, and so does this one
		select {
		case <-ctx.Done():
			return l.p.NotAcquired(ctx.Err())
		case <-l.c.Done():
			return l.p.Wrap(distsync.ErrClosed)
		}
	}
	d := r.Delay()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		l.giveBack(ctx, r, ctx.Err())
		return l.p.NotAcquired(ctx.Err())
	case <-l.c.Done():
		l.giveBack(ctx, r, distsync.ErrClosed)
		return l.p.Wrap(distsync.ErrClosed)
	}
}

// reserveFor is reserve for WaitN: under a context that ctx's deadline ends, and its
// cancellation only a second later (or the Handle's closing), so that a Wait cancelled while
// its script is in flight reads the reply, and gives back what it took, before it returns.
func (l *Limiter) reserveFor(ctx context.Context, n int, maxWait string) (*Reservation, byte, error) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx)) // ctx's values, not its end
	defer cancel()
	defer context.AfterFunc(l.c.Context(), cancel)() // and ends when the Handle closes
	if dl, ok := ctx.Deadline(); ok {
		var dcancel context.CancelFunc
		rctx, dcancel = context.WithDeadline(rctx, dl)
		defer dcancel()
	}
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-rctx.Done():
		}
	})
	defer stop()
	return l.reserve(rctx, n, maxWait)
}

// giveBack cancels r for a Wait that ends before its time to act, whatever its ctx (wctx,
// the Wait's, which the observer is given with why, the reason it ended) says.
func (l *Limiter) giveBack(wctx context.Context, r *Reservation, why error) {
	ctx, cancel := l.c.Detached(5 * time.Second)
	defer cancel()
	if err := r.cancel(ctx, wctx, why); err != nil {
		if lg := l.c.Log(); lg != nil {
			lg.Warn("distsync: rate: giving back a cancelled Wait's tokens failed", "name", l.p.Name, "err", err)
		}
	}
}

// SetLimit sets the limit of every process using the limiter's name, from the next decision
// of each, after bringing the tokens up to now under the old limit (x/time/rate's SetLimit).
// Reservations already made keep their time to act. The limit is stored in Redis for
// [SettingsRetention] after the limiter's last use. It returns an error matching
// [distsync.ErrInvalid], sending nothing, for a negative or NaN limit, and Redis's error if
// the call fails.
func (l *Limiter) SetLimit(ctx context.Context, limit Limit) error {
	if err := checkLimit(limit); err != nil {
		return l.p.Wrap(err)
	}
	_, err := l.set(ctx, scripts.RateArgs{NewLimit: formatLimit(limit)})
	return err
}

// SetBurst sets the burst of every process using the limiter's name, as [Limiter.SetLimit]
// sets the limit. It returns an error matching [distsync.ErrInvalid], sending nothing, for a
// negative burst.
func (l *Limiter) SetBurst(ctx context.Context, burst int) error {
	if err := checkBurst(burst); err != nil {
		return l.p.Wrap(err)
	}
	_, err := l.set(ctx, scripts.RateArgs{NewBurst: strconv.Itoa(burst)})
	return err
}

// Tokens returns the tokens the limiter has now, by Redis's clock: below zero while
// reservations wait for theirs. It changes nothing.
func (l *Limiter) Tokens(ctx context.Context) (float64, error) {
	return l.set(ctx, scripts.RateArgs{}) // rate_tokens.lua, when nothing is to be set
}

// set runs rate_set.lua with a, or rate_tokens.lua if a sets nothing, and returns the tokens.
func (l *Limiter) set(ctx context.Context, a scripts.RateArgs) (float64, error) {
	if err := l.c.Enter(); err != nil {
		return 0, l.p.Wrap(err)
	}
	defer l.c.Exit()
	s := scripts.RateSet
	if a.NewLimit == "" && a.NewBurst == "" {
		s = scripts.RateTokens
	}
	v, err := l.run(ctx, s, a)
	if err == nil && len(v) != 3 {
		err = core.Unexpected(s, v)
	}
	if err != nil {
		return 0, l.p.Wrap(err)
	}
	l.learn(v[1], v[2])
	return strconv.ParseFloat(v[0], 64)
}

// The codes of rate_reserve.lua's reply.
const (
	ok           = '1'
	exceedsBurst = '0'
	tooLate      = '2'
	never        = '3'
)

// call is reserve for a method that does not wait: it enters the Handle and wraps errors.
func (l *Limiter) call(ctx context.Context, n int, maxWait string) (*Reservation, byte, error) {
	if err := l.c.Enter(); err != nil {
		return nil, 0, l.p.Wrap(err)
	}
	defer l.c.Exit()
	r, code, err := l.reserve(ctx, n, maxWait)
	if err != nil {
		return nil, 0, l.p.Wrap(err)
	}
	return r, code, nil
}

// reserve runs rate_reserve.lua: n tokens, if their time to act is at most maxWait µs away
// ("inf": no bound).
func (l *Limiter) reserve(ctx context.Context, n int, maxWait string) (*Reservation, byte, error) {
	s := scripts.RateReserve
	v, err := l.run(ctx, s, scripts.RateArgs{N: strconv.Itoa(n), MaxWait: maxWait})
	got := time.Now()
	if err != nil {
		return nil, 0, err
	}
	if len(v) != 6 || len(v[0]) != 1 {
		return nil, 0, core.Unexpected(s, v)
	}
	wait, err1 := strconv.ParseInt(v[1], 10, 64)
	at, err2 := strconv.ParseInt(v[2], 10, 64)
	if err1 != nil || err2 != nil {
		return nil, 0, core.Unexpected(s, v)
	}
	l.learn(v[4], v[5])
	r := &Reservation{lim: l}
	if v[0][0] == ok {
		// The time to act as a local time: from the reply's arrival, so never early.
		r.wait = time.Duration(wait) * time.Microsecond
		r.ok, r.n, r.act, r.at, r.limit = true, n, got.Add(r.wait), at, v[4]
	}
	return r, v[0][0], nil
}

// run runs s once with a, the limiter's own fields filled in.
func (l *Limiter) run(ctx context.Context, s *scripts.Script, a scripts.RateArgs) ([]string, error) {
	a.Bucket, a.Limit, a.Burst, a.Retention = l.key, l.limit0, l.burst0, core.Ms(SettingsRetention)
	return a.Exec(ctx, l.c.Client, s).AsStrSlice()
}

// learn records the limit and burst in force, as a reply gives them.
func (l *Limiter) learn(limit, burst string) {
	lim, err1 := parseLimit(limit)
	b, err2 := strconv.Atoi(burst)
	if err1 != nil || err2 != nil {
		return
	}
	l.mu.Lock()
	l.limit, l.burst = lim, b
	l.mu.Unlock()
}

// formatLimit writes a limit for the scripts, in a form both Redis's Lua and the embedded
// miniredis's read back exactly: a plain decimal while it is short, else an exponent after a
// mantissa with a point. miniredis's Lua reads neither an integer beyond int64 without a
// point ("10000000000000000000"), nor an exponent after a mantissa without one ("1e+19"),
// nor a decimal of hundreds of digits.
func formatLimit(limit Limit) string {
	f := float64(limit)
	if limit >= Inf || math.IsInf(f, 1) {
		return "inf"
	}
	if s := strconv.FormatFloat(f, 'f', -1, 64); f < 1e15 && len(s) <= 24 {
		return s
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // "1e+19", "1.5e-30"
	if mant, exp, ok := strings.Cut(s, "e"); ok && !strings.Contains(mant, ".") {
		s = mant + ".0e" + exp
	}
	return s
}

func parseLimit(s string) (Limit, error) {
	if s == "inf" {
		return Inf, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	return Limit(f), err
}

// A Reservation is n tokens a Limiter set aside for events that may happen after a delay.
// It may be cancelled, which gives back what it can. Its methods are safe for concurrent use.
type Reservation struct {
	lim   *Limiter
	ok    bool
	n     int
	act   time.Time     // its time to act, local clock
	at    int64         // the same, Redis's clock, µs
	limit string        // the limit in force when it was made
	wait  time.Duration // the delay the reply set
	call  uint64        // the decision's Event.Call, 0 if unobserved

	cancelled atomic.Bool
}

// OK reports whether the limiter set the tokens aside. If not, Delay returns [InfDuration]
// and Cancel does nothing.
func (r *Reservation) OK() bool { return r.ok }

// Delay is DelayFrom(time.Now()).
func (r *Reservation) Delay() time.Duration { return r.DelayFrom(time.Now()) }

// DelayFrom returns how long after t the holder must wait before acting: zero means act now,
// [InfDuration] that the reservation is not OK. The time to act is Redis's, turned into a
// local time when the reply arrived (so late by up to its one-way latency, never early).
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	if !r.ok {
		return InfDuration
	}
	return max(0, r.act.Sub(t))
}

// Cancel says the holder will not act, and gives back as many of the reservation's tokens as
// the reservations made after it did not count on (x/time/rate's Cancel): none once its time
// to act has passed. It sends one script, at most once per Reservation: a later Cancel, or
// one on a Reservation that is not OK, does nothing and returns nil. If it fails (Redis's
// error, or ctx's), the tokens stay taken: the limiter then errs towards fewer events.
func (r *Reservation) Cancel(ctx context.Context) error {
	if !r.ok {
		return nil
	}
	if err := r.lim.c.Enter(); err != nil {
		return r.lim.p.Wrap(err)
	}
	defer r.lim.c.Exit()
	return r.cancel(ctx, ctx, nil)
}

// cancel gives r back on ctx; the observer is told with octx and why.
func (r *Reservation) cancel(ctx, octx context.Context, why error) error {
	if r.limit == "inf" || r.n == 0 || !time.Now().Before(r.act) || r.cancelled.Swap(true) {
		return nil // nothing to give back; or given back already
	}
	l := r.lim
	v, err := l.run(ctx, scripts.RateCancel, scripts.RateArgs{N: strconv.Itoa(r.n),
		At: strconv.FormatInt(r.at, 10), RLimit: r.limit})
	if err == nil && len(v) != 4 {
		err = core.Unexpected(scripts.RateCancel, v)
	}
	if err != nil {
		return l.p.Wrap(fmt.Errorf("cancel: %w", err))
	}
	l.learn(v[2], v[3])
	if l.c.Observed() {
		l.c.Decision(core.Event{Kind: core.EventCanceled, Primitive: kind.Rate, Name: l.p.Name, ID: r.call,
			Context: octx, Weight: int64(r.n), Err: why})
	}
	return nil
}

// report tells the observer, if the Handle has one, of a decision on n tokens that set no
// reservation (what, e.g. core.EventRefused, with err) or one with delay wait, and returns
// its call number (0 without an observer).
func (l *Limiter) report(ctx context.Context, what uint8, n int, wait time.Duration, err error) uint64 {
	if !l.c.Observed() {
		return 0
	}
	return l.c.Decision(core.Event{Kind: what, Primitive: kind.Rate, Name: l.p.Name, Context: ctx,
		Weight: int64(n), Wait: wait, Err: err})
}

// decided reports r, an OK reservation just made, to the observer: allowed if its time to act
// was now, delayed otherwise, with the delay the reply set.
func (r *Reservation) decided(ctx context.Context) {
	what := uint8(core.EventAllowed)
	if r.wait > 0 {
		what = core.EventDelayed
	}
	r.call = r.lim.report(ctx, what, r.n, r.wait, nil)
}

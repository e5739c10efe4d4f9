//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/rate"
)

// distsync rate NAME --limit R [--burst N] [--tokens N] [--] CMD: wait for CMD's turn under
// the rate limiter NAME (package rate: a token bucket in Redis, on Redis's clock), then run
// CMD and exit with its status. A rate limit admits a start: nothing is held while CMD runs,
// so there is no lease, no renewal, no loss and no fencing token.

// rateUnits are the units a rate may be given per, besides a Go duration ("3/500ms").
var rateUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
	"ms": time.Millisecond,
}

// errNotARate is the error of a --limit that does not read as a rate.
var errNotARate = errors.New("not a rate (10/s, 100/m, 5/h, 3/500ms, a number per second, or inf)")

// parseRateLimit reads --limit: R/UNIT (10/s, 100/m, 5/h, 20/ms), R/D with a Go duration
// (3/500ms, 1/10s), a plain number of events per second (2.5), or inf (no limit). The rate
// must be above 0: a zero rate would run nothing but the burst, ever.
func parseRateLimit(v string) (rate.Limit, error) {
	if strings.EqualFold(v, "inf") {
		return rate.Inf, nil
	}
	num, per, hasPer := strings.Cut(v, "/")
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || strings.TrimSpace(num) != num {
		return 0, errNotARate
	}
	interval := time.Second
	if hasPer {
		if d, ok := rateUnits[per]; ok {
			interval = d
		} else if d, err := time.ParseDuration(per); err == nil && d > 0 {
			interval = d
		} else {
			return 0, errNotARate
		}
	}
	switch l := n / interval.Seconds(); {
	case n < 0:
		return 0, errors.New("negative rate")
	case l == 0:
		return 0, errors.New("must be above 0 (a zero rate never runs CMD but the burst's)")
	case math.IsInf(l, 0):
		return 0, errors.New("beyond a finite rate: give inf for no limit")
	default:
		return rate.Limit(l), nil
	}
}

// rateFlags adds rate's own flags to fs.
func rateFlags(fs *flagSet, cfg *config) {
	gave := func(flag string) {
		if cfg.limitFlag != "" && cfg.limitFlag != flag {
			cfg.limitTwice = true
		}
		cfg.limitFlag = flag
	}
	fs.add("limit", 0, "R", "the rate, required (or --every): 10/s, 100/m, 5/h, 3/500ms, a\n"+
		"plain number per second, or inf (no limit). Every user of NAME\n"+
		"should give the same; a limit stored for NAME by a program\n"+
		"(rate.Limiter.SetLimit) overrides it",
		func(v string) error {
			l, err := parseRateLimit(v)
			if err != nil {
				return err
			}
			cfg.limit = l
			gave("limit")
			return nil
		})
	fs.add("every", 0, "D", "the rate as one start every D (rate.Every), instead of --limit:\n"+
		"--every 200ms is --limit 5/s", func(v string) error {
		d, err := parseDuration(v)
		switch {
		case err != nil:
			return err
		case d <= 0:
			return errors.New("must be above 0")
		}
		cfg.limit = rate.Every(d)
		gave("every")
		return nil
	})
	maxBurst := int64(min(1<<53, math.MaxInt))
	fs.integer(&cfg.burst, "burst", 0, "N", "how many may start at once after a quiet time (default 1: starts\n"+
		"are spaced evenly, one every 1/R)", 1, maxBurst)
	fs.integer(&cfg.tokens, "tokens", 0, "N", "tokens CMD takes, 1 to --burst (default 1): a CMD that makes 5\n"+
		"calls to a rate-limited API takes 5", 1, maxBurst)
}

// runRate waits for CMD's turn under the rate limiter NAME (--timeout 0: takes it only if
// it is now), then runs CMD and returns its status.
func (r *runner) runRate(h *distsync.Handle) int {
	lim, err := rate.NewLimiter(h, r.cfg.name, r.cfg.limit, int(r.cfg.burst))
	if err != nil {
		r.errorf("%v", err)
		return exitUsage
	}
	what := fmt.Sprintf("rate limiter %q", r.cfg.name)
	n := int(r.cfg.tokens)
	if r.cfg.timeout == 0 {
		ok, err := lim.AllowN(r.sigs.waitCtx, n)
		if err != nil {
			return r.notAcquired(what, err)
		}
		if !ok {
			r.notef("%s: no token now (--timeout 0)", what)
			return int(r.cfg.conflictExit)
		}
	} else {
		ctx := r.sigs.waitCtx
		if r.cfg.timeout > 0 {
			// A deadline, not only the timer that ends waitCtx: WaitN sees it and refuses at
			// once, taking nothing, a turn that would come after it.
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, r.deadline)
			defer cancel()
		}
		if err := lim.WaitN(ctx, n); err != nil {
			return r.rateNotAdmitted(what, ctx, err)
		}
	}
	ch, err := r.sigs.begin(func() (*child, error) { return startChild(r.spec(nil, r.stdout)) }, false)
	if err != nil {
		var aborted abortError
		if errors.As(err, &aborted) {
			return aborted.status()
		}
		r.errorf("%s: %v", r.cfg.argv[0], err)
		return startStatus(err)
	}
	<-ch.exited
	r.sigs.childGone()
	status, _ := ch.reap()
	return status
}

// rateNotAdmitted returns the exit status for a WaitN that failed with err under ctx.
func (r *runner) rateNotAdmitted(what string, ctx context.Context, err error) int {
	var sig signalError
	switch {
	case errors.As(context.Cause(r.sigs.waitCtx), &sig):
		return bySignal(sig.sig)
	case errors.Is(err, rate.ErrWouldExceedDeadline), errors.Is(ctx.Err(), context.DeadlineExceeded),
		errors.Is(context.Cause(r.sigs.waitCtx), errTimedOut):
		r.notef("%s: CMD's turn would come after --timeout %v", what, r.cfg.timeout)
		return int(r.cfg.conflictExit)
	case errors.Is(err, rate.ErrExceedsBurst):
		// The burst stored for NAME (rate.Limiter.SetBurst) is below --tokens.
		r.errorf("%v: --tokens %d is more than the burst in force for NAME", err, r.cfg.tokens)
		return exitUsage
	}
	return r.notAcquired(what, err)
}

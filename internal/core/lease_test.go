package core

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A lease's Err, Done and Context read its local deadline when they are called: a holder whose
// process was frozen past the deadline (SIGSTOP, a long pause) learns of the loss from its
// first look after it resumes, even if the renewal loop has not run since. Here the loop is
// not running at all.
func TestLeaseReadsItsDeadlineWhenAsked(t *testing.T) {
	t.Parallel()
	for _, look := range []struct {
		name string
		lost func(l *Lease) bool
	}{
		{"Err", func(l *Lease) bool { return errors.Is(l.Err(), ErrLost) }},
		{"Done", func(l *Lease) bool {
			select {
			case <-l.Done():
				return true
			default:
				return false
			}
		}},
		{"Context", func(l *Lease) bool { return l.Context().Err() != nil }},
		{"Bind", func(l *Lease) bool {
			ctx, cancel := l.Bind(context.Background())
			defer cancel()
			return ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrLost)
		}},
		{"Stop", func(l *Lease) bool { return errors.Is(l.Stop(), ErrLost) }},
	} {
		t.Run(look.name, func(t *testing.T) {
			h := &Handle{}
			h.ren = newRenewer(h) // its loop never runs
			const ttl = 100 * time.Millisecond
			l, err := h.Hold(LeaseSpec{Key: "k", Owner: "o", Kind: "s", TTL: ttl, Renew: true, Sent: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if l.Err() != nil {
				t.Fatal("a fresh lease reads as lost")
			}
			time.Sleep(ttl) // past the deadline (ttl less drift after the send)
			if !look.lost(l) {
				t.Fatalf("%s does not report a lease whose deadline passed %v ago", look.name, time.Since(l.deadline))
			}
			if !errors.Is(l.Err(), ErrLost) {
				t.Fatalf("Err = %v, want ErrLost", l.Err())
			}
		})
	}
}

// An acquisition whose reply came after its lease's local deadline is refused, ended, and
// given back at once; a waiter's place (Place) is not refused for that.
func TestHoldRefusesALateClaim(t *testing.T) {
	t.Parallel()
	h := &Handle{}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	defer h.cancel()
	h.ren = newRenewer(h)
	given := make(chan struct{}, 1)
	const ttl = 50 * time.Millisecond
	l, err := h.Hold(LeaseSpec{Key: "k", Owner: "o", Kind: "s", TTL: ttl, Renew: true, Sent: time.Now().Add(-ttl),
		Release: func(context.Context, *Lease) error { given <- struct{}{}; return nil }})
	if !errors.Is(err, ErrLate) || !errors.Is(l.Err(), ErrLate) {
		t.Fatalf("Hold of a late claim = %v (lease: %v), want ErrLate", err, l.Err())
	}
	select {
	case <-given:
	default:
		t.Fatal("the late claim was not given back before Hold returned")
	}
	if _, err := h.Hold(LeaseSpec{Key: "k", Owner: "w", Kind: "z", TTL: ttl, Renew: true, Sent: time.Now().Add(-ttl), Place: true}); err != nil {
		t.Fatalf("Hold of a lapsed place = %v, want it taken (its waiter re-checks)", err)
	}
}

// A release retried after a connection error takes the retry's answer: a claim it finds gone
// is reported lost, whatever the first attempt's error, since a lost reply and a lost claim
// (Redis restarted empty) cannot be told apart, and a loss is never hidden.
func TestGiveBackReportsAGoneClaimAsLost(t *testing.T) {
	t.Parallel()
	h := &Handle{}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	defer h.cancel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, first := range []error{refused, io.EOF} {
		calls := 0
		held, err := h.GiveBack(context.Background(), "test", time.Second, nil, func(context.Context) (bool, error) {
			calls++
			if calls == 1 {
				return false, first
			}
			return false, nil // the claim is not there
		})
		if err != nil || held {
			t.Errorf("first attempt %v, then the claim gone: GiveBack = %v, %v; want not held", first, held, err)
		}
	}
}

// A release Redis refuses (an ACL without a command the script calls, a script's error) is
// returned as it is and not tried again in the background, where each try would be refused
// alike until the lease ran out.
func TestGiveBackDoesNotRetryARefusal(t *testing.T) {
	t.Parallel()
	h := &Handle{Config: Config{Logger: slog.New(slog.DiscardHandler)}}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	defer h.cancel()
	refusal := Permanent(errors.New("refused"))
	var calls atomic.Int32
	finished := make(chan struct{})
	_, err := h.GiveBack(context.Background(), "test", time.Second, func() { close(finished) }, func(context.Context) (bool, error) {
		calls.Add(1)
		return false, refusal
	})
	if !errors.Is(err, refusal) {
		t.Fatalf("GiveBack = %v, want the refusal", err)
	}
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("finally did not run")
	}
	h.bg.Wait()
	if n := calls.Load(); n != 1 {
		t.Errorf("the release was sent %d times, want once", n)
	}
}

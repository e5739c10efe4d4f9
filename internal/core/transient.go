package core

import (
	"context"
	"errors"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/rediserr"
)

// Transient reports whether err may go away by itself, so that a blocking call should retry
// rather than give up: a connection error (rueidis reconnects), or a Redis error that a
// failover, a restart or a cluster resharding produces. A closing client, other Redis errors
// and Permanent errors are not transient.
//
// Context errors are transient: a caller checks its own context before it retries, so a
// context error it sees with its context still live is not its own. rueidis hands one out
// when another command on the same connection ran into that command's own deadline (it
// closes the connection with the error, and every command queued on it gets it): a Lock
// whose context has minutes left must not end with "context deadline exceeded".
func Transient(err error) bool {
	if err == nil || errors.Is(err, rueidis.ErrClosing) || errors.Is(err, ErrClosed) {
		return false
	}
	var p permanent
	if errors.As(err, &p) {
		return false
	}
	if re, ok := rediserr.As(err); ok {
		return rediserr.Transient(re)
	}
	return true // a transport error: EOF, reset, refused, closed connection, timeout
}

type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// Permanent marks err as not Transient (an unexpected reply, say).
func Permanent(err error) error { return permanent{err} }

// RetryNow runs f, then again while it fails with a transient error, up to three more times
// after 10, 20 and 40 ms, unless ctx ends first: for a command a caller waits for, which is
// safe to send again (Redis applies its request id once, or it is idempotent). It returns f's
// last error.
func RetryNow(ctx context.Context, f func() error) error {
	return retryFrom(ctx, f(), f)
}

// retryFrom is RetryNow after a first call of f that returned err.
func retryFrom(ctx context.Context, err error, f func() error) error {
	for i, backoff := 0, 10*time.Millisecond; err != nil && Transient(err) && i < 3; i, backoff = i+1, 2*backoff {
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		err = f()
	}
	return err
}

// RetryAfter reports whether a wait that failed with err should try again: it does if err is
// transient and ctx is alive, after sleeping *backoff, which it then doubles up to a second.
// It returns false at once for any other error, or when ctx ends during the sleep.
func RetryAfter(ctx context.Context, backoff *time.Duration, err error) bool {
	if ctx.Err() != nil || !Transient(err) || !Sleep(ctx, *backoff) {
		return false
	}
	*backoff = min(2**backoff, time.Second)
	return true
}

// Sleep waits for d or ctx, and reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

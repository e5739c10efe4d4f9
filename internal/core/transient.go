package core

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/rueidis"
)

// Transient reports whether err may go away by itself, so that a blocking call should retry
// rather than give up: a connection error (rueidis reconnects), or a Redis error that a
// failover, a restart or a cluster resharding produces. Context errors, a closing client,
// other Redis errors and Permanent errors are not transient.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, rueidis.ErrClosing) || errors.Is(err, ErrClosed) {
		return false
	}
	var p permanent
	if errors.As(err, &p) {
		return false
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg := re.Error()
		for _, prefix := range []string{"READONLY", "LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY"} {
			if strings.HasPrefix(msg, prefix) {
				return true
			}
		}
		return false
	}
	return true // a transport error: EOF, reset, refused, closed connection, timeout
}

type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// Permanent marks err as not Transient (an unexpected reply, say).
func Permanent(err error) error { return permanent{err} }

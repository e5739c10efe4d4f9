package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/redis/rueidis"
)

func TestTransient(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{io.EOF, true},
		// Not the caller's: rueidis fails every command queued on a connection that another
		// command's deadline closed with that command's error. The caller checks its own
		// context before it retries.
		{context.DeadlineExceeded, true},
		{fmt.Errorf("wrapped: %w", context.Canceled), true},
		{ErrLate, true},
		{rueidis.ErrClosing, false},
		{ErrClosed, false},
		{Permanent(errors.New("unexpected reply")), false},
		{nil, false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
)

// A demo ended by a signal whose keys could not be deleted says so beside the signal: the
// clean-up's error is found in the demo's joined error, without the cancellation.
func TestLeftKeysIsSaidAfterASignal(t *testing.T) {
	t.Parallel()
	cleanup := fmt.Errorf("%w (distsync-demo:x:*): %w", errKeysLeft, io.ErrUnexpectedEOF)
	err := errors.Join(fmt.Errorf("lock: %w", context.Canceled), cleanup)
	if got := leftKeys(err); got != cleanup {
		t.Fatalf("leftKeys(%q) = %q, want %q", err, got, cleanup)
	}
	if !errors.Is(err, errKeysLeft) {
		t.Fatal("the joined error does not match errKeysLeft")
	}
}

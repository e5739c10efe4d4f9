package rediserr_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/internal/rediserr"
)

// As finds Redis's error reply through distsync's wrapping, and Transient tells a failover's
// replies from the rest.
func TestAsAndTransient(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reply := func(msg string) error {
		return c.Do(context.Background(), c.B().Eval().Script("return redis.error_reply(ARGV[1])").Numkeys(0).Arg(msg).Build()).Error()
	}
	for _, tc := range []struct {
		msg       string
		transient bool
	}{
		{"LOADING Redis is loading the dataset in memory", true},
		{"CLUSTERDOWN The cluster is down", true},
		{"NOPERM this user has no permissions to run the 'evalsha' command", false},
		{"ERR unknown command", false},
	} {
		err := fmt.Errorf("mutex %q: lock: %w", "m", reply(tc.msg))
		re, ok := rediserr.As(err)
		if !ok {
			t.Fatalf("As(%v) found no Redis error", err)
		}
		if got := rediserr.Transient(re); got != tc.transient {
			t.Errorf("Transient(%q) = %v, want %v", tc.msg, got, tc.transient)
		}
	}
	for _, err := range []error{nil, io.EOF, fmt.Errorf("wrapped: %w", io.EOF)} {
		if _, ok := rediserr.As(err); ok {
			t.Errorf("As(%v) found a Redis error", err)
		}
	}
}

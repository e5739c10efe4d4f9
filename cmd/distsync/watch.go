//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/inspect"
)

// watchCacheTTL is how long the client keeps the replies through which it tracks the keys
// (rueidis caps it at the key's own TTL). Redis goes on tracking a key after the client
// dropped its reply, until it has sent the invalidation, so this only bounds the cache's
// size; it is not a polling interval.
const watchCacheTTL = time.Hour

// watchSettle is how long the watcher lets the invalidations of one change arrive before it
// reads the view again: one script's writes to several keys are one change.
const watchSettle = 5 * time.Millisecond

// watcher runs "inspect --watch": it reads the names' keys with client-side caching, so
// that Redis tracks them (CLIENT TRACKING) and tells the client when any of them is written
// or expires, and prints the view again each time. Nothing polls: between two changes
// distsync sends no command (rueidis's own idle PING aside).
type watcher struct {
	changed chan struct{} // a token when something the client tracked changed
}

func newWatcher() *watcher { return &watcher{changed: make(chan struct{}, 1)} }

// tune makes the client report its invalidations to w. A nil list is rueidis's report that
// the connection was made again and every tracked key may have changed.
func (w *watcher) tune(o *rueidis.ClientOption) {
	o.OnInvalidations = func([]rueidis.RedisMessage) {
		select {
		case w.changed <- struct{}{}:
		default: // one re-read is pending already
		}
	}
}

// run prints the view (show) at start and after every change, until ctx ends. It returns
// the exit status.
func (w *watcher) run(ctx context.Context, h *distsync.Handle, c rueidis.Client, names []string, f inspectFlags,
	stdout, stderr io.Writer, show func(w io.Writer) int) int {
	var last []byte
	var keys []string
	for _, name := range names {
		ks, err := inspect.Keys(h, f.kind, name)
		if err != nil {
			return badUsage(stderr, "inspect", err)
		}
		keys = append(keys, ks...)
	}
	if err := trackingOn(ctx, c); err != nil {
		fmt.Fprintf(stderr, "distsync inspect: --watch: %v\n", err)
		return exitUnavailable
	}
	for {
		// Track first, then read: a change between the two makes one more read, none is
		// missed. A key whose reply is still cached is still tracked.
		track := make([]rueidis.CacheableTTL, len(keys)) // rueidis recycles a command once sent
		for i, k := range keys {
			track[i] = rueidis.CT(c.B().Pttl().Key(k).Cache(), watchCacheTTL)
		}
		for _, r := range c.DoMultiCache(ctx, track...) {
			if err := r.Error(); err != nil {
				if ctx.Err() != nil {
					return exitOK
				}
				if errors.Is(err, rueidis.ErrDoCacheAborted) {
					// rueidis's error, when Redis refused the transaction it wraps each tracked
					// read in, says nothing of the commands; an ACL is the usual cause.
					err = fmt.Errorf("%w (each read is sent as CLIENT CACHING YES, MULTI, PTTL, PTTL, EXEC: the Redis user needs +client|caching +multi +exec, see docs/acl.md)", err)
				}
				fmt.Fprintf(stderr, "distsync inspect: --watch: %v\n", err)
				return exitUnavailable
			}
		}
		var view bytes.Buffer
		if status := show(&view); status != exitOK || ctx.Err() != nil {
			return status
		}
		if !bytes.Equal(view.Bytes(), last) { // a change that left the view as it was is not shown
			if !f.json {
				fmt.Fprintf(stdout, "--- %s\n", time.Now().Format("15:04:05.000"))
			}
			_, _ = stdout.Write(view.Bytes())
			last = view.Bytes()
		}
		select {
		case <-w.changed:
		case <-ctx.Done():
			return exitOK
		}
		// One script writes several keys, whose invalidations come one after the other:
		// read once for them all.
		t := time.NewTimer(watchSettle)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return exitOK
		}
		select {
		case <-w.changed:
		default:
		}
	}
}

// trackingOn returns an error unless the client's connection has client tracking on: a
// server without it (older than Redis 6, or one that speaks only RESP2) would never tell of
// a change.
func trackingOn(ctx context.Context, c rueidis.Client) error {
	info, err := c.Do(ctx, c.B().ClientTrackinginfo().Build()).AsMap()
	if err != nil {
		return fmt.Errorf("needs client tracking (Redis 6 or later): CLIENT TRACKINGINFO: %w", err)
	}
	fm := info["flags"]
	flags, err := fm.AsStrSlice()
	if err != nil {
		return fmt.Errorf("needs client tracking (Redis 6 or later): CLIENT TRACKINGINFO: %w", err)
	}
	for _, fl := range flags {
		if strings.EqualFold(fl, "on") {
			return nil
		}
	}
	return fmt.Errorf("needs client tracking (Redis 6 or later, RESP3): the connection has none (flags %v)", flags)
}

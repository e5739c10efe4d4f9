//go:build unix

package main

import (
	"context"
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
	stdout, stderr io.Writer, show func() int) int {
	var track []rueidis.CacheableTTL
	for _, name := range names {
		ks, err := inspect.Keys(h, f.kind, name)
		if err != nil {
			return badUsage(stderr, "inspect", err)
		}
		for _, k := range ks {
			track = append(track, rueidis.CT(c.B().Pttl().Key(k).Cache(), watchCacheTTL))
		}
	}
	if err := trackingOn(ctx, c); err != nil {
		fmt.Fprintf(stderr, "distsync inspect: --watch: %v\n", err)
		return exitUnavailable
	}
	for {
		// Track first, then read: a change between the two makes one more read, none is
		// missed. A key whose reply is still cached is still tracked.
		for _, r := range c.DoMultiCache(ctx, track...) {
			if err := r.Error(); err != nil {
				if ctx.Err() != nil {
					return exitOK
				}
				fmt.Fprintf(stderr, "distsync inspect: --watch: %v\n", err)
				return exitUnavailable
			}
		}
		if !f.json {
			fmt.Fprintf(stdout, "--- %s\n", time.Now().Format("15:04:05.000"))
		}
		if status := show(); status != exitOK || ctx.Err() != nil {
			return status
		}
		select {
		case <-w.changed:
		case <-ctx.Done():
			return exitOK
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

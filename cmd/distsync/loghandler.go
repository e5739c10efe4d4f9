//go:build unix

package main

// This file: the Handle's log, as distsync prints it.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// logHandler prints those of the Handle's warnings that the command does not report itself,
// as "distsync: ..." lines on stderr: a once result that could not be shared (the waiting
// callers take over when the lead lapses). The others say again what distsync has said in
// its own words (a lost claim, a release that failed, a wait that was given up and whose
// queue entry expires by itself) or are the library's own retries (a subscription made
// again), and are dropped: one event, one message.
type logHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	attrs []slog.Attr
	// verbose (--verbose) prints every record of the Handle's logger, from Debug up; without
	// it, only the warnings of once (shownLogPrefix).
	verbose bool
}

// shownLogPrefix starts the messages of the Handle's logger that logHandler prints.
const shownLogPrefix = "distsync: once: "

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.verbose
}

func (h *logHandler) Handle(_ context.Context, rec slog.Record) error {
	if !h.verbose && !strings.HasPrefix(rec.Message, shownLogPrefix) {
		return nil
	}
	var b strings.Builder
	b.WriteString(rec.Message)
	add := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	rec.Attrs(add)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{w: h.w, mu: h.mu, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...), verbose: h.verbose}
}

func (h *logHandler) WithGroup(string) slog.Handler { return h }

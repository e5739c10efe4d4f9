// Package embedded runs Redis inside the process (miniredis), for examples, demos and quick
// tests that must work on any machine. It is not a production Redis: no persistence, no
// replication, no Cluster, one process.
package embedded

import (
	"context"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
)

// Server is an in-process Redis.
type Server struct {
	mr      *miniredis.Miniredis
	mu      sync.Mutex
	closers []func()
}

// Start starts an in-process Redis on a free loopback port. TTLs follow the real clock, as
// in Redis.
func Start() (*Server, error) {
	mr := miniredis.NewMiniRedis()
	mr.ClockTTL(true)
	if err := mr.Start(); err != nil {
		return nil, err
	}
	return &Server{mr: mr}, nil
}

// Addr returns the server's address.
func (s *Server) Addr() string { return s.mr.Addr() }

// ClientOption returns the rueidis options a client of this server needs: miniredis has no
// client-side caching and no commands on a subscribed RESP3 connection, and it answers CLUSTER
// SLOTS, so rueidis must be told that it is a single node.
func (s *Server) ClientOption() rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress:       []string{s.mr.Addr()},
		DisableCache:      true,
		AlwaysRESP2:       true,
		ForceSingleClient: true,
	}
}

// NewClient returns a new rueidis client of the server. Close it when done.
func (s *Server) NewClient() (rueidis.Client, error) { return rueidis.NewClient(s.ClientOption()) }

// NewHandle returns a distsync Handle on a new client of the server, as one process would
// have; examples make several to play several processes. Close closes it and its client.
func (s *Server) NewHandle(opts ...distsync.Option) (*distsync.Handle, error) {
	c, err := s.NewClient()
	if err != nil {
		return nil, err
	}
	h, err := distsync.New(c, opts...)
	if err != nil {
		c.Close()
		return nil, err
	}
	s.mu.Lock()
	s.closers = append(s.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Close(ctx)
		c.Close()
	})
	s.mu.Unlock()
	return h, nil
}

// Miniredis returns the underlying miniredis, for tests that inspect or manipulate it.
func (s *Server) Miniredis() *miniredis.Miniredis { return s.mr }

// Close closes the Handles made by NewHandle, then stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	closers := s.closers
	s.closers = nil
	s.mu.Unlock()
	for _, c := range closers {
		c()
	}
	s.mr.Close()
}

// Package embedded runs Redis inside the process (miniredis), for examples, demos and quick
// tests that must work on any machine. It is not a production Redis: no persistence, no
// replication, no Cluster, one process.
package embedded

import (
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
)

// Server is an in-process Redis.
type Server struct {
	mr *miniredis.Miniredis
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

// Miniredis returns the underlying miniredis, for tests that inspect or manipulate it.
func (s *Server) Miniredis() *miniredis.Miniredis { return s.mr }

// Close stops the server.
func (s *Server) Close() { s.mr.Close() }

package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/redis/rueidis"
)

// Network is a fault injector for one client's connections: Cut closes every connection the
// client has and refuses new ones until Restore, as a partition between that client and
// Redis would. It works on every backend, Cluster included, because it sits in the client's
// dialer rather than in front of one server.
type Network struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	down  bool
}

// NewNetwork returns a healthy network.
func NewNetwork() *Network { return &Network{conns: make(map[net.Conn]struct{})} }

var errPartitioned = errors.New("redistest: network cut")

func (n *Network) dial(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	n.mu.Lock()
	down := n.down
	n.mu.Unlock()
	if down {
		return nil, errPartitioned
	}
	c, err := d.DialContext(ctx, "tcp", dst)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		_ = c.Close()
		return nil, errPartitioned
	}
	n.conns[c] = struct{}{}
	return c, nil
}

// Cut closes every connection and refuses new ones.
func (n *Network) Cut() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down = true
	for c := range n.conns {
		_ = c.Close()
	}
	n.conns = make(map[net.Conn]struct{})
}

// Restore lets the client connect again.
func (n *Network) Restore() {
	n.mu.Lock()
	n.down = false
	n.mu.Unlock()
}

// ClientVia returns a new client whose connections all go through n.
func (b *Backend) ClientVia(tb testing.TB, n *Network) rueidis.Client {
	tb.Helper()
	opt := b.ClientOption()
	opt.DialCtxFn = n.dial
	c, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatalf("rueidis.NewClient: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

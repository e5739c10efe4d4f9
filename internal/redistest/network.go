package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Network is a fault injector for one client's connections: Cut closes every connection the
// client has and refuses new ones until Restore, as a partition between that client and
// Redis would. It works on every backend, Cluster included, because it sits in the client's
// dialer rather than in front of one server.
//
// A cut is clean: Redis has run every command the client wrote before Cut, and none it writes
// after, by the time Cut returns, and the client gets no reply to any of them. (Closing the
// sockets alone would leave commands written just before the cut in Redis's input buffers, to
// run at some moment after Cut returned: on miniredis, after commands that other clients sent
// later. A waiter "cut off" that way could still take a lock handed to it after the cut.)
type Network struct {
	mu    sync.Mutex
	conns map[*cutConn]struct{}
	down  bool
}

// NewNetwork returns a healthy network.
func NewNetwork() *Network { return &Network{conns: make(map[*cutConn]struct{})} }

var errPartitioned = errors.New("redistest: network cut")

// drainTimeout bounds how long Cut waits for Redis to run what was written before it (Redis
// may be paused).
const drainTimeout = 3 * time.Second

func (n *Network) dial(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	n.mu.Lock()
	down := n.down
	n.mu.Unlock()
	if down {
		return nil, errPartitioned
	}
	raw, err := d.DialContext(ctx, "tcp", dst)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		_ = raw.Close()
		return nil, errPartitioned
	}
	c := &cutConn{Conn: raw, drained: make(chan struct{})}
	n.conns[c] = struct{}{}
	return c, nil
}

// Cut ends every connection cleanly (see Network) and refuses new ones.
func (n *Network) Cut() {
	n.mu.Lock()
	n.down = true
	conns := n.conns
	n.conns = make(map[*cutConn]struct{})
	n.mu.Unlock()
	var wg sync.WaitGroup
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.cut()
		}()
	}
	wg.Wait()
}

// Restore lets the client connect again.
func (n *Network) Restore() {
	n.mu.Lock()
	n.down = false
	n.mu.Unlock()
}

// cutConn is a client connection that Network can cut cleanly.
type cutConn struct {
	net.Conn
	down    atomic.Bool
	once    sync.Once
	drained chan struct{}
}

// cut stops the client's writes, sends Redis the end of the stream after what was written,
// reads (and drops) every reply until Redis, having run all of it, closes its end, then closes.
func (c *cutConn) cut() {
	c.down.Store(true)
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	c.drain()
	_ = c.Conn.Close()
}

// drain reads to the end of the stream, once, at most drainTimeout, whoever calls it first:
// the client's reader may be blocked in Read when the cut comes, and both then see the end.
func (c *cutConn) drain() {
	c.once.Do(func() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(drainTimeout))
		_, _ = io.Copy(io.Discard, c.Conn)
		close(c.drained)
	})
	<-c.drained
}

// Close, by the client after a failed write, say, waits for the drain: closing earlier would
// leave Redis what was written, to run later.
func (c *cutConn) Close() error {
	if c.down.Load() {
		c.drain()
	}
	return c.Conn.Close()
}

func (c *cutConn) Write(p []byte) (int, error) {
	if c.down.Load() {
		return 0, errPartitioned
	}
	return c.Conn.Write(p)
}

func (c *cutConn) Read(p []byte) (int, error) {
	if c.down.Load() {
		return 0, errPartitioned
	}
	n, err := c.Conn.Read(p)
	if c.down.Load() {
		c.drain() // what it read is a reply the cut-off client must not see
		return 0, errPartitioned
	}
	return n, err
}

// ClientVia returns a new client whose connections all go through n.
func (b *Backend) ClientVia(tb testing.TB, n *Network) rueidis.Client {
	tb.Helper()
	opt := b.testOption(tb)
	opt.DialCtxFn = n.dial
	c, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatalf("rueidis.NewClient: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

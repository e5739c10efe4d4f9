package deploytest

import (
	"bufio"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/redistest"
)

// clientOf returns a function making clients with opt (rueidis's defaults otherwise: caching
// on), closed when the test ends.
func clientOf(opt rueidis.ClientOption) func(t *testing.T) rueidis.Client {
	return func(t *testing.T) rueidis.Client {
		t.Helper()
		c, err := rueidis.NewClient(opt)
		if err != nil {
			t.Fatalf("rueidis.NewClient: %v", err)
		}
		t.Cleanup(c.Close)
		return c
	}
}

// Every primitive works against servers that speak TLS only and require a client certificate,
// a primary with a replica (WithReplicaAck's dedicated connections included) and a 3-master
// Cluster whose bus is TLS too: every connection distsync opens (commands, pub/sub, the replica
// ack's, each Cluster node's) goes through the client's TLS settings, since a plain one, or a
// TLS one without the client certificate, is refused.
func TestTLSOnly(t *testing.T) {
	certs := redistest.NewTLS(t, true)
	t.Run("standalone", func(t *testing.T) {
		primary := redistest.StartTLSRedis(t, certs)
		replica := redistest.StartTLSRedis(t, certs, "replicaof 127.0.0.1 "+port(primary.Addr()))
		waitReplicas(t, primary, 1)
		refusesPlainAndAnonymous(t, primary.Addr(), certs)
		refusesPlainAndAnonymous(t, replica.Addr(), certs)
		pass{prefix: "tls.standalone:", client: clientOf(primary.ClientOption()), acks: 1}.run(t)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartTLSCluster(t, certs)
		for _, addr := range c.Addrs() {
			refusesPlainAndAnonymous(t, addr, certs)
		}
		pass{prefix: "tls.cluster:", client: clientOf(c.ClientOption())}.run(t)
	})
}

// refusesPlainAndAnonymous fails t unless the server at addr refuses a plain connection and a
// TLS one without a client certificate, and answers one with it.
func refusesPlainAndAnonymous(t *testing.T, addr string, certs *redistest.TLS) {
	t.Helper()
	ping := func(c net.Conn, err error) string {
		if err != nil {
			return "dial: " + err.Error()
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return "write: " + err.Error()
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return "read: " + err.Error()
		}
		return strings.TrimSpace(line)
	}
	d := &net.Dialer{Timeout: 2 * time.Second}
	if got := ping(d.Dial("tcp", addr)); got == "+PONG" {
		t.Errorf("%s answers PING without TLS", addr)
	}
	anonymous := certs.ClientConfig()
	anonymous.Certificates = nil
	if got := ping(tls.DialWithDialer(d, "tcp", addr, anonymous)); got == "+PONG" {
		t.Errorf("%s answers PING over TLS without a client certificate", addr)
	}
	if got := ping(tls.DialWithDialer(d, "tcp", addr, certs.ClientConfig())); got != "+PONG" {
		t.Errorf("%s: PING over TLS with the client certificate: %s", addr, got)
	}
}

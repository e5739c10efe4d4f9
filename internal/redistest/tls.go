package redistest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Servers that speak TLS only: certificates made by the test, with crypto/x509.

// TLS is the certificates of a test's TLS servers and clients, in files in a directory of the
// test's: a CA, a certificate for the servers (127.0.0.1 and localhost, for serving and, on a
// Cluster's bus and from a replica, for connecting) and one for clients.
type TLS struct {
	Dir                   string
	CA                    string // the CA's certificate, PEM: what a client trusts (SSL_CERT_FILE)
	Cert, Key             string // the servers'
	ClientCert, ClientKey string // the clients'
	AuthClients           bool   // servers require a client certificate (tls-auth-clients yes)
	pool                  *x509.CertPool
	clientCert            tls.Certificate
}

// NewTLS makes a CA and certificates signed by it in a directory of tb's. authClients makes
// the servers started with them refuse a client without a certificate of the CA.
func NewTLS(tb testing.TB, authClients bool) *TLS {
	tb.Helper()
	dir := tb.TempDir()
	t := &TLS{Dir: dir, AuthClients: authClients, pool: x509.NewCertPool()}
	caKey, caCert, caDER := newCert(tb, nil, nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "distsync test CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	})
	t.pool.AddCert(caCert)
	t.CA = writePEM(tb, dir, "ca.crt", "CERTIFICATE", caDER)
	key, _, der := newCert(tb, caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	t.Cert = writePEM(tb, dir, "server.crt", "CERTIFICATE", der)
	t.Key = writePEM(tb, dir, "server.key", "PRIVATE KEY", key)
	key, _, der = newCert(tb, caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "distsync test client"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	t.ClientCert = writePEM(tb, dir, "client.crt", "CERTIFICATE", der)
	t.ClientKey = writePEM(tb, dir, "client.key", "PRIVATE KEY", key)
	cert, err := tls.LoadX509KeyPair(t.ClientCert, t.ClientKey)
	if err != nil {
		tb.Fatalf("redistest: client certificate: %v", err)
	}
	t.clientCert = cert
	return t
}

// newCert makes a key and a certificate from tmpl, signed by parent (self-signed if nil), and
// returns the key (PKCS #8), the certificate and its DER.
func newCert(tb testing.TB, parentKey *ecdsa.PrivateKey, parent *x509.Certificate, tmpl *x509.Certificate) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("redistest: key: %v", err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		tb.Fatalf("redistest: certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("redistest: certificate: %v", err)
	}
	return key, cert, der
}

// writePEM writes v (a DER certificate, or a key to marshal as PKCS #8) to dir/name.
func writePEM(tb testing.TB, dir, name, typ string, v any) string {
	tb.Helper()
	der, ok := v.([]byte)
	if !ok {
		var err error
		if der, err = x509.MarshalPKCS8PrivateKey(v); err != nil {
			tb.Fatalf("redistest: %s: %v", name, err)
		}
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return path
}

// ClientConfig returns the TLS configuration of a client of t's servers: it trusts t's CA and
// presents t's client certificate.
func (t *TLS) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: t.pool, Certificates: []tls.Certificate{t.clientCert}, MinVersion: tls.VersionTLS12}
}

// config returns the configuration lines that make a server listen with TLS only, on port;
// none for a nil t.
func (t *TLS) config(port int, cluster bool) []string {
	if t == nil {
		return nil
	}
	auth := "no"
	if t.AuthClients {
		auth = "yes"
	}
	lines := []string{
		"port 0",
		"tls-port " + strconv.Itoa(port),
		"tls-cert-file " + t.Cert,
		"tls-key-file " + t.Key,
		"tls-ca-cert-file " + t.CA,
		"tls-auth-clients " + auth,
		"tls-replication yes",
	}
	if cluster {
		lines = append(lines, "tls-cluster yes")
	}
	return lines
}

// cliArgs returns the arguments that make the CLI connect with TLS; none for a nil t.
func (t *TLS) cliArgs() []string {
	if t == nil {
		return nil
	}
	return []string{"--tls", "--cacert", t.CA, "--cert", t.ClientCert, "--key", t.ClientKey}
}

// tlsServers maps the address of every running server that speaks TLS only to the TLS
// configuration the harness's own probes (PING at start, Command) connect to it with.
var tlsServers sync.Map

// register records that the server at addr speaks TLS with t's certificates; nothing for a
// nil t.
func (t *TLS) register(addr string) {
	if t != nil {
		tlsServers.Store(addr, t.ClientConfig())
	}
}

// clientTLS returns the TLS configuration of a client of the server at addr: nil for a server
// that does not speak TLS.
func clientTLS(addr string) *tls.Config {
	if c, ok := tlsServers.Load(addr); ok {
		return c.(*tls.Config)
	}
	return nil
}

// dialServer connects to the server at addr as the harness's probes do: over TLS if it
// speaks TLS only.
func dialServer(addr string, limit time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: limit}
	if cfg := clientTLS(addr); cfg != nil {
		return tls.DialWithDialer(d, "tcp", addr, cfg)
	}
	return d.Dial("tcp", addr)
}

// startServer starts a server that does not speak TLS (see launch).
func startServer(cluster bool, extra ...string) (*Server, error) {
	return launch(cluster, nil, extra...)
}

// RequireTLS skips tb, with a message saying why, if the server binary or the CLI
// ([ServerBin], [CLIBin]) was built without TLS (Valkey as .ci/valkey builds it, BUILD_TLS=no),
// as for a missing binary (see [RequireRedis]). It fails tb instead when
// DISTSYNC_REQUIRE_REDIS=1 and the binary is the default one, redis-server on PATH
// (DISTSYNC_REDIS_SERVER unset): Debian's is built with TLS, and CI must not lose the TLS
// tests to a package change without being told. A binary named by DISTSYNC_REDIS_SERVER
// without TLS is a skip: the variable chose a build, not TLS.
func RequireTLS(tb testing.TB) {
	tb.Helper()
	requireBinaries(tb)
	err := tlsSupport()
	if err == nil {
		return
	}
	if os.Getenv(EnvRequire) == "1" && os.Getenv(EnvServer) == "" {
		tb.Fatalf("redistest: %v, and %s=1 with the default redis-server", err, EnvRequire)
	}
	skip(tb, "the server binary has no TLS", fmt.Sprintf("redistest: TLS tests skipped: %v", err))
}

var (
	tlsSupportMu   sync.Mutex
	tlsSupportSeen = map[string]error{} // by server and CLI path
)

// tlsSupport returns why the server binary or the CLI cannot speak TLS, or nil.
func tlsSupport() error {
	bin, err := ServerBin()
	if err != nil {
		return err
	}
	cli, err := CLIBin()
	if err != nil {
		return err
	}
	tlsSupportMu.Lock()
	defer tlsSupportMu.Unlock()
	key := bin + "\x00" + cli
	if err, ok := tlsSupportSeen[key]; ok {
		return err
	}
	err = probeTLS(bin, cli)
	tlsSupportSeen[key] = err
	return err
}

// probeTLS starts the server with a TLS port and certificate files that do not exist: a
// build with TLS fails to load them, one without fails at the TLS port, each saying so. The
// CLI is asked for --tls --version, which one without TLS refuses.
func probeTLS(bin, cli string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	port, err := freePort(false)
	if err != nil {
		return err
	}
	out, _ := exec.CommandContext(ctx, bin, "--port", "0", "--tls-port", strconv.Itoa(port), "--save", "",
		"--tls-cert-file", "/nonexistent/distsync.crt", "--tls-key-file", "/nonexistent/distsync.key").CombinedOutput()
	for _, without := range []string{"Bad directive", "Failed finding TLS support", "Missing implement of connection type tls"} {
		if strings.Contains(string(out), without) {
			return fmt.Errorf("%s was built without TLS (%q)", bin, without)
		}
	}
	if out, err := exec.CommandContext(ctx, cli, "--tls", "--version").CombinedOutput(); err != nil {
		return fmt.Errorf("%s was built without TLS: --tls: %v: %s", cli, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// StartTLSRedis is StartRedis for a server that speaks TLS only, with t's certificates.
// Connect to it with [Proc.ClientOption]; [Command] and the Proc's methods reach it over TLS.
// A binary without TLS skips tb, or fails it (see [RequireTLS]).
func StartTLSRedis(tb testing.TB, t *TLS, extra ...string) *Proc {
	tb.Helper()
	RequireTLS(tb)
	s, err := launch(false, t, extra...)
	if err != nil {
		tb.Fatalf("start redis-server with TLS: %v", err)
	}
	noteOwn("TLS servers")
	p := &Proc{s: s}
	tb.Cleanup(p.Stop)
	return p
}

// ClientOption returns the options of a client of the server: with its TLS configuration if
// it speaks TLS only.
func (p *Proc) ClientOption() rueidis.ClientOption {
	return lean(rueidis.ClientOption{InitAddress: []string{p.Addr()}, TLSConfig: clientTLS(p.Addr())})
}

// StartTLSCluster starts a Redis Cluster of three masters for tb alone that speaks TLS only,
// to clients and on its bus (tls-cluster yes), with t's certificates, and stops it when tb
// ends. A binary without TLS skips tb, or fails it (see [RequireTLS]).
func StartTLSCluster(tb testing.TB, t *TLS) *Cluster {
	tb.Helper()
	RequireTLS(tb)
	c, err := startCluster(t)
	if err != nil {
		tb.Fatalf("start TLS cluster: %v", err)
	}
	noteOwn("TLS Clusters")
	tb.Cleanup(c.Stop)
	return c
}

// ClientOption returns the options of a client of the cluster: with its TLS configuration if
// it speaks TLS only.
func (c *Cluster) ClientOption() rueidis.ClientOption {
	return lean(rueidis.ClientOption{InitAddress: c.Addrs(), TLSConfig: clientTLS(c.Addrs()[0])})
}

//go:build unix

package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/redis/rueidis"
)

// redisTarget is the Redis a command talks to: the URL of --redis (or DISTSYNC_REDIS_URL) and
// the TLS files of --cacert, --cert and --key.
type redisTarget struct {
	url string
	tls tlsFiles
}

// tlsFiles are the PEM files of --cacert, --cert and --key, "" where not given.
type tlsFiles struct {
	caCert, cert, key string
}

// given reports whether any of the files was given.
func (t tlsFiles) given() bool { return t.caCert != "" || t.cert != "" || t.key != "" }

// tlsFlags adds --cacert, --cert and --key, as redis-cli names them.
func tlsFlags(fs *flagSet, t *tlsFiles) {
	fs.str(&t.caCert, "cacert", 0, "FILE",
		"trust the CA certificates in FILE (PEM) for a rediss:// Redis, in\nplace of the system's")
	fs.str(&t.cert, "cert", 0, "FILE",
		"present the client certificate in FILE (PEM) to a rediss:// Redis\nthat asks for one (tls-auth-clients); with --key")
	fs.str(&t.key, "key", 0, "FILE", "the private key of --cert (PEM)")
}

// check returns why the target cannot be used, or nil: a URL that does not parse, TLS files
// for a URL that is not rediss:// (they would be ignored, and the connection plain), --cert
// without --key or the reverse, a file that cannot be read or holds no certificate or key. It
// sends nothing to Redis. Every such error is the user's to fix.
func (r redisTarget) check() error {
	if err := checkRedisURL(r.url); err != nil {
		return err
	}
	if !r.tls.given() {
		return nil
	}
	if scheme, _, _ := strings.Cut(withScheme(r.url), "://"); !strings.EqualFold(scheme, "rediss") && !strings.EqualFold(scheme, "valkeys") {
		return fmt.Errorf("%s gives TLS files, but the URL is not rediss:// (TLS): use rediss://host:port", r.tls.flags())
	}
	_, err := r.tls.config()
	return err
}

// flags names the TLS flags given, for messages.
func (t tlsFiles) flags() string {
	var fs []string
	for _, f := range []struct{ name, v string }{{"--cacert", t.caCert}, {"--cert", t.cert}, {"--key", t.key}} {
		if f.v != "" {
			fs = append(fs, f.name)
		}
	}
	return strings.Join(fs, ", ")
}

// config returns the roots and certificate the files give, as a tls.Config whose other fields
// are zero; nil if no file is given.
func (t tlsFiles) config() (*tls.Config, error) {
	if !t.given() {
		return nil, nil
	}
	c := &tls.Config{}
	if t.caCert != "" {
		pem, err := os.ReadFile(t.caCert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificate in it", shownValue(t.caCert))
		}
	}
	switch {
	case t.cert != "" && t.key == "":
		return nil, errors.New("--cert needs --key, the certificate's private key")
	case t.key != "" && t.cert == "":
		return nil, errors.New("--key needs --cert, the certificate it is the key of")
	case t.cert != "":
		cert, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return nil, fmt.Errorf("--cert and --key: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// options returns the client options of the target. Its error matches errBadURL for what the
// user must fix.
func (r redisTarget) options() (rueidis.ClientOption, error) {
	opt, err := parseRedisURL(r.url)
	if err != nil {
		return opt, err
	}
	files, err := r.tls.config()
	if err != nil {
		return opt, fmt.Errorf("%w: %v", errBadURL, err)
	}
	if files != nil && opt.TLSConfig != nil { // (check refuses files without rediss://)
		if files.RootCAs != nil {
			opt.TLSConfig.RootCAs = files.RootCAs
		}
		opt.TLSConfig.Certificates = files.Certificates
	}
	return opt, nil
}

// tlsHint returns what likely went wrong when a connection to a Redis fails with err, "" if
// nothing is known: the two sides disagreeing on TLS, or a client certificate missing. Go's
// errors say only "connection reset by peer" or "EOF" in these cases.
func tlsHint(opt rueidis.ClientOption, err error) string {
	msg := err.Error()
	reset := strings.Contains(msg, "connection reset by peer") || strings.Contains(msg, "EOF") ||
		strings.Contains(msg, "broken pipe")
	switch {
	case opt.TLSConfig == nil && reset && !strings.HasPrefix(strings.Join(opt.InitAddress, ""), "/"):
		return "the server closed the connection: if it speaks TLS only, use rediss://"
	case opt.TLSConfig != nil && strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "the server does not speak TLS: use redis:// for a plain port"
	case opt.TLSConfig != nil && len(opt.TLSConfig.Certificates) == 0 &&
		(reset || strings.Contains(msg, "certificate required") || strings.Contains(msg, "bad certificate")):
		return "the server may want a client certificate: give --cert and --key"
	case opt.TLSConfig != nil && strings.Contains(msg, "certificate signed by unknown authority"):
		return "the server's certificate is not signed by a CA this machine trusts: give --cacert"
	}
	return ""
}

// redisProblem is check's error, for a target that check refuses, as a usage error: one of
// DISTSYNC_REDIS_URL's (--redis's value was checked as the flag was read), or of the TLS files.
func redisProblem(r redisTarget) error {
	if err := checkRedisURL(r.url); err != nil {
		return usagef("DISTSYNC_REDIS_URL: %v", err)
	}
	return usagef("%v", r.check())
}

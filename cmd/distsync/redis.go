//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// pingTimeout bounds the PING with which dialRedis checks that Redis answers.
const pingTimeout = 5 * time.Second

// The errors of dialRedis that are the user's to fix (exit status 64); any other error of it
// means Redis could not be reached (69).
var (
	errNoRedis = errors.New("no Redis given: use --redis URL or set DISTSYNC_REDIS_URL")
	errBadURL  = errors.New("bad Redis URL")
)

// dialRedis returns a client of the Redis r names, which the caller closes. r.url is a URL that
// rueidis.ParseURL reads (redis://[user:password@]host:port[/db], rediss:// for TLS,
// unix://path; more Redis Cluster nodes with ?addr=host:port&addr=...), or a bare host:port.
// rueidis finds out by itself whether it talks to a Redis Cluster. dialRedis PINGs Redis,
// waiting at most 5 s (the handshake included) or until ctx ends, whichever is first, so that
// a Redis that does not answer fails here rather than in the first command. Its error matches
// errNoRedis for an empty URL, and errBadURL for one that does not parse or TLS files that
// cannot be used.
func dialRedis(ctx context.Context, r redisTarget) (rueidis.Client, error) {
	return dialRedisWith(ctx, r, nil)
}

// dialRedisWith is dialRedis with the client's options completed by tune, if not nil.
func dialRedisWith(ctx context.Context, r redisTarget, tune func(*rueidis.ClientOption)) (rueidis.Client, error) {
	if r.url == "" {
		return nil, errNoRedis
	}
	opt, err := r.options()
	if err != nil {
		return nil, err
	}
	if tune != nil {
		tune(&opt)
	}
	where := strings.Join(opt.InitAddress, ", ")
	// rueidis.NewClient handshakes with the server (HELLO), a few times over, before it
	// returns: it and the PING share the one bound, so that a server that accepts the
	// connection and never answers costs pingTimeout, not the handshakes' sum.
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	type dialed struct {
		c   rueidis.Client
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := rueidis.NewClient(opt)
		if err != nil {
			ch <- dialed{nil, fmt.Errorf("redis at %s: %w%s", where, err, hinted(opt, err))}
			return
		}
		if err := c.Do(pctx, c.B().Ping().Build()).Error(); err != nil {
			c.Close()
			ch <- dialed{nil, fmt.Errorf("redis at %s: ping: %w%s", where, err, hinted(opt, err))}
			return
		}
		ch <- dialed{c, nil}
	}()
	select {
	case d := <-ch:
		if d.err == nil || !errors.Is(d.err, context.DeadlineExceeded) || ctx.Err() != nil {
			return d.c, d.err
		}
	case <-pctx.Done():
		go func() { // NewClient returns in its own time: close what it makes
			if d := <-ch; d.c != nil {
				d.c.Close()
			}
		}()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("redis at %s: %w", where, context.Cause(ctx))
		}
	}
	// A server that accepts the connection and never answers (paused, overloaded, or not
	// Redis): say so, and what bounded the wait, not a bare deadline.
	hint := ""
	if opt.TLSConfig != nil {
		hint = " (a plain Redis port does not answer TLS: use redis:// for one)"
	}
	return nil, fmt.Errorf("redis at %s accepted the connection but did not answer within %v%s", where, pingTimeout, hint)
}

// hinted returns tlsHint's hint for a connection that failed with err, as " (hint)", or "".
func hinted(opt rueidis.ClientOption, err error) string {
	if h := tlsHint(opt, err); h != "" {
		return " (" + h + ")"
	}
	return ""
}

// parseRedisURL returns the client options of addr, a URL that rueidis.ParseURL reads or a
// bare host:port. Its error matches errBadURL.
func parseRedisURL(addr string) (rueidis.ClientOption, error) {
	addr = withScheme(addr)
	opt, err := readURL(addr)
	if err != nil {
		return opt, fmt.Errorf("%w %q: %v", errBadURL, redacted(addr), err)
	}
	if opt.Password == "" {
		opt.Password = os.Getenv(envPassword)
	}
	return opt, nil
}

// envPassword names the variable that gives the Redis password apart from the URL (as
// REDISCLI_AUTH does redis-cli's): a URL's password shows in ps when it is given with --redis.
// A password in the URL comes first.
const envPassword = "DISTSYNC_REDIS_PASSWORD"

// childCredentials returns what childEnv must change in CMD's environment so that CMD does
// not get the Redis password distsync was given: DISTSYNC_REDIS_PASSWORD removed, and
// DISTSYNC_REDIS_URL without its password (removed if it does not parse). A distsync that CMD
// runs must be given the password again.
func childCredentials() []string {
	out := []string{envPassword}
	v, ok := os.LookupEnv("DISTSYNC_REDIS_URL")
	if !ok {
		return out
	}
	u, err := url.Parse(withScheme(v))
	switch {
	case err != nil:
		return append(out, "DISTSYNC_REDIS_URL")
	case u.User != nil:
		if _, has := u.User.Password(); has {
			u.User = url.User(u.User.Username())
			return append(out, "DISTSYNC_REDIS_URL="+u.String())
		}
	}
	return out
}

// readURL returns the client options of addr, a URL, if rueidis reads it and strictURL finds
// nothing wrong with it.
func readURL(addr string) (rueidis.ClientOption, error) {
	opt, err := rueidis.ParseURL(addr)
	if err == nil {
		err = strictURL(addr)
	}
	return opt, err
}

// urlParams are the query parameters rueidis.ParseURL reads; it ignores any other.
var urlParams = []string{"addr", "client_cache", "client_name", "db", "dial_timeout", "master_set",
	"max_retries", "protocol", "skip_verify", "write_timeout"}

// strictURL returns why addr, a URL that rueidis.ParseURL accepts, would not reach the servers
// it names, or nil. rueidis dials localhost:6379, or the URL's own host, in place of an
// address it cannot read (?addr=foo, a port that is not a number), ignores a parameter it does
// not know (?adr=host:port), and learns of a port out of range only when it dials: a lock
// taken on a Redis other than the one meant excludes nobody, so these are refused here.
func strictURL(addr string) error {
	u, err := url.Parse(addr)
	if err != nil {
		return err
	}
	for k := range u.Query() {
		if !slices.Contains(urlParams, k) {
			return fmt.Errorf("unknown parameter %q (rueidis reads %s)", k, strings.Join(urlParams, ", "))
		}
	}
	if u.Scheme == "unix" {
		return nil
	}
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		if err := checkPort(p); err != nil {
			return fmt.Errorf("port %q: %v", p, err)
		}
	}
	for _, a := range u.Query()["addr"] {
		host, port, err := net.SplitHostPort(a)
		switch {
		case err != nil || host == "":
			return fmt.Errorf("addr=%s: want host:port", a)
		case checkPort(port) != nil:
			return fmt.Errorf("addr=%s: port %q: %v", a, port, checkPort(port))
		}
	}
	return nil
}

// checkPort returns why p is not a TCP port number, or nil.
func checkPort(p string) error {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return errors.New("not a port from 1 to 65535")
	}
	return nil
}

// withScheme returns addr, a URL or a bare host:port, as a URL.
func withScheme(addr string) string {
	if !strings.Contains(addr, "://") {
		return "redis://" + addr
	}
	return addr
}

// checkRedisURL returns why addr is not a Redis URL, or nil.
func checkRedisURL(addr string) error {
	if _, err := readURL(withScheme(addr)); err != nil {
		var ue *url.Error // its text holds the URL, and so its password
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("not a Redis URL: %v", err)
	}
	return nil
}

// redacted returns addr with the password of its user info, if any, replaced: for errors.
func redacted(addr string) string {
	if u, err := url.Parse(withScheme(addr)); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

// dialStatus returns the exit status for an error of dialRedis: exitUsage for what the user
// gave, exitUnavailable otherwise.
func dialStatus(err error) int {
	if errors.Is(err, errNoRedis) || errors.Is(err, errBadURL) {
		return exitUsage
	}
	return exitUnavailable
}

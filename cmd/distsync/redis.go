//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
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

// dialRedis returns a client of the Redis at url, which the caller closes. url is a URL that
// rueidis.ParseURL reads (redis://[user:password@]host:port[/db], rediss:// for TLS,
// unix://path; more Redis Cluster nodes with ?addr=host:port&addr=...), or a bare host:port.
// rueidis finds out by itself whether it talks to a Redis Cluster. dialRedis PINGs Redis,
// waiting at most 5 s or until ctx ends, so that a Redis that does not answer fails here
// rather than in the first command. Its error matches errNoRedis for an empty url and
// errBadURL for one that does not parse.
func dialRedis(ctx context.Context, addr string) (rueidis.Client, error) {
	return dialRedisWith(ctx, addr, nil)
}

// dialRedisWith is dialRedis with the client's options completed by tune, if not nil.
func dialRedisWith(ctx context.Context, addr string, tune func(*rueidis.ClientOption)) (rueidis.Client, error) {
	if addr == "" {
		return nil, errNoRedis
	}
	opt, err := parseRedisURL(addr)
	if err != nil {
		return nil, err
	}
	if tune != nil {
		tune(&opt)
	}
	where := strings.Join(opt.InitAddress, ", ")
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redis at %s: %w", where, err)
	}
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis at %s: ping: %w", where, err)
	}
	return c, nil
}

// parseRedisURL returns the client options of addr, a URL that rueidis.ParseURL reads or a
// bare host:port. Its error matches errBadURL.
func parseRedisURL(addr string) (rueidis.ClientOption, error) {
	addr = withScheme(addr)
	opt, err := rueidis.ParseURL(addr)
	if err != nil {
		return opt, fmt.Errorf("%w %q: %v", errBadURL, redacted(addr), err)
	}
	return opt, nil
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
	if _, err := rueidis.ParseURL(withScheme(addr)); err != nil {
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

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/mutex"
)

// ownServer is the redis-server the run started (nil with -redis: a replica is attached only
// to a server of the run's own, never to the user's).
var ownServer *server

// startReplica starts a redis-server replicating primary, in a directory of its own,
// and waits until its link is up.
func startReplica(primary *server) (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(primary.addr, ":")
	dir, err := os.MkdirTemp("", "distsync-bench-replica-")
	if err != nil {
		return nil, err
	}
	for range 20 {
		p := 10000 + int(time.Now().UnixNano()%12000)
		cmd := exec.Command(bin, "--port", strconv.Itoa(p), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--replicaof", host, port)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		s := &server{addr: "127.0.0.1:" + strconv.Itoa(p), cmd: cmd, dir: dir}
		if !waitReady(s.addr) {
			s.stop()
			dir, _ = os.MkdirTemp("", "distsync-bench-replica-")
			continue
		}
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.addr}, DisableCache: true})
		if err != nil {
			s.stop()
			return nil, err
		}
		for range 400 {
			info, _ := c.Do(context.Background(), c.B().Info().Section("replication").Build()).ToString()
			if strings.Contains(info, "master_link_status:up") {
				c.Close()
				return s, nil
			}
			time.Sleep(25 * time.Millisecond)
		}
		c.Close()
		s.stop()
		return nil, errors.New("the replica's link did not come up")
	}
	return nil, errors.New("could not start a replica")
}

// replicaAck measures what WithReplicaAck(1, 1s) costs an uncontended mutex Lock+Unlock, with
// one local replica attached: the pair with and without the option, interleaved with a PING
// (the unit) in a random order each round.
func replicaAck(ctx context.Context, addr string, iters int) ([]primRow, error) {
	if ownServer == nil || ownServer.addr != addr {
		return nil, errors.New("skipped: needs the run's own redis-server (no -redis), to attach a replica to")
	}
	rep, err := startReplica(ownServer)
	if err != nil {
		return nil, err
	}
	defer rep.stop()
	open := func(opts ...distsync.Option) (*mutex.Mutex, func(), error) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			return nil, nil, err
		}
		h, err := distsync.New(c, append([]distsync.Option{distsync.WithKeyPrefix(keyPrefix), distsync.WithLeaseTTL(leaseTTL)}, opts...)...)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		m, err := mutex.New(h, "replica-ack:"+strconv.Itoa(len(opts)))
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return m, func() { _ = h.Close(context.Background()); c.Close() }, nil
	}
	plain, closePlain, err := open()
	if err != nil {
		return nil, err
	}
	defer closePlain()
	acked, closeAcked, err := open(distsync.WithReplicaAck(1, time.Second))
	if err != nil {
		return nil, err
	}
	defer closeAcked()
	return comparePairs(ctx, addr, iters, "uncontended, one goroutine, one replica attached: mutex: Lock + Unlock, ",
		plain, "defaults", acked, "WithReplicaAck(1, 1s)")
}

// comparePairs measures the uncontended Lock+Unlock of a and b, iters times each after a
// tenth as many to warm up (dedicated connections, subscriptions), the two interleaved in
// alternating order with a PING to addr (the unit), and returns a row for each.
func comparePairs(ctx context.Context, addr string, iters int, scenario string, a *mutex.Mutex, aName string, b *mutex.Mutex, bName string) ([]primRow, error) {
	pinger, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	defer pinger.Close()
	pair := func(m *mutex.Mutex) (time.Duration, error) {
		t0 := time.Now()
		if err := m.Lock(ctx); err != nil {
			return 0, err
		}
		if err := m.Unlock(ctx); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	var pings, as, bs []time.Duration
	for i := range iters + iters/10 {
		t0 := time.Now()
		if err := pinger.Do(ctx, pinger.B().Ping().Build()).Error(); err != nil {
			return nil, err
		}
		p := time.Since(t0)
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		d1, err := pair(first)
		if err != nil {
			return nil, err
		}
		d2, err := pair(second)
		if err != nil {
			return nil, err
		}
		if i < iters/10 {
			continue
		}
		if first == b {
			d1, d2 = d2, d1
		}
		pings, as, bs = append(pings, p), append(as, d1), append(bs, d2)
	}
	rtt := pct(pings, 50)
	row := func(what string, d []time.Duration) primRow {
		return primRow{scenario: scenario + what,
			result:     fmt.Sprintf("%v p50 (%v p99)", pct(d, 50).Round(time.Microsecond), pct(d, 99).Round(time.Microsecond)),
			rtt:        fmt.Sprintf("%.1f", float64(pct(d, 50))/float64(rtt)),
			clientCmds: -1, redisCmds: -1, redisCPU: -1}
	}
	return []primRow{row(aName, as), row(bName, bs)}, nil
}

// redlock measures an uncontended Lock+Unlock of a mutex on a quorum of three primaries (the
// run's own redis-server and two more started for it, all on this machine) against the plain
// mutex on one, interleaved with a PING (the unit).
func redlock(ctx context.Context, addr string, iters int) ([]primRow, error) {
	if ownServer == nil || ownServer.addr != addr {
		return nil, errors.New("skipped: needs the run's own redis-server (no -redis)")
	}
	addrs := []string{addr}
	for range 2 {
		s, err := startRedis()
		if err != nil {
			return nil, err
		}
		defer s.stop()
		addrs = append(addrs, s.addr)
	}
	var hs []*distsync.Handle
	for _, a := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		h, err := distsync.New(c, distsync.WithKeyPrefix(keyPrefix), distsync.WithLeaseTTL(leaseTTL))
		if err != nil {
			return nil, err
		}
		defer h.Close(context.Background())
		hs = append(hs, h)
	}
	plain, err := mutex.New(hs[0], "redlock:plain")
	if err != nil {
		return nil, err
	}
	quorum, err := mutex.New(hs[0], "redlock:quorum", mutex.WithQuorum(hs[1], hs[2]))
	if err != nil {
		return nil, err
	}
	return comparePairs(ctx, addr, iters, "uncontended, one goroutine: mutex: Lock + Unlock, ",
		plain, "one primary", quorum, "WithQuorum over 3 primaries on this machine")
}

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
)

// electionResign measures Resign → the waiting candidate's Campaign returning, in another
// process, rounds times, each after the candidate sat idle for gap; the unit is a PING sent
// just before each round by a client idle for as long.
func electionResign(ctx context.Context, addr string, rounds int, gap time.Duration) (primRow, error) {
	ps, closeAll, err := openPods(addr, 2)
	if err != nil {
		return primRow{}, err
	}
	defer closeAll()
	pinger, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return primRow{}, err
	}
	defer pinger.Close()
	name := fmt.Sprintf("election:%d", time.Now().UnixNano())
	a, err := election.New(ps[0].h, name)
	if err != nil {
		return primRow{}, err
	}
	b, err := election.New(ps[1].h, name)
	if err != nil {
		return primRow{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(rounds)*(gap+10*time.Second))
	defer cancel()
	var took, pings []time.Duration
	for range rounds {
		ta, err := a.Campaign(ctx, "a")
		if err != nil {
			return primRow{}, err
		}
		got := make(chan error, 1)
		var tb *election.Term
		go func() {
			var err error
			tb, err = b.Campaign(ctx, "b")
			got <- err
		}()
		time.Sleep(gap) // b queues, and sits idle
		t0 := time.Now()
		if err := pinger.Do(ctx, pinger.B().Ping().Build()).Error(); err != nil {
			return primRow{}, err
		}
		pings = append(pings, time.Since(t0))
		t0 = time.Now()
		if err := ta.Resign(ctx); err != nil {
			return primRow{}, err
		}
		if err := <-got; err != nil {
			return primRow{}, err
		}
		took = append(took, time.Since(t0))
		if err := tb.Resign(ctx); err != nil {
			return primRow{}, err
		}
	}
	p50, ping := pct(took, 50), pct(pings, 50)
	return primRow{
		scenario:   fmt.Sprintf("election: Resign → the next candidate leads (another process, idle %v), %d rounds", gap, rounds),
		result:     fmt.Sprintf("p50 %v, max %v", p50.Round(time.Microsecond), pct(took, 100).Round(time.Microsecond)),
		rtt:        fmt.Sprintf("%.1f (idle RTT %v)", float64(p50)/float64(ping), ping.Round(time.Microsecond)),
		clientCmds: -1, redisCmds: -1, redisCPU: -1,
	}, nil
}

// electionFailover measures how long an election goes without a leader when its leader is cut
// off (its client closed under it, so it neither renews nor resigns): from the cut to the
// waiting candidate's Campaign returning, against the lease, rounds times.
func electionFailover(ctx context.Context, addr string, rounds int, lease time.Duration) (primRow, error) {
	ps, closeAll, err := openPods(addr, 1)
	if err != nil {
		return primRow{}, err
	}
	defer closeAll()
	name := fmt.Sprintf("election-failover:%d", time.Now().UnixNano())
	b, err := election.New(ps[0].h, name, distsync.WithLeaseTTL(lease))
	if err != nil {
		return primRow{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(rounds)*(3*lease+10*time.Second))
	defer cancel()
	var took []time.Duration
	for r := range rounds {
		raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			return primRow{}, err
		}
		h, err := distsync.New(raw, distsync.WithKeyPrefix(keyPrefix))
		if err != nil {
			raw.Close()
			return primRow{}, err
		}
		a, err := election.New(h, name, distsync.WithLeaseTTL(lease))
		if err != nil {
			raw.Close()
			return primRow{}, err
		}
		if _, err := a.Campaign(ctx, "a"); err != nil {
			raw.Close()
			return primRow{}, err
		}
		got := make(chan error, 1)
		var tb *election.Term
		go func() {
			var err error
			tb, err = b.Campaign(ctx, "b")
			got <- err
		}()
		// Cut at a different point of the renewal period each round.
		time.Sleep(lease/2 + time.Duration(r)*lease/time.Duration(3*rounds))
		t0 := time.Now()
		raw.Close()
		err = <-got
		took = append(took, time.Since(t0))
		cctx, ccancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_ = h.Close(cctx)
		ccancel()
		if err != nil {
			return primRow{}, err
		}
		if err := tb.Resign(ctx); err != nil {
			return primRow{}, err
		}
	}
	return primRow{
		scenario:   fmt.Sprintf("election: leader cut off → the next candidate leads, lease %v, %d rounds", lease, rounds),
		result:     fmt.Sprintf("p50 %v, max %v (%.2f× / %.2f× the lease)", pct(took, 50).Round(time.Millisecond), pct(took, 100).Round(time.Millisecond), float64(pct(took, 50))/float64(lease), float64(pct(took, 100))/float64(lease)),
		clientCmds: -1, redisCmds: -1, redisCPU: -1,
	}, nil
}

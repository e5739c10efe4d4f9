package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/waitgroup"
)

// waitgroupWake measures the waitgroup's broadcast: pods processes (clients and Handles of
// their own) with perPod goroutines each blocked in Wait on one group, and one more process
// that does the last Done. From the moment that Done is sent, it measures how long until the
// first waiter returned and until every waiter returned, over rounds rounds, in time and in
// round trips: a PING on an idle client of its own, just before each round's Done (the unit
// of the same run). Client commands are per waiter per round (the waits' checks and
// subscriptions, and the doer's Add and Done); Redis's, per round.
func waitgroupWake(ctx context.Context, addr string, pods, perPod, rounds int) (primRow, error) {
	ps, closeAll, err := openPods(addr, pods+1)
	if err != nil {
		return primRow{}, err
	}
	defer closeAll()
	name := fmt.Sprintf("wake:%d", time.Now().UnixNano())
	var wgs []*waitgroup.WaitGroup
	for _, p := range ps {
		wg, err := waitgroup.New(p.h, name)
		if err != nil {
			return primRow{}, err
		}
		wgs = append(wgs, wg)
	}
	doer := wgs[pods]
	idle, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return primRow{}, err
	}
	defer idle.Close()
	channel := keyPrefix + "{" + name + "}:waitgroup:ch" // see internal/scripts/lib/waitgroup.lua
	subscribed := func() (int64, error) {
		m, err := idle.Do(ctx, idle.B().PubsubNumsub().Channel(channel).Build()).AsIntMap()
		return m[channel], err
	}
	before, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	cl0 := clientTotal(ps)
	var firsts, lasts, rtts []time.Duration
	for range rounds {
		if err := doer.Add(ctx, 1); err != nil {
			return primRow{}, err
		}
		returned := make([]time.Time, pods*perPod)
		errs := make([]error, pods*perPod)
		var all sync.WaitGroup
		for i := range pods * perPod {
			all.Add(1)
			go func() {
				defer all.Done()
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				errs[i] = wgs[i%pods].Wait(wctx)
				returned[i] = time.Now()
			}()
		}
		// Every process subscribed, then a moment for the waiters' second checks: all of
		// them are then blocked on the channel.
		for deadline := time.Now().Add(10 * time.Second); ; {
			n, err := subscribed()
			if err != nil {
				return primRow{}, err
			}
			if n >= int64(pods) {
				break
			}
			if time.Now().After(deadline) {
				return primRow{}, fmt.Errorf("%d of %d processes subscribed", n, pods)
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		t0 := time.Now()
		if err := idle.Do(ctx, idle.B().Ping().Build()).Error(); err != nil {
			return primRow{}, err
		}
		rtts = append(rtts, time.Since(t0))
		sent := time.Now()
		if err := doer.Done(ctx); err != nil {
			return primRow{}, err
		}
		all.Wait()
		if err := errors.Join(errs...); err != nil {
			return primRow{}, err
		}
		first, last := returned[0], returned[0]
		for _, at := range returned {
			if at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
		if first.Before(sent) {
			return primRow{}, errors.New("a waiter returned before the last Done was sent")
		}
		firsts, lasts = append(firsts, first.Sub(sent)), append(lasts, last.Sub(sent))
	}
	after, err := commandstats(addr)
	if err != nil {
		return primRow{}, err
	}
	rc, rcpu := after.per(before, float64(rounds))
	rtt := pct(rtts, 50)
	in := func(d time.Duration) float64 { return float64(d) / float64(rtt) }
	f50, fmax, l50, lmax := pct(firsts, 50), pct(firsts, 100), pct(lasts, 50), pct(lasts, 100)
	return primRow{
		scenario: fmt.Sprintf("waitgroup: last Done → Wait returns, %d waiters (%d pods × %d) and a doer pod, %d rounds",
			pods*perPod, pods, perPod, rounds),
		result: fmt.Sprintf("first waiter p50 %v (max %v); every waiter p50 %v (max %v)",
			f50.Round(time.Microsecond), fmax.Round(time.Microsecond), l50.Round(time.Microsecond), lmax.Round(time.Microsecond)),
		rtt: fmt.Sprintf("first: %.1f (%.1f); all: %.1f (%.1f) (idle RTT %v)",
			in(f50), in(fmax), in(l50), in(lmax), rtt.Round(time.Microsecond)),
		clientCmds: float64(clientTotal(ps)-cl0) / float64(pods*perPod*rounds),
		redisCmds:  rc,
		redisCPU:   rcpu,
	}, nil
}

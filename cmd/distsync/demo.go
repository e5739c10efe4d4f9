//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/internal/counting"
	"github.com/distsync/distsync/internal/stats"
	"github.com/distsync/distsync/internal/sweep"
	"github.com/distsync/distsync/mutex"
)

type demoConfig struct {
	redis                    redisTarget
	pods, goroutines, rounds int
	hold                     time.Duration
}

// demoRecord is what one critical section saw.
type demoRecord struct {
	pod, goroutine int
	token          int64
	handoff        time.Duration // since the previous holder (another goroutine) called Unlock; 0 if none
	wait           time.Duration // Lock call to return
}

// errKeysLeft is the error of a demo that could not delete its keys when it ended: said also
// when a signal ended the demo.
var errKeysLeft = errors.New("could not delete the demo's keys")

func demo(ctx context.Context, cfg demoConfig, out io.Writer) (err error) {
	opt, where, stopServer, err := demoRedis(cfg.redis)
	if err != nil {
		return err
	}
	defer stopServer()

	// Every key of the run lives under a prefix of its own, which cleanUp deletes whatever
	// way the run ends: a mutex keeps its fencing counter for the handle's fence retention
	// (7 days by default) after the last Lock, so a run would otherwise leave a key behind on
	// the user's Redis.
	pods := &demoPods{prefix: fmt.Sprintf("distsync-demo:%016x:", rand.Uint64())}
	defer func() {
		if _, cerr := pods.cleanUp(ctx); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	if err := pods.open(opt, where, cfg.pods); err != nil {
		return err
	}
	rtt, err := pingRTT(ctx, pods.clients[0])
	if err != nil {
		return fmt.Errorf("ping %s: %w", where, err)
	}
	for _, c := range pods.clients {
		c.Reset()
	}

	fmt.Fprintf(out, "distsync demo: %d pods × %d goroutines, %d rounds each, on one mutex\n", cfg.pods, cfg.goroutines, cfg.rounds)
	fmt.Fprintf(out, "Redis:            %s (round trip p50 %v)\n", where, rtt.Round(time.Microsecond))

	run := &demoRun{lastHolder: -1}
	start := time.Now()
	if err := run.contend(ctx, cfg, pods.handles); err != nil {
		return err
	}
	elapsed := time.Since(start)
	report(out, cfg, run.records, int(run.maxInside.Load()), pods.clients, rtt, elapsed)
	deleted, err := pods.cleanUp(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "keys left:        none (deleted the run's %d, all under %s)\n", deleted, pods.prefix)
	return nil
}

// demoPods are the demo's simulated pods: a client and a Handle each, every key under prefix.
type demoPods struct {
	prefix  string
	clients []*counting.Client
	handles []*distsync.Handle
	cleaned bool
}

// open connects n pods to opt's Redis (where names it).
func (d *demoPods) open(opt rueidis.ClientOption, where string, n int) error {
	for range n {
		raw, err := rueidis.NewClient(opt)
		if err != nil {
			return fmt.Errorf("connect to %s: %w", where, err)
		}
		c := counting.New(raw)
		h, err := distsync.New(c, distsync.WithKeyPrefix(d.prefix))
		if err != nil {
			raw.Close()
			return err
		}
		c.Reset() // New's version check: the report counts what the pods' mutexes send
		d.clients, d.handles = append(d.clients, c), append(d.handles, h)
	}
	return nil
}

// cleanUp closes the pods and deletes every key under the prefix, once; it returns how many.
func (d *demoPods) cleanUp(ctx context.Context) (deleted int, err error) {
	if d.cleaned {
		return 0, nil
	}
	d.cleaned = true
	for _, h := range d.handles {
		_ = h.Close(context.Background())
	}
	defer func() {
		for _, c := range d.clients {
			c.Close()
		}
	}()
	if len(d.clients) == 0 {
		return 0, nil
	}
	// ctx may be cancelled already (an interrupt): the keys must go all the same.
	sweepCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	deleted, err = sweep.DeleteKeys(sweepCtx, d.clients[0].Client, d.prefix)
	if err != nil {
		err = fmt.Errorf("%w (%s*): %w", errKeysLeft, d.prefix, err)
	}
	return deleted, err
}

// demoRun is what the demo's goroutines record as they take turns on the mutex.
type demoRun struct {
	inside, maxInside atomic.Int32
	mu                sync.Mutex // guards the records; the mutex under test already serialises them
	records           []demoRecord
	lastUnlock        time.Time
	lastHolder        int
	firstErr          error
	errOnce           sync.Once
}

// contend runs cfg.goroutines goroutines on each Handle, each locking the mutex "demo"
// cfg.rounds times, and returns the first error any of them met.
func (r *demoRun) contend(ctx context.Context, cfg demoConfig, handles []*distsync.Handle) error {
	var wg sync.WaitGroup
	for p, h := range handles {
		m, err := mutex.New(h, "demo")
		if err != nil {
			return err
		}
		for g := range cfg.goroutines {
			id := p*cfg.goroutines + g
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range cfg.rounds {
					if err := r.round(ctx, m, p, id, cfg.hold); err != nil {
						r.errOnce.Do(func() { r.firstErr = err })
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	return r.firstErr
}

// round is one turn of goroutine id of pod p: Lock, hold for hold, Unlock, recorded.
func (r *demoRun) round(ctx context.Context, m *mutex.Mutex, p, id int, hold time.Duration) error {
	t0 := time.Now()
	lease, err := m.LockLease(ctx)
	if err != nil {
		return err
	}
	got := time.Now()
	n := r.inside.Add(1)
	for m := r.maxInside.Load(); n > m && !r.maxInside.CompareAndSwap(m, n); m = r.maxInside.Load() {
	}
	r.mu.Lock()
	rec := demoRecord{pod: p, goroutine: id, token: lease.Token(), wait: got.Sub(t0)}
	if r.lastHolder >= 0 && r.lastHolder != id {
		rec.handoff = got.Sub(r.lastUnlock)
	}
	r.records = append(r.records, rec)
	r.mu.Unlock()
	time.Sleep(hold)
	r.inside.Add(-1)
	r.mu.Lock()
	r.lastHolder, r.lastUnlock = id, time.Now()
	r.mu.Unlock()
	return m.Unlock(ctx)
}

// demoRedis returns client options for the Redis the demo uses: the URL given (a bare
// host:port stands for redis://host:port), or an embedded one it starts (and stop stops).
func demoRedis(r redisTarget) (opt rueidis.ClientOption, where string, stop func(), err error) {
	if r.url != "" {
		if opt, err = r.options(); err != nil {
			return opt, "", nil, fmt.Errorf("--redis: %w", err)
		}
		return opt, strings.Join(opt.InitAddress, ", "), func() {}, nil
	}
	srv, err := embedded.Start()
	if err != nil {
		return opt, "", nil, err
	}
	return srv.ClientOption(), "embedded miniredis at " + srv.Addr() + " (use --redis URL for a real one)", srv.Close, nil
}

func pingRTT(ctx context.Context, c rueidis.Client) (time.Duration, error) {
	var samples []time.Duration
	for range 50 {
		t0 := time.Now()
		if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
			return 0, err
		}
		samples = append(samples, time.Since(t0))
	}
	slices.Sort(samples)
	return samples[len(samples)/2], nil
}

func report(out io.Writer, cfg demoConfig, records []demoRecord, maxInside int, clients []*counting.Client, rtt, elapsed time.Duration) {
	perPod := make([]int, cfg.pods)
	perG := make([]float64, cfg.pods*cfg.goroutines)
	var handoffs, waits []time.Duration
	increasing := true
	for i, r := range records {
		perPod[r.pod]++
		perG[r.goroutine]++
		waits = append(waits, r.wait)
		if r.handoff > 0 {
			handoffs = append(handoffs, r.handoff)
		}
		if i > 0 && r.token <= records[i-1].token {
			increasing = false
		}
	}
	commands := 0
	for _, c := range clients {
		commands += c.Total()
	}
	overlaps := "none: never more than one holder at a time"
	if maxInside > 1 {
		overlaps = fmt.Sprintf("VIOLATED: %d holders at once", maxInside)
	}
	tokens := "strictly increasing"
	if !increasing {
		tokens = "NOT increasing"
	}
	fmt.Fprintf(out, "acquisitions:     %d in %v (%.0f/s); per pod %s\n", len(records), elapsed.Round(time.Millisecond),
		float64(len(records))/elapsed.Seconds(), strings.Trim(fmt.Sprint(perPod), "[]"))
	fmt.Fprintf(out, "overlaps:         %s\n", overlaps)
	if len(records) > 0 {
		fmt.Fprintf(out, "fencing tokens:   %s, %d … %d\n", tokens, records[0].token, records[len(records)-1].token)
	}
	if len(handoffs) > 0 {
		fmt.Fprintf(out, "hand-off:         p50 %v  p90 %v  p99 %v  (%s; Unlock by one goroutine to Lock returning in another)\n",
			pct(handoffs, 50), pct(handoffs, 90), pct(handoffs, 99), inRTT(pct(handoffs, 50), rtt))
	}
	fmt.Fprintf(out, "wait in Lock:     p50 %v  p99 %v  max %v\n", pct(waits, 50), pct(waits, 99), pct(waits, 100))
	fmt.Fprintf(out, "fairness:         Jain's index %.3f over %d goroutines (1 = equal shares)\n", stats.Jain(perG), len(perG))
	fmt.Fprintf(out, "Redis commands:   %.2f per acquisition, all pods together (renewals and clean-up included)\n",
		float64(commands)/float64(max(len(records), 1)))
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s) - 1) * p / 100
	return s[i].Round(time.Microsecond)
}

func inRTT(d, rtt time.Duration) string {
	if rtt <= 0 {
		return "?"
	}
	return fmt.Sprintf("%.1f round trips", float64(d)/float64(rtt))
}

// leftKeys returns the error of the clean-up in err, a demo's error that matches errKeysLeft:
// the cancellation that a signal caused says nothing a user needs beside the signal.
func leftKeys(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if errors.Is(e, errKeysLeft) {
				return e
			}
		}
	}
	return err
}

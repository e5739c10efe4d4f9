package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/distsync/distsync/internal/stats"
	"github.com/redis/rueidis"
)

// ---- uncontended Lock+Unlock, one goroutine

// pairStats is one library's uncontended Lock+Unlock: the p50 and p99 of its pairs
// interleaved with the other libraries' pair by pair, and of its pairs back to back.
type pairStats struct {
	p50, p99       time.Duration
	b2bP50, b2bP99 time.Duration
}

// uncontended times Lock+Unlock on an idle key for every library, twice: interleaved (one
// pair per library in turn, in a random order each round, see interleave), so that every
// library meets the same moments of a noisy machine; then back to back (blocks of
// consecutive pairs, the libraries taking turns block by block, see backToBack), as a worker
// loop that locks item after item does, with as many pairs. It returns each library's figures
// by name, and the p50 of the PINGs sent between the interleaved rounds (the unit).
func uncontended(ctx context.Context, ls []lib, addr string, iters int) (map[string]pairStats, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	pinger, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, 0, err
	}
	defer pinger.Close()
	ops := make([]pairOp, len(ls))
	for i, l := range ls {
		s, err := l.open(addr)
		if err != nil {
			return nil, 0, err
		}
		defer s.Close()
		lk := s.New(l.name + ":uncontended")
		ops[i] = pairOp{l.name, pairOf(lk.Lock, lk.Unlock)}
	}
	inter, pings, err := interleave(ctx, pinger, ops, iters)
	if err != nil {
		return nil, 0, err
	}
	b2b, err := backToBack(ctx, ops, iters)
	if err != nil {
		return nil, 0, err
	}
	out := map[string]pairStats{}
	for j, l := range ls {
		out[l.name] = pairStats{pct(inter[j], 50), pct(inter[j], 99), pct(b2b[j], 50), pct(b2b[j], 99)}
	}
	return out, pct(pings, 50), nil
}

// ---- distinct keys: Lock+Unlock pairs per second, each goroutine on its own key

// distinctGoroutines is how many goroutines the main table's distinct-keys column runs, each
// on its own key, in one process: enough that Redis, not the round trip, is what limits the
// pairs per second.
const distinctGoroutines = 64

// distinctKeys runs goroutines goroutines for dur, each locking and unlocking its own key
// through one session of l, and returns the pairs per second of them all, with the CPU a pair
// cost Redis and this process (the one library's session runs alone in it then): with many
// goroutines the two vCPUs, not the round trip, limit the figure, and these say whose work it
// is.
func distinctKeys(ctx context.Context, l lib, addr string, goroutines int, dur time.Duration) (distinct, error) {
	s, err := l.open(addr)
	if err != nil {
		return distinct{}, err
	}
	defer s.Close()
	return distinctRun(ctx, addr, goroutines, dur, func(g int) (func(context.Context) error, error) {
		lk := s.New(l.name + ":distinct:" + strconv.Itoa(g))
		return pairOf(lk.Lock, lk.Unlock), nil
	})
}

// distinctRun runs goroutines goroutines for dur, each repeating the pair newPair made for it
// (on a key of its own), and measures them as distinctKeys says.
func distinctRun(ctx context.Context, addr string, goroutines int, dur time.Duration, newPair func(g int) (func(context.Context) error, error)) (distinct, error) {
	pairs := make([]func(context.Context) error, goroutines)
	for g := range pairs {
		var err error
		if pairs[g], err = newPair(g); err != nil {
			return distinct{}, err
		}
	}
	before, err := commandstats(addr)
	if err != nil {
		return distinct{}, err
	}
	cpu0 := processCPU()
	ctx, cancel := context.WithTimeout(ctx, dur+30*time.Second)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	start := time.Now()
	deadline := start.Add(dur)
	for _, pair := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := pair(ctx); err != nil {
					errs <- err
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1 := processCPU()
	close(errs)
	if err := <-errs; err != nil {
		return distinct{}, err
	}
	after, err := commandstats(addr)
	if err != nil {
		return distinct{}, err
	}
	total := float64(n.Load())
	redisCmds, redisCPU := after.per(before, total)
	return distinct{perSec: total / elapsed.Seconds(), redisCmds: redisCmds, redisCPU: redisCPU, clientCPU: time.Duration(float64(cpu1-cpu0) / total)}, nil
}

// distinct is the outcome of distinctKeys: pairs per second, the Redis commands of a pair
// (INFO commandstats: a script's inner calls included, the script call too), and the CPU time
// of a pair in Redis (INFO cpu) and in this process (getrusage).
type distinct struct {
	perSec              float64
	redisCmds           float64
	redisCPU, clientCPU time.Duration
}

// processCPU returns the CPU time (user and system) this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ---- idle waiter: commands per second sent by a waiter while another session holds the lock

func idleWaiter(ctx context.Context, l lib, addr string, window time.Duration) (float64, error) {
	holder, err := l.open(addr)
	if err != nil {
		return 0, err
	}
	defer holder.Close()
	waiter, err := l.open(addr)
	if err != nil {
		return 0, err
	}
	defer waiter.Close()
	ctx, cancel := context.WithTimeout(ctx, window+15*time.Second)
	defer cancel()
	hl := holder.New(l.name + ":idle")
	if err := hl.Lock(ctx); err != nil {
		return 0, err
	}
	wl := waiter.New(l.name + ":idle")
	got := make(chan error, 1)
	go func() { got <- wl.Lock(ctx) }()
	time.Sleep(time.Second) // settle: first attempt, subscription
	before := waiter.Commands()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	sent := waiter.Commands() - before
	if err := hl.Unlock(ctx); err != nil {
		return 0, err
	}
	if err := <-got; err != nil {
		return 0, err
	}
	_ = wl.Unlock(ctx)
	return float64(sent) / window.Seconds(), nil
}

// ---- contention: processes × goroutines on one key

// record is one acquisition seen by a worker. Times are wall-clock nanoseconds: the workers
// are processes on one machine, and share its clock.
type record struct {
	G          int   `json:"g"` // process*100 + goroutine
	LockCall   int64 `json:"c"`
	LockReturn int64 `json:"r"`
	UnlockCall int64 `json:"u"`
}

type workerResult struct {
	Records  []record `json:"records"`
	Commands int64    `json:"commands"`
	Stalled  int      `json:"stalled"` // goroutines whose Lock never returned
	Err      string   `json:"err,omitempty"`
}

type contention struct {
	acquisitions       int
	perSecond          float64
	handoffP50         time.Duration // Unlock call to the next Lock return, in another goroutine
	handoffP99         time.Duration
	handoffs           []time.Duration // every hand-off, for the CDF plot
	reacquired         float64         // share of acquisitions by the goroutine that had just released
	waitP99            time.Duration
	jain               float64
	clientCmds         float64       // commands the clients sent, per acquisition
	redisCmds          float64       // commands Redis executed (INFO commandstats, script internals included), per acquisition
	redisCPU           time.Duration // Redis's CPU time (INFO cpu), per acquisition
	stalled            int           // goroutines still waiting 10 s after the run ended
	rtt                time.Duration // PING p50 during the run, from another client
	processes, perProc int
}

// runWorker is the body of a worker process: goroutines lock and unlock key until the
// deadline, and the records go to stdout as JSON.
func runWorker(libName, addr, key string, proc, goroutines int, start, until time.Time, hold time.Duration) {
	res := workerResult{}
	defer func() { _ = json.NewEncoder(os.Stdout).Encode(res) }()
	l, err := libByName(libName)
	if err != nil {
		res.Err = err.Error()
		return
	}
	s, err := l.open(addr)
	if err != nil {
		res.Err = err.Error()
		return
	}
	defer s.Close()
	lockers := make([]locker, goroutines)
	for g := range lockers {
		lockers[g] = s.New(key)
	}
	time.Sleep(time.Until(start))
	ctx, cancel := context.WithDeadline(context.Background(), until.Add(10*time.Second))
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g, lk := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []record
			for time.Now().Before(until) {
				r := record{G: proc*100 + g, LockCall: time.Now().UnixNano()}
				if err := lk.Lock(ctx); err != nil {
					mu.Lock()
					if time.Now().After(until) && ctx.Err() != nil {
						// Still waiting 10 s after everyone else stopped: a lost wake-up.
						res.Stalled++
					} else {
						res.Err = err.Error()
					}
					mu.Unlock()
					break
				}
				r.LockReturn = time.Now().UnixNano()
				if hold > 0 {
					time.Sleep(hold)
				}
				r.UnlockCall = time.Now().UnixNano()
				if err := lk.Unlock(ctx); err != nil {
					mu.Lock()
					res.Err = err.Error()
					mu.Unlock()
					return
				}
				mine = append(mine, r)
			}
			mu.Lock()
			res.Records = append(res.Records, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Commands = s.Commands()
}

func contended(ctx context.Context, l lib, addr string, processes, goroutines int, dur, hold time.Duration) (contention, error) {
	out := contention{processes: processes, perProc: goroutines}
	key := fmt.Sprintf("%s:contended:%d", l.name, time.Now().UnixNano())
	before, err := commandstats(addr)
	if err != nil {
		return out, err
	}
	start := time.Now().Add(500 * time.Millisecond) // workers connect first, then start together
	until := start.Add(dur)
	// The round trip while the machine is as busy as the contention makes it: the unit of
	// the hand-off columns.
	pingDone := make(chan []time.Duration)
	go func() {
		var d []time.Duration
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err == nil {
			defer c.Close()
			time.Sleep(time.Until(start))
			for time.Now().Before(until) {
				t0 := time.Now()
				if c.Do(context.Background(), c.B().Ping().Build()).Error() == nil {
					d = append(d, time.Since(t0))
				}
				time.Sleep(time.Millisecond)
			}
		}
		pingDone <- d
	}()
	type proc struct {
		cmd *exec.Cmd
		out strings.Builder
	}
	var procs []*proc
	for p := range processes {
		// A cancelled ctx kills the workers; the parent deletes their keys after they are gone.
		pr := &proc{cmd: exec.CommandContext(ctx, os.Args[0], "-worker", "-lib", l.name, "-redis", addr, "-key", key, "-prefix", keyPrefix,
			"-proc", strconv.Itoa(p), "-goroutines", strconv.Itoa(goroutines),
			"-start", strconv.FormatInt(start.UnixNano(), 10), "-until", strconv.FormatInt(until.UnixNano(), 10),
			"-hold", hold.String())}
		pr.cmd.Stdout = &pr.out
		pr.cmd.Stderr = os.Stderr
		if err := pr.cmd.Start(); err != nil {
			return out, err
		}
		procs = append(procs, pr)
	}
	var recs []record
	var clientCmds int64
	for _, pr := range procs {
		if err := pr.cmd.Wait(); err != nil {
			return out, fmt.Errorf("worker: %w", err)
		}
		var res workerResult
		if err := json.Unmarshal([]byte(pr.out.String()), &res); err != nil {
			return out, fmt.Errorf("worker output: %w", err)
		}
		if res.Err != "" {
			return out, fmt.Errorf("worker: %s", res.Err)
		}
		recs = append(recs, res.Records...)
		clientCmds += res.Commands
		out.stalled += res.Stalled
	}
	out.rtt = pct(<-pingDone, 50)
	after, err := commandstats(addr)
	if err != nil {
		return out, err
	}
	slices.SortFunc(recs, func(a, b record) int { return int(a.LockReturn - b.LockReturn) })
	if len(recs) < 2 {
		return out, fmt.Errorf("only %d acquisitions", len(recs))
	}
	var handoffs, waits []time.Duration
	perG := map[int]float64{}
	same := 0
	for i, r := range recs {
		perG[r.G]++
		waits = append(waits, time.Duration(r.LockReturn-r.LockCall))
		if i == 0 {
			continue
		}
		prev := recs[i-1]
		if prev.G == r.G {
			same++
			continue
		}
		handoffs = append(handoffs, time.Duration(r.LockReturn-prev.UnlockCall))
	}
	var shares []float64
	for p := range processes {
		for g := range goroutines {
			shares = append(shares, perG[p*100+g])
		}
	}
	n := len(recs)
	out.acquisitions = n
	out.perSecond = float64(n) / dur.Seconds()
	out.handoffP50, out.handoffP99 = pct(handoffs, 50), pct(handoffs, 99)
	out.handoffs = handoffs
	out.reacquired = float64(same) / float64(n-1)
	out.waitP99 = pct(waits, 99)
	out.jain = stats.Jain(shares)
	out.clientCmds = float64(clientCmds) / float64(n)
	out.redisCmds, out.redisCPU = after.per(before, float64(n))
	return out, nil
}

// redisLoad is what Redis has done so far: the commands it executed (INFO commandstats,
// leaving out the ones clients send to stay connected or to ask questions: PING, INFO, HELLO,
// CLIENT, SELECT, CLUSTER, COMMAND) and the CPU time its process used (INFO cpu, user and
// system: the commands, their scripts and the network work around them).
type redisLoad struct {
	cmds int64
	cpu  time.Duration
}

// per returns the load from before to l, per op of n.
func (l redisLoad) per(before redisLoad, n float64) (cmds float64, cpu time.Duration) {
	if n <= 0 {
		return -1, -1
	}
	return float64(l.cmds-before.cmds) / n, time.Duration(float64(l.cpu-before.cpu) / n)
}

// commandstats reads the Redis at addr's load so far (that node's alone, if it is a node of a
// Cluster).
func commandstats(addr string) (redisLoad, error) {
	var out redisLoad
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		return out, err
	}
	defer c.Close()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Section("cpu").Build()).ToString()
	if err != nil {
		return out, err
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			sec, _ := strconv.ParseFloat(rest, 64)
			out.cpu += time.Duration(sec * float64(time.Second))
			continue
		}
		if !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		switch strings.SplitN(strings.TrimPrefix(name, "cmdstat_"), "|", 2)[0] {
		case "ping", "info", "hello", "client", "select", "cluster", "command":
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		out.cmds += n
	}
	return out, nil
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

// ---- idle wake-up: the first waiter's Lock return after an Unlock, once both sat idle

// idleWake measures, over rounds, the time from the holder's Unlock call to the waiter's Lock
// returning in another client, after both sat idle for gap, and the round trip of a PING sent
// just before the Unlock by a client that sat idle as long (the unit: an idle machine is slow
// to wake, for a PING as for a lock). It returns the p50 of both and the slowest wake-up.
func idleWake(ctx context.Context, l lib, addr string, rounds int, gap time.Duration) (wake, ping, slowest time.Duration, err error) {
	holder, err := l.open(addr)
	if err != nil {
		return 0, 0, 0, err
	}
	defer holder.Close()
	waiter, err := l.open(addr)
	if err != nil {
		return 0, 0, 0, err
	}
	defer waiter.Close()
	pinger, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return 0, 0, 0, err
	}
	defer pinger.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Duration(rounds)*(gap+10*time.Second))
	defer cancel()
	hl, wl := holder.New(l.name+":wake"), waiter.New(l.name+":wake")
	var wakes, pings []time.Duration
	for range rounds {
		if err := hl.Lock(ctx); err != nil {
			return 0, 0, 0, err
		}
		got := make(chan time.Time, 1)
		fail := make(chan error, 1)
		go func() {
			if err := wl.Lock(ctx); err != nil {
				fail <- err
				return
			}
			got <- time.Now()
		}()
		time.Sleep(gap)
		t0 := time.Now()
		if err := pinger.Do(ctx, pinger.B().Ping().Build()).Error(); err != nil {
			return 0, 0, 0, err
		}
		pings = append(pings, time.Since(t0))
		t0 = time.Now()
		if err := hl.Unlock(ctx); err != nil {
			return 0, 0, 0, err
		}
		select {
		case at := <-got:
			wakes = append(wakes, at.Sub(t0))
		case err := <-fail:
			return 0, 0, 0, err
		}
		if err := wl.Unlock(ctx); err != nil {
			return 0, 0, 0, err
		}
	}
	return pct(wakes, 50), pct(pings, 50), pct(wakes, 100), nil
}

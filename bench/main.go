// Command bench compares distsync's mutex with the Go peers on one local redis-server, in one
// run, and prints a Markdown table (docs/benchmarks.md holds the latest one).
//
//	cd bench && go run . [-redis 127.0.0.1:6379] [-quick] [-primitives yes|no|only|identity|lockall|rate|breakdown] [-plots ../docs/img]
//
// Without -redis it starts a redis-server of its own (from PATH) on a free loopback port and
// stops it at the end. Latencies are also given in Redis round trips: the median PING on an
// idle connection, measured in the same run.
//
// Every key the run writes, for every library, starts with a prefix of the run's own,
// distsync-bench:<random>:, and the run deletes every key under it when it ends, also on an
// error or an interrupt (SIGINT, SIGTERM), so that it leaves nothing on a -redis server.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/sweep"
)

// keyPrefix starts every key the run writes, whatever the library (see each library's open
// and New in libs.go): a prefix of this run's own, so that the run can delete its keys at the
// end and no other. main sets it once, before anything runs; a worker process gets its
// parent's through -prefix.
var keyPrefix string

func main() {
	var (
		addr       = flag.String("redis", "", "redis-server address (default: start one)")
		quick      = flag.Bool("quick", false, "shorter runs (noisier figures)")
		only       = flag.String("libs", "", "comma-separated libraries to run (default: all)")
		processes  = flag.Int("processes", 4, "contention: worker processes")
		goroutines = flag.Int("goroutines", 4, "contention: goroutines per process")
		prims      = flag.String("primitives", "yes", "the distsync primitives table: yes, no, only (without the peers), identity (only the identity-cost rows), lockall (only mutex.All against nested Locks), rate (only rate.Limiter against go-redis/redis_rate), distinct (only every primitive's pair on distinct keys, 64 goroutines, against the floor), hog (only the uncontended and distinct-keys figures of -libs, quiet and then with a CPU hog on each core) or breakdown (only the client-side breakdown of one uncontended pair: the floor and distsync's primitives, cut at their client calls, with allocations and goroutine wake-ups per pair)")
		worker     = flag.Bool("worker", false, "internal: run as a contention worker")
		wLib       = flag.String("lib", "", "internal")
		wKey       = flag.String("key", "", "internal")
		wProc      = flag.Int("proc", 0, "internal")
		wStart     = flag.Int64("start", 0, "internal")
		wUntil     = flag.Int64("until", 0, "internal")
		wHold      = flag.Duration("hold", 0, "internal")
		wPrefix    = flag.String("prefix", "", "internal")
		crashHold  = flag.Bool("crash-holder", false, "internal: run as the holder of the crash scenario")
		plots      = flag.String("plots", "", "write SVG charts into this directory (docs/benchmarks.md embeds ../docs/img)")
	)
	flag.Parse()
	plotsDir = *plots
	if *crashHold {
		keyPrefix = *wPrefix
		runCrashHolder(*wLib, *addr, *wKey)
		return
	}
	if *worker {
		keyPrefix = *wPrefix
		runWorker(*wLib, *addr, *wKey, *wProc, *goroutines, time.Unix(0, *wStart), time.Unix(0, *wUntil), *wHold)
		return
	}
	keyPrefix = fmt.Sprintf("distsync-bench:%016x:", rand.Uint64())
	// An interrupt ends the scenarios early, so that run's deferred clean-up deletes the keys.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *quick, *only, *prims, *processes, *goroutines); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type row struct {
	lib        lib
	un         pairStats // uncontended Lock+Unlock, interleaved and back to back
	cont       contention
	idle       float64
	distinct   distinct
	contErr    error
	contention bool
	distinctErr,
	idleErr error
	// idle wake-up: p50 and slowest, and the p50 of a PING after the same idle time
	wake, wakePing, wakeMax time.Duration
	wakeErr                 error
	// crash recovery: how long after the killed holder's lease ran out the waiter got it
	crashLate, crashLeft time.Duration
	crashErr             error
}

func run(ctx context.Context, addr string, quick bool, only, prims string, processes, goroutines int) (err error) {
	if addr == "" {
		srv, err := startRedis()
		if err != nil {
			return err
		}
		defer srv.stop()
		addr = srv.addr
		ownServer = srv
	}
	defer func() {
		if cerr := deleteRunKeys(addr); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	switch prims {
	case "only":
		return primitives(ctx, addr, quick)
	case "identity":
		return identityOnly(ctx, addr, quick)
	case "lockall":
		return lockAll(ctx, addr, quick)
	case "rate":
		return rateBench(ctx, addr, quick)
	case "breakdown":
		return breakdown(ctx, addr, quick)
	case "distinct":
		return distinctOnly(ctx, addr, quick)
	}
	// The idle window stays inside one lease (10 s, after a 1 s settle), so that the peers
	// without renewal still hold their lock when it ends.
	iters, dur, idleWin, distinctDur := 3000, 5*time.Second, 8*time.Second, 3*time.Second
	wakeRounds, wakeGap := 5, 3*time.Second
	if quick {
		iters, dur, idleWin, distinctDur = 500, 2*time.Second, 3*time.Second, time.Second
		wakeRounds, wakeGap = 3, time.Second
	}
	var chosen []lib
	for _, l := range libs {
		if only == "" || slices_contains(strings.Split(only, ","), l.name) {
			chosen = append(chosen, l)
		}
	}
	if prims == "hog" {
		return hogCompare(ctx, addr, chosen, iters, distinctDur)
	}
	fmt.Fprintf(os.Stderr, "uncontended, all libraries interleaved, then back to back…\n")
	un, rtt, err := uncontended(ctx, chosen, addr, iters)
	if err != nil {
		return fmt.Errorf("uncontended: %w", err)
	}
	var rows []row
	for _, l := range chosen {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r := row{lib: l, un: un[l.name]}
		fmt.Fprintf(os.Stderr, "%s: distinct keys…\n", l.name)
		if r.distinct, err = distinctKeys(ctx, l, addr, distinctGoroutines, distinctDur); err != nil {
			r.distinctErr = err
			fmt.Fprintf(os.Stderr, "%s distinct keys: %v\n", l.name, err)
		}
		if !l.floor {
			r.contention = true
			fmt.Fprintf(os.Stderr, "%s: contention %d×%d…\n", l.name, processes, goroutines)
			r.cont, r.contErr = contended(ctx, l, addr, processes, goroutines, dur, 0)
			if r.contErr != nil {
				fmt.Fprintf(os.Stderr, "%s contention: %v\n", l.name, r.contErr)
			}
			fmt.Fprintf(os.Stderr, "%s: idle waiter…\n", l.name)
			if r.idle, err = idleWaiter(ctx, l, addr, idleWin); err != nil {
				r.idleErr = err
				fmt.Fprintf(os.Stderr, "%s idle waiter: %v\n", l.name, err)
			}
			fmt.Fprintf(os.Stderr, "%s: crash recovery…\n", l.name)
			if r.crashLate, r.crashLeft, err = crashRecovery(ctx, l, addr); err != nil {
				r.crashErr = err
				fmt.Fprintf(os.Stderr, "%s crash recovery: %v\n", l.name, err)
			}
			fmt.Fprintf(os.Stderr, "%s: idle wake-up…\n", l.name)
			if r.wake, r.wakePing, r.wakeMax, err = idleWake(ctx, l, addr, wakeRounds, wakeGap); err != nil {
				r.wakeErr = err
				fmt.Fprintf(os.Stderr, "%s idle wake-up: %v\n", l.name, err)
			}
		}
		rows = append(rows, r)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	printTable(rows, rtt, processes, goroutines, dur, idleWin, wakeRounds, wakeGap, distinctDur)
	if prims != "no" {
		return primitives(ctx, addr, quick)
	}
	return nil
}

// deleteRunKeys deletes every key under keyPrefix on the server at addr, once the run is
// over: the peers delete their keys on Unlock, but distsync keeps a name's fencing counter
// for the fence retention (7 days by default), and any lock held when a scenario failed or
// was interrupted stays until its lease ends.
func deleteRunKeys(addr string) error {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return fmt.Errorf("delete the run's keys (%s*): %w", keyPrefix, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := sweep.DeleteKeys(ctx, c, keyPrefix)
	if err != nil {
		return fmt.Errorf("delete the run's keys (%s*): %w", keyPrefix, err)
	}
	fmt.Fprintf(os.Stderr, "deleted the run's %d keys (%s*)\n", n, keyPrefix)
	return nil
}

func slices_contains(xs []string, x string) bool {
	for _, y := range xs {
		if strings.TrimSpace(y) == x {
			return true
		}
	}
	return false
}

func printTable(rows []row, rtt time.Duration, processes, goroutines int, dur, idleWin time.Duration, wakeRounds int, wakeGap, distinctDur time.Duration) {
	ratio := func(d, unit time.Duration) string {
		if unit <= 0 {
			return "?"
		}
		return fmt.Sprintf("%.1f", float64(d)/float64(unit))
	}
	var floor pairStats
	floorDistinct, bestPeer := 0.0, 0.0
	for _, r := range rows {
		if r.lib.floor {
			floor = r.un
			if r.distinctErr == nil {
				floorDistinct = r.distinct.perSec
			}
		} else if r.lib.name != "distsync" && r.distinct.perSec > bestPeer {
			bestPeer = r.distinct.perSec
		}
	}
	times := func(d, f time.Duration) string {
		if f <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f×", float64(d)/float64(f))
	}
	fmt.Printf("Round trip (PING p50), measured between the uncontended pairs: %v.\n\n", rtt.Round(time.Microsecond))
	fmt.Printf("| library | Lock+Unlock p50 (p99), uncontended | in RTT | vs floor | back-to-back p50 (p99), vs floor | hand-off p50 / p99, in RTT under load | releaser re-acquires | Lock wait p99 | Jain (goroutines) | client cmds / acq | Redis cmds / acq | Redis CPU / acq | idle waiter cmds/s | idle wake-up p50 (max), in idle RTT | crash: waiter in after the lease ran out | distinct keys, pairs/s |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		b2b := fmt.Sprintf("%v (%v), %s", r.un.b2bP50.Round(time.Microsecond), r.un.b2bP99.Round(time.Microsecond),
			times(r.un.b2bP50, floor.b2bP50))
		cont := "| — | — | — | — | — | — | — | — | — | — "
		if r.contention && r.contErr == nil {
			c := r.cont
			wait := c.waitP99.Round(time.Microsecond).String()
			if c.stalled > 0 {
				wait = fmt.Sprintf("∞: %d of %d goroutines never got it", c.stalled, c.processes*c.perProc)
			}
			idle := fmt.Sprintf("%.2f", r.idle)
			if r.idleErr != nil {
				idle = "error: " + r.idleErr.Error()
			}
			wake := fmt.Sprintf("%s (%s; %v, RTT %v)", ratio(r.wake, r.wakePing), ratio(r.wakeMax, r.wakePing),
				r.wake.Round(time.Microsecond), r.wakePing.Round(time.Microsecond))
			if r.wakeErr != nil {
				wake = "error: " + r.wakeErr.Error()
			}
			crash := fmt.Sprintf("%v (lease left at the kill: %v)", r.crashLate.Round(time.Millisecond), r.crashLeft.Round(time.Millisecond))
			if r.crashErr != nil {
				crash = "error: " + r.crashErr.Error()
			}
			cont = fmt.Sprintf("| %s / %s (%v / %v; RTT %v) | %.0f%% | %s | %.3f | %.2f | %.2f | %v | %s | %s | %s ",
				ratio(c.handoffP50, c.rtt), ratio(c.handoffP99, c.rtt), c.handoffP50.Round(time.Microsecond),
				c.handoffP99.Round(time.Microsecond), c.rtt.Round(time.Microsecond), 100*c.reacquired, wait,
				c.jain, c.clientCmds, c.redisCmds, c.redisCPU.Round(100*time.Nanosecond), idle, wake, crash)
		} else if r.contErr != nil {
			cont = fmt.Sprintf("| error: %v | | | | | | | | | ", r.contErr)
		}
		fmt.Printf("| %s | %v (%v) | %s | %s | %s %s| %s |\n", r.lib.name, r.un.p50.Round(time.Microsecond), r.un.p99.Round(time.Microsecond),
			ratio(r.un.p50, rtt), times(r.un.p50, floor.p50), b2b, cont, distinctCell(r, floorDistinct, bestPeer))
	}
	fmt.Printf("\nSettings: lease 10 s for every library. Uncontended: one goroutine, Lock then Unlock on an idle key, the libraries interleaved pair by pair (a PING before each round is the RTT unit); back-to-back: the same pairs, as many, in blocks of %d consecutive pairs per library (a worker loop locking item after item), the libraries taking turns block by block in a new random order each round, after one block each to warm up. Contention: %d processes × %d goroutines on one key for %v, no work inside the lock; a hand-off is the time from one goroutine's Unlock call to the next Lock returning in another goroutine; its RTT unit is a PING sent by another client during the run. Idle waiter: commands a waiting client sends in %v while another client holds the lock. Idle wake-up: Unlock call to the waiting client's Lock return after both sat idle for %v, %d rounds; its unit is a PING sent just before the Unlock by a client idle as long. Crash: a holder process, past its first renewal, is SIGKILLed with a waiter queued; the time from when its lease ran out (its PTTL read at the kill) to the waiter's Lock return. Distinct keys: %d goroutines in one process, each on its own key, for %v; × floor is against the floor's pairs/s; CPU per pair is Redis's (INFO cpu, user and system) and the bench process's (getrusage) over the run, in which that library's session runs alone: with 64 goroutines the two vCPUs, not the round trip, limit the pairs.\n\n",
		pairBlock, processes, goroutines, dur, idleWin, wakeGap, wakeRounds, distinctGoroutines, distinctDur)
	for _, r := range rows {
		fmt.Printf("- %s: %s\n", r.lib.name, r.lib.settings)
	}
	plotHandoffCDF(rows)
	plotRedisCPU(rows)
}

// distinctCell is r's distinct-keys cell: its pairs/s, against the floor's (floor, when
// measured) and, for distsync, against the best peer's.
func distinctCell(r row, floor, bestPeer float64) string {
	if r.distinctErr != nil {
		return "error: " + r.distinctErr.Error()
	}
	d := r.distinct
	var notes []string
	if floor > 0 && !r.lib.floor {
		notes = append(notes, fmt.Sprintf("%.2f× floor", d.perSec/floor))
	}
	if r.lib.name == "distsync" && bestPeer > 0 {
		notes = append(notes, fmt.Sprintf("%.2f× best peer", d.perSec/bestPeer))
	}
	notes = append(notes, fmt.Sprintf("per pair: Redis %.2f cmds, CPU Redis %v, client %v", d.redisCmds,
		d.redisCPU.Round(100*time.Nanosecond), d.clientCPU.Round(100*time.Nanosecond)))
	return fmt.Sprintf("%.0f (%s)", d.perSec, strings.Join(notes, ", "))
}

// ---- a redis-server of the benchmark's own

type server struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

func startRedis() (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("no redis-server on PATH: install it or pass -redis host:port")
	}
	dir, err := os.MkdirTemp("", "distsync-bench-")
	if err != nil {
		return nil, err
	}
	for range 20 {
		port := 10000 + int(time.Now().UnixNano()%12000)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err != nil {
			continue
		} else {
			_ = l.Close()
		}
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd, dir: dir}
		if waitReady(s.addr) {
			return s, nil
		}
		s.stop()
	}
	return nil, errors.New("could not start redis-server")
}

func waitReady(addr string) bool {
	for range 200 {
		if c, err := net.Dial("tcp", addr); err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			line, _ := bufio.NewReader(c).ReadString('\n')
			_ = c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return true
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	return false
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = os.RemoveAll(s.dir)
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// runCrashHolder is the body of a holder process of the crash scenario: it takes key, says
// "locked" on stdout, and holds (renewing, if its library renews) until it is killed.
func runCrashHolder(libName, addr, key string) {
	l, err := libByName(libName)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	s, err := l.open(addr)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	if err := s.New(key).Lock(context.Background()); err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("locked")
	select {} // until SIGKILL
}

// crashRecovery starts a holder process, lets a waiter (in this process) queue behind it, lets
// the holder live past its first renewal (a third of the lease), kills it with SIGKILL, and
// returns how long after the killed holder's lease ran out (its PTTL read at the kill) the
// waiter's Lock returned.
func crashRecovery(ctx context.Context, l lib, addr string) (late, left time.Duration, err error) {
	key := fmt.Sprintf("%s:crash:%d", l.name, time.Now().UnixNano())
	cmd := exec.CommandContext(ctx, os.Args[0], "-crash-holder", "-lib", l.name, "-redis", addr, "-key", key, "-prefix", keyPrefix)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		return 0, 0, fmt.Errorf("holder: %q %v", line, err)
	}
	s, err := l.open(addr)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	wctx, cancel := context.WithTimeout(ctx, leaseTTL+30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	var at time.Time
	go func() {
		err := s.New(key).Lock(wctx)
		at = time.Now()
		got <- err
	}()
	time.Sleep(leaseTTL/3 + time.Second) // past the holder's first renewal
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, 0, err
	}
	killed := time.Now()
	if left, err = lockPTTL(addr, key); err != nil {
		return 0, 0, err
	}
	if err := <-got; err != nil {
		return 0, left, fmt.Errorf("the waiter never got the lock: %w", err)
	}
	return at.Sub(killed.Add(left)), left, nil
}

// lockPTTL returns the longest PTTL, up to a lease, among the keys of the run that name key:
// the lock's (a library's other keys either have no TTL or, like distsync's fence, a far
// longer one).
func lockPTTL(addr, key string) (time.Duration, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctx := context.Background()
	var best int64 = -1
	var cursor uint64
	for range 1000 {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(keyPrefix+"*"+key+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return 0, err
		}
		for _, k := range e.Elements {
			ms, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
			if err == nil && ms > best && time.Duration(ms)*time.Millisecond <= leaseTTL {
				best = ms
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("no lock key with a lease for %q", key)
	}
	return time.Duration(best) * time.Millisecond, nil
}

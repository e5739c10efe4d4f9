// Package scripts holds every Lua script distsync runs, one embedded .lua file each.
//
// Each file starts with a header giving its KEYS, ARGV and reply. Go names them too: each
// script's KEYS and ARGV are the fields of one struct (MutexAcquireArgs for mutex_acquire.lua,
// see seam.go), whose Exec and Call build them in the header's order, and a test checks
// every struct against its header. A line of the form
// "-- #include lib/x.lua" is replaced by that file when the script is loaded, so helpers
// shared by several scripts (the server clock, the waiter queue) are written once.
// Scripts run through rueidis' EVALSHA with an EVAL fallback on NOSCRIPT.
package scripts

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/rueidis"
)

//go:embed *.lua lib/*.lua
var files embed.FS

// The scripts. Their contracts are in the headers of the .lua files.
var (
	Extend          = load("extend.lua")
	MutexAcquire    = load("mutex_acquire.lua")
	MutexRelease    = load("mutex_release.lua")
	MutexLeave      = load("mutex_leave.lua")
	MutexConfirm    = load("mutex_confirm.lua")
	MutexRenew      = load("mutex_renew.lua")
	MutexAcquireAll = load("mutex_acquire_all.lua")

	ReentrantLock    = load("reentrant_lock.lua")
	ReentrantUnlock  = load("reentrant_unlock.lua")
	ReentrantAbandon = load("reentrant_abandon.lua")
	ReentrantRenew   = load("reentrant_renew.lua")

	FairAcquire = load("fair_acquire.lua")
	FairLeave   = load("fair_leave.lua")
	FairPlace   = load("fair_place.lua")

	SemaphoreAcquire = load("semaphore_acquire.lua")
	SemaphoreRelease = load("semaphore_release.lua")
	SemaphoreLeave   = load("semaphore_leave.lua")
	SemaphoreResize  = load("semaphore_resize.lua")
	SemaphorePlace   = load("semaphore_place.lua")
	SemaphoreRenew   = load("semaphore_renew.lua")
	SemaphoreStatus  = load("semaphore_status.lua")

	Holders = load("holders.lua")

	OnceBegin  = load("once_begin.lua")
	OnceFinish = load("once_finish.lua")
	OnceForget = load("once_forget.lua")

	RWMutexLock   = load("rwmutex_lock.lua")
	RWMutexUnlock = load("rwmutex_unlock.lua")
	RWMutexLeave  = load("rwmutex_leave.lua")
	RWMutexRenew  = load("rwmutex_renew.lua")

	FenceRaise   = load("fence_raise.lua")
	FencedSet    = load("fenced_set.lua")
	FencedDelete = load("fenced_delete.lua")
)

// loaded is every script, in the order load made them.
var loaded []*Script

// All returns every script, in the order they were loaded: the test of the seam
// (seam_test.go) finds each one's struct.
func All() []*Script { return slices.Clone(loaded) }

// Script is one loaded Lua script.
type Script struct {
	name string
	src  string
	sha  string
}

func load(name string) *Script {
	src := expand(name, 0)
	sum := sha1.Sum([]byte(src))
	s := &Script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
	loaded = append(loaded, s)
	return s
}

const includeMark = "-- #include "

func expand(name string, depth int) string {
	if depth > 4 {
		panic("scripts: include nesting too deep at " + name)
	}
	b, err := files.ReadFile(name)
	if err != nil {
		panic("scripts: " + err.Error())
	}
	var out strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if inc, ok := strings.CutPrefix(line, includeMark); ok {
			out.WriteString(expand(strings.TrimSpace(inc), depth+1))
			continue
		}
		out.WriteString(line)
	}
	return out.String()
}

// Name returns the script's file name.
func (s *Script) Name() string { return s.name }

// SHA returns the script's SHA1, as EVALSHA names it.
func (s *Script) SHA() string { return s.sha }

// Source returns the script as sent to Redis, includes expanded.
func (s *Script) Source() string { return s.src }

// Exec runs the script once (EVALSHA, then EVAL if the server does not know it yet).
// rueidis does not retry it: a script that changes state must not run twice. An ACL's
// refusal comes back with what the script ran before Redis's error (the command, or the
// script's line and what it calls there), which it wraps.
//
// It builds the command itself rather than through rueidis.Lua.Exec, which does the same
// EVALSHA-then-EVAL, so that keys and args are only read, never kept: the seam's Exec methods
// fill them on the stack, and an uncontended acquisition allocates nothing for its arguments.
func (s *Script) Exec(ctx context.Context, c rueidis.Client, keys, args []string) rueidis.RedisResult {
	r := c.Do(ctx, s.evalsha(c, keys, args))
	if noScript(r) {
		r = c.Do(ctx, s.eval(c, keys, args))
	}
	return s.explain(r, keys)
}

// evalsha and eval build the command that runs s with keys and args, by its SHA1 or with its
// source; they read keys and args, and keep neither.
func (s *Script) evalsha(c rueidis.Client, keys, args []string) rueidis.Completed {
	return c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func (s *Script) eval(c rueidis.Client, keys, args []string) rueidis.Completed {
	return c.B().Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// noScript reports whether r is Redis's NOSCRIPT: the server does not know the script yet.
func noScript(r rueidis.RedisResult) bool {
	re, ok := rueidis.IsRedisErr(r.Error())
	return ok && re.IsNoScript()
}

// Call is one script invocation, for a batch ([DoMulti]) or to send later. Make it with the
// Call method of the script's struct (see seam.go), which names every key and argument.
type Call struct {
	Script *Script
	Keys   []string
	Args   []string
}

// Exec runs k once, as [Script.Exec] does.
func (k Call) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	s := k.Script
	return s.Exec(ctx, c, k.Keys, k.Args)
}

// DoMulti runs calls in one pipeline per Redis node (rueidis groups them by slot). Calls that
// find the script missing (NOSCRIPT) are sent again with EVAL, in a second pipeline. Unlike
// rueidis.Lua.ExecMulti it does not SCRIPT LOAD on every node first, which would cost one
// more round trip on every renewal tick.
func DoMulti(ctx context.Context, c rueidis.Client, calls []Call) []rueidis.RedisResult {
	if len(calls) == 0 {
		return nil
	}
	cmds := make(rueidis.Commands, len(calls))
	for i, k := range calls {
		cmds[i] = k.Script.evalsha(c, k.Keys, k.Args)
	}
	res := c.DoMulti(ctx, cmds...)
	var again []int
	for i, r := range res {
		if noScript(r) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		cmds = cmds[:0]
		for _, i := range again {
			k := calls[i]
			cmds = append(cmds, k.Script.eval(c, k.Keys, k.Args))
		}
		for j, r := range c.DoMulti(ctx, cmds...) {
			res[again[j]] = r
		}
	}
	for i, k := range calls {
		res[i] = k.Script.explain(res[i], k.Keys)
	}
	return res
}

// String implements fmt.Stringer.
func (s *Script) String() string { return fmt.Sprintf("script %s (%s)", s.name, s.sha[:8]) }

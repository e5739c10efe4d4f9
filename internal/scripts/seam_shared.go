package scripts

import (
	"context"

	"github.com/redis/rueidis"
)

// The KEYS and ARGV shared by all the scripts of a rwmutex (lib/rw.lua), of a semaphore
// (lib/sem.lua) and of a wait group (lib/waitgroup.lua): one struct each, whose Exec and Call
// take the script, and panic if it is not one of the family's (see seam.go).

// The scripts that share a struct.
var (
	RWMutexScripts   = []*Script{RWMutexLock, RWMutexUnlock, RWMutexLeave, RWMutexRenew}
	SemaphoreScripts = []*Script{SemaphoreAcquire, SemaphoreRelease, SemaphoreLeave, SemaphoreResize,
		SemaphorePlace, SemaphoreRenew, SemaphoreStatus}
	WaitGroupScripts = []*Script{WaitGroupAdd, WaitGroupJoin, WaitGroupLeave, WaitGroupVoid, WaitGroupCheck}
)

// RWMutexKeys are the KEYS of every rwmutex script, in lib/rw.lua's order. A rwmutex makes
// them once.
type RWMutexKeys struct {
	W     string `key:"w"`
	R     string `key:"r"`
	WW    string `key:"ww"`
	RQ    string `key:"rq"`
	RA    string `key:"ra"`
	Fence string `key:"fence"`
	Ops   string `key:"ops"`
	WO    string `key:"wo"`
	Rel   string `key:"rel"`
}

// RWMutexArgs are the KEYS and ARGV of every rwmutex script (rwmutex_lock.lua,
// rwmutex_unlock.lua, rwmutex_leave.lua, rwmutex_renew.lua), in lib/rw.lua's order.
type RWMutexArgs struct {
	Keys     RWMutexKeys
	Mode     string `arg:"mode"`
	Owner    string `arg:"owner"`
	Waiter   string `arg:"waiter"`
	More     string `arg:"more"`
	TTL      string `arg:"ttl"`
	Slack    string `arg:"slack"`
	Window   string `arg:"window"`
	FenceTTL string `arg:"fence_ttl"`
	OpsTTL   string `arg:"ops_ttl"`
	Prefix   string `arg:"channel"` // the channel prefix
	Pub      string `arg:"pub"`
}

// Exec runs s, a rwmutex script, once with a, as [Script.Exec] does.
func (a RWMutexArgs) Exec(ctx context.Context, c rueidis.Client, s *Script) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(s, buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of s, a rwmutex script.
func (a RWMutexArgs) Call(s *Script) Call { return a.fill(s, make([]string, 0, 20)) }

func (a RWMutexArgs) fill(s *Script, v []string) Call {
	mustBeOne("RWMutexArgs", s, RWMutexScripts)
	k := a.Keys
	v = append(v, k.W, k.R, k.WW, k.RQ, k.RA, k.Fence, k.Ops, k.WO, k.Rel,
		a.Mode, a.Owner, a.Waiter, a.More, a.TTL, a.Slack, a.Window, a.FenceTTL, a.OpsTTL, a.Prefix, a.Pub)
	return split(s, v, 9)
}

// SemaphoreKeys are the KEYS of every semaphore script, in lib/sem.lua's order. A semaphore
// makes them once.
type SemaphoreKeys struct {
	H    string `key:"h"`
	N    string `key:"n"`
	Q    string `key:"q"`
	QX   string `key:"qx"`
	QN   string `key:"qn"`
	Size string `key:"size"`
	Ops  string `key:"ops"`
}

// SemaphoreArgs are the KEYS and ARGV of every semaphore script (semaphore_acquire.lua,
// semaphore_release.lua, semaphore_leave.lua, semaphore_resize.lua, semaphore_place.lua,
// semaphore_renew.lua, semaphore_status.lua), in lib/sem.lua's order.
type SemaphoreArgs struct {
	Keys   SemaphoreKeys
	ID     string `arg:"id"`
	N      string `arg:"n"`
	Size   string `arg:"size"`
	TTL    string `arg:"ttl"`
	WLease string `arg:"wlease"`
	Slack  string `arg:"slack"`
	Prefix string `arg:"channel"` // the channel prefix
	Pub    string `arg:"pub"`
	OpsTTL string `arg:"ops_ttl"`
	Extra  string `arg:"extra"`
}

// Exec runs s, a semaphore script, once with a, as [Script.Exec] does.
func (a SemaphoreArgs) Exec(ctx context.Context, c rueidis.Client, s *Script) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(s, buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of s, a semaphore script.
func (a SemaphoreArgs) Call(s *Script) Call { return a.fill(s, make([]string, 0, 17)) }

func (a SemaphoreArgs) fill(s *Script, v []string) Call {
	mustBeOne("SemaphoreArgs", s, SemaphoreScripts)
	k := a.Keys
	v = append(v, k.H, k.N, k.Q, k.QX, k.QN, k.Size, k.Ops,
		a.ID, a.N, a.Size, a.TTL, a.WLease, a.Slack, a.Prefix, a.Pub, a.OpsTTL, a.Extra)
	return split(s, v, 7)
}

// WaitGroupKeys are the KEYS of every waitgroup script, in lib/waitgroup.lua's order. A wait
// group makes them once.
type WaitGroupKeys struct {
	S   string `key:"s"`
	M   string `key:"m"`
	Ops string `key:"ops"`
}

// WaitGroupArgs are the KEYS and ARGV of every waitgroup script (waitgroup_add.lua,
// waitgroup_join.lua, waitgroup_leave.lua, waitgroup_void.lua, waitgroup_check.lua), in
// lib/waitgroup.lua's order.
type WaitGroupArgs struct {
	Keys    WaitGroupKeys
	ID      string `arg:"id"`
	Delta   string `arg:"delta"`
	TTL     string `arg:"ttl"`
	Expiry  string `arg:"expiry"`
	Keep    string `arg:"keep"`
	Channel string `arg:"channel"`
	Pub     string `arg:"pub"`
	OpsTTL  string `arg:"ops_ttl"`
	Extra   string `arg:"extra"`
}

// Exec runs s, a waitgroup script, once with a, as [Script.Exec] does.
func (a WaitGroupArgs) Exec(ctx context.Context, c rueidis.Client, s *Script) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(s, buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of s, a waitgroup script.
func (a WaitGroupArgs) Call(s *Script) Call { return a.fill(s, make([]string, 0, 12)) }

func (a WaitGroupArgs) fill(s *Script, v []string) Call {
	mustBeOne("WaitGroupArgs", s, WaitGroupScripts)
	k := a.Keys
	v = append(v, k.S, k.M, k.Ops, a.ID, a.Delta, a.TTL, a.Expiry, a.Keep, a.Channel, a.Pub, a.OpsTTL, a.Extra)
	return split(s, v, 3)
}

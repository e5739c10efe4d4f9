package scripts

import (
	"context"

	"github.com/redis/rueidis"
)

// The KEYS and ARGV of a mutex's scripts, and of extend.lua, fence_raise.lua and holders.lua
// (see seam.go).

// MutexKeys are the first four KEYS of a mutex's scripts (mutex_acquire.lua, mutex_confirm.lua,
// mutex_leave.lua, mutex_release.lua) and of a fair lock's (fair_acquire.lua, fair_leave.lua,
// fair_place.lua). A primitive makes them once.
type MutexKeys struct {
	Lock  string `key:"lock"`
	Fence string `key:"fence"`
	Q     string `key:"q"`
	QX    string `key:"qx"`
}

// MutexAcquireArgs are mutex_acquire.lua's KEYS and ARGV, in its header's order.
type MutexAcquireArgs struct {
	Keys     MutexKeys
	Owner    string `arg:"owner"`
	TTL      string `arg:"ttl"`
	FenceTTL string `arg:"fence_ttl"`
	Waiter   string `arg:"waiter"`
	Flags    string `arg:"flags"`
	Slack    string `arg:"slack"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	Backup   string `arg:"backup"`
	Last     string `arg:"last"`
}

// Exec runs mutex_acquire.lua once with a, as [Script.Exec] does.
func (a MutexAcquireArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of mutex_acquire.lua.
func (a MutexAcquireArgs) Call() Call { return a.fill(make([]string, 0, 14)) }

func (a MutexAcquireArgs) fill(v []string) Call {
	k := a.Keys
	v = append(v, k.Lock, k.Fence, k.Q, k.QX,
		a.Owner, a.TTL, a.FenceTTL, a.Waiter, a.Flags, a.Slack, a.Prefix, a.Pub, a.Backup, a.Last)
	return split(MutexAcquire, v, 4)
}

// MutexAcquireAllArgs are mutex_acquire_all.lua's KEYS and ARGV, in its header's order: Keys
// holds four keys per mutex (lock, fence, qx, with) and TTLs a lease per mutex.
type MutexAcquireAllArgs struct {
	Keys     []string `key:"KEYS"`
	Owner    string   `arg:"owner"`
	FenceTTL string   `arg:"fence_ttl"`
	With     string   `arg:"with"`
	TTLs     []string `arg:"ttl"`
}

// Call returns a as a call of mutex_acquire_all.lua.
func (a MutexAcquireAllArgs) Call() Call {
	v := make([]string, 0, len(a.Keys)+3+len(a.TTLs))
	v = append(v, a.Keys...)
	v = append(v, a.Owner, a.FenceTTL, a.With)
	v = append(v, a.TTLs...)
	return split(MutexAcquireAll, v, len(a.Keys))
}

// MutexConfirmArgs are mutex_confirm.lua's KEYS and ARGV, in its header's order. Its optional
// KEYS[5] is sent if Values is set.
type MutexConfirmArgs struct {
	Keys     MutexKeys
	Values   string `key:"values,opt"`
	Owner    string `arg:"owner"`
	TTL      string `arg:"ttl"`
	Waiter   string `arg:"waiter"`
	Requeue  string `arg:"requeue"`
	Slack    string `arg:"slack"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	Backup   string `arg:"backup"`
	Window   string `arg:"window"`
	FenceTTL string `arg:"fence_ttl"`
}

// Exec runs mutex_confirm.lua once with a, as [Script.Exec] does.
func (a MutexConfirmArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of mutex_confirm.lua.
func (a MutexConfirmArgs) Call() Call { return a.fill(make([]string, 0, 15)) }

func (a MutexConfirmArgs) fill(v []string) Call {
	k := a.Keys
	v = append(v, k.Lock, k.Fence, k.Q, k.QX)
	if a.Values != "" {
		v = append(v, a.Values)
	}
	nk := len(v)
	v = append(v, a.Owner, a.TTL, a.Waiter, a.Requeue, a.Slack, a.Prefix, a.Pub, a.Backup, a.Window, a.FenceTTL)
	return split(MutexConfirm, v, nk)
}

// MutexLeaveArgs are mutex_leave.lua's KEYS and ARGV, in its header's order.
type MutexLeaveArgs struct {
	Keys     MutexKeys
	Waiter   string `arg:"waiter"`
	Owner    string `arg:"owner"`
	Window   string `arg:"window"`
	FenceTTL string `arg:"fence_ttl"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	VoidTTL  string `arg:"void_ttl"`
	Last     string `arg:"last"`
	Dequeue  string `arg:"dequeue"`
	Grant    string `arg:"grant"`
}

// Exec runs mutex_leave.lua once with a, as [Script.Exec] does.
func (a MutexLeaveArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of mutex_leave.lua.
func (a MutexLeaveArgs) Call() Call { return a.fill(make([]string, 0, 14)) }

func (a MutexLeaveArgs) fill(v []string) Call {
	k := a.Keys
	v = append(v, k.Lock, k.Fence, k.Q, k.QX,
		a.Waiter, a.Owner, a.Window, a.FenceTTL, a.Prefix, a.Pub, a.VoidTTL, a.Last, a.Dequeue, a.Grant)
	return split(MutexLeave, v, 4)
}

// Record is the optional tail of the scripts of a lock that keeps a record of its holder, an
// election's (lib/queue.lua): KEYS values, and ARGV observers and ttl. The zero Record is a
// plain lock's, and sends none of it; a struct that has a Record sends its optional entries
// if Values is set.
type Record struct {
	Values    string `key:"values,opt"`
	Observers string `arg:"observers,opt"`
	TTL       string `arg:"ttl,opt"`
}

// MutexReleaseArgs are mutex_release.lua's KEYS and ARGV, in its header's order. Its optional
// entries (Record and Waiter) are sent if Record.Values is set.
type MutexReleaseArgs struct {
	Keys     MutexKeys
	Rel      string `key:"rel"`
	Owner    string `arg:"owner"`
	Window   string `arg:"window"`
	FenceTTL string `arg:"fence_ttl"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	TTL      string `arg:"ttl"`
	Record   Record
	Waiter   string `arg:"waiter,opt"`
}

// Exec runs mutex_release.lua once with a, as [Script.Exec] does.
func (a MutexReleaseArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of mutex_release.lua.
func (a MutexReleaseArgs) Call() Call { return a.fill(make([]string, 0, 15)) }

func (a MutexReleaseArgs) fill(v []string) Call {
	k, r := a.Keys, a.Record
	if r.Values == "" {
		v = append(v, k.Lock, k.Fence, k.Q, k.QX, a.Rel,
			a.Owner, a.Window, a.FenceTTL, a.Prefix, a.Pub, a.TTL)
		return split(MutexRelease, v, 5)
	}
	v = append(v, k.Lock, k.Fence, k.Q, k.QX, a.Rel, r.Values,
		a.Owner, a.Window, a.FenceTTL, a.Prefix, a.Pub, a.TTL, r.Observers, r.TTL, a.Waiter)
	return split(MutexRelease, v, 6)
}

// MutexRenewArgs are mutex_renew.lua's KEYS and ARGV, in its header's order.
type MutexRenewArgs struct {
	Lock   string   `key:"lock"`
	Q      string   `key:"q"`
	QX     string   `key:"qx"`
	Keep   []string `key:"keep"`
	Owner  string   `arg:"owner"`
	TTL    string   `arg:"ttl"`
	Prefix string   `arg:"prefix"`
	Pub    string   `arg:"pub"`
}

// Exec runs mutex_renew.lua once with a, as [Script.Exec] does.
func (a MutexRenewArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of mutex_renew.lua.
func (a MutexRenewArgs) Call() Call { return a.fill(make([]string, 0, 7+len(a.Keep))) }

func (a MutexRenewArgs) fill(v []string) Call {
	v = append(v, a.Lock, a.Q, a.QX)
	v = append(v, a.Keep...)
	nk := len(v)
	v = append(v, a.Owner, a.TTL, a.Prefix, a.Pub)
	return split(MutexRenew, v, nk)
}

// ExtendArgs are extend.lua's KEYS and ARGV, in its header's order. Its optional Token is sent
// if it is set (for kind 'h').
type ExtendArgs struct {
	Key   string   `key:"key"`
	Keep  []string `key:"keep"`
	Kind  string   `arg:"kind"`
	Owner string   `arg:"owner"`
	TTL   string   `arg:"ttl"`
	Token string   `arg:"token,opt"`
}

// Exec runs extend.lua once with a, as [Script.Exec] does.
func (a ExtendArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of extend.lua.
func (a ExtendArgs) Call() Call { return a.fill(make([]string, 0, 5+len(a.Keep))) }

func (a ExtendArgs) fill(v []string) Call {
	v = append(v, a.Key)
	v = append(v, a.Keep...)
	nk := len(v)
	v = append(v, a.Kind, a.Owner, a.TTL)
	if a.Token != "" {
		v = append(v, a.Token)
	}
	return split(Extend, v, nk)
}

// FenceRaiseArgs are fence_raise.lua's KEYS and ARGV, in its header's order.
type FenceRaiseArgs struct {
	Fence    string `key:"fence"`
	Token    string `arg:"token"`
	FenceTTL string `arg:"fence"` // the header's "fence retention ms"
}

// Exec runs fence_raise.lua once with a, as [Script.Exec] does.
func (a FenceRaiseArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of fence_raise.lua.
func (a FenceRaiseArgs) Call() Call { return a.fill(make([]string, 0, 3)) }

func (a FenceRaiseArgs) fill(v []string) Call {
	v = append(v, a.Fence, a.Token, a.FenceTTL)
	return split(FenceRaise, v, 1)
}

// HoldersArgs are holders.lua's KEYS and ARGV, in its header's order: the claim's keys, laid
// out as Layout says.
type HoldersArgs struct {
	Keys   []string `key:"KEYS"`
	Layout string   `arg:"layout"`
}

// Exec runs holders.lua once with a, as [Script.Exec] does.
func (a HoldersArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of holders.lua.
func (a HoldersArgs) Call() Call { return a.fill(make([]string, 0, 1+len(a.Keys))) }

func (a HoldersArgs) fill(v []string) Call {
	v = append(v, a.Keys...)
	nk := len(v)
	v = append(v, a.Layout)
	return split(Holders, v, nk)
}

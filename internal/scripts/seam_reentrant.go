package scripts

import (
	"context"

	"github.com/redis/rueidis"
)

// The KEYS and ARGV of a reentrant mutex's scripts (see seam.go).

// ReentrantKeys are the KEYS of reentrant_lock.lua, reentrant_unlock.lua and
// reentrant_abandon.lua. A reentrant mutex makes them once.
type ReentrantKeys struct {
	Lock  string `key:"lock"`
	Fence string `key:"fence"`
	Ops   string `key:"ops"`
	Q     string `key:"q"`
	QX    string `key:"qx"`
}

// ReentrantLockArgs are reentrant_lock.lua's KEYS and ARGV, in its header's order.
type ReentrantLockArgs struct {
	Keys     ReentrantKeys
	Owner    string `arg:"owner"`
	ID       string `arg:"id"`
	TTL      string `arg:"ttl"`
	FenceTTL string `arg:"fence_ttl"`
	OpsTTL   string `arg:"ops_ttl"`
	Expect   string `arg:"expect"`
	Waiter   string `arg:"waiter"`
	Flags    string `arg:"flags"`
	Slack    string `arg:"slack"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	Backup   string `arg:"backup"`
	Last     string `arg:"last"`
}

// Exec runs reentrant_lock.lua once with a, as [Script.Exec] does.
func (a ReentrantLockArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of reentrant_lock.lua.
func (a ReentrantLockArgs) Call() Call { return a.fill(make([]string, 0, 18)) }

func (a ReentrantLockArgs) fill(v []string) Call {
	k := a.Keys
	v = append(v, k.Lock, k.Fence, k.Ops, k.Q, k.QX,
		a.Owner, a.ID, a.TTL, a.FenceTTL, a.OpsTTL, a.Expect, a.Waiter, a.Flags, a.Slack, a.Prefix, a.Pub, a.Backup, a.Last)
	return split(ReentrantLock, v, 5)
}

// ReentrantUnlockArgs are reentrant_unlock.lua's KEYS and ARGV, in its header's order.
type ReentrantUnlockArgs struct {
	Keys     ReentrantKeys
	Owner    string `arg:"owner"`
	ID       string `arg:"id"`
	By       string `arg:"by"`
	OpsTTL   string `arg:"ops_ttl"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	Token    string `arg:"token"`
	Window   string `arg:"window"`
	FenceTTL string `arg:"fence_ttl"`
}

// Exec runs reentrant_unlock.lua once with a, as [Script.Exec] does.
func (a ReentrantUnlockArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of reentrant_unlock.lua.
func (a ReentrantUnlockArgs) Call() Call { return a.fill(make([]string, 0, 14)) }

func (a ReentrantUnlockArgs) fill(v []string) Call {
	k := a.Keys
	v = append(v, k.Lock, k.Fence, k.Ops, k.Q, k.QX,
		a.Owner, a.ID, a.By, a.OpsTTL, a.Prefix, a.Pub, a.Token, a.Window, a.FenceTTL)
	return split(ReentrantUnlock, v, 5)
}

// ReentrantAbandonArgs are reentrant_abandon.lua's KEYS and ARGV, in its header's order.
type ReentrantAbandonArgs struct {
	Keys     ReentrantKeys
	Owner    string `arg:"owner"`
	ID       string `arg:"id"`
	OpsTTL   string `arg:"ops_ttl"`
	Waiter   string `arg:"waiter"`
	Window   string `arg:"window"`
	FenceTTL string `arg:"fence_ttl"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	Last     string `arg:"last"`
	Dequeue  string `arg:"dequeue"`
	Grant    string `arg:"grant"`
}

// Exec runs reentrant_abandon.lua once with a, as [Script.Exec] does.
func (a ReentrantAbandonArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of reentrant_abandon.lua.
func (a ReentrantAbandonArgs) Call() Call { return a.fill(make([]string, 0, 16)) }

func (a ReentrantAbandonArgs) fill(v []string) Call {
	k := a.Keys
	v = append(v, k.Lock, k.Fence, k.Ops, k.Q, k.QX,
		a.Owner, a.ID, a.OpsTTL, a.Waiter, a.Window, a.FenceTTL, a.Prefix, a.Pub, a.Last, a.Dequeue, a.Grant)
	return split(ReentrantAbandon, v, 5)
}

// ReentrantRenewArgs are reentrant_renew.lua's KEYS and ARGV, in its header's order.
type ReentrantRenewArgs struct {
	Lock   string `key:"lock"`
	Q      string `key:"q"`
	QX     string `key:"qx"`
	Field  string `arg:"field"`
	TTL    string `arg:"ttl"`
	Token  string `arg:"token"`
	Prefix string `arg:"prefix"`
	Pub    string `arg:"pub"`
}

// Exec runs reentrant_renew.lua once with a, as [Script.Exec] does.
func (a ReentrantRenewArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of reentrant_renew.lua.
func (a ReentrantRenewArgs) Call() Call { return a.fill(make([]string, 0, 8)) }

func (a ReentrantRenewArgs) fill(v []string) Call {
	v = append(v, a.Lock, a.Q, a.QX, a.Field, a.TTL, a.Token, a.Prefix, a.Pub)
	return split(ReentrantRenew, v, 3)
}

package scripts

import (
	"context"

	"github.com/redis/rueidis"
)

// The KEYS and ARGV of a fair lock's scripts and an election's (see seam.go).

// FairAcquireArgs are fair_acquire.lua's KEYS and ARGV, in its header's order. Its optional
// entries (Record and Value) are sent if Record.Values is set.
type FairAcquireArgs struct {
	Keys     MutexKeys
	Waiter   string `arg:"waiter"`
	TTL      string `arg:"ttl"`
	FenceTTL string `arg:"fence_ttl"`
	WLease   string `arg:"wlease"`
	Try      string `arg:"try"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	Backup   string `arg:"backup"`
	Slack    string `arg:"slack"`
	Record   Record
	Value    string `arg:"value,opt"`
}

// Exec runs fair_acquire.lua once with a, as [Script.Exec] does.
func (a FairAcquireArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of fair_acquire.lua.
func (a FairAcquireArgs) Call() Call { return a.fill(make([]string, 0, 17)) }

func (a FairAcquireArgs) fill(v []string) Call {
	k, r := a.Keys, a.Record
	if r.Values == "" {
		v = append(v, k.Lock, k.Fence, k.Q, k.QX,
			a.Waiter, a.TTL, a.FenceTTL, a.WLease, a.Try, a.Prefix, a.Pub, a.Backup, a.Slack)
		return split(FairAcquire, v, 4)
	}
	v = append(v, k.Lock, k.Fence, k.Q, k.QX, r.Values,
		a.Waiter, a.TTL, a.FenceTTL, a.WLease, a.Try, a.Prefix, a.Pub, a.Backup, a.Slack, r.Observers, r.TTL, a.Value)
	return split(FairAcquire, v, 5)
}

// FairLeaveArgs are fair_leave.lua's KEYS and ARGV, in its header's order. Its optional
// entries (Record) are sent if Record.Values is set.
type FairLeaveArgs struct {
	Keys     MutexKeys
	Waiter   string `arg:"waiter"`
	Window   string `arg:"window"`
	FenceTTL string `arg:"fence_ttl"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	VoidTTL  string `arg:"void_ttl"`
	Record   Record
}

// Exec runs fair_leave.lua once with a, as [Script.Exec] does.
func (a FairLeaveArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of fair_leave.lua.
func (a FairLeaveArgs) Call() Call { return a.fill(make([]string, 0, 13)) }

func (a FairLeaveArgs) fill(v []string) Call {
	k, r := a.Keys, a.Record
	if r.Values == "" {
		v = append(v, k.Lock, k.Fence, k.Q, k.QX, a.Waiter, a.Window, a.FenceTTL, a.Prefix, a.Pub, a.VoidTTL)
		return split(FairLeave, v, 4)
	}
	v = append(v, k.Lock, k.Fence, k.Q, k.QX, r.Values,
		a.Waiter, a.Window, a.FenceTTL, a.Prefix, a.Pub, a.VoidTTL, r.Observers, r.TTL)
	return split(FairLeave, v, 5)
}

// FairPlaceArgs are fair_place.lua's KEYS and ARGV, in its header's order. Its optional
// entries (Record) are sent if Record.Values is set.
type FairPlaceArgs struct {
	Keys     MutexKeys
	Waiter   string `arg:"waiter"`
	WLease   string `arg:"wlease"`
	FenceTTL string `arg:"fence_ttl"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	Record   Record
}

// Exec runs fair_place.lua once with a, as [Script.Exec] does.
func (a FairPlaceArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of fair_place.lua.
func (a FairPlaceArgs) Call() Call { return a.fill(make([]string, 0, 12)) }

func (a FairPlaceArgs) fill(v []string) Call {
	k, r := a.Keys, a.Record
	if r.Values == "" {
		v = append(v, k.Lock, k.Fence, k.Q, k.QX, a.Waiter, a.WLease, a.FenceTTL, a.Prefix, a.Pub)
		return split(FairPlace, v, 4)
	}
	v = append(v, k.Lock, k.Fence, k.Q, k.QX, r.Values,
		a.Waiter, a.WLease, a.FenceTTL, a.Prefix, a.Pub, r.Observers, r.TTL)
	return split(FairPlace, v, 5)
}

// ElectionLeaderArgs are election_leader.lua's KEYS, in its header's order. It has no ARGV.
type ElectionLeaderArgs struct {
	Lock   string `key:"lock"`
	Fence  string `key:"fence"`
	Values string `key:"values"`
}

// Exec runs election_leader.lua once with a, as [Script.Exec] does.
func (a ElectionLeaderArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of election_leader.lua.
func (a ElectionLeaderArgs) Call() Call { return a.fill(make([]string, 0, 3)) }

func (a ElectionLeaderArgs) fill(v []string) Call {
	v = append(v, a.Lock, a.Fence, a.Values)
	return split(ElectionLeader, v, 3)
}

// ElectionProclaimArgs are election_proclaim.lua's KEYS and ARGV, in its header's order.
type ElectionProclaimArgs struct {
	Lock      string `key:"lock"`
	Values    string `key:"values"`
	Owner     string `arg:"owner"`
	Waiter    string `arg:"waiter"`
	Term      string `arg:"term"`
	Value     string `arg:"value"`
	Observers string `arg:"observers"`
	TTL       string `arg:"ttl"`
	Pub       string `arg:"pub"`
}

// Exec runs election_proclaim.lua once with a, as [Script.Exec] does.
func (a ElectionProclaimArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of election_proclaim.lua.
func (a ElectionProclaimArgs) Call() Call { return a.fill(make([]string, 0, 9)) }

func (a ElectionProclaimArgs) fill(v []string) Call {
	v = append(v, a.Lock, a.Values, a.Owner, a.Waiter, a.Term, a.Value, a.Observers, a.TTL, a.Pub)
	return split(ElectionProclaim, v, 2)
}

// ElectionRenewArgs are election_renew.lua's KEYS and ARGV, in its header's order.
type ElectionRenewArgs struct {
	Lock      string `key:"lock"`
	Q         string `key:"q"`
	QX        string `key:"qx"`
	Values    string `key:"values"`
	Owner     string `arg:"owner"`
	TTL       string `arg:"ttl"`
	Prefix    string `arg:"prefix"`
	Pub       string `arg:"pub"`
	Observers string `arg:"observers"`
	Waiter    string `arg:"waiter"`
	Token     string `arg:"token"`
}

// Exec runs election_renew.lua once with a, as [Script.Exec] does.
func (a ElectionRenewArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of election_renew.lua.
func (a ElectionRenewArgs) Call() Call { return a.fill(make([]string, 0, 11)) }

func (a ElectionRenewArgs) fill(v []string) Call {
	v = append(v, a.Lock, a.Q, a.QX, a.Values, a.Owner, a.TTL, a.Prefix, a.Pub, a.Observers, a.Waiter, a.Token)
	return split(ElectionRenew, v, 4)
}

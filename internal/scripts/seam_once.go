package scripts

import (
	"context"

	"github.com/redis/rueidis"
)

// The KEYS and ARGV of a once group's scripts, a fenced value's, and inspect.lua (see
// seam.go).

// OnceBeginArgs are once_begin.lua's KEYS and ARGV, in its header's order. Its optional
// KEYS[7] and ARGV[4] are sent if Last is set.
type OnceBeginArgs struct {
	Lead     string `key:"lead"`
	Kept     string `key:"kept"`
	Res      string `key:"res"`
	Mine     string `key:"mine"`
	Fence    string `key:"fence"`
	Forgot   string `key:"forgot"`
	Last     string `key:"last,opt"`
	Owner    string `arg:"owner"`
	TTL      string `arg:"ttl"`
	FenceTTL string `arg:"fence_ttl"`
	Floor    string `arg:"floor,opt"`
}

// Exec runs once_begin.lua once with a, as [Script.Exec] does.
func (a OnceBeginArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of once_begin.lua.
func (a OnceBeginArgs) Call() Call { return a.fill(make([]string, 0, 11)) }

func (a OnceBeginArgs) fill(v []string) Call {
	v = append(v, a.Lead, a.Kept, a.Res, a.Mine, a.Fence, a.Forgot)
	if a.Last != "" {
		v = append(v, a.Last)
	}
	nk := len(v)
	v = append(v, a.Owner, a.TTL, a.FenceTTL)
	if a.Last != "" {
		v = append(v, a.Floor)
	}
	return split(OnceBegin, v, nk)
}

// OnceFinishArgs are once_finish.lua's KEYS and ARGV, in its header's order (by index: the
// header names KEYS[3] last). Its optional KEYS[5] is sent if Last is set.
type OnceFinishArgs struct {
	Lead    string `key:"lead"`
	Kept    string `key:"kept"`
	Res     string `key:"res"`
	Forgot  string `key:"forgot"`
	Last    string `key:"last,opt"`
	Owner   string `arg:"owner"`
	Result  string `arg:"result"`
	Keep    string `arg:"keep"`
	Linger  string `arg:"linger"`
	Channel string `arg:"channel"`
	Pub     string `arg:"pub"`
	Token   string `arg:"token"`
}

// Exec runs once_finish.lua once with a, as [Script.Exec] does.
func (a OnceFinishArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of once_finish.lua.
func (a OnceFinishArgs) Call() Call { return a.fill(make([]string, 0, 12)) }

func (a OnceFinishArgs) fill(v []string) Call {
	v = append(v, a.Lead, a.Kept, a.Res, a.Forgot)
	if a.Last != "" {
		v = append(v, a.Last)
	}
	nk := len(v)
	v = append(v, a.Owner, a.Result, a.Keep, a.Linger, a.Channel, a.Pub, a.Token)
	return split(OnceFinish, v, nk)
}

// OnceForgetArgs are once_forget.lua's KEYS and ARGV, in its header's order.
type OnceForgetArgs struct {
	Lead    string `key:"lead"`
	Kept    string `key:"kept"`
	Forgot  string `key:"forgot"`
	Linger  string `arg:"linger"`
	Channel string `arg:"channel"`
	Pub     string `arg:"pub"`
}

// Exec runs once_forget.lua once with a, as [Script.Exec] does.
func (a OnceForgetArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of once_forget.lua.
func (a OnceForgetArgs) Call() Call { return a.fill(make([]string, 0, 6)) }

func (a OnceForgetArgs) fill(v []string) Call {
	v = append(v, a.Lead, a.Kept, a.Forgot, a.Linger, a.Channel, a.Pub)
	return split(OnceForget, v, 3)
}

// FencedSetArgs are fenced_set.lua's KEYS and ARGV, in its header's order.
type FencedSetArgs struct {
	Key   string `key:"value"` // the hash that keeps the value and its token
	Token string `arg:"token"`
	Value string `arg:"value"`
}

// Exec runs fenced_set.lua once with a, as [Script.Exec] does.
func (a FencedSetArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of fenced_set.lua.
func (a FencedSetArgs) Call() Call { return a.fill(make([]string, 0, 3)) }

func (a FencedSetArgs) fill(v []string) Call {
	v = append(v, a.Key, a.Token, a.Value)
	return split(FencedSet, v, 1)
}

// FencedDeleteArgs are fenced_delete.lua's KEYS and ARGV, in its header's order.
type FencedDeleteArgs struct {
	Key   string `key:"value"` // the hash, as in FencedSetArgs
	Token string `arg:"token"`
	Keep  string `arg:"keep"`
}

// Exec runs fenced_delete.lua once with a, as [Script.Exec] does.
func (a FencedDeleteArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of fenced_delete.lua.
func (a FencedDeleteArgs) Call() Call { return a.fill(make([]string, 0, 3)) }

func (a FencedDeleteArgs) fill(v []string) Call {
	v = append(v, a.Key, a.Token, a.Keep)
	return split(FencedDelete, v, 1)
}

// InspectArgs are inspect.lua's KEYS and ARGV: the kinds to read, and each kind's keys in
// their order (its header lists them).
type InspectArgs struct {
	Keys  []string `key:"KEYS"`
	Kinds []string `arg:"ARGV"`
}

// Exec runs inspect.lua once with a, as [Script.Exec] does.
func (a InspectArgs) Exec(ctx context.Context, c rueidis.Client) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of inspect.lua.
func (a InspectArgs) Call() Call { return a.fill(make([]string, 0, len(a.Keys)+len(a.Kinds))) }

func (a InspectArgs) fill(v []string) Call {
	v = append(v, a.Keys...)
	nk := len(v)
	v = append(v, a.Kinds...)
	return split(Inspect, v, nk)
}

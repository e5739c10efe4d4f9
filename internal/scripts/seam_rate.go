package scripts

import (
	"context"

	"github.com/redis/rueidis"
)

// The scripts of package rate, which share their KEYS and ARGV (lib/rate.lua). Their
// contracts are in the headers of the .lua files.
var (
	RateReserve = load("rate_reserve.lua")
	RateCancel  = load("rate_cancel.lua")
	RateSet     = load("rate_set.lua")
	RateTokens  = load("rate_tokens.lua")

	RateScripts = []*Script{RateReserve, RateCancel, RateSet, RateTokens}
)

// RateArgs are the KEYS and ARGV of every rate script (rate_reserve.lua, rate_cancel.lua,
// rate_set.lua, rate_tokens.lua), in lib/rate.lua's order. Each script reads the fields its
// header names; the others may be left empty.
type RateArgs struct {
	Bucket    string `key:"bucket"`
	Limit     string `arg:"limit"` // the caller's own limit: a float, or "inf"
	Burst     string `arg:"burst"` // the caller's own burst
	N         string `arg:"n"`
	MaxWait   string `arg:"max_wait"` // µs, or "inf"
	Retention string `arg:"retention"`
	At        string `arg:"at"`     // a reservation's time to act, µs, server clock
	RLimit    string `arg:"rlimit"` // the limit the reservation was made under
	NewLimit  string `arg:"new_limit"`
	NewBurst  string `arg:"new_burst"`
}

// Exec runs s, a rate script, once with a, as [Script.Exec] does.
func (a RateArgs) Exec(ctx context.Context, c rueidis.Client, s *Script) rueidis.RedisResult {
	var buf [MaxArgs]string
	return a.fill(s, buf[:0]).Exec(ctx, c)
}

// Call returns a as a call of s, a rate script.
func (a RateArgs) Call(s *Script) Call { return a.fill(s, make([]string, 0, 10)) }

func (a RateArgs) fill(s *Script, v []string) Call {
	mustBeOne("RateArgs", s, RateScripts)
	v = append(v, a.Bucket, a.Limit, a.Burst, a.N, a.MaxWait, a.Retention, a.At, a.RLimit, a.NewLimit, a.NewBurst)
	return split(s, v, 1)
}

package scripts

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

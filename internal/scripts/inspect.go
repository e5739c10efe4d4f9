package scripts

// Inspect is the script of package inspect (inspect.lua). It only reads; it is sent with
// EVALSHA like the others, not EVALSHA_RO, because miniredis refuses TIME in a read-only
// script. Package inspect's tests run it with EVAL_RO on Redis, which refuses any write.
var Inspect = load("inspect.lua")

// InspectArgs are inspect.lua's KEYS and ARGV: the kinds to read, and each kind's keys in
// their order (its header lists them).
type InspectArgs struct {
	Keys  []string `key:"KEYS"`
	Kinds []string `arg:"ARGV"`
}

package scripts

// The scripts of package waitgroup. Their contracts are in the headers of the .lua files;
// lib/waitgroup.lua holds the state they share.
var (
	WaitGroupAdd   = load("waitgroup_add.lua")
	WaitGroupJoin  = load("waitgroup_join.lua")
	WaitGroupLeave = load("waitgroup_leave.lua")
	WaitGroupVoid  = load("waitgroup_void.lua")
	WaitGroupCheck = load("waitgroup_check.lua")

	// WaitGroupScripts are the scripts that share WaitGroupArgs.
	WaitGroupScripts = []*Script{WaitGroupAdd, WaitGroupJoin, WaitGroupLeave, WaitGroupVoid, WaitGroupCheck}
)

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

package scripts

// The election's own scripts. Its queue, grants and releases are the fair lock's, with a
// record of the leader (lib/queue.lua).
var (
	ElectionLeader   = load("election_leader.lua")
	ElectionProclaim = load("election_proclaim.lua")
	ElectionRenew    = load("election_renew.lua")
)

// ElectionLeaderArgs are election_leader.lua's KEYS, in its header's order. It has no ARGV.
type ElectionLeaderArgs struct {
	Lock   string `key:"lock"`
	Fence  string `key:"fence"`
	Values string `key:"values"`
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

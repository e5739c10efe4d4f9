package scripts

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

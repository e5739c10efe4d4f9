package scripts

// The KEYS and ARGV of a fair lock's scripts (see seam.go).

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

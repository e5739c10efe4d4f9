package scripts

// The KEYS and ARGV of a mutex's scripts, and of extend.lua, fence_raise.lua and holders.lua
// (see seam.go).

// MutexKeys are the first four KEYS of a mutex's scripts (mutex_acquire.lua, mutex_confirm.lua,
// mutex_leave.lua, mutex_release.lua) and of a fair lock's (fair_acquire.lua, fair_leave.lua,
// fair_place.lua). A primitive makes them once.
type MutexKeys struct {
	Lock  string `key:"lock"`
	Fence string `key:"fence"`
	Q     string `key:"q"`
	QX    string `key:"qx"`
}

// MutexAcquireArgs are mutex_acquire.lua's KEYS and ARGV, in its header's order.
type MutexAcquireArgs struct {
	Keys     MutexKeys
	Owner    string `arg:"owner"`
	TTL      string `arg:"ttl"`
	FenceTTL string `arg:"fence_ttl"`
	Waiter   string `arg:"waiter"`
	Flags    string `arg:"flags"`
	Slack    string `arg:"slack"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	Backup   string `arg:"backup"`
	Last     string `arg:"last"`
}

// MutexAcquireAllArgs are mutex_acquire_all.lua's KEYS and ARGV, in its header's order: Keys
// holds four keys per mutex (lock, fence, qx, with) and TTLs a lease per mutex.
type MutexAcquireAllArgs struct {
	Keys     []string `key:"KEYS"`
	Owner    string   `arg:"owner"`
	FenceTTL string   `arg:"fence_ttl"`
	With     string   `arg:"with"`
	TTLs     []string `arg:"ttl"`
}

// MutexConfirmArgs are mutex_confirm.lua's KEYS and ARGV, in its header's order. Its optional
// KEYS[5] is sent if Values is set.
type MutexConfirmArgs struct {
	Keys     MutexKeys
	Values   string `key:"values,opt"`
	Owner    string `arg:"owner"`
	TTL      string `arg:"ttl"`
	Waiter   string `arg:"waiter"`
	Requeue  string `arg:"requeue"`
	Slack    string `arg:"slack"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	Backup   string `arg:"backup"`
	Window   string `arg:"window"`
	FenceTTL string `arg:"fence_ttl"`
}

// MutexLeaveArgs are mutex_leave.lua's KEYS and ARGV, in its header's order.
type MutexLeaveArgs struct {
	Keys     MutexKeys
	Waiter   string `arg:"waiter"`
	Owner    string `arg:"owner"`
	Window   string `arg:"window"`
	FenceTTL string `arg:"fence_ttl"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	VoidTTL  string `arg:"void_ttl"`
	Last     string `arg:"last"`
	Dequeue  string `arg:"dequeue"`
	Grant    string `arg:"grant"`
}

// Record is the optional tail of the scripts of a lock that keeps a record of its holder, an
// election's (lib/queue.lua): KEYS values, and ARGV observers and ttl. The zero Record is a
// plain lock's, and sends none of it; a struct that has a Record sends its optional entries
// if Values is set.
type Record struct {
	Values    string `key:"values,opt"`
	Observers string `arg:"observers,opt"`
	TTL       string `arg:"ttl,opt"`
}

// MutexReleaseArgs are mutex_release.lua's KEYS and ARGV, in its header's order. Its optional
// entries (Record and Waiter) are sent if Record.Values is set.
type MutexReleaseArgs struct {
	Keys     MutexKeys
	Rel      string `key:"rel"`
	Owner    string `arg:"owner"`
	Window   string `arg:"window"`
	FenceTTL string `arg:"fence_ttl"`
	Prefix   string `arg:"prefix"`
	Pub      string `arg:"pub"`
	TTL      string `arg:"ttl"`
	Record   Record
	Waiter   string `arg:"waiter,opt"`
}

// MutexRenewArgs are mutex_renew.lua's KEYS and ARGV, in its header's order.
type MutexRenewArgs struct {
	Lock   string   `key:"lock"`
	Q      string   `key:"q"`
	QX     string   `key:"qx"`
	Keep   []string `key:"keep"`
	Owner  string   `arg:"owner"`
	TTL    string   `arg:"ttl"`
	Prefix string   `arg:"prefix"`
	Pub    string   `arg:"pub"`
}

// ExtendArgs are extend.lua's KEYS and ARGV, in its header's order. Its optional Token is sent
// if it is set (for kind 'h').
type ExtendArgs struct {
	Key   string   `key:"key"`
	Keep  []string `key:"keep"`
	Kind  string   `arg:"kind"`
	Owner string   `arg:"owner"`
	TTL   string   `arg:"ttl"`
	Token string   `arg:"token,opt"`
}

// FenceRaiseArgs are fence_raise.lua's KEYS and ARGV, in its header's order.
type FenceRaiseArgs struct {
	Fence    string `key:"fence"`
	Token    string `arg:"token"`
	FenceTTL string `arg:"fence"` // the header's "fence retention ms"
}

// HoldersArgs are holders.lua's KEYS and ARGV, in its header's order: the claim's keys, laid
// out as Layout says.
type HoldersArgs struct {
	Keys   []string `key:"KEYS"`
	Layout string   `arg:"layout"`
}

package scripts

// The KEYS and ARGV shared by all the scripts of a rwmutex (lib/rw.lua) and of a semaphore
// (lib/sem.lua): one struct each, whose Exec and Call take the script, and panic if it is not
// one of the family's (see seam.go).

// The scripts that share a struct.
var (
	RWMutexScripts   = []*Script{RWMutexLock, RWMutexUnlock, RWMutexLeave, RWMutexRenew}
	SemaphoreScripts = []*Script{SemaphoreAcquire, SemaphoreRelease, SemaphoreLeave, SemaphoreResize,
		SemaphorePlace, SemaphoreRenew, SemaphoreStatus}
)

// RWMutexKeys are the KEYS of every rwmutex script, in lib/rw.lua's order. A rwmutex makes
// them once.
type RWMutexKeys struct {
	W     string `key:"w"`
	R     string `key:"r"`
	WW    string `key:"ww"`
	RQ    string `key:"rq"`
	RA    string `key:"ra"`
	Fence string `key:"fence"`
	Ops   string `key:"ops"`
	WO    string `key:"wo"`
	Rel   string `key:"rel"`
}

// RWMutexArgs are the KEYS and ARGV of every rwmutex script (rwmutex_lock.lua,
// rwmutex_unlock.lua, rwmutex_leave.lua, rwmutex_renew.lua), in lib/rw.lua's order.
type RWMutexArgs struct {
	Keys     RWMutexKeys
	Mode     string `arg:"mode"`
	Owner    string `arg:"owner"`
	Waiter   string `arg:"waiter"`
	More     string `arg:"more"`
	TTL      string `arg:"ttl"`
	Slack    string `arg:"slack"`
	Window   string `arg:"window"`
	FenceTTL string `arg:"fence_ttl"`
	OpsTTL   string `arg:"ops_ttl"`
	Prefix   string `arg:"channel"` // the channel prefix
	Pub      string `arg:"pub"`
}

// SemaphoreKeys are the KEYS of every semaphore script, in lib/sem.lua's order. A semaphore
// makes them once.
type SemaphoreKeys struct {
	H    string `key:"h"`
	N    string `key:"n"`
	Q    string `key:"q"`
	QX   string `key:"qx"`
	QN   string `key:"qn"`
	Size string `key:"size"`
	Ops  string `key:"ops"`
}

// SemaphoreArgs are the KEYS and ARGV of every semaphore script (semaphore_acquire.lua,
// semaphore_release.lua, semaphore_leave.lua, semaphore_resize.lua, semaphore_place.lua,
// semaphore_renew.lua, semaphore_status.lua), in lib/sem.lua's order.
type SemaphoreArgs struct {
	Keys   SemaphoreKeys
	ID     string `arg:"id"`
	N      string `arg:"n"`
	Size   string `arg:"size"`
	TTL    string `arg:"ttl"`
	WLease string `arg:"wlease"`
	Slack  string `arg:"slack"`
	Prefix string `arg:"channel"` // the channel prefix
	Pub    string `arg:"pub"`
	OpsTTL string `arg:"ops_ttl"`
	Extra  string `arg:"extra"`
}

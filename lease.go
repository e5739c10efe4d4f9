package distsync

import (
	"context"
	"time"

	"github.com/distsync/distsync/internal/core"
)

// Lease is one acquisition of a claim: a lock, a permit. It ends when its holder releases it,
// when the claim is lost, or when the Handle closes. A Lease is safe for concurrent use.
type Lease struct {
	l *core.Lease
}

// Token returns the fencing token of the acquisition: larger than every token handed out
// before it for the same name. Pass it to the storage the lock protects and have that storage
// refuse a write with a token smaller than the largest it has seen; that, not the lock alone,
// keeps a holder that was paused past its lease from doing harm (see docs/guarantees.md).
func (l *Lease) Token() int64 { return l.l.Token() }

// TTL returns the length of the lease.
func (l *Lease) TTL() time.Duration { return l.l.TTL() }

// Done returns a channel that is closed when the lease ends: released by its holder, lost
// (its key expired, was deleted or taken, or Redis could not be reached to renew it before its
// local deadline), or the Handle closed. Work done under the lock should stop when it closes.
func (l *Lease) Done() <-chan struct{} { return l.l.Done() }

// Err returns nil while the lease is held. After Done is closed it returns why: an error
// matching [ErrReleased], [ErrLost] (with the reason) or [ErrClosed].
func (l *Lease) Err() error { return l.l.Err() }

// Context returns a copy of parent that is also cancelled, with [context.Cause] set to Err,
// when the lease ends. Run the work the lock protects under it. Its own Err and Done read the
// lease's local deadline when called, as Err does; contexts derived from it (WithTimeout, a
// request's context) learn of the loss when the Handle's renewal loop ends the lease, at most
// a moment after the deadline, or later if the process was frozen. Call cancel when the work is
// done to release the context's resources.
func (l *Lease) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	return l.l.Bind(parent)
}

package distsync

import (
	"context"
	"fmt"
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
// keeps a holder that was paused past its lease from doing harm (see docs/guarantees.md and
// package fenced). A read hold of a rwmutex carries the name's last token: that of the last
// write hold before it, or, if Redis keeps none (the name was never written, Redis restarted
// empty, or the fence retention passed), one the reader takes from the server clock as a
// writer would; either way no write hold before it has a larger token and every write hold
// after it a larger one, and readers at the same time share it. Semaphore permits, which are
// not exclusive, carry 0.
func (l *Lease) Token() int64 { return l.l.Token() }

// TTL returns the length of the lease: how long each renewal (or, for a fixed lease, the
// acquisition) makes it last.
func (l *Lease) TTL() time.Duration { return l.l.TTL() }

// Deadline returns the lease's local deadline, as its holder knows it: the claim is surely in
// Redis until then. It is counted from when the last acquire, renewal, [Lease.Refresh] or
// [Lease.Extend] that succeeded was sent, less a margin for clock drift (1% and 2 ms); past it,
// without a renewal that succeeded, the lease ends with [ErrLost]. time.Until(l.Deadline()) is
// the time the holder has left for sure. After the lease ended, it is the deadline it had.
func (l *Lease) Deadline() time.Time { return l.l.Deadline() }

// Refresh renews the lease now, for its TTL from now, and reports the outcome: nil if the
// claim was still held (the deadline then counts from this renewal); an error matching
// [ErrLost] if it was gone or taken, and the lease ends with it (Done closes); the lease's
// error if it had already ended. A connection error is returned as it is and changes nothing:
// the lease goes on until its deadline, and the Handle goes on renewing a renewed lease. It
// works on fixed leases too, which it extends by their TTL.
func (l *Lease) Refresh(ctx context.Context) error { return l.l.Refresh(ctx, 0) }

// Extend makes a fixed lease (see [WithFixedLease]) end d from now, in Redis and here, and
// reports the outcome as [Lease.Refresh] does. d may be shorter than what is left: the claim
// then ends sooner. It returns an error matching [ErrInvalid] for d below [MinLeaseTTL] and for
// a lease the Handle renews (its renewals would undo the change; use Refresh).
func (l *Lease) Extend(ctx context.Context, d time.Duration) error {
	switch {
	case !l.l.Fixed():
		return fmt.Errorf("distsync: lease: %w: Extend of a renewed lease (use Refresh)", ErrInvalid)
	case d < MinLeaseTTL:
		return fmt.Errorf("distsync: lease: %w: Extend by %v, below MinLeaseTTL", ErrInvalid, d)
	}
	return l.l.Refresh(ctx, d)
}

// LeaseFromContext returns the lease whose [Lease.Context] ctx is or derives from. The
// context that package once gives the function it runs is one: a leader can read its
// lease's token and deadline there.
func LeaseFromContext(ctx context.Context) (*Lease, bool) {
	l, ok := core.LeaseFrom(ctx)
	if !ok {
		return nil, false
	}
	return l.Public().(*Lease), true
}

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

package waitgroup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/scripts"
)

// Member is one unit of a group's pending work under a lease: made by [WaitGroup.Join] or
// [WaitGroup.Claim], ended by [Member.Done] or [Member.Fail]. Its Handle renews the lease
// while it is pending; if the lease ends first (its process was cut off from Redis, or
// stalled, past the lease), the member is lost: it counts as lost in the round, never as done,
// and its [Member.Lease] says so. A Member is safe for concurrent use.
type Member struct {
	wg    *WaitGroup
	id    string
	claim bool
	lease *core.Lease
}

// Join adds one member to the group, under a lease renewed by the Handle, and returns it. A
// group at zero starts a new round. ctx bounds the call: if it ends first, or Redis cannot be
// reached, Join returns an error (matching both [distsync.ErrNotAcquired] and ctx.Err() for
// ctx) and the group is unchanged; a request that was in flight is settled in Redis first. A
// join whose reply came after its lease's local deadline is given back, and Join returns an
// error matching ErrNotAcquired.
func (wg *WaitGroup) Join(ctx context.Context) (*Member, error) { return wg.member(ctx, "j") }

// Claim takes over one plain unit that [WaitGroup.Add] added, as a member under a lease: the
// group's pending work is unchanged, but the unit is now vouched for, and counted as lost if
// its claimer dies. It returns an error matching [ErrNothingToClaim] if no plain unit is left
// (they were all claimed or done, or none was added), and fails as [WaitGroup.Join] does.
func (wg *WaitGroup) Claim(ctx context.Context) (*Member, error) { return wg.member(ctx, "c") }

func (wg *WaitGroup) member(ctx context.Context, kind string) (*Member, error) {
	if err := ctx.Err(); err != nil {
		return nil, wg.notAcquired(err)
	}
	if err := wg.c.Enter(); err != nil {
		return nil, wg.wrap(err)
	}
	defer wg.c.Exit()
	m := &Member{wg: wg, id: wg.c.NewID(), claim: kind == "c"}
	sent := time.Now()
	v, err := wg.apply(ctx, scripts.WaitGroupJoin, m.id, 0, kind)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, wg.notAcquired(err)
	case err != nil:
		return nil, wg.wrap(err)
	case len(v) == 0 || v[0] < 0 || v[0] > 1:
		return nil, wg.wrap(core.Unexpected(scripts.WaitGroupJoin, v))
	case v[0] == 0:
		return nil, fmt.Errorf("waitgroup %q: %w", wg.name, ErrNothingToClaim)
	}
	if len(v) == 2 {
		wg.took(v[1])
	}
	// Sent counts from before the first attempt: Redis's expiry is later than the local
	// deadline, whichever attempt went through.
	m.lease, err = wg.c.Hold(core.LeaseSpec{Key: wg.keys.M, Kind: "z", Owner: m.id, Keep: wg.keep,
		TTL: wg.ttl, Renew: wg.renew, Sent: sent, Release: m.release})
	switch {
	case errors.Is(err, core.ErrLate):
		// The reply came after the lease's local deadline (Redis or the network stalled for
		// about a lease): not a member, as every primitive's acquisition says (core.Prim.Fail).
		return nil, wg.notAcquired(err) // given back by m.release
	case err != nil:
		return nil, wg.wrap(err) // the Handle closed
	}
	return m, nil
}

// release gives the member back for the Handle: a member whose join came too late to use is
// taken back as if it never was; one still pending when its Handle closes leaves unfinished,
// and is counted as lost at once rather than when its lease would have lapsed.
func (m *Member) release(ctx context.Context, l *core.Lease) error {
	mode := "l"
	if errors.Is(l.Err(), core.ErrLate) {
		mode = "j"
		if m.claim {
			mode = "c"
		}
	}
	_, err := m.leave(ctx, mode)
	return err
}

// Done ends the member: it no longer counts as pending, and the round ends if it was the last.
// It returns nil once Redis has counted it. If the member was lost (see [Member.Lease]), Done
// counts nothing and returns an error matching [distsync.ErrNotHeld] and [distsync.ErrLost];
// after an earlier Done, one matching ErrNotHeld and [distsync.ErrReleased]. A connection
// error is retried under the member's id, which Redis counts once; if ctx ends or Redis stays
// unreachable, Done returns the error and the Handle finishes in the background.
func (m *Member) Done(ctx context.Context) error { return m.finish(ctx, "d") }

// Fail ends the member as Done does, and records err as the round's error if it is the
// first: every Wait of the round, in every process, returns an error matching
// [ErrMemberFailed] with err's text (an error crosses processes as its text, cut to its first
// 4 KiB). Fail with a nil err is Done.
func (m *Member) Fail(ctx context.Context, err error) error {
	if err == nil {
		return m.Done(ctx)
	}
	text := err.Error()
	if len(text) > maxErrText {
		text = strings.ToValidUTF8(text[:maxErrText], "") + "…"
	}
	return m.finish(ctx, "d"+text)
}

// maxErrText is the most of a member's error text that Redis stores and publishes.
const maxErrText = 4 << 10

// Lease returns the member's lease. Its Done channel closes, and its Err says why, when the
// member ends: done (matching [distsync.ErrReleased]), lost (matching [distsync.ErrLost]: the
// lease could not be renewed, or a fixed lease ran out), or its Handle closed. Work the member
// stands for should stop when it is lost: the round already counts it as lost.
func (m *Member) Lease() *distsync.Lease { return api.Lease(m.lease) }

func (m *Member) finish(ctx context.Context, extra string) error {
	if err := m.lease.Stop(); err != nil {
		if errors.Is(err, distsync.ErrLost) {
			// Lost here (the local deadline passed), perhaps not yet in Redis: count the loss
			// now rather than when the lease lapses there.
			lctx, cancel := m.wg.c.Detached(time.Second)
			_, _ = m.leave(lctx, "l")
			cancel()
		}
		return fmt.Errorf("waitgroup %q: member: %w: %w", m.wg.name, distsync.ErrNotHeld, err)
	}
	ok, err := m.wg.c.GiveBack(ctx, fmt.Sprintf("waitgroup %q: member Done", m.wg.name), opsTTL,
		func() { m.lease.End(distsync.ErrReleased) },
		func(ctx context.Context) (bool, error) { return m.leave(ctx, extra) })
	switch {
	case err != nil:
		return m.wg.wrap(err)
	case !ok:
		lost := fmt.Errorf("%w: the member's lease had lapsed when it was done", distsync.ErrLost)
		m.lease.End(lost)
		return fmt.Errorf("waitgroup %q: member: %w: %w", m.wg.name, distsync.ErrNotHeld, lost)
	}
	m.lease.End(distsync.ErrReleased)
	return nil
}

// leave runs waitgroup_leave.lua for the member: it reports whether the member was in the
// group.
func (m *Member) leave(ctx context.Context, extra string) (bool, error) {
	n, err := m.wg.run(ctx, scripts.WaitGroupLeave, m.id, 0, extra).AsInt64()
	return n == 1, err
}

// Go joins the group ([WaitGroup.Join]) and runs fn in a new goroutine as the member; when fn
// returns, the member is done, with fn's error if any ([Member.Fail]), so that a Wait in any
// process hears of it. fn's context carries ctx's values and cancellation, and ends too, with
// the lease's error as its cause, if the membership is lost: the round counts fn's work as lost
// then, whatever fn does. If fn panics, the member fails with the panic's text, and the panic
// goes on. Go returns Join's error: fn runs only if Go returns nil.
//
// As with sync.WaitGroup, a round ends whenever the count returns to zero: if one member's fn
// can finish before the next Go, the members may end up in several rounds, and a Wait reports
// the last one's outcome only. To report a batch as one, let no member finish before every one
// has started (as the example does), or Add the batch's count first and have each worker take
// its unit with [WaitGroup.Claim].
func (wg *WaitGroup) Go(ctx context.Context, fn func(ctx context.Context) error) error {
	m, err := wg.Join(ctx)
	if err != nil {
		return err
	}
	go m.run(ctx, fn)
	return nil
}

func (m *Member) run(ctx context.Context, fn func(context.Context) error) {
	fctx, cancel := m.lease.Bind(ctx)
	err := errors.New("fn called runtime.Goexit") // unless fn returns or panics
	defer func() {
		cancel()
		r := recover()
		if r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
		dctx, dcancel := m.wg.c.Detached(m.wg.ttl + 5*time.Second)
		if ferr := m.Fail(dctx, err); ferr != nil && !errors.Is(ferr, distsync.ErrLost) && !errors.Is(ferr, distsync.ErrClosed) {
			m.wg.c.Log().Warn("distsync: waitgroup: a Go member could not be counted done", "group", m.wg.name, "err", ferr)
		}
		dcancel()
		if r != nil {
			panic(r)
		}
	}()
	err = fn(fctx)
}

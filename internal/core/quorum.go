package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// quorum is the state of a lease over other leases: one claim on each of several independent
// Redis primaries, held together (Redlock).
type quorum struct {
	members []*Lease
	need    int
	// short says how many members are held when fewer than need are: why the lease is lost.
	short func(held, of, need int) string
}

// Quorum returns a lease that is held while at least need of members are, with the fencing
// token token: the lease of a claim taken on a quorum of independent primaries. It ends, as
// lost, as soon as fewer than need members are held: each member is renewed by its own
// Handle's loop, and ends at its own deadline if its renewals fail. Its deadline is the
// need-th latest of the members' deadlines; Refresh refreshes every member still held and
// succeeds if need of them were refreshed. Releasing it is its holder's business: release each
// member, then End the quorum lease with ErrReleased. members are h's or other Handles'.
//
// It ends with ErrClosed when h closes (its members on other Handles are not h's to release).
func (h *Handle) Quorum(members []*Lease, need int, token int64, ttl time.Duration, renew bool) *Lease {
	return h.over(&quorum{members: members, need: need, short: func(n, of, need int) string {
		return fmt.Sprintf("held on %d of %d primaries, fewer than the quorum of %d", n, of, need)
	}}, token, ttl, renew)
}

// Together returns a lease that is held while every one of members is, with the fencing token
// token: the lease of several claims taken together (mutex.All). It ends, as lost, as soon as
// one member is lost; the rest is as for Quorum, with need the number of members.
func (h *Handle) Together(members []*Lease, token int64, ttl time.Duration, renew bool) *Lease {
	return h.over(&quorum{members: members, need: len(members), short: func(n, of, _ int) string {
		return fmt.Sprintf("held %d of its %d names", n, of)
	}}, token, ttl, renew)
}

// over returns the lease over q's members.
func (h *Handle) over(q *quorum, token int64, ttl time.Duration, renew bool) *Lease {
	members := q.members
	l := &Lease{h: h, spec: LeaseSpec{TTL: ttl, Token: token, Renew: renew}, quorum: q}
	// The Handle's Close ends it (its members on other Handles are not this Handle's to end);
	// the end of a member makes it look at its members again (report, of the member). Neither
	// needs a context of l's or of a member's: most holds end released, with nobody asking.
	l.unclose = context.AfterFunc(h.ctx, func() { l.End(ErrClosed) })
	for _, m := range members {
		m.endMu.Lock()
		m.parent = l
		m.endMu.Unlock()
	}
	l.quorum.check(l) // a member that ended before it was told of l
	return l
}

// endedUp is called, by report, once l has ended: a lease over other leases stops watching its
// Handle's Close, and the lease over l, if any, looks at its members again.
func (l *Lease) endedUp() {
	if l.unclose != nil {
		l.unclose()
	}
	l.endMu.Lock()
	p := l.parent
	l.endMu.Unlock()
	if p != nil {
		p.quorum.check(p)
	}
}

// heldCount returns how many members are still held (each checked against its own deadline).
func (q *quorum) heldCount() int {
	n := 0
	for _, m := range q.members {
		if m.Err() == nil {
			n++
		}
	}
	return n
}

// held returns the members still held (each checked against its own deadline).
func (q *quorum) held() []*Lease {
	var out []*Lease
	for _, m := range q.members {
		if m.Err() == nil {
			out = append(out, m)
		}
	}
	return out
}

// check ends l as lost if fewer than need members are held.
func (q *quorum) check(l *Lease) {
	if l.ended() != nil {
		return
	}
	if n := q.heldCount(); n < q.need {
		for _, m := range q.members {
			if errors.Is(m.Err(), ErrClosed) {
				l.End(ErrClosed) // a Handle's Close released its claim: not a loss
				return
			}
		}
		l.End(lost(q.short(n, len(q.members), q.need)))
	}
}

func (q *quorum) deadline() time.Time {
	ds := make([]time.Time, 0, len(q.members))
	for _, m := range q.members {
		if m.Err() == nil {
			ds = append(ds, m.Deadline())
		}
	}
	if len(ds) < q.need {
		return time.Time{}
	}
	slices.SortFunc(ds, func(a, b time.Time) int { return b.Compare(a) })
	return ds[q.need-1]
}

// refresh refreshes every member still held, at once; it succeeds if need of them were.
func (q *quorum) refresh(ctx context.Context, l *Lease, ttl time.Duration) error {
	held := q.held()
	errs := make([]error, len(held))
	var wg sync.WaitGroup
	for i, m := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.Refresh(ctx, ttl)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	q.check(l)
	if err := l.Err(); err != nil {
		return err
	}
	if ok < q.need {
		return fmt.Errorf("refreshed on %d of %d primaries, fewer than the quorum of %d: %w", ok, len(q.members), q.need, errors.Join(errs...))
	}
	return nil
}

package mutex

// This file: the state of a quorum's gather (quorum.go): each primary attempted, held,
// parked or out.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/distsync/distsync"
)

// primaryState is where a gather stands with one primary.
type primaryState int

const (
	pending primaryState = iota // attempted, no answer yet
	held                        // its claim is the gather's
	parked                      // given back after a split; attempted again on progress
	out                         // returned without the claim: an error, or (try) held elsewhere
)

// attempted is what one primary's attempt returned.
type attempted struct {
	i   int
	ok  bool
	err error
}

// gathering is the state of one gather.
type gathering struct {
	q     *quorumLock
	try   bool
	rctx  context.Context // the attempts', cancelled once the gather decides
	began time.Time

	// An attempt that returns after the gather decided gives back what it took by itself.
	mu      sync.Mutex
	decided bool
	results chan attempted

	state        []primaryState
	errs         []error
	most         int              // the most primaries held at once
	split, grace <-chan time.Time // see gather's doc; nil when not armed
}

// attempt attempts primary i, in the background.
func (g *gathering) attempt(i int) {
	m := g.q.ms[i]
	go func() {
		var err error
		ok := true
		if g.try {
			_, ok, err = m.tryLock(g.rctx)
		} else {
			_, err = m.lock(g.rctx)
		}
		g.mu.Lock()
		late := g.decided
		if !late {
			g.results <- attempted{i, ok && err == nil, err}
		}
		g.mu.Unlock()
		if late && ok && err == nil {
			g.q.giveBack([]int{i})
		}
	}()
}

// count returns how many primaries are in state st.
func (g *gathering) count(st primaryState) (n int) {
	for _, x := range g.state {
		if x == st {
			n++
		}
	}
	return n
}

// took notes what an attempt returned, and reports whether the gather can stop: a majority
// cannot be had any more. A majority held arms the grace for the others' claims.
func (g *gathering) took(r attempted) (stop bool) {
	if !r.ok {
		g.state[r.i] = out
		if r.err != nil && g.rctx.Err() == nil && !errors.Is(r.err, distsync.ErrNotAcquired) {
			g.errs = append(g.errs, fmt.Errorf("primary %d: %w", r.i, r.err))
		}
		return g.count(out) > len(g.q.ms)-g.q.need
	}
	g.state[r.i] = held
	g.most = max(g.most, g.count(held))
	if g.count(held) >= g.q.need {
		if g.grace == nil {
			// The others are likely on their way back with their claims: give them as long
			// again as the majority took (cancelling them in flight would cost each a
			// clean-up), then cancel them.
			g.grace = time.After(min(max(time.Since(g.began), time.Millisecond), QuorumWait))
		}
		g.split = nil
		return false
	}
	if !g.try {
		g.retryParked() // progress: the parked primaries are worth attempting again
		g.split = time.After(QuorumWait + time.Duration(rand.Int64N(int64(QuorumWait))))
	}
	return false
}

// retryParked attempts the parked primaries again.
func (g *gathering) retryParked() {
	for i, st := range g.state {
		if st == parked {
			g.state[i] = pending
			g.attempt(i)
		}
	}
}

// splitUp ends a split: some primaries held, not a majority, for a while. A TryLock stops. A
// Lock gives back what it holds and parks those primaries; if it waits on none, it attempts
// them again at once.
func (g *gathering) splitUp() (stop bool) {
	g.split = nil
	if g.try {
		return true
	}
	var back []int
	for i, st := range g.state {
		if st == held {
			back = append(back, i)
			g.state[i] = parked
		}
	}
	// In the background: a primary that answers slowly (stopped, cut off) must not stop the
	// gathering, or the claims of the primaries that come free meanwhile would wait, held
	// and unused, and every other process behind them. A parked primary attempted again
	// meanwhile comes after its own release in Redis (one connection, in order), and waits in
	// that primary's queue like any other.
	go g.q.giveBack(back)
	if g.count(pending) == 0 {
		g.retryParked()
	}
	return false
}

// decide ends the gather's attempts (rctx is cancelled): it takes the results already sent,
// leaves the later ones to give back what they took by themselves, and returns the primaries
// held.
func (g *gathering) decide() []int {
	g.mu.Lock()
	g.decided = true
	for drained := false; !drained; {
		select {
		case r := <-g.results:
			if r.ok {
				g.state[r.i] = held
			}
		default:
			drained = true
		}
	}
	g.mu.Unlock()
	var got []int
	for i, st := range g.state {
		if st == held {
			got = append(got, i)
		}
	}
	g.most = max(g.most, len(got))
	return got
}

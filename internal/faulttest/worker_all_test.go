package faulttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/mutex"
)

// allClaim is the worker's side of mutex.All: each acquisition draws a set of SetMin..SetMax
// of the worker's Names and gives them to NewAll in a random order (or, one time in
// SingleEvery, locks one name with Mutex.Lock), so that processes lock overlapping sets in
// every order. One Mutex value per name serves every set, as a process would keep them.
type allClaim struct {
	ms     map[string]*mutex.Mutex
	sp     spec
	rnd    *rand.Rand
	all    *mutex.All   // the current hold's set (nil: single or none)
	single *mutex.Mutex // the current hold's single Mutex
	names  []string     // the current hold's names, in NewAll's order
	toks   []int64      // and tokens
}

func newAllClaim(h *distsync.Handle, sp spec) (*allClaim, error) {
	if len(sp.Names) == 0 || sp.SetMin < 1 || sp.SetMax < sp.SetMin {
		return nil, fmt.Errorf("all: names %v, sets of %d..%d", sp.Names, sp.SetMin, sp.SetMax)
	}
	c := &allClaim{ms: map[string]*mutex.Mutex{}, sp: sp, rnd: rand.New(rand.NewPCG(sp.Seed^0x5eed, uint64(os.Getpid())))}
	for _, n := range sp.Names {
		m, err := mutex.New(h, n)
		if err != nil {
			return nil, err
		}
		c.ms[n] = m
	}
	return c, nil
}

// draw returns the names of the next acquisition, in the order they are given.
func (c *allClaim) draw() []string {
	k := min(c.sp.SetMin+c.rnd.IntN(c.sp.SetMax-c.sp.SetMin+1), len(c.sp.Names))
	if c.sp.SingleEvery > 0 && c.rnd.IntN(c.sp.SingleEvery) == 0 {
		k = 1
	}
	perm := c.rnd.Perm(len(c.sp.Names))
	out := make([]string, k)
	for i := range out {
		out[i] = c.sp.Names[perm[i]]
	}
	return out
}

func (c *allClaim) acquire(ctx context.Context, _ string) (*distsync.Lease, error) {
	names := c.draw()
	c.all, c.single, c.names, c.toks = nil, nil, nil, nil
	if len(names) == 1 && c.sp.SingleEvery > 0 {
		m := c.ms[names[0]]
		l, err := m.LockLease(ctx)
		if err != nil {
			return nil, err
		}
		c.single, c.names, c.toks = m, names, []int64{l.Token()}
		return l, nil
	}
	ms := make([]*mutex.Mutex, len(names))
	for i, n := range names {
		ms[i] = c.ms[n]
	}
	a, err := mutex.NewAll(ms...)
	if err != nil {
		return nil, err
	}
	l, err := a.LockLease(ctx)
	if err != nil {
		return nil, err
	}
	c.all, c.names, c.toks = a, names, a.Tokens()
	if len(c.toks) != len(names) {
		return l, fmt.Errorf("all: %d tokens for %d names", len(c.toks), len(names))
	}
	return l, nil
}

// held returns the names and tokens of the current hold.
func (c *allClaim) held() ([]string, []int64) { return c.names, c.toks }

func (c *allClaim) release(ctx context.Context) error {
	switch {
	case c.all != nil:
		return c.all.Unlock(ctx)
	case c.single != nil:
		return c.single.Unlock(ctx)
	}
	return errors.New("all: release without a hold")
}

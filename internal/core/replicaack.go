package core

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/scripts"
)

// ReplicaAck is what WithReplicaAck asks for: every script call that takes or extends a claim
// is followed, on the same connection, by WAIT N Timeout.
type ReplicaAck struct {
	N       int
	Timeout time.Duration
}

// grantScripts are the scripts whose success gives the caller a claim or extends one: their
// writes are the ones a failover must not lose. Releases, queue places, inspections and once
// results are not waited for (a release lost in a failover costs waiters a lease, not
// exclusion).
var grantScripts = func() map[string]bool {
	m := map[string]bool{}
	for _, s := range []*scripts.Script{
		scripts.Extend, scripts.MutexAcquire, scripts.MutexConfirm, scripts.MutexRenew,
		scripts.ReentrantLock, scripts.ReentrantRenew, scripts.FairAcquire, scripts.ElectionRenew,
		scripts.SemaphoreAcquire, scripts.SemaphoreRenew, scripts.RWMutexLock, scripts.RWMutexRenew,
		scripts.OnceBegin,
	} {
		m[s.SHA()] = true
	}
	return m
}()

// ackClient is the rueidis client of a Handle made with a replica ack: it sends each grant
// script together with WAIT, on one dedicated connection (WAIT counts the writes of its own
// connection, and a WAIT that blocks must not hold up the commands pipelined on a shared
// one), and turns a grant that too few replicas acknowledged into ErrNotReplicated.
// Everything else goes to the wrapped client as it is.
type ackClient struct {
	rueidis.Client
	ack ReplicaAck
}

// WaitsForReplicas reports whether h has a replica ack: then a claim granted inside Redis
// (a hand-off) must be adopted through its grant script, which waits for the replicas, never
// held on the strength of the grant's message alone.
func (h *Handle) WaitsForReplicas() bool { return h.Config.ReplicaAck.N > 0 }

// WithReplicaAck wraps c so that every grant script waits for ack (see ackClient).
//
// Every reply of a grant script that reports a claim must come from a call that wrote (a retry
// that finds its take done extends the lease): WAIT counts the writes of its own connection,
// and a reply that wrote nothing would be acknowledged at once, whatever the replicas have.
func WithReplicaAck(c rueidis.Client, ack ReplicaAck) rueidis.Client {
	return &ackClient{Client: c, ack: ack}
}

// isGrant reports whether cmd runs a grant script (EVALSHA by its SHA, or the EVAL that
// follows a NOSCRIPT).
func isGrant(cmd rueidis.Completed) bool {
	args := cmd.Commands()
	if len(args) < 2 {
		return false
	}
	switch args[0] {
	case "EVALSHA", "evalsha":
		return grantScripts[args[1]]
	case "EVAL", "eval":
		sum := sha1.Sum([]byte(args[1]))
		return grantScripts[hex.EncodeToString(sum[:])]
	}
	return false
}

func (a *ackClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if !isGrant(cmd) {
		return a.Client.Do(ctx, cmd)
	}
	return a.waited(ctx, []rueidis.Completed{cmd}, []bool{true})[0]
}

func (a *ackClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	grant := make([]bool, len(multi))
	some := false
	for i, cmd := range multi {
		grant[i] = isGrant(cmd)
		some = some || grant[i]
	}
	if !some {
		return a.Client.DoMulti(ctx, multi...)
	}
	// On one primary the whole batch is one group.
	cluster := a.Client.Mode() == rueidis.ClientModeCluster
	if !cluster {
		return a.waited(ctx, multi, grant)
	}
	// On a Cluster, one group per slot: WAIT goes to the node (and connection) of the writes it
	// counts. Calls of one primitive share a hash tag, so a group is one primitive's, or a
	// renewal batch's for one slot. A group without a grant goes out as it would without the
	// option.
	order := []uint16{}
	groups := map[uint16][]int{}
	for i, cmd := range multi {
		s := cmd.Slot()
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], i)
	}
	out := make([]rueidis.RedisResult, len(multi))
	var wg sync.WaitGroup
	for _, s := range order {
		idx := groups[s]
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmds := make([]rueidis.Completed, len(idx))
			g := make([]bool, len(idx))
			for j, i := range idx {
				cmds[j], g[j] = multi[i], grant[i]
			}
			var res []rueidis.RedisResult
			if slices.Contains(g, true) {
				res = a.waited(ctx, cmds, g)
			} else {
				res = a.Client.DoMulti(ctx, cmds...)
			}
			for j, i := range idx {
				out[i] = res[j]
			}
		}()
	}
	wg.Wait()
	return out
}

// waited sends cmds (of one slot) and WAIT on one dedicated connection, and returns cmds'
// results, with ErrNotReplicated for each grant script that gave or extended a claim without
// enough acknowledgements.
//
// A dedicated connection does not follow a Cluster's redirections as the client does: a group
// that every node refused with MOVED or ASK (a failover or a resharding moved the slot; nothing
// ran) is sent again, a few times, once the client has refreshed its map of the slots.
func (a *ackClient) waited(ctx context.Context, cmds []rueidis.Completed, grant []bool) []rueidis.RedisResult {
	pinned := make([]rueidis.Completed, len(cmds), len(cmds)+1)
	for i, c := range cmds {
		pinned[i] = c.Pin() // not recycled by rueidis after a reply: it may be sent again
	}
	var res []rueidis.RedisResult
	var err error
	for attempt, backoff := 0, 10*time.Millisecond; ; attempt, backoff = attempt+1, 2*backoff {
		wait := a.Client.B().Wait().Numreplicas(int64(a.ack.N)).Timeout(a.ack.Timeout.Milliseconds()).Build()
		err = a.Client.Dedicated(func(dc rueidis.DedicatedClient) error {
			res = dc.DoMulti(ctx, append(pinned[:len(cmds):len(cmds)], wait)...)
			return nil
		})
		if err != nil || attempt == 5 || !redirected(res[:len(cmds)]) || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
	}
	if err != nil || len(res) != len(cmds)+1 {
		if err == nil {
			err = errors.New("distsync: unexpected number of replies")
		}
		out := make([]rueidis.RedisResult, len(cmds))
		for i := range out {
			out[i] = rueidis.NewErrorResult(err)
		}
		return out
	}
	acks, werr := res[len(cmds)].AsInt64()
	if werr == nil && acks >= int64(a.ack.N) {
		return res[:len(cmds)]
	}
	why := strconv.FormatInt(acks, 10)
	if werr != nil {
		why = "WAIT failed (" + werr.Error() + ")"
	}
	short := Permanent(fmt.Errorf("%w: %s of %d replicas within %v", ErrNotReplicated, why, a.ack.N, a.ack.Timeout))
	for i := range cmds {
		if !grant[i] {
			continue
		}
		if _, redisErr := rueidis.IsRedisErr(res[i].Error()); redisErr {
			continue // the script failed in Redis (NOSCRIPT included): it wrote nothing
		}
		if res[i].Error() == nil && granted(res[i]) {
			res[i] = rueidis.NewErrorResult(short)
		}
	}
	return res[:len(cmds)]
}

// redirected reports whether every result is a MOVED or ASK redirection.
func redirected(res []rueidis.RedisResult) bool {
	for _, r := range res {
		re, ok := rueidis.IsRedisErr(r.Error())
		if !ok {
			return false
		}
		if _, moved := re.IsMoved(); moved {
			continue
		}
		if _, ask := re.IsAsk(); ask {
			continue
		}
		return false
	}
	return true
}

// granted reports whether a grant script's reply gave or extended a claim: 1, or an array
// that starts with 1 or 2 (taken, adopted) or 'l' (a once lead). Other replies (queued, not
// renewed, voided) wrote nothing a failover could take from a holder, and are returned as
// they are whatever the replicas acknowledged.
func granted(r rueidis.RedisResult) bool {
	if n, err := r.AsInt64(); err == nil {
		return n == 1
	}
	a, err := r.ToArray()
	if err != nil || len(a) == 0 {
		return false
	}
	if n, err := a[0].AsInt64(); err == nil {
		return n == 1 || n == 2
	}
	s, err := a[0].ToString()
	return err == nil && s == "l"
}

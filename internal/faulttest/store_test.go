package faulttest

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/redistest"
)

// The fenced store is a redis-server of its own, never faulted, shared by every scenario of
// the test binary (each under its own key namespace). Workers write to it with their hold's
// fencing token on entering the critical section and again on leaving it, even when the
// lease was lost: that late write is what a holder paused past its lease would do, and the
// store must refuse it once a newer token has written.

//go:embed fenced_write.lua
var fencedWriteSrc string

var fencedWrite = rueidis.NewLuaScript(fencedWriteSrc)

type fencedStore struct {
	c  rueidis.Client
	ns string
}

func storeKeys(ns string) []string { return []string{ns + ":max", ns + ":log", ns + ":rejected"} }

// write sends one fenced write and reports whether the store accepted it.
func (s fencedStore) write(ctx context.Context, tok int64, hold, phase string) (bool, error) {
	n, err := fencedWrite.Exec(ctx, s.c, storeKeys(s.ns), []string{strconv.FormatInt(tok, 10), hold, phase}).AsInt64()
	return n == 1, err
}

var (
	clusterOnce sync.Once
	clusterB    *redistest.Backend
)

// sharedCluster returns the harness's 3-master Cluster, started on first use (TestMain stops
// it).
func sharedCluster(t *testing.T) *redistest.Backend {
	t.Helper()
	b := redistest.Open(t, redistest.ClusterB)
	clusterOnce.Do(func() { clusterB = b })
	return b
}

var (
	storeOnce sync.Once
	storeProc *redistest.Proc
	storeErr  error
)

// sharedStore returns the address of the fenced store, starting it on first use. TestMain
// stops it.
func sharedStore(t *testing.T) string {
	t.Helper()
	redistest.RequireRedis(t)
	storeOnce.Do(func() { storeProc, storeErr = redistest.StartProc() })
	if storeErr != nil {
		t.Fatalf("start the fenced store: %v", storeErr)
	}
	return storeProc.Addr()
}

// fencedWriteRec is one write the store accepted or rejected.
type fencedWriteRec struct {
	Tok   int64
	Hold  string
	Phase string
	Max   int64 // for a rejected write: the largest token accepted when it came
}

func parseWrites(lines []string) ([]fencedWriteRec, error) {
	var out []fencedWriteRec
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 3 {
			return nil, fmt.Errorf("bad store entry %q", l)
		}
		tok, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad store entry %q: %v", l, err)
		}
		w := fencedWriteRec{Tok: tok, Hold: f[1], Phase: f[2]}
		if len(f) > 3 {
			w.Max, _ = strconv.ParseInt(f[3], 10, 64)
		}
		out = append(out, w)
	}
	return out, nil
}

// readStore returns the accepted and the rejected writes of namespace ns.
func readStore(t *testing.T, addr, ns string) (accepted, rejected []fencedWriteRec) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("fenced store client: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := storeKeys(ns)
	for i, dst := range []*[]fencedWriteRec{&accepted, &rejected} {
		lines, err := c.Do(ctx, c.B().Lrange().Key(k[i+1]).Start(0).Stop(-1).Build()).AsStrSlice()
		if err != nil {
			t.Fatalf("read the fenced store: %v", err)
		}
		if *dst, err = parseWrites(lines); err != nil {
			t.Fatal(err)
		}
	}
	return accepted, rejected
}

// checkFencedLog checks the accepted writes: tokens never decrease (the store's own rule, so
// a failure here is the store's), and no token was accepted for two different holds, which
// would mean a token was handed out twice and fencing could not tell two holders apart.
func checkFencedLog(accepted []fencedWriteRec) []string {
	var bad []string
	owner := map[int64]string{}
	for i, w := range accepted {
		if i > 0 && w.Tok < accepted[i-1].Tok {
			bad = append(bad, fmt.Sprintf("accepted write #%d token %d (hold %s) after token %d (hold %s)",
				i, w.Tok, w.Hold, accepted[i-1].Tok, accepted[i-1].Hold))
		}
		if h, ok := owner[w.Tok]; ok && h != w.Hold {
			bad = append(bad, fmt.Sprintf("token %d accepted for two holds: %s and %s (a token handed out twice)", w.Tok, h, w.Hold))
		}
		owner[w.Tok] = w.Hold
	}
	return bad
}

// storeNS is the namespace of one name's store in a scenario of several names (all): each
// name is its own storage, fenced by that name's tokens.
func storeNS(ns, name string) string { return ns + ":" + name }

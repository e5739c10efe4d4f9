package waitgroup_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/waitgroup"
)

// Redis restarted empty under a group whose members were lost: no Wait of a process that took
// part in the lost round returns nil, whether the restart came before its Wait began or while
// it waited, and even though new work began on the new server meanwhile (a fourth member).
func TestRoundLostInARestartIsNeverDone(t *testing.T) {
	t.Parallel()
	for _, during := range []bool{false, true} {
		t.Run(map[bool]string{false: "restart before Wait", true: "restart during Wait"}[during], func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartRedis(t)
			const ttl = time.Second
			group := func() *waitgroup.WaitGroup {
				h := redistest.Handle(t, srv.Client(t), distsync.WithLeaseTTL(ttl))
				wg, err := waitgroup.New(h, "restart")
				if err != nil {
					t.Fatal(err)
				}
				return wg
			}
			ctx := ctxFor(t, 60*time.Second)
			waiter := group()
			must(t, "the waiter's Add(1)", waiter.Add(ctx, 1))
			var members []*waitgroup.Member
			for range 3 {
				m, err := group().Join(ctx)
				must(t, "Join", err)
				members = append(members, m)
			}
			var w <-chan error
			if during {
				w = wait(waiter, 50*time.Second)
				redistest.Blocks(t, "Wait before the restart", w, 200*time.Millisecond)
			}
			if err := srv.Restart(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			for i, m := range members {
				select {
				case <-m.Lease().Done():
				case <-time.After(10 * ttl):
					t.Fatalf("member %d was not told of its loss", i)
				}
				if err := m.Done(ctx); !errors.Is(err, distsync.ErrLost) {
					t.Fatalf("member %d's Done after the restart: %v, want ErrLost", i, err)
				}
			}
			// New work on the new server: a fourth member, which ends cleanly.
			fourth, err := group().Join(ctx)
			must(t, "the fourth Join", err)
			if err := waiter.Done(ctx); !errors.Is(err, waitgroup.ErrNegative) {
				t.Fatalf("the waiter's Done after the restart: %v, want ErrNegative", err)
			}
			if !during {
				w = wait(waiter, 50*time.Second) // while the fourth member works
			}
			must(t, "the fourth member's Done", fourth.Done(ctx))
			err = result(t, "Wait", w, 20*time.Second)
			if !errors.Is(err, waitgroup.ErrExpired) {
				t.Fatalf("Wait of a process whose round was lost in the restart: %v, want ErrExpired", err)
			}
			// Reported once: the next Wait is about the group as it is now (its last round
			// ended cleanly).
			if err := result(t, "a second Wait", wait(waiter, 20*time.Second), 10*time.Second); err != nil {
				t.Fatalf("a second Wait, after the loss was reported: %v", err)
			}
		})
	}
}

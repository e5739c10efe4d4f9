package waitq_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/waitq"
)

// A grant whose take comes too late to use (this process stalled past it, or the grant was
// gone when its holder was recorded) does not end the wait: WaitTurn looks in Redis again and
// goes on until it acquires or ctx ends, as it does for an attempt whose claim came too late.
func TestLateTakeOfAGrantKeepsWaiting(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	client, err := rueidis.NewClient(srv.ClientOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	dh, err := distsync.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dh.Close(context.Background()) })
	h, err := api.Core(dh, "test")
	if err != nil {
		t.Fatal(err)
	}
	const channel, id = "t:ch", "w1"
	box := waitq.NewMailbox(h, channel, func(p string) (string, waitq.Signal) {
		return id, waitq.Signal{Kind: waitq.Granted, Grant: waitq.Grant{Owner: "~" + id, Token: 7, Window: 30 * time.Second}}
	})
	slot := box.Register(id)
	defer slot.Close()

	var attempts, takes atomic.Int32
	granted := make(chan struct{}) // closed when the test has published the grant
	turn := waitq.Turn{
		ID: id, Slot: slot, Place: "t:place",
		Attempt: func(ctx context.Context, _ string) (waitq.TurnResult, error) {
			attempts.Add(1)
			select {
			case <-granted:
				if takes.Load() > 0 {
					return waitq.TurnResult{Acquired: true}, nil // the look in Redis after the late take
				}
			default:
			}
			return waitq.TurnResult{Wait: time.Minute}, nil
		},
		Take: func(g waitq.Grant, _ time.Time) error {
			takes.Add(1)
			return fmt.Errorf("%w: the lock was gone when its holder was recorded", core.ErrLate)
		},
		Leave: func(context.Context) error { return nil },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- waitq.WaitTurn(ctx, h, 30*time.Second, turn) }()
	// Once the waiter listens, grant it.
	for srv.Miniredis().PubSubNumSub(channel)[channel] == 0 || attempts.Load() < 2 {
		if ctx.Err() != nil {
			t.Fatal("the waiter never subscribed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(granted)
	if err := client.Do(ctx, client.B().Publish().Channel(channel).Message("g").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitTurn after a late take, with %v of ctx left: %v", time.Until(deadlineOf(ctx)), err)
		}
	case <-ctx.Done():
		t.Fatal("WaitTurn did not return")
	}
	if takes.Load() != 1 {
		t.Fatalf("%d takes, want 1: the scenario did not happen", takes.Load())
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

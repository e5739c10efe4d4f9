package pubsub_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distsync/distsync/internal/pubsub"
	"github.com/distsync/distsync/internal/redistest"
)

// Over RESP2 (the embedded miniredis), a command whose ctx deadline passes while it is in
// flight breaks rueidis's command connection, which rueidis replaces while the subscription
// stays on a connection of its own: an UNSUBSCRIBE then reaches the new connection and ends
// nothing. The channel's last listener leaving still ends its subscription in the notifier.
func TestUnsubscribeEndsTheSubscriptionAfterTheCommandConnectionBroke(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Mini)
	client := b.Client(t)
	n := pubsub.New(client, false, nil)
	defer n.Close(context.Background())
	n.SetLinger(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := n.Subscribe(ctx, "resp2", newListener())
	if err != nil {
		t.Fatal(err)
	}
	// A script that outlasts its command's deadline: rueidis closes the connection it was
	// sent on.
	short, cancelShort := context.WithTimeout(ctx, 5*time.Millisecond)
	err = client.Do(short, client.B().Eval().Script("local i = 0 while i < 2e6 do i = i + 1 end return i").Numkeys(0).Build()).Error()
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the slow script: %v, want its deadline to pass in flight", err)
	}
	s.Close()
	if !redistest.Eventually(20*time.Second, func() bool { return n.Channels() == 0 }) {
		t.Fatal("the channel was not ended")
	}
}

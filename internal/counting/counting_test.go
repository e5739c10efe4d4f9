package counting_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/embedded"
	"github.com/distsync/distsync/internal/counting"
)

// slow is a rueidis.Client whose Do and DoMulti answer d late.
type slow struct {
	rueidis.Client
	d time.Duration
}

func (s slow) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	time.Sleep(s.d)
	return s.Client.Do(ctx, cmd)
}

func (s slow) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	time.Sleep(s.d)
	return s.Client.DoMulti(ctx, multi...)
}

// slowClient returns a counting client of an embedded Redis whose every call takes d more,
// both closed when t ends.
func slowClient(t *testing.T, d time.Duration) *counting.Client {
	t.Helper()
	srv, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	raw, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	return counting.New(slow{raw, d})
}

// Slowest reports the longest round trip of the commands sent in its window, pipelines
// included, and forgets what Reset forgot.
func TestSlowest(t *testing.T) {
	const d = 20 * time.Millisecond
	c := slowClient(t, d)
	b := c.B()
	before := time.Now()
	c.Do(context.Background(), b.Ping().Build())
	c.DoMulti(context.Background(), b.Ping().Build(), b.Get().Key("k").Build())
	after := time.Now()
	if got := c.Slowest(before, after); got < d || got > after.Sub(before) {
		t.Errorf("Slowest = %v, want between %v and %v", got, d, after.Sub(before))
	}
	if got := c.Slowest(after.Add(time.Second), after.Add(2*time.Second)); got != 0 {
		t.Errorf("Slowest of a window with no command = %v, want 0", got)
	}
	if got, want := c.Pipelines(), []int{2}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("Pipelines = %v, want %v", got, want)
	}
	if got := c.Total(); got != 3 {
		t.Errorf("Total = %d, want 3", got)
	}
	c.Reset()
	if got := c.Slowest(before, time.Now()); got != 0 {
		t.Errorf("Slowest after Reset = %v, want 0", got)
	}
}

// Busy adds up the time in which a command was waiting for its reply, once where round
// trips overlap, and nothing for the time between them.
func TestBusy(t *testing.T) {
	const d = 30 * time.Millisecond
	c := slowClient(t, d)
	b := c.B()
	before := time.Now()
	c.Do(context.Background(), b.Ping().Build())
	idle := time.Now()
	time.Sleep(10 * d) // nothing in flight
	resumed := time.Now()
	var wg sync.WaitGroup
	for range 3 { // three round trips at once: one span
		wg.Go(func() { c.Do(context.Background(), b.Ping().Build()) })
	}
	wg.Wait()
	after := time.Now()
	got := c.Busy(before, after)
	if lo, hi := 2*d, idle.Sub(before)+after.Sub(resumed); got < lo || got > hi {
		t.Errorf("Busy = %v, want between %v and %v (the idle %v not counted)", got, lo, hi, resumed.Sub(idle))
	}
	if got := c.Busy(idle, resumed); got != 0 {
		t.Errorf("Busy of a window with no command in flight = %v, want 0", got)
	}
	if got := c.Busy(before, before.Add(d/2)); got > d/2 {
		t.Errorf("Busy of half a round trip = %v, want at most %v", got, d/2)
	}
}

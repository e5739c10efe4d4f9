package election_test

import (
	"context"
	"fmt"

	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/embedded"
)

// The scheduler that only the leader runs: every pod campaigns, the leader schedules under its
// term's context (which ends if leadership is lost), and resigns when it shuts down, handing
// over to the next pod at once. Here two pods run in one process.
func Example() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ctx := context.Background()

	pod := func(name string, ticks int, done chan<- struct{}) {
		defer close(done)
		h, _ := srv.NewHandle() // each pod has its own client and Handle
		e, _ := election.New(h, "scheduler")
		term, err := e.Campaign(ctx, name)
		if err != nil {
			return
		}
		work := term.Context()
		for i := range ticks {
			if work.Err() != nil {
				return // deposed: stop scheduling at once
			}
			fmt.Printf("%s (term %s) schedules batch %d\n", name, order(term), i)
		}
		_ = term.Resign(ctx) // shutting down: the next pod leads now
	}
	first, second := make(chan struct{}), make(chan struct{})
	go pod("pod-a", 2, first)
	<-first
	go pod("pod-b", 1, second)
	<-second
	// Output:
	// pod-a (term 1) schedules batch 0
	// pod-a (term 1) schedules batch 1
	// pod-b (term 2) schedules batch 0
}

// terms numbers the terms the example sees, in order: a Term's token is a large number that
// only ever grows, which is what a store needs to refuse a deposed leader's writes.
var terms = map[int64]int{}

func order(t *election.Term) string {
	if _, ok := terms[t.Token()]; !ok {
		terms[t.Token()] = len(terms) + 1
	}
	return fmt.Sprint(terms[t.Token()])
}

// Observe tells every pod who leads, and every change, without polling: here a pod that
// routes requests to the leader's address.
func ExampleElection_Observe() {
	srv, _ := embedded.Start()
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	h, _ := srv.NewHandle()
	router, _ := election.New(h, "primary")
	leaders := router.Observe(ctx)

	hl, _ := srv.NewHandle()
	e, _ := election.New(hl, "primary")
	term, _ := e.Campaign(ctx, "10.0.0.7:8080")
	fmt.Println("route to", (<-leaders).Value)
	_ = term.Proclaim(ctx, "10.0.0.7:9090") // the leader moved its listener
	fmt.Println("route to", (<-leaders).Value)
	_ = term.Resign(ctx)

	_, err := router.Leader(ctx)
	fmt.Println(err)
	// Output:
	// route to 10.0.0.7:8080
	// route to 10.0.0.7:9090
	// election "primary": no leader
}

// Leader answers who leads, in one round trip.
func ExampleElection_Leader() {
	srv, _ := embedded.Start()
	defer srv.Close()
	ctx := context.Background()
	h, _ := srv.NewHandle()
	e, _ := election.New(h, "scheduler")
	term, _, _ := e.TryCampaign(ctx, "pod-a")
	info, _ := e.Leader(ctx)
	fmt.Println(info.Value, info.Handle == h.ID(), info.Term == term.Token(), info.TTL > 0)
	_ = term.Resign(ctx)
	// Output: pod-a true true true
}

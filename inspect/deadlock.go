package inspect

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/core"
)

// Deadlock is a cycle of waits among processes: the process of each Wait waits for a
// primitive that the process of the next Wait holds, and the last Wait's for one that the
// first's holds. It starts at the Wait whose Handle sorts first.
type Deadlock []Wait

// Wait is one process's place in a Deadlock: the process of the Handle Handle (whose identity
// is Identity, by default its host and PID) waits in the queue of the primitive of Kind named
// Name, as Waiter, behind Holder, a hold taken by the next Wait's process.
type Wait struct {
	Handle, Identity string
	Kind, Name       string
	Waiter           string
	Holder           distsync.Holder
}

// deadlockKinds are the kinds whose waits Deadlocks follows: those whose waiters are served
// only when a hold they wait behind ends (every hold, for a rwmutex's writer). A semaphore's
// waiter is not: another holder's permits may serve it. A once group keeps no queue in Redis,
// and a wait group's Wait waits for work, not for a hold.
var deadlockKinds = []string{Mutex, Reentrant, RWMutex, Fair, Election}

// DeadlockKinds returns the kinds whose waits [Deadlocks] follows.
func DeadlockKinds() []string { return slices.Clone(deadlockKinds) }

// Deadlocks returns the cycles of waits among the processes that hold and wait for the
// primitives under the Handle's key prefix whose names match pattern (a glob as [List]
// takes it; "" matches every name), of the kinds of [DeadlockKinds]: process A waits for a
// name that B holds, while B waits for one that A holds (or C does, which waits for one that
// A holds...), as nested Locks taken in different orders leave them. A process is a Handle:
// Wait.Handle, and, for a reentrant mutex's hold, the Handle through which its owner took
// it (though the owner may since have re-entered from another process, and the first let go
// of its count). Each group of processes that wait on one another is reported by one cycle
// through it, the shortest through the process whose Handle sorts first: other cycles
// through the same processes are not listed. A reader that a rwmutex's last writer admitted
// waits for nothing; a semaphore's waiter is not followed (another holder may serve it).
//
// On success it returns, sorted by their first Handle, the cycles of a second read of the
// primitives of each group found in a first read of every primitive, each of whose waits the
// first read saw too, with the same waiter behind the same hold (nil if none): the first
// read is not one snapshot, and a cycle put together from states of different moments is
// dropped by the second. A cycle among processes is a deadlock when each process waits in
// the code that holds, as nested Locks do; a process that holds in one goroutine and waits
// in another is a process-level cycle that ends when that goroutine releases. It reports no
// process waiting for itself. It costs what List costs and a round trip per primitive; it
// writes nothing. On failure it returns List's and Inspect's errors.
func Deadlocks(ctx context.Context, h *distsync.Handle, pattern string) ([]Deadlock, error) {
	es, err := List(ctx, h, pattern)
	if err != nil {
		return nil, err
	}
	var sel []Entry
	for _, e := range es {
		if slices.Contains(deadlockKinds, e.Kind) {
			sel = append(sel, e)
		}
	}
	rs, err := inspectAll(ctx, h, sel)
	if err != nil {
		return nil, err
	}
	first := waitsOf(rs)
	var out []Deadlock
	for _, group := range groups(first) {
		// The group's primitives again: a cycle of the second read, each of whose waits the
		// first read saw too.
		again, err := inspectAll(ctx, h, entriesOf(first, group))
		if err != nil {
			return nil, err
		}
		second := within(waitsOf(again), group)
		for _, g := range groups(second) {
			if d := cycleIn(second, g); confirmed(d, first) {
				out = append(out, d)
			}
		}
	}
	slices.SortFunc(out, func(a, b Deadlock) int { return cmp.Compare(a[0].Handle, b[0].Handle) })
	return out, nil
}

// inspectParallel is how many primitives Deadlocks reads at once.
const inspectParallel = 8

// inspectAll reads every entry, inspectParallel at a time.
func inspectAll(ctx context.Context, h *distsync.Handle, es []Entry) ([]Report, error) {
	out := make([]Report, len(es))
	errs := make([]error, len(es))
	sem := make(chan struct{}, inspectParallel)
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = Inspect(ctx, h, e.Kind, e.Name)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// edge is a Wait and the process it waits for.
type edge struct {
	Wait
	to string // the Handle of Wait.Holder's process
}

// waitsOf returns every wait of a process for a hold of another process in rs, by waiting
// Handle. A grant not yet taken up ('~...') is no hold: it is on its way to a waiter.
func waitsOf(rs []Report) map[string][]edge {
	out := make(map[string][]edge)
	for _, r := range rs {
		for _, w := range r.Queue {
			if w.Handle == "" || w.Admitted { // an admitted reader waits for no hold
				continue
			}
			for _, hd := range r.Holders {
				to := hd.Handle
				if r.Kind == Reentrant {
					to = r.maker
				}
				if to == "" || to == w.Handle || strings.HasPrefix(hd.Owner, "~") {
					continue
				}
				out[w.Handle] = append(out[w.Handle], edge{Wait{Handle: w.Handle, Identity: w.Identity,
					Kind: r.Kind, Name: r.Name, Waiter: w.ID, Holder: hd}, to})
			}
		}
	}
	return out
}

// groups returns the strongly connected groups of two processes or more in g: the processes
// that each wait, directly or through others, for every other (Tarjan's algorithm).
func groups(g map[string][]edge) [][]string {
	nodes := make([]string, 0, len(g))
	for n := range g {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	index, low := map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var found [][]string
	var visit func(n string)
	visit = func(n string) {
		index[n], low[n] = len(index), len(index)
		stack = append(stack, n)
		onStack[n] = true
		for _, e := range g[n] {
			if _, seen := index[e.to]; !seen {
				visit(e.to)
				low[n] = min(low[n], low[e.to])
			} else if onStack[e.to] {
				low[n] = min(low[n], index[e.to])
			}
		}
		if low[n] == index[n] {
			var group []string
			for {
				m := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[m] = false
				group = append(group, m)
				if m == n {
					break
				}
			}
			if len(group) > 1 {
				found = append(found, group)
			}
		}
	}
	for _, n := range nodes {
		if _, seen := index[n]; !seen {
			visit(n)
		}
	}
	return found
}

// within returns the waits of g between processes of group.
func within(g map[string][]edge, group []string) map[string][]edge {
	out := make(map[string][]edge)
	for _, n := range group {
		for _, e := range g[n] {
			if slices.Contains(group, e.to) {
				out[n] = append(out[n], e)
			}
		}
	}
	return out
}

// cycleIn returns a shortest cycle through the smallest Handle of group, a strongly connected
// group of g, by a breadth-first search inside the group.
func cycleIn(g map[string][]edge, group []string) Deadlock {
	in := make(map[string]bool, len(group))
	for _, n := range group {
		in[n] = true
	}
	start := slices.Min(group)
	prev := map[string]edge{} // how each node was reached
	queue := []string{start}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, e := range g[n] {
			if !in[e.to] {
				continue
			}
			if e.to == start {
				cycle := Deadlock{e.Wait}
				for at := n; at != start; at = prev[at].Handle {
					cycle = append(cycle, prev[at].Wait)
				}
				slices.Reverse(cycle)
				return cycle
			}
			if _, seen := prev[e.to]; !seen {
				prev[e.to] = e
				queue = append(queue, e.to)
			}
		}
	}
	panic(fmt.Sprintf("inspect: no cycle in a strongly connected group %v", group)) // not reached
}

// entriesOf returns the primitives of the waits in g between processes of group.
func entriesOf(g map[string][]edge, group []string) []Entry {
	var out []Entry
	for _, es := range within(g, group) {
		for _, w := range es {
			e := Entry{Kind: w.Kind, Name: w.Name}
			if !slices.Contains(out, e) {
				out = append(out, e)
			}
		}
	}
	return out
}

// confirmed reports whether every wait of d is in g too: the same waiter behind the same
// hold (owner and token). A mutex's waiter id is its process's, so a process that gave up
// and waited again behind the same hold counts as the same wait.
func confirmed(d Deadlock, g map[string][]edge) bool {
	for _, w := range d {
		if !slices.ContainsFunc(g[w.Handle], func(e edge) bool {
			return e.Kind == w.Kind && e.Name == w.Name && e.Waiter == w.Waiter &&
				e.Holder.Owner == w.Holder.Owner && e.Holder.Token == w.Holder.Token
		}) {
			return false
		}
	}
	return true
}

// holdMaker returns the Handle of the request id that made a reentrant hold, "" if it names
// none.
func holdMaker(id string) string {
	h, _ := core.Whose(id)
	return h
}

// Package kind is the one registry of the primitives' kind names: what their errors, their
// options, the observer's events (distsync.Event.Primitive), the otel module's attributes,
// inspect and the command call them.
package kind

// The kinds of primitive, as errors and events name them.
const (
	Mutex     = "mutex"
	Reentrant = "reentrant"
	RWMutex   = "rwmutex"
	Fair      = "fair"
	Semaphore = "semaphore"
	Group     = "once.Group"
	Once      = "once.Once"      // also OnceFunc
	OnceValue = "once.OnceValue" // also OnceValues
	Election  = "election"
	WaitGroup = "waitgroup"
	Fenced    = "fenced"
	Rate      = "rate"
)

// All is every kind, in the order the package docs list them.
var All = []string{Mutex, Reentrant, RWMutex, Fair, Semaphore, Group, Once, OnceValue, Election, WaitGroup, Fenced, Rate}

// OncePrefix starts the kind of every primitive of package once.
const OncePrefix = "once."

// Space returns the kind's part of its keys (see internal/keys): the kind itself, except for
// package once, whose kinds share the key space "once". inspect names primitives by it.
func Space(k string) string {
	if len(k) > len(OncePrefix) && k[:len(OncePrefix)] == OncePrefix {
		return "once"
	}
	return k
}

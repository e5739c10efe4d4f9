package once

// Channel returns the channel on which the processes that wait for key's call listen, for
// tests that must know a process waits (it is subscribed) before they go on.
func (g *Group[T]) Channel(key string) string {
	ks, err := g.keys(key)
	if err != nil {
		panic(err)
	}
	return ks.channel
}

// InFlight reports whether a Do for key in this process would join a call in flight.
func (g *Group[T]) InFlight(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[key] != nil
}

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

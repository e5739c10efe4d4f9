package inspect

import (
	"fmt"

	"github.com/distsync/distsync"
)

// Keys returns the names of the keys in which Redis keeps the primitive of kind called name,
// or, for kind "", those of every kind called name: a write to any of them is a change of
// what [Inspect] or [Name] reads (a hold taken, renewed or released, a waiter queued or gone,
// a result kept or forgotten), and so is the expiry of any of them. They are for a watcher
// that reads them with client-side caching's tracking or subscribes to keyspace
// notifications, to read the primitive again at every change instead of polling; the
// distsync command's "inspect --watch" does the first. Writing to them breaks the primitive.
// A rate limiter's tokens also come back with time, between writes: its key changes at each
// decision, not as its tokens refill.
//
// A once group keeps the keys of each of its keys apart, and they cannot be known without a
// SCAN: Keys returns those of the key "" (a Once's, OnceFunc's, OnceValue's or OnceValues's,
// and the distsync command's once), not those of the group's other keys; nor a call's result
// keys (the call's end, which writes one, also ends its lead, a key Keys returns). Keys sends
// nothing to Redis. It returns an error matching [distsync.ErrInvalid] for a nil Handle, a
// kind that is neither "" nor one of [Kinds], or an empty name.
func Keys(h *distsync.Handle, kind, name string) ([]string, error) {
	c, err := open(h)
	if err != nil {
		return nil, err
	}
	kinds := []string{kind}
	switch {
	case kind == "":
		kinds = Kinds()
	case layout[kind] == nil:
		return nil, fmt.Errorf("inspect: %w: unknown kind %q (want one of %v)", distsync.ErrInvalid, kind, Kinds())
	}
	if name == "" {
		return nil, fmt.Errorf("inspect: %w: empty name", distsync.ErrInvalid)
	}
	var out []string
	for _, k := range kinds {
		n := name
		if k == Once {
			n = onceName(name, "")
		}
		ks, err := keysOf(c, k, n)
		if err != nil {
			return nil, err
		}
		out = append(out, ks...)
	}
	return out, nil
}

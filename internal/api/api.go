// Package api is the one place where the primitive packages meet package distsync's public
// types: it turns a *distsync.Handle and its options into the core's, and the core's leases
// and holders into the *distsync.Lease and []distsync.Holder that the primitives return.
// Package distsync cannot be imported by the core (it imports the core), so it installs its
// conversions into the core when it is initialised (core.Bridge); this package gives them
// their types back, once, for every primitive.
package api

import (
	"fmt"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/keys"
)

// Lease returns the *distsync.Lease of l (nil for a nil l).
func Lease(l *core.Lease) *distsync.Lease {
	if l == nil {
		return nil
	}
	return l.Public().(*distsync.Lease)
}

// Holders returns hs as package distsync's Holders (nil for nil).
func Holders(hs []core.HolderInfo) []distsync.Holder {
	if hs == nil {
		return nil
	}
	out := make([]distsync.Holder, len(hs))
	for i, h := range hs {
		out[i] = distsync.Holder(h)
	}
	return out
}

// Option returns o as a distsync.Option: a primitive package's own options are made so.
func Option(o core.Opt) distsync.Option { return core.WrapOption(o).(distsync.Option) }

// Core returns the core of h, or an error matching distsync.ErrInvalid that names what for
// a nil h.
func Core(h *distsync.Handle, what string) (*core.Handle, error) {
	if c := core.Of(h); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("%s: %w: nil handle", what, core.ErrInvalid)
}

// Setup is what every primitive's New does first: it reaches the core of h, applies opts to
// the settings of the primitive of kind called name (ext is the package's own settings, with
// their defaults, which its options set: see core.ExtOpt), and checks the name and the lease
// (see core.Handle.Space). Its errors match distsync.ErrInvalid and name the primitive.
func Setup(h *distsync.Handle, kind, name string, opts []distsync.Option, ext any) (core.Prim, core.Settings, keys.Space, error) {
	c, err := Core(h, kind)
	if err != nil {
		return core.Prim{}, core.Settings{}, keys.Space{}, err
	}
	set, err := c.Settings(kind, name, core.Unwrap(opts), ext)
	if err != nil {
		return core.Prim{}, set, keys.Space{}, err
	}
	ks, err := c.Space(kind, name, set.LeaseTTL)
	if err != nil {
		return core.Prim{}, set, ks, err
	}
	return core.Prim{H: c, Kind: kind, Name: name}, set, ks, nil
}

package inspect

import "github.com/distsync/distsync"

// KeysOf returns the keys inspect.lua reads for the primitive of kind whose key name is name
// (for once, OnceName's).
func KeysOf(h *distsync.Handle, kind, name string) ([]string, error) {
	c, err := open(h)
	if err != nil {
		return nil, err
	}
	return keysOf(c, kind, name)
}

// OnceName returns the key name of key in the once group called group.
func OnceName(group, key string) string { return onceName(group, key) }

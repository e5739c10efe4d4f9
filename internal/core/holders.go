package core

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/distsync/distsync/internal/scripts"
)

// How a primitive keeps its claims, for holders.lua.
const (
	LayoutString = "string" // mutex, fair: [lock, fence]
	LayoutHash   = "hash"   // reentrant: [lock]
	LayoutRW     = "rw"     // rwmutex: [w, r, fence]
	LayoutSem    = "sem"    // semaphore: [h, n]
)

// HolderInfo is one live hold of a name, as holders.lua reports it (see distsync.Holder).
type HolderInfo struct {
	Owner     string
	Handle    string
	Identity  string
	Token     int64
	Remaining time.Duration
	Count     int64
	Shared    bool
}

// Holders reads who holds the primitive of kind named name, whose claims are kept in keys,
// laid out as layout, in one round trip that writes nothing (nil on error).
func (h *Handle) Holders(ctx context.Context, kind, name, layout string, keys []string) ([]HolderInfo, error) {
	hs, err := h.holders(ctx, layout, keys)
	if err != nil {
		return nil, fmt.Errorf("%s %q: holders: %w", kind, name, err)
	}
	return hs, nil
}

func (h *Handle) holders(ctx context.Context, layout string, keys []string) ([]HolderInfo, error) {
	rows, err := scripts.HoldersArgs{Keys: keys, Layout: layout}.Exec(ctx, h.Client).ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]HolderInfo, 0, len(rows))
	for _, r := range rows {
		f, err := r.ToArray()
		if err != nil || len(f) != 5 {
			return nil, Unexpected(scripts.Holders, rows)
		}
		owner, err := f[0].ToString()
		if err != nil {
			return nil, Unexpected(scripts.Holders, rows)
		}
		var n [4]int64
		for i := range n {
			if n[i], err = f[i+1].AsInt64(); err != nil {
				return nil, Unexpected(scripts.Holders, rows)
			}
		}
		remaining := time.Duration(n[0]) * time.Millisecond
		if n[0] < 0 {
			remaining = -1 // no expiry
		}
		hi := HolderInfo{Owner: owner, Token: n[1], Remaining: remaining, Count: n[2], Shared: n[3] == 1}
		if layout != LayoutHash { // a reentrant owner is the caller's, not a handle's
			hi.Handle, hi.Identity = Whose(owner)
		}
		out = append(out, hi)
	}
	return out, nil
}

// HandleOf returns the id of the handle that made an owner value or waiter id (NewID: every
// one starts with it), with the '~' of a grant taken off.
func HandleOf(owner string) string {
	owner = strings.TrimPrefix(owner, "~")
	if i := strings.IndexByte(owner, ':'); i >= 0 {
		return owner[:i]
	}
	return ""
}

// Whose returns the id and the identity of the handle that made an owner value or waiter id
// (HandleOf, IdentityOf).
func Whose(owner string) (handle, identity string) { return HandleOf(owner), IdentityOf(owner) }

// ID returns the handle's id: the first part of every owner value and waiter id it makes.
func (h *Handle) ID() string { return h.id }

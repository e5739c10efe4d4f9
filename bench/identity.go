package main

import (
	"context"
	"strings"

	"github.com/distsync/distsync"
)

// identityCost measures what the Handle's identity, carried in every owner value and waiter
// id, costs an uncontended mutex Lock+Unlock: the default ("<host name>:<pid>"), a 1-byte
// identity, and the longest, 64 bytes that all escape (192 bytes in each id), with the
// process's allocations per pair.
func identityCost(ctx context.Context, addr string, iters int) ([]primRow, error) {
	return handleCost(ctx, addr, iters, "identity", "the default identity", []handleSetup{
		{"the default identity (<host>:<pid>)", nil},
		{"a 1-byte identity", []distsync.Option{distsync.WithIdentity("a")}},
		{"a 64-byte identity, every byte escaped (192 bytes in each id)", []distsync.Option{
			distsync.WithIdentity(strings.Repeat("\u00e9", distsync.MaxIdentityLen/2))}},
	}, true)
}

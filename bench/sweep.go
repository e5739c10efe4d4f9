package main

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/sweep"
)

// deleteKeys deletes every key that starts with prefix and returns how many it deleted:
// sweep.DeleteKeys, the demo's clean-up (the main module's internal packages are importable
// here, since this module's path is under the main module's).
func deleteKeys(ctx context.Context, c rueidis.Client, prefix string) (int, error) {
	return sweep.DeleteKeys(ctx, c, prefix)
}

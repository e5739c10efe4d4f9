// Package sweep deletes the keys a run left under its prefix, for the demo (cmd/distsync)
// and the benchmarks (bench).
package sweep

import (
	"context"
	"strings"

	"github.com/redis/rueidis"
)

// DeleteKeys deletes every key that starts with prefix and returns how many it deleted. It
// SCANs every node c knows, since on Redis Cluster each master holds its own share of the
// keys, and deletes through c, which sends each UNLINK to the key's master. The prefix is
// matched literally: its glob characters are escaped, and every key SCAN returns is checked
// against it again, so that no other key is ever touched.
//
// Call it once nothing writes under prefix any more (after every handle is closed and every
// worker has exited): a key written during the sweep may be missed.
func DeleteKeys(ctx context.Context, c rueidis.Client, prefix string) (int, error) {
	match := globEscaper.Replace(prefix) + "*"
	deleted := 0
	for _, node := range c.Nodes() {
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(match).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return deleted, err
			}
			var unlink rueidis.Commands
			for _, k := range e.Elements {
				if strings.HasPrefix(k, prefix) {
					unlink = append(unlink, c.B().Unlink().Key(k).Build())
				}
			}
			for _, r := range c.DoMulti(ctx, unlink...) {
				n, err := r.AsInt64()
				if err != nil {
					return deleted, err
				}
				// A replica lists its master's keys again; the second UNLINK finds none.
				deleted += int(n)
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return deleted, nil
}

var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

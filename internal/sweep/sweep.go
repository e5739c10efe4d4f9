// Package sweep finds and deletes the keys under a prefix on every node of a Redis: Scan for
// package inspect's listing, DeleteKeys for the demo (cmd/distsync) and the benchmarks (bench).
package sweep

import (
	"context"
	"strings"

	"github.com/redis/rueidis"
)

// Scan calls f with the keys that start with prefix, one SCAN batch at a time. It SCANs every
// node c knows, since on Redis Cluster each master holds its own share of the keys. The
// prefix is matched literally: its glob characters are escaped, and every key SCAN returns
// is checked against it again, so f sees no other key. A replica lists its master's keys
// again, so f may see a key more than once; SCAN may also return a key twice, and misses a
// key only if it was written or deleted during the scan. An error of f or of Redis ends the
// scan and is returned.
func Scan(ctx context.Context, c rueidis.Client, prefix string, f func(keys []string) error) error {
	match := globEscaper.Replace(prefix) + "*"
	for _, node := range c.Nodes() {
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(match).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return err
			}
			var keys []string
			for _, k := range e.Elements {
				if strings.HasPrefix(k, prefix) {
					keys = append(keys, k)
				}
			}
			if len(keys) > 0 {
				if err := f(keys); err != nil {
					return err
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// DeleteKeys deletes every key that starts with prefix and returns how many it deleted. It
// finds them with Scan, on every node c knows, and deletes through c, which sends each UNLINK
// to the key's master. No other key is ever touched.
//
// Call it once nothing writes under prefix any more (after every handle is closed and every
// worker has exited): a key written during the sweep may be missed.
func DeleteKeys(ctx context.Context, c rueidis.Client, prefix string) (int, error) {
	deleted := 0
	err := Scan(ctx, c, prefix, func(keys []string) error {
		unlink := make(rueidis.Commands, 0, len(keys))
		for _, k := range keys {
			unlink = append(unlink, c.B().Unlink().Key(k).Build())
		}
		for _, r := range c.DoMulti(ctx, unlink...) {
			n, err := r.AsInt64()
			if err != nil {
				return err
			}
			// A replica lists its master's keys again; the second UNLINK finds none.
			deleted += int(n)
		}
		return nil
	})
	return deleted, err
}

var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

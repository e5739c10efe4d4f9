// Package deploytest holds the tests of distsync on Redis as deployments run it: as a Redis
// ACL user with only the permissions docs/acl.md lists (the tests read the lines from the
// doc), over TLS only, and with the servers' script caches flushed or the server itself
// swapped for another build under the clients. Each runs one representative pass of every
// primitive (pass_test.go): holders hold, waiters wait, the holders' leases are renewed, and
// the waiters are served when the holders let go.
//
// The TLS tests need a server and a CLI built with TLS. Debian's redis-server and redis-cli
// are; Valkey as .ci/valkey builds it (BUILD_TLS=no) is not, and under it the TLS tests are
// skipped with the reason. The default redis-server without TLS fails them under
// DISTSYNC_REQUIRE_REDIS=1 instead (see redistest.RequireTLS): CI must not lose them silently.
//
// TestServerSwapped swaps each server for the binary DISTSYNC_REDIS_SWAP names (.ci/run:
// Valkey 8.0.1 for Debian's Redis 7.0.15), or restarts its own binary if it names none.
package deploytest

// Package deploytest holds the tests of distsync on Redis as deployments run it: as a Redis
// ACL user with only the permissions docs/acl.md lists, over TLS only, and with the servers'
// script caches flushed or the server itself swapped for another build under the clients.
// Each runs one representative pass of every primitive (pass_test.go): holders hold, waiters
// wait, the holders' leases are renewed, and the waiters are served when the holders let go.
package deploytest

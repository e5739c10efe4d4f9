package distsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/keys"
)

// Defaults of a Handle. Each can be changed with the option of the same name.
const (
	// DefaultKeyPrefix starts every key and channel distsync writes, so that its keyspace
	// can be told apart and scanned.
	DefaultKeyPrefix = "distsync:"

	// DefaultLeaseTTL is the lease of a claim: Redis frees it this long after its holder
	// stops renewing it. The holder renews it every third of that (3.3 s), so it keeps its
	// claim through about 6 s of pauses or unreachable Redis, while a crashed holder is
	// replaced after 10 s. Longer leases make a crash cost more; shorter ones make a pause
	// (GC, a slow network) lose the lock more often. A waiter's idle backstop re-check also
	// follows it: at most one command per lease.
	DefaultLeaseTTL = 10 * time.Second

	// DefaultFenceRetention is how long the last fencing token of a name is kept after its
	// last acquisition. Tokens follow the server's clock in microseconds, so once the counter
	// has expired the next token is still larger unless the server clock stepped back by
	// more than this; without an expiry, every lock name ever used would leave a key behind.
	DefaultFenceRetention = 7 * 24 * time.Hour

	// DefaultHandoffWindow is how long a lock granted to the next waiting process at release
	// lasts until that process confirms it. A live waiter confirms within a round trip or
	// two; the window bounds what a waiter that died while queued can cost: one pause of this
	// length, after which the next waiter takes the lock.
	DefaultHandoffWindow = 500 * time.Millisecond

	// DefaultWaiterLease is the lease of a waiter's place in a queue kept in Redis (fair,
	// semaphore): the waiter renews it every third of that (1 s) while it waits, batched with
	// the Handle's other renewals, and a waiter whose process died is dropped from the queue
	// once it lapses. It also bounds what a waiter that died can cost the others: a claim
	// handed to it comes back after at most this long. Shorter makes dead waiters cheaper and
	// costs more renewals; three seconds survives a second of pauses between two renewals.
	DefaultWaiterLease = 3 * time.Second

	// MaxIdentityLen is the longest identity [WithIdentity] takes, in bytes: room for a
	// host name and a process id, or a Kubernetes pod name (at most 63 bytes), while every
	// owner value and waiter id, which carry the identity (see [Handle.ID]), stays short
	// enough to cost nothing worth measuring per acquire (docs/benchmarks.md).
	MaxIdentityLen = 64

	// MinLeaseTTL is the shortest lease any option accepts: a holder stops believing in its
	// lease 1% and 2 ms before Redis drops it (for client and server clocks that run at
	// slightly different rates), and a shorter lease would leave it next to nothing.
	MinLeaseTTL = 10 * time.Millisecond

	// DefaultServerCheckTimeout bounds the one round trip [New] makes to learn the servers'
	// version. It is rueidis' own dial timeout: long enough to connect again to a server
	// that dropped the client's connection, short enough that a program started while Redis is
	// unreachable is told so in seconds. [NewWithContext] takes a context instead.
	DefaultServerCheckTimeout = 5 * time.Second
)

// Handle is the shared machinery of the primitives made from one rueidis client: key layout,
// defaults, the pub/sub notifier (one subscription connection per Redis node), the renewal
// loop of every held lease, and background work. Make one per client and share it.
type Handle struct {
	c *core.Handle
}

// New wraps client in a Handle, as [NewWithContext] does with a context that ends after
// [DefaultServerCheckTimeout].
func New(client rueidis.Client, opts ...Option) (*Handle, error) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultServerCheckTimeout)
	defer cancel()
	return NewWithContext(ctx, client, opts...)
}

// NewWithContext wraps client in a Handle. It makes one round trip to Redis, the Handle's
// only one before its primitives are used: INFO server, sent to every node of a Cluster at
// once, to learn the servers' version. ctx bounds it.
//
//   - A server older than distsync supports (Redis 6.2, Valkey 7.2) gives an error matching
//     [ErrUnsupported] that names the version found and the version needed.
//   - On a Cluster of Redis 7.0 or later the Handle uses sharded pub/sub (SSUBSCRIBE,
//     SPUBLISH), so that a wake-up touches one shard; on a Redis 6.2 Cluster, which has
//     none, plain pub/sub, which the Cluster broadcasts to every node (docs/benchmarks.md
//     has what that costs).
//   - A server that answers INFO with an error (an ACL user without INFO, the embedded
//     miniredis, which has no server section) is taken as supported, with plain pub/sub,
//     which works on every version.
//   - A server that cannot be reached before ctx ends gives an error wrapping rueidis' (and
//     ctx's): a Handle whose pub/sub it could not choose is not handed out. rueidis.NewClient
//     has just connected to it, so this is a server that went away since; retry New as you
//     would NewClient.
//
// A nil client or a bad option gives an error matching [ErrInvalid], and nothing is sent.
//
// For the embedded miniredis, build the client with DisableCache, AlwaysRESP2 and
// ForceSingleClient set: miniredis has no client-side caching and no commands on a RESP3
// subscribed connection, and it answers CLUSTER SLOTS, so rueidis would otherwise take it for
// a Redis Cluster.
func NewWithContext(ctx context.Context, client rueidis.Client, opts ...Option) (*Handle, error) {
	if client == nil {
		return nil, fmt.Errorf("distsync: %w: nil client", ErrInvalid)
	}
	cfg, err := core.Configure(core.Config{
		Prefix:        DefaultKeyPrefix,
		LeaseTTL:      DefaultLeaseTTL,
		FenceTTL:      DefaultFenceRetention,
		HandoffWindow: DefaultHandoffWindow,
		WaiterLease:   DefaultWaiterLease,
		Identity:      core.DefaultIdentity(),
	}, core.Unwrap(opts))
	if err != nil {
		return nil, fmt.Errorf("distsync: %w", err)
	}
	if err := keys.CheckPrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("distsync: %w: %v", ErrInvalid, err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	srv, err := core.ProbeServer(ctx, client)
	if err != nil {
		if errors.Is(err, ErrUnsupported) {
			return nil, fmt.Errorf("distsync: %w", err)
		}
		return nil, fmt.Errorf("distsync: cannot learn the server's version: %w", err)
	}
	if srv.Version == "" {
		cfg.Logger.Info("distsync: the server does not report its version; taken as supported, with plain pub/sub")
	}
	return &Handle{c: core.NewHandle(client, cfg, srv)}, nil
}

// ID returns the Handle's id, unique across processes: the Holders of every primitive report
// it as [Holder.Handle] for the holds taken through this Handle, so that an operator can tell
// which process holds a name. It is the Handle's [Handle.Identity], with every byte but ASCII
// letters, digits and "-_.@+=" percent-encoded (%3A for ':'), then '.' and 16 random
// characters of base64url ("web-7f9c%3A4211.Q2xhc3NpY0hvbGRl"): every owner value and
// waiter id the Handle writes to Redis starts with it, so that Holders and package inspect
// can tell whose they are without another key.
func (h *Handle) ID() string { return h.c.ID() }

// Identity returns the Handle's identity, as [WithIdentity] set it or by default
// "<host name>:<process id>". [Holder.Identity], package inspect and the [Observer]'s
// [Event.Identity] report it.
func (h *Handle) Identity() string { return h.c.Config.Identity }

// Client returns the rueidis client the Handle wraps.
func (h *Handle) Client() rueidis.Client { return h.c.Raw }

// Close releases every claim the Handle still holds, so that waiters elsewhere get them at
// once instead of after their leases, then unsubscribes and stops the Handle's goroutines.
// ctx bounds how long it waits for Redis; claims it could not release expire with their
// leases. Blocked calls on the Handle's primitives return [ErrClosed]. Close does not close
// the rueidis client. Calling Close again does nothing and returns nil.
func (h *Handle) Close(ctx context.Context) error { return h.c.Close(ctx) }

func init() {
	core.Bridge(
		func(h any) *core.Handle {
			if hh, _ := h.(*Handle); hh != nil {
				return hh.c
			}
			return nil
		},
		func(l *core.Lease) any { return &Lease{l: l} },
		func(o core.Opt) any { return Option{o: o} },
		func(o any) core.Opt { return o.(Option).o },
	)
}

// Package fenced keeps values in Redis that a lock's stale holders cannot overwrite.
//
// A lock on Redis is a lease: a holder paused past it (a GC pause, a stopped VM, a slow
// network) resumes believing it holds the lock while another process holds it. A [Value]
// refuses such a stale holder. Each write carries the fencing token of the writer's hold
// ([distsync.Lease.Token]), and the Value accepts it only if the token is at least the largest
// token it has accepted, which it records. An equal token is accepted, so one holder can
// write several times; a larger one is a later holder, after whose first write the earlier
// holders' writes are refused. Before it, they are accepted: the Value orders writes by
// token, it cannot know that the lock changed hands.
//
// The value and the largest token accepted live in one Redis hash, <prefix>{<name>}:fenced
// (the name escaped as for every primitive), and each Set or Delete is one Lua script that
// checks the token and writes: one round trip, atomic, in one slot on Redis Cluster (the
// slot of every key of a lock with the same name).
//
// Use the tokens of one lock for a Value: nothing orders the tokens of two lock names, or of
// one name on two Redis deployments. For data kept elsewhere, make the same check in that
// store (docs/guarantees.md, "Fencing in your own storage").
//
// The value lives in the same Redis as the lock and is replicated like it: a failover can lose
// acknowledged writes, the value and its token together (docs/guarantees.md, "What is not
// promised").
package fenced

import (
	"context"
	"fmt"
	"strconv"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/api"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/kind"
	"github.com/distsync/distsync/internal/scripts"
)

// Value is a value in Redis written only with a fencing token at least the largest one it has
// accepted. Make it with [New]; it is safe for concurrent use.
//
// While a value is stored, its key has no TTL: it is data, kept until deleted. After
// [Value.Delete], the key keeps the token alone for the Handle's fence retention
// ([distsync.WithFenceRetention], [distsync.DefaultFenceRetention] unless changed; longer if
// an earlier Delete left it more), so that a stale holder still cannot write; then, unless a
// Set came first, the key expires and the Value is as if never set, accepting any token. The
// lock's later holders' tokens are still larger than the forgotten one (they follow the
// server clock in microseconds, unless it stepped back by more than the retention;
// docs/guarantees.md), but a stale write that arrives more than the retention after the
// Delete is accepted.
type Value struct {
	c       *core.Handle
	name    string
	key     string
	keepArg string
}

// New returns the Value called name. It sends nothing to Redis. It returns an error matching
// [distsync.ErrInvalid] for a nil handle or an empty name. Any name is allowed otherwise;
// names that differ are different values.
func New(h *distsync.Handle, name string) (*Value, error) {
	c, err := api.Core(h, kind.Fenced)
	if err != nil {
		return nil, err
	}
	ks, err := c.Keys(kind.Fenced, name)
	if err != nil {
		return nil, fmt.Errorf("fenced %q: %w", name, err)
	}
	return &Value{c: c, name: name, key: ks.Key(), keepArg: core.Ms(c.Config.FenceTTL)}, nil
}

// Name returns the name the Value was made with.
func (v *Value) Name() string { return v.name }

// Set writes value if token is at least the largest token v has accepted, and records token.
// It returns true if it wrote, and false, with a nil error, if v has accepted a larger token:
// the writer's hold is stale, and v is unchanged.
//
// A token below 1 returns an error matching [distsync.ErrInvalid] and sends nothing. On a
// closed Handle, Set returns an error matching [distsync.ErrClosed]. ctx bounds the one round
// trip. If it ends, or the connection fails, after the command was sent, Set returns the
// error and the write may have been made; sending the same token and value again is safe.
// If the key holds what package fenced did not write (another type, or a token field that is
// not a token), Set returns an error and changes nothing.
func (v *Value) Set(ctx context.Context, token int64, value string) (bool, error) {
	set := scripts.FencedSetArgs{Key: v.key, Token: strconv.FormatInt(token, 10), Value: value}
	return v.write(ctx, "set", token, set.Call())
}

// Delete deletes v's value if token is at least the largest token v has accepted, and records
// token, which v keeps for the fence retention (see [Value]): a stale holder cannot write v
// after a Delete either. It returns true if the token was accepted (the value is gone, whether
// or not it was set) and false, with a nil error, if v has accepted a larger token: v is
// unchanged. Bad input, a closed Handle, ctx and errors are as for [Value.Set].
func (v *Value) Delete(ctx context.Context, token int64) (bool, error) {
	del := scripts.FencedDeleteArgs{Key: v.key, Token: strconv.FormatInt(token, 10), Keep: v.keepArg}
	return v.write(ctx, "delete", token, del.Call())
}

// write runs call, the op of token, once (if token is valid).
func (v *Value) write(ctx context.Context, op string, token int64, call scripts.Call) (bool, error) {
	if token < 1 {
		return false, fmt.Errorf("fenced %q: %s: %w: token must be positive, got %d", v.name, op, distsync.ErrInvalid, token)
	}
	if err := v.c.Enter(); err != nil {
		return false, fmt.Errorf("fenced %q: %s: %w", v.name, op, err)
	}
	defer v.c.Exit()
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("fenced %q: %s: %w", v.name, op, err)
	}
	n, err := call.Exec(ctx, v.c.Client).AsInt64()
	if err == nil && n != 0 && n != 1 {
		err = core.Unexpected(call.Script, n)
	}
	if err != nil {
		return false, fmt.Errorf("fenced %q: %s: %w", v.name, op, err)
	}
	return n == 1, nil
}

// Get returns v's value, and ok true, if one is stored; ok is false if v was never set or was
// deleted. token is the largest token v has accepted, which is the token of the Set that
// stored value when ok is true; 0 if v records none. ctx bounds the one round trip. On a
// closed Handle, Get returns an error matching [distsync.ErrClosed]; if the key holds what
// package fenced did not write, an error.
func (v *Value) Get(ctx context.Context) (value string, token int64, ok bool, err error) {
	if err := v.c.Enter(); err != nil {
		return "", 0, false, fmt.Errorf("fenced %q: get: %w", v.name, err)
	}
	defer v.c.Exit()
	msgs, err := v.c.Client.Do(ctx, v.c.Client.B().Hmget().Key(v.key).Field("value", "token").Build()).ToArray()
	if err == nil && len(msgs) != 2 {
		err = fmt.Errorf("unexpected reply of %d elements to HMGET", len(msgs))
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("fenced %q: get: %w", v.name, err)
	}
	if !msgs[1].IsNil() {
		s, err := msgs[1].ToString()
		if err == nil {
			token, err = strconv.ParseInt(s, 10, 64)
		}
		if err != nil || token < 1 || strconv.FormatInt(token, 10) != s {
			return "", 0, false, fmt.Errorf("fenced %q: get: the key %s holds no fencing token", v.name, v.key)
		}
	}
	if msgs[0].IsNil() {
		return "", token, false, nil
	}
	value, err = msgs[0].ToString()
	if err != nil {
		return "", 0, false, fmt.Errorf("fenced %q: get: %w", v.name, err)
	}
	return value, token, true, nil
}

package inspect

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/keys"
	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/internal/sweep"
)

// layout lists the key parts of each kind, in the order inspect.lua takes them ("" is the
// main key). A primitive that has none of them is absent from Redis.
var layout = map[string][]string{
	Mutex:     {"", "fence", "q", "qx", "rel", "with"},
	Reentrant: {"", "fence", "ops", "q", "qx"},
	RWMutex:   {"", "r", "ww", "rq", "ra", "fence", "ops", "wo", "rel"},
	Fair:      {"", "fence", "q", "qx", "rel"},
	Semaphore: {"", "n", "q", "qx", "qn", "size", "ops"},
	Once:      {"", "kept", "fence"}, // of one key of a group; its res:<leader> keys are not read
	Election:  {"", "fence", "q", "qx", "rel", "v"},
	WaitGroup: {"", "m", "ops"},
	Rate:      {""},
}

// keysOf returns the keys of the primitive of kind whose key name is name (for once, one
// key's "<len(group)>:<group>:<key>", as package once names it).
func keysOf(c *core.Handle, kind, name string) ([]string, error) {
	ks, err := c.Keys(kind, name)
	if err != nil {
		return nil, fmt.Errorf("inspect %s %q: %w", kind, name, err)
	}
	out := make([]string, len(layout[kind]))
	for i, p := range layout[kind] {
		if p == "" {
			out[i] = ks.Key()
		} else {
			out[i] = ks.Part(p)
		}
	}
	return out, nil
}

// row is what inspect.lua returns for one kind.
type row struct {
	exists  int64
	holders []distsync.Holder
	queue   []Waiter
	fence   int64
	extra   []rueidis.RedisMessage
}

// readName reads the kinds (not once) of name in one script call. With found, it returns only
// the kinds Redis has keys of; otherwise one Report per kind.
func readName(ctx context.Context, c *core.Handle, name string, kinds []string, found bool) ([]Report, error) {
	var ks []string
	for _, kind := range kinds {
		k, err := keysOf(c, kind, name)
		if err != nil {
			return nil, err
		}
		ks = append(ks, k...)
	}
	what := fmt.Sprintf("inspect %q", name)
	if len(kinds) == 1 {
		what = fmt.Sprintf("inspect %s %q", kinds[0], name)
	}
	reply, err := scripts.InspectArgs{Keys: ks, Kinds: kinds}.Exec(ctx, c.Raw).ToArray()
	if err == nil && len(reply) != len(kinds) {
		err = core.Unexpected(scripts.Inspect, reply)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var out []Report
	for i, kind := range kinds {
		rw, err := parseRow(kind, reply[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if found && rw.exists == 0 {
			continue
		}
		r := Report{Kind: kind, Name: name}
		if rw.exists > 0 {
			if err := r.fill(rw); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// fill sets r from what inspect.lua read of its kind.
func (r *Report) fill(rw row) error {
	r.Holders, r.Queue, r.Fence = rw.holders, rw.queue, rw.fence
	bad := func() error { return core.Unexpected(scripts.Inspect, rw.extra) }
	switch r.Kind {
	case Mutex:
		if len(rw.extra) == 0 {
			return nil // an ordinary hold, or none
		}
		var set []string
		s, err := rw.extra[0].ToString()
		if err != nil || len(rw.extra) != 1 || json.Unmarshal([]byte(s), &set) != nil {
			return bad()
		}
		r.With = others(set, r.Name)
	case Reentrant:
		if len(rw.extra) == 0 {
			return nil // nobody holds, or a grant not taken up
		}
		id, err := rw.extra[0].ToString()
		if err != nil || len(rw.extra) != 1 {
			return bad()
		}
		r.maker = holdMaker(id)
	case Semaphore:
		if len(rw.extra) != 2 {
			return bad()
		}
		var err1, err2 error
		r.Size, err1 = rw.extra[0].AsInt64()
		r.InUse, err2 = rw.extra[1].AsInt64()
		if err1 != nil || err2 != nil {
			return bad()
		}
	case Election:
		if len(rw.extra) == 0 {
			return nil // nobody leads
		}
		if len(rw.extra) != 3 {
			return bad()
		}
		l := &Leader{}
		var err1, err2, err3 error
		l.Term, err1 = rw.extra[0].AsInt64()
		l.Rev, err2 = rw.extra[1].AsInt64()
		l.Value, err3 = rw.extra[2].ToString()
		if err1 != nil || err2 != nil || err3 != nil {
			return bad()
		}
		r.Leader = l
	case Rate:
		if len(rw.extra) == 0 {
			return nil // not a bucket package rate wrote
		}
		b, err := bucket(rw.extra)
		if err != nil {
			return bad()
		}
		r.Bucket = b
	case WaitGroup:
		ct, err := counter(rw.extra)
		if err != nil {
			return bad()
		}
		ct.Pending = ct.Units + int64(len(r.Holders))
		r.Counter = ct
	}
	return nil
}

// others returns the names of set but the first that is name, nil if none is left.
func others(set []string, name string) []string {
	var out []string
	for i, n := range set {
		if n == name {
			return append(out, set[i+1:]...)
		}
		out = append(out, n)
	}
	return out // not reached: a record names its own mutex
}

// bucket reads a rate limiter's extra: {tokens, since_us, limit, burst, now, next_us}, all
// strings (” for a setting not stored, or tokens now that Redis cannot know).
func bucket(x []rueidis.RedisMessage) (*Bucket, error) {
	if len(x) != 6 {
		return nil, fmt.Errorf("bad rate state")
	}
	var s [6]string
	for i := range s {
		var err error
		if s[i], err = x[i].ToString(); err != nil {
			return nil, err
		}
	}
	b := &Bucket{LimitSet: s[2] != "", BurstSet: s[3] != "", Exact: s[4] != ""}
	tokens := s[0]
	if b.Exact {
		tokens = s[4]
	}
	var errs [5]error
	var since, next int64
	b.Tokens, errs[0] = strconv.ParseFloat(tokens, 64)
	since, errs[1] = strconv.ParseInt(s[1], 10, 64)
	next, errs[2] = strconv.ParseInt(s[5], 10, 64)
	if b.LimitSet {
		b.Limit, errs[3] = strconv.ParseFloat(s[2], 64) // "inf" is +Inf
	}
	if b.BurstSet {
		b.Burst, errs[4] = strconv.ParseInt(s[3], 10, 64)
	}
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	b.Updated, b.Next = time.Duration(since)*time.Microsecond, time.Duration(next)*time.Microsecond
	return b, nil
}

// counter reads a wait group's extra: {units, round, open, lost, err, r1, o1, ...}.
func counter(x []rueidis.RedisMessage) (*Counter, error) {
	if len(x) < 5 || len(x)%2 != 1 {
		return nil, fmt.Errorf("bad waitgroup state")
	}
	s := make([]string, len(x))
	for i := range x {
		var err error
		if s[i], err = x[i].ToString(); err != nil {
			n, err := x[i].AsInt64() // a number the script computed
			if err != nil {
				return nil, err
			}
			s[i] = strconv.FormatInt(n, 10)
		}
	}
	ct := &Counter{Open: s[2] == "1", Err: s[4]}
	ct.Units, _ = strconv.ParseInt(s[0], 10, 64)
	ct.Round, _ = strconv.ParseInt(s[1], 10, 64)
	ct.Lost, _ = strconv.ParseInt(s[3], 10, 64)
	for i := 5; i+1 < len(s); i += 2 {
		o := Outcome{}
		var err error
		if o.Round, err = strconv.ParseInt(s[i], 10, 64); err != nil {
			continue // not a round the package wrote
		}
		lost, text, _ := strings.Cut(s[i+1], "\n")
		o.Lost, _ = strconv.ParseInt(lost, 10, 64)
		o.Err = text
		ct.Ended = append(ct.Ended, o)
	}
	slices.SortFunc(ct.Ended, func(a, b Outcome) int { return cmp.Compare(b.Round, a.Round) })
	return ct, nil
}

// parseRow reads inspect.lua's {exists, holders, queue, fence, extra} for kind.
func parseRow(kind string, m rueidis.RedisMessage) (row, error) {
	f, err := m.ToArray()
	if err != nil || len(f) != 5 {
		return row{}, core.Unexpected(scripts.Inspect, m)
	}
	var rw row
	var err1, err2 error
	rw.exists, err1 = f[0].AsInt64()
	rw.fence, err2 = f[3].AsInt64()
	hs, err3 := f[1].ToArray()
	qs, err4 := f[2].ToArray()
	rw.extra, err = f[4].ToArray()
	if err != nil || err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return row{}, core.Unexpected(scripts.Inspect, m)
	}
	for _, h := range hs {
		v, err := h.ToArray()
		if err != nil || len(v) != 5 {
			return row{}, core.Unexpected(scripts.Inspect, m)
		}
		owner, err := v[0].ToString()
		var n [4]int64
		for i := range n {
			if err == nil {
				n[i], err = v[i+1].AsInt64()
			}
		}
		if err != nil {
			return row{}, core.Unexpected(scripts.Inspect, m)
		}
		hd := distsync.Holder{Owner: owner, Remaining: left(n[0]), Token: n[1], Count: n[2], Shared: n[3] == 1}
		if kind != Reentrant { // a reentrant owner is the caller's, not a Handle's
			hd.Handle, hd.Identity = core.Whose(owner)
		}
		rw.holders = append(rw.holders, hd)
	}
	for _, q := range qs {
		v, err := q.ToArray()
		if err != nil || len(v) != 6 {
			return row{}, core.Unexpected(scripts.Inspect, m)
		}
		var s [3]string
		var n [3]int64
		for i, j := range []int{0, 4, 5} {
			if err == nil {
				s[i], err = v[j].ToString()
			}
		}
		for i := range n {
			if err == nil {
				n[i], err = v[i+1].AsInt64()
			}
		}
		if err != nil {
			return row{}, core.Unexpected(scripts.Inspect, m)
		}
		w := Waiter{ID: s[0], Remaining: left(n[0]), Weight: n[2], Shared: s[1] != "", Admitted: s[1] == "a", Value: s[2]}
		w.Handle, w.Identity = core.Whose(s[0])
		if n[1] > 0 {
			w.Waited = time.Duration(n[1]) * time.Millisecond
		}
		rw.queue = append(rw.queue, w)
	}
	return rw, nil
}

// left turns a remaining time in ms, as PTTL gives it, into a Duration: negative (-1) if
// Redis keeps it without expiry.
func left(ms int64) time.Duration {
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

// onceName returns the key name package once uses for key of group, and its inverse.
func onceName(group, key string) string { return strconv.Itoa(len(group)) + ":" + group + ":" + key }

func splitOnce(name string) (group, key string, ok bool) {
	n, rest, ok := strings.Cut(name, ":")
	l, err := strconv.Atoi(n)
	if !ok || err != nil || l < 1 || l >= len(rest) || rest[l] != ':' || strconv.Itoa(l) != n {
		return "", "", false
	}
	return rest[:l], rest[l+1:], true
}

// readOnce reads the once group called group: it SCANs every node for the group's keys and
// reads each key it finds with inspect.lua, a SCAN batch at a time, in one pipeline per node.
// found reports whether Redis has any key of the group.
func readOnce(ctx context.Context, c *core.Handle, group string) (r Report, found bool, err error) {
	r = Report{Kind: Once, Name: group}
	prefix := c.Config.Prefix + "{" + keys.Escape(onceName(group, ""))
	seen := make(map[string]bool)
	err = sweep.Scan(ctx, c.Raw, prefix, func(batch []string) error {
		var names []string
		var calls []scripts.Call
		for _, k := range batch {
			kind, name, ok := parseKey(c.Config.Prefix, k)
			if !ok || kind != Once || seen[name] {
				continue
			}
			if g, _, ok := splitOnce(name); !ok || g != group {
				continue
			}
			seen[name] = true
			ks, err := keysOf(c, Once, name)
			if err != nil {
				return err
			}
			names = append(names, name)
			calls = append(calls, scripts.InspectArgs{Keys: ks, Kinds: []string{Once}}.Call())
		}
		for i, res := range scripts.DoMulti(ctx, c.Raw, calls) {
			reply, err := res.ToArray()
			if err == nil && len(reply) != 1 {
				err = core.Unexpected(scripts.Inspect, reply)
			}
			if err != nil {
				return err
			}
			rw, err := parseRow(Once, reply[0])
			if err != nil {
				return err
			}
			if k, ok, err := onceKey(names[i], rw); err != nil {
				return err
			} else if ok {
				r.Keys = append(r.Keys, k)
			}
		}
		return nil
	})
	if err != nil {
		return Report{}, false, fmt.Errorf("inspect once %q: %w", group, err)
	}
	slices.SortFunc(r.Keys, func(a, b OnceKey) int { return strings.Compare(a.Key, b.Key) })
	return r, len(seen) > 0, nil
}

// keptAs names the status byte of a result (once_begin.lua).
var keptAs = map[string]string{"v": "value", "e": "error", "p": "panic", "g": "goexit"}

// onceKey makes the OnceKey of the key named name from what inspect.lua read of it; ok is
// false if it has neither a call in flight nor a result kept.
func onceKey(name string, rw row) (OnceKey, bool, error) {
	_, key, _ := splitOnce(name)
	k := OnceKey{Key: key}
	if len(rw.extra) != 2 {
		return k, false, core.Unexpected(scripts.Inspect, rw.extra)
	}
	status, err1 := rw.extra[0].ToString()
	kept, err2 := rw.extra[1].AsInt64()
	if err1 != nil || err2 != nil {
		return k, false, core.Unexpected(scripts.Inspect, rw.extra)
	}
	if len(rw.holders) > 0 {
		k.Leader = &rw.holders[0]
	}
	if status != "" {
		k.Kept, k.KeptFor = cmp.Or(keptAs[status], status), left(kept)
	}
	return k, k.Leader != nil || k.Kept != "", nil
}

package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/mutex"
)

// leaseTTL is the lease every library is given, so that they are compared like for like.
const leaseTTL = 10 * time.Second

// locker is what the scenarios drive: a lock on one key.
type locker interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// session is one process's connection to Redis through one library.
type session interface {
	// New returns a locker for key, whose Redis keys all start with keyPrefix. How lockers
	// are shared follows each library's idiom: distsync shares one *mutex.Mutex per key among
	// goroutines, as with sync.Mutex; the peers hand out a lock object per acquisition.
	New(key string) locker
	// Commands returns the commands this session's client has sent so far.
	Commands() int64
	Close()
}

type lib struct {
	name     string
	settings string
	open     func(addr string) (session, error)
	floor    bool // not a lock library: the least a lease lock can cost
}

var libs = []lib{
	{name: "floor", settings: "rueidis: SET NX PX, EVALSHA compare-and-delete", open: openFloor, floor: true},
	{name: "distsync", settings: "mutex, defaults (pub/sub wake-up, renewal at TTL/3)", open: openDistsync},
	{name: "rueidislock", settings: "KeyMajority 1 (one key), wake-up by client-side caching", open: openRueidislock},
	{name: "redislock", settings: "LinearBackoff(100ms) retries", open: openRedislock},
	{name: "redsync", settings: "default retry delay 50-250 ms, unlimited tries", open: openRedsync},
}

func libByName(name string) (lib, error) {
	for _, l := range libs {
		if l.name == name {
			return l, nil
		}
	}
	return lib{}, fmt.Errorf("unknown library %q", name)
}

// ---- counting the commands a rueidis client sends

// countingClient counts the commands sent through a rueidis client, with one atomic add (a
// benchmark must not slow the libraries it measures). rueidis' own health-check PINGs do not
// go through it. While a stampLog is set on it (the breakdown), it also notes when each Do and
// DoMulti is called and when it returns; unset, that costs one atomic load per call.
type countingClient struct {
	rueidis.Client
	n      atomic.Int64
	stamps atomic.Pointer[stampLog]
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	s := c.stamps.Load()
	s.mark()
	r := c.Client.Do(ctx, cmd)
	s.mark()
	return r
}

func (c *countingClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(multi)))
	s := c.stamps.Load()
	s.mark()
	r := c.Client.DoMulti(ctx, multi...)
	s.mark()
	return r
}

func (c *countingClient) Receive(ctx context.Context, sub rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	c.n.Add(1)
	return c.Client.Receive(ctx, sub, fn)
}

func (c *countingClient) Total() int64 { return c.n.Load() }

func count(raw rueidis.Client) *countingClient { return &countingClient{Client: raw} }

// stampLog is the times at which a countingClient's calls (Do, DoMulti) were made and
// returned, two per call, since its last take.
type stampLog struct {
	mu sync.Mutex // the caller's goroutine marks; the renewal loop's could too
	at []time.Time
}

// mark notes the time now. On a nil log it does nothing: nobody is looking.
func (s *stampLog) mark() {
	if s == nil {
		return
	}
	now := time.Now()
	s.mu.Lock()
	s.at = append(s.at, now)
	s.mu.Unlock()
}

// take appends the times noted since the last take to dst, forgets them, and returns dst.
func (s *stampLog) take(dst []time.Time) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	dst = append(dst, s.at...)
	s.at = s.at[:0]
	return dst
}

// ---- distsync

type distsyncSession struct {
	c  *countingClient
	h  *distsync.Handle
	mu sync.Mutex
	ms map[string]*mutex.Mutex
}

func openDistsync(addr string) (session, error) {
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	c := count(raw)
	h, err := distsync.New(c, distsync.WithKeyPrefix(keyPrefix), distsync.WithLeaseTTL(leaseTTL))
	if err != nil {
		return nil, err
	}
	return &distsyncSession{c: c, h: h, ms: map[string]*mutex.Mutex{}}, nil
}

func (s *distsyncSession) New(key string) locker {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.ms[key]
	if m == nil {
		var err error
		if m, err = mutex.New(s.h, key); err != nil {
			panic(err)
		}
		s.ms[key] = m
	}
	return m
}

func (s *distsyncSession) Commands() int64 { return s.c.Total() }
func (s *distsyncSession) Close() {
	_ = s.h.Close(context.Background())
	s.c.Close()
}

// ---- floor: one SET NX PX, one EVALSHA compare-and-delete

var floorRelease = rueidis.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

type floorSession struct {
	c   *countingClient
	seq atomic.Int64
}

func openFloor(addr string) (session, error) {
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	return &floorSession{c: count(raw)}, nil
}

type floorLock struct {
	s     *floorSession
	key   string
	value string
}

func (s *floorSession) New(key string) locker {
	return &floorLock{s: s, key: keyPrefix + "floor:" + key}
}
func (s *floorSession) Commands() int64 { return s.c.Total() }
func (s *floorSession) Close()          { s.c.Close() }

func (l *floorLock) Lock(ctx context.Context) error {
	l.value = fmt.Sprint(l.s.seq.Add(1), time.Now().UnixNano())
	for {
		err := l.s.c.Do(ctx, l.s.c.B().Set().Key(l.key).Value(l.value).Nx().PxMilliseconds(leaseTTL.Milliseconds()).Build()).Error()
		if err == nil {
			return nil
		}
		if !rueidis.IsRedisNil(err) {
			return err
		}
		select { // the floor is measured uncontended; this loop only keeps it correct
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (l *floorLock) Unlock(ctx context.Context) error {
	return floorRelease.Exec(ctx, l.s.c, []string{l.key}, []string{l.value}).Error()
}

// ---- rueidislock

type rueidislockSession struct {
	c *countingClient
	l rueidislock.Locker
}

func openRueidislock(addr string) (session, error) {
	s := &rueidislockSession{}
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:  1,
		KeyValidity:  leaseTTL,
		KeyPrefix:    keyPrefix + "rueidislock", // its keys are <KeyPrefix>:<i>:<name>
		ClientBuilder: func(opt rueidis.ClientOption) (rueidis.Client, error) {
			raw, err := rueidis.NewClient(opt)
			if err != nil {
				return nil, err
			}
			s.c = count(raw)
			return s.c, nil
		},
	})
	if err != nil {
		return nil, err
	}
	s.l = l
	return s, nil
}

type rueidislockLock struct {
	s      *rueidislockSession
	key    string
	cancel context.CancelFunc
}

func (s *rueidislockSession) New(key string) locker { return &rueidislockLock{s: s, key: key} }
func (s *rueidislockSession) Commands() int64       { return s.c.Total() }
func (s *rueidislockSession) Close()                { s.l.Close() }

func (l *rueidislockLock) Lock(ctx context.Context) error {
	// rueidislock ties the hold to the context it waits with: the scenarios' contexts outlive
	// every hold.
	_, cancel, err := l.s.l.WithContext(ctx, l.key)
	if err != nil {
		return err
	}
	l.cancel = cancel
	return nil
}

func (l *rueidislockLock) Unlock(context.Context) error {
	l.cancel()
	return nil
}

// ---- go-redis based peers

type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h countHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func goredisClient(addr string) (*goredis.Client, *atomic.Int64) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	n := new(atomic.Int64)
	c.AddHook(countHook{n})
	return c, n
}

type redislockSession struct {
	c *goredis.Client
	n *atomic.Int64
	l *redislock.Client
}

func openRedislock(addr string) (session, error) {
	c, n := goredisClient(addr)
	return &redislockSession{c: c, n: n, l: redislock.New(c)}, nil
}

type redislockLock struct {
	s    *redislockSession
	key  string
	held *redislock.Lock
}

func (s *redislockSession) New(key string) locker { return &redislockLock{s: s, key: keyPrefix + key} }
func (s *redislockSession) Commands() int64       { return s.n.Load() }
func (s *redislockSession) Close()                { _ = s.c.Close() }

func (l *redislockLock) Lock(ctx context.Context) error {
	// redislock stops retrying after one TTL when ctx has no deadline; the scenarios always
	// give one.
	lk, err := l.s.l.Obtain(ctx, l.key, leaseTTL, &redislock.Options{RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond)})
	if err != nil {
		return err
	}
	l.held = lk
	return nil
}

func (l *redislockLock) Unlock(ctx context.Context) error { return l.held.Release(ctx) }

type redsyncSession struct {
	c  *goredis.Client
	n  *atomic.Int64
	rs *redsync.Redsync
}

func openRedsync(addr string) (session, error) {
	c, n := goredisClient(addr)
	return &redsyncSession{c: c, n: n, rs: redsync.New(rsgoredis.NewPool(c))}, nil
}

type redsyncLock struct{ m *redsync.Mutex }

func (s *redsyncSession) New(key string) locker {
	return redsyncLock{s.rs.NewMutex(keyPrefix+key, redsync.WithExpiry(leaseTTL), redsync.WithTries(1<<30))}
}
func (s *redsyncSession) Commands() int64 { return s.n.Load() }
func (s *redsyncSession) Close()          { _ = s.c.Close() }

func (l redsyncLock) Lock(ctx context.Context) error { return l.m.LockContext(ctx) }
func (l redsyncLock) Unlock(ctx context.Context) error {
	_, err := l.m.UnlockContext(ctx)
	return err
}

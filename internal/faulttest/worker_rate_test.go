package faulttest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync/internal/scripts"
	"github.com/distsync/distsync/rate"
)

// rateLoop is the life of a rate worker: sp.Goroutines goroutines call Wait over and over,
// each at once after the last returned, until the worker stops. Every admission (a Wait that
// returned nil) is recorded with CLOCK_MONOTONIC and CLOCK_REALTIME as soon as Wait returned,
// and with Redis's decision (its time to act and when it was made, server clock), which the
// worker's client taps from the script's reply (tapClient).
func (w *worker) rateLoop(lim *rate.Limiter) {
	sp := w.sp
	var wg sync.WaitGroup
	for g := range max(1, sp.Goroutines) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < sp.MaxIter && w.stop.Err() == nil; i++ {
				tap := &tapReply{}
				err := lim.Wait(context.WithValue(w.stop, tapKey{}, tap))
				t, wall := mono(), time.Now().UnixMicro()
				call := fmt.Sprintf("%s.%d#%d", sp.ID, g, i)
				if err != nil {
					w.r.rec(Event{T: t, Ev: evFailed, Hold: call, Err: err.Error(), Ctx: isCtxErr(err), Alive: w.stop.Err() == nil})
					if w.stop.Err() == nil {
						w.sleep(50 * time.Millisecond) // an error other than the stop: do not spin
					}
					continue
				}
				e := Event{T: t, Ev: evAdmit, Hold: call, Wall: wall}
				if v := tap.get(); len(v) == 6 && v[0] == "1" {
					wait, err1 := strconv.ParseInt(v[1], 10, 64)
					at, err2 := strconv.ParseInt(v[2], 10, 64)
					if err1 == nil && err2 == nil {
						e.At, e.Made, e.Val = at, at-wait, v[4]
					}
				}
				if e.At == 0 {
					e.Err = fmt.Sprintf("no reservation seen in the reply: %q", tap.get())
				}
				w.r.rec(e)
			}
		}()
	}
	wg.Wait()
}

// tapKey is the context key of a Wait's tapReply.
type tapKey struct{}

// tapReply is the last reply of rate_reserve.lua sent with a Wait's context.
type tapReply struct {
	mu sync.Mutex
	v  []string
}

func (r *tapReply) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.v
}

// tapClient is a rueidis.Client that gives the replies of rate_reserve.lua to the tapReply
// of the call's context, if it has one. It changes nothing that it passes on.
type tapClient struct{ rueidis.Client }

// Do implements rueidis.Client.
func (c *tapClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	tap, _ := ctx.Value(tapKey{}).(*tapReply)
	// Look at the command before Do: rueidis may recycle it afterwards.
	if tap == nil || !isReserve(cmd.Commands()) {
		return c.Client.Do(ctx, cmd)
	}
	res := c.Client.Do(ctx, cmd)
	if v, err := res.AsStrSlice(); err == nil {
		tap.mu.Lock()
		tap.v = v
		tap.mu.Unlock()
	}
	return res
}

func isReserve(cmd []string) bool {
	s := scripts.RateReserve
	return len(cmd) > 1 && (cmd[0] == "EVALSHA" && cmd[1] == s.SHA() || cmd[0] == "EVAL" && cmd[1] == s.Source())
}

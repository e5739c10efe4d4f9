//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/rueidis"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/inspect"
	"github.com/distsync/distsync/internal/keys"
)

// inspectFlags are the flags inspect and ls share (see inspectFlagSet).
type inspectFlags struct {
	redis        redisTarget
	prefix, kind string
	json, watch  bool
	all          bool // ls --all: idle primitives too
	deadlocks    bool // inspect --deadlocks [PATTERN]
}

// openInspect parses the flags, checks them and connects: it returns the Handle to read
// through, its client, a function that closes both, the positional arguments, and the exit
// status if it cannot go on (having printed the help, or said why on stderr). tune, if not
// nil, completes the client's options once the flags are read.
func openInspect(command string, args []string, stdout, stderr io.Writer, tune func(inspectFlags, *rueidis.ClientOption)) (
	h *distsync.Handle, c rueidis.Client, closeAll func(), f inspectFlags, pos []string, status int, ok bool) {
	f = inspectFlags{redis: redisTarget{url: envRedis()}, prefix: distsync.DefaultKeyPrefix}
	pos, rest, _, err := inspectFlagSet(command, &f).parse(args, -1)
	pos = append(pos, rest...) // NAMEs after "--" too
	fail := func(err error) (*distsync.Handle, rueidis.Client, func(), inspectFlags, []string, int, bool) {
		return nil, nil, nil, f, nil, badUsage(stderr, command, err), false
	}
	switch {
	case errors.Is(err, errHelp):
		fmt.Fprint(stdout, helpOf(command))
		return nil, nil, nil, f, nil, exitOK, false
	case err != nil:
		return fail(err)
	case f.deadlocks && f.watch:
		return fail(usagef("--deadlocks and --watch exclude one another"))
	case f.deadlocks && f.kind != "":
		return fail(usagef("--deadlocks reads the kinds whose waiters wait for holds (%s): give no --kind", strings.Join(inspect.DeadlockKinds(), ", ")))
	case f.deadlocks && len(pos) > 1:
		return fail(usagef("--deadlocks takes one PATTERN at most, got %d", len(pos)))
	case command == "inspect" && !f.deadlocks && len(pos) == 0:
		return fail(usagef("missing NAME"))
	case command == "inspect" && !f.deadlocks && slices.Contains(pos, ""):
		return fail(usagef("empty NAME"))
	case command == "ls" && len(pos) > 1:
		return fail(usagef("one PATTERN at most, got %d", len(pos)))
	case f.redis.url == "":
		return fail(usagef("no Redis: give --redis URL or set DISTSYNC_REDIS_URL"))
	case f.redis.check() != nil: // --redis was checked, not DISTSYNC_REDIS_URL, nor the TLS files
		return fail(redisProblem(f.redis))
	}
	if err := keys.CheckPrefix(f.prefix); err != nil {
		return fail(usagef("--prefix %s: %v", shownValue(f.prefix), err))
	}
	c, err = dialRedisWith(context.Background(), f.redis, func(o *rueidis.ClientOption) {
		if tune != nil {
			tune(f, o)
		}
	})
	if err != nil {
		fmt.Fprintf(stderr, "distsync %s: %v\n", command, err)
		return nil, nil, nil, f, nil, dialStatus(err), false
	}
	h, err = distsync.New(c, distsync.WithKeyPrefix(f.prefix))
	if err != nil {
		c.Close()
		if !errors.Is(err, distsync.ErrInvalid) { // Redis went away, or is too old
			fmt.Fprintf(stderr, "distsync %s: %v\n", command, err)
			return nil, nil, nil, f, nil, exitUnavailable, false
		}
		return fail(fmt.Errorf("--prefix %s: %w", shownValue(f.prefix), err))
	}
	closeAll = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Close(ctx) // it holds nothing
		c.Close()
	}
	return h, c, closeAll, f, pos, exitOK, true
}

// runInspect runs "distsync inspect [flags] NAME...": see "distsync help inspect". It
// returns the exit status.
func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	w := newWatcher()
	h, c, closeAll, f, names, status, ok := openInspect("inspect", args, stdout, stderr, func(f inspectFlags, o *rueidis.ClientOption) {
		if f.watch {
			w.tune(o) // the client's invalidations go to w
		}
	})
	if !ok {
		return status
	}
	defer closeAll()
	if f.deadlocks {
		return showDeadlocks(ctx, h, names, f.json, stdout, stderr)
	}
	show := func(stdout io.Writer) int {
		var out []nameJSON
		for _, name := range names {
			rs, err := inspectName(ctx, h, name, f.kind)
			if err != nil {
				if ctx.Err() != nil && f.watch {
					return exitOK // interrupted
				}
				fmt.Fprintf(stderr, "distsync inspect: %v\n", err)
				if errors.Is(err, distsync.ErrInvalid) {
					return exitUsage
				}
				return exitUnavailable
			}
			if f.json {
				out = append(out, toJSON(name, rs))
				continue
			}
			printName(stdout, name, rs)
		}
		if f.json {
			return writeJSON(stdout, stderr, out, !f.watch)
		}
		return exitOK
	}
	if !f.watch {
		return show(stdout)
	}
	return w.run(ctx, h, c, names, f, stdout, stderr, show)
}

// inspectName reads name: every kind it has keys of, or only kind. A kind with nothing in
// Redis is left out.
func inspectName(ctx context.Context, h *distsync.Handle, name, kind string) ([]inspect.Report, error) {
	if kind == "" {
		return inspect.Name(ctx, h, name)
	}
	r, err := inspect.Inspect(ctx, h, kind, name)
	if err != nil || empty(r) {
		return nil, err
	}
	return []inspect.Report{r}, nil
}

// empty reports whether r has nothing at all: the Report of a primitive Redis has no key of
// (or one with no more than keys of no interest here, such as a lingering once result).
func empty(r inspect.Report) bool {
	return r.Idle() && r.Fence == 0 && r.Size == 0 && r.Counter == nil && r.Bucket == nil
}

// runLs runs "distsync ls [flags] [PATTERN]": see "distsync help ls". It returns the exit
// status.
func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	h, _, closeAll, f, pos, status, ok := openInspect("ls", args, stdout, stderr, nil)
	if !ok {
		return status
	}
	defer closeAll()
	pattern := ""
	if len(pos) == 1 {
		pattern = pos[0]
	}
	es, err := inspect.List(ctx, h, pattern)
	if err != nil {
		fmt.Fprintf(stderr, "distsync ls: %v\n", err)
		if errors.Is(err, distsync.ErrInvalid) {
			return exitUsage
		}
		return exitUnavailable
	}
	var sel []inspect.Entry
	for _, e := range es {
		if f.kind == "" || e.Kind == f.kind {
			sel = append(sel, e)
		}
	}
	out, err := lsHolders(ctx, h, sel)
	if err != nil {
		fmt.Fprintf(stderr, "distsync ls: %v\n", err)
		return exitUnavailable
	}
	if !f.all {
		out = slices.DeleteFunc(out, func(e entryJSON) bool { return e.Idle })
	}
	if f.json {
		return writeJSON(stdout, stderr, out, true)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if len(out) > 0 {
		fmt.Fprintln(tw, "KIND\tNAME\tHELD BY\tWAITING")
	}
	for _, e := range out {
		by := strings.Join(e.HeldBy, ", ")
		if by == "" {
			by = "-"
		}
		if len(e.With) > 0 {
			by += " (with " + withList(e.With) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", e.Kind, shown(e.Name), by, e.Waiting)
	}
	if err := tw.Flush(); err != nil {
		return exitUnavailable
	}
	return exitOK
}

// lsParallel is how many primitives ls reads at once.
const lsParallel = 8

// lsHolders reads who holds and how many wait for each entry, lsParallel at a time: one
// round trip each (a once group: a SCAN and a pipeline).
func lsHolders(ctx context.Context, h *distsync.Handle, es []inspect.Entry) ([]entryJSON, error) {
	out := make([]entryJSON, len(es))
	errs := make([]error, len(es))
	sem := make(chan struct{}, lsParallel)
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := inspect.Inspect(ctx, h, e.Kind, e.Name)
			out[i], errs[i] = entryJSON{Kind: e.Kind, Name: e.Name, HeldBy: []string{}, Waiting: len(r.Queue)}, err
			for _, hd := range r.Holders {
				out[i].HeldBy = append(out[i].HeldBy, holderName(hd))
			}
			out[i].With = r.With
			out[i].Idle = idleEntry(r)
			for _, k := range r.Keys {
				if k.Leader != nil {
					out[i].HeldBy = append(out[i].HeldBy, holderName(*k.Leader))
				}
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// showDeadlocks prints the wait-for cycles among the processes that hold and wait for the
// primitives whose names match the pattern in pos (every name if none): inspect --deadlocks.
func showDeadlocks(ctx context.Context, h *distsync.Handle, pos []string, asJSON bool, stdout, stderr io.Writer) int {
	pattern := ""
	if len(pos) == 1 {
		pattern = pos[0]
	}
	ds, err := inspect.Deadlocks(ctx, h, pattern)
	if err != nil {
		fmt.Fprintf(stderr, "distsync inspect: %v\n", err)
		if errors.Is(err, distsync.ErrInvalid) {
			return exitUsage
		}
		return exitUnavailable
	}
	if asJSON {
		out := []deadlockJSON{}
		for _, d := range ds {
			out = append(out, toDeadlockJSON(d))
		}
		return writeJSON(stdout, stderr, out, true)
	}
	if len(ds) == 0 {
		fmt.Fprintln(stdout, "no deadlock")
	}
	for _, d := range ds {
		fmt.Fprintf(stdout, "deadlock of %d processes:\n", len(d))
		for i, w := range d {
			next := d[(i+1)%len(d)]
			fmt.Fprintf(stdout, "  %s waits for %s %s, held by %s (token %d)\n",
				processName(w.Identity, w.Handle), w.Kind, shown(w.Name), processName(next.Identity, next.Handle), w.Holder.Token)
		}
	}
	return exitOK
}

// processName names a process of a deadlock: its identity, or its Handle if it has none.
func processName(identity, handle string) string {
	if identity != "" {
		return identity
	}
	return "handle " + shown(handle)
}

// idleEntry reports whether ls leaves r out without --all: nobody holds or waits for it
// (inspect.Report.Idle), and it is not a rate limiter that has a bucket in Redis (which it
// keeps only while the bucket is not full). A name that keeps only its fencing token, for a
// week after its last hold, is idle: it was listed for that week.
func idleEntry(r inspect.Report) bool { return r.Idle() && r.Bucket == nil }

// holderName names a hold for ls: its Handle's identity (host:PID unless the process named
// itself), or, for a reentrant mutex, whose holds belong to an owner, the owner.
func holderName(hd distsync.Holder) string {
	switch {
	case hd.Identity != "":
		return hd.Identity
	case hd.Owner != "":
		return "owner " + shown(hd.Owner)
	}
	return "?"
}

// withList prints the other names of a set of mutexes held together: "b, c".
func withList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = shown(n)
	}
	return strings.Join(out, ", ")
}

// shown returns name as it is if it prints plainly, else quoted (Go syntax).
func shown(name string) string {
	q := strconv.Quote(name)
	if q[1:len(q)-1] == name && !strings.ContainsAny(name, " \t") {
		return name
	}
	return q
}

// The table output.

// printName prints what inspect read of name.
func printName(w io.Writer, name string, rs []inspect.Report) {
	if len(rs) == 0 {
		fmt.Fprintf(w, "%s: nothing held or queued\n", shown(name))
		return
	}
	for _, r := range rs {
		fmt.Fprintf(w, "%s %s: %s\n", r.Kind, shown(name), summary(r))
		var b bytes.Buffer
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		if r.Kind == inspect.Once {
			onceTable(tw, r)
		} else {
			claimTable(tw, r)
		}
		_ = tw.Flush()
		for _, line := range strings.SplitAfter(b.String(), "\n") {
			if line != "" {
				fmt.Fprintln(w, strings.TrimRight(line, " \n")) // tabwriter pads empty last cells
			}
		}
	}
}

// summary is the one line said of a report before its table.
func summary(r inspect.Report) string {
	var s []string
	switch {
	case r.Kind == inspect.Once:
		inFlight, kept := 0, 0
		for _, k := range r.Keys {
			if k.Leader != nil {
				inFlight++
			}
			if k.Kept != "" {
				kept++
			}
		}
		s = append(s, fmt.Sprintf("%d in flight, %d kept", inFlight, kept))
	case r.Kind == inspect.WaitGroup && r.Counter != nil:
		ct := r.Counter
		s = append(s, fmt.Sprintf("%d pending (plain units %d, members %d)", ct.Pending, ct.Units, len(r.Holders)))
		switch {
		case ct.Round == 0:
		case ct.Open:
			s = append(s, fmt.Sprintf("round %d open, %d lost so far", ct.Round, ct.Lost))
		default:
			s = append(s, fmt.Sprintf("round %d ended", ct.Round))
		}
		for i, o := range ct.Ended {
			if i == 3 {
				s = append(s, fmt.Sprintf("%d more rounds kept", len(ct.Ended)-3))
				break
			}
			s = append(s, fmt.Sprintf("round %d: %s", o.Round, outcome(o)))
		}
		if ct.Err != "" {
			s = append(s, "first error "+strconv.Quote(ct.Err))
		}
	case r.Kind == inspect.Rate && r.Bucket != nil:
		s = append(s, bucketSummary(r.Bucket)...)
	case r.Idle():
		s = append(s, "free")
	case r.Kind == inspect.Reentrant:
		s = append(s, fmt.Sprintf("%d holding", len(r.Holders)))
	default:
		s = append(s, fmt.Sprintf("%d holding, %d waiting", len(r.Holders), len(r.Queue)))
	}
	if r.Kind == inspect.Semaphore {
		s = append(s, fmt.Sprintf("size %d, %d in use", r.Size, r.InUse))
	}
	if l := r.Leader; l != nil {
		s = append(s, fmt.Sprintf("leader %q, term %d, rev %d", l.Value, l.Term, l.Rev))
	}
	if len(r.With) > 0 {
		s = append(s, "held with "+withList(r.With)+", all or none (mutex.All)")
	}
	if r.Fence != 0 {
		s = append(s, fmt.Sprintf("last token %d", r.Fence))
	}
	if r.Kind == inspect.Reentrant || r.Kind == inspect.Once {
		s = append(s, "waiters wait on pub/sub, not in a queue in Redis")
	}
	return strings.Join(s, "; ")
}

// bucketSummary says what a rate limiter's bucket holds: its tokens (now, or at its last
// write when Redis cannot know the rate they come back at), its settings, and the latest
// reservation's time to act if it is ahead.
func bucketSummary(b *inspect.Bucket) []string {
	var s []string
	if b.Exact {
		s = append(s, fmt.Sprintf("%.2f tokens now", b.Tokens))
	} else {
		s = append(s, fmt.Sprintf("%.2f tokens at its last decision, %s ago (more now: they come back at the callers' own limit)",
			b.Tokens, duration(b.Updated)))
	}
	if b.LimitSet {
		s = append(s, "limit "+limitText(b.Limit)+" (stored)")
	} else {
		s = append(s, "limit: the callers' own")
	}
	if b.BurstSet {
		s = append(s, fmt.Sprintf("burst %d (stored)", b.Burst))
	} else {
		s = append(s, "burst: the callers' own")
	}
	if b.Next > 0 {
		s = append(s, "latest reservation acts in "+duration(b.Next))
	}
	return s
}

// limitText prints a rate limit in events per second: "10/s", "inf".
func limitText(l float64) string {
	if math.IsInf(l, 1) {
		return "inf"
	}
	return strconv.FormatFloat(l, 'g', 4, 64) + "/s"
}

func outcome(o inspect.Outcome) string {
	switch {
	case o.Lost == 0 && o.Err == "":
		return "clean"
	case o.Err == "":
		return fmt.Sprintf("%d lost", o.Lost)
	}
	return fmt.Sprintf("%d lost, error %q", o.Lost, o.Err)
}

// claimTable prints the holders and the queue of a report.
func claimTable(tw io.Writer, r inspect.Report) {
	if len(r.Holders) == 0 && len(r.Queue) == 0 {
		return
	}
	// The identity (host:PID by default) first, the id Redis keeps last: it is long, and
	// starts with the identity and the Handle id (the JSON has the Handle apart).
	header := "  \tIDENTITY\tTOKEN\tCOUNT\tLEFT\tWAITED"
	if r.Kind == inspect.Election {
		header += "\tVALUE"
	}
	fmt.Fprintln(tw, header+"\tOWNER / WAITER")
	for _, h := range r.Holders {
		role := "holder"
		switch {
		case r.Kind == inspect.WaitGroup:
			role = "member"
		case h.Shared:
			role = "reader"
		case strings.HasPrefix(h.Owner, "~"):
			role = "granted"
		}
		value := ""
		if r.Kind == inspect.Election {
			value = "\t-"
			if r.Leader != nil {
				value = "\t" + strconv.Quote(r.Leader.Value)
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t-%s\t%s\n", role, identity(h.Identity), token(h.Token), h.Count,
			duration(h.Remaining), value, shown(h.Owner))
	}
	for i, q := range r.Queue {
		role := fmt.Sprintf("waiting %d", i+1)
		switch {
		case q.Admitted:
			role += " (admitted reader)"
		case q.Shared:
			role += " (reader)"
		}
		value, waited := "", "-"
		if r.Kind == inspect.Election {
			value = "\t" + strconv.Quote(q.Value)
		}
		if q.Waited > 0 || !q.Shared {
			waited = duration(q.Waited)
		}
		fmt.Fprintf(tw, "  %s\t%s\t-\t%d\t%s\t%s%s\t%s\n", role, identity(q.Identity), q.Weight,
			duration(q.Remaining), waited, value, shown(q.ID))
	}
}

func onceTable(tw io.Writer, r inspect.Report) {
	if len(r.Keys) == 0 {
		return
	}
	fmt.Fprintln(tw, "  KEY\tLEADER (IDENTITY)\tTOKEN\tLEFT\tKEPT\tKEPT FOR\tCALL IN FLIGHT")
	for _, k := range r.Keys {
		leader, id, tok, left := "-", "-", "-", "-"
		if l := k.Leader; l != nil {
			leader, id, tok, left = shown(l.Owner), identity(l.Identity), token(l.Token), duration(l.Remaining)
		}
		kept, keptFor := "-", "-"
		if k.Kept != "" {
			kept, keptFor = k.Kept, duration(k.KeptFor)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", strconv.Quote(k.Key), id, tok, left, kept, keptFor, leader)
	}
}

// identity prints a Handle's identity as shown does, "-" if there is none (a reentrant
// owner's hold).
func identity(s string) string { return dash(shown(s)) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func token(t int64) string {
	if t == 0 {
		return "-"
	}
	return strconv.FormatInt(t, 10)
}

// duration prints d to the millisecond; a negative one is no expiry.
func duration(d time.Duration) string {
	if d < 0 {
		return "no expiry"
	}
	return d.Round(time.Millisecond).String()
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// hog is one busy process per CPU (`yes` into /dev/null), started and stopped by the bench.
type hog struct{ cmds []*exec.Cmd }

func startHog() (*hog, error) {
	h := &hog{}
	for range runtime.NumCPU() {
		cmd := exec.Command("yes")
		cmd.Stdout = nil // /dev/null
		if err := cmd.Start(); err != nil {
			h.stop()
			return nil, fmt.Errorf("starting the CPU hog: %w", err)
		}
		h.cmds = append(h.cmds, cmd)
	}
	return h, nil
}

// stop kills every hog process by its PID and reaps it.
func (h *hog) stop() {
	for _, c := range h.cmds {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	h.cmds = nil
}

// hogRun is one library's figures in one condition: its uncontended p50 and distinct-keys
// pairs/s and Redis CPU per pair, against the floor's of the same condition.
type hogRun struct {
	p50, distinctPerSec, redisCPU float64 // × the floor's
}

// hogCompare runs the uncontended rows and the distinct-keys cell of the chosen libraries
// (the floor among them) twice, quiet and then with a CPU hog on every core, and prints each
// library's ratios to the floor in both and how much they grew (-primitives hog).
func hogCompare(ctx context.Context, addr string, chosen []lib, iters int, distinctDur time.Duration) error {
	hasFloor := false
	for _, l := range chosen {
		hasFloor = hasFloor || l.floor
	}
	if !hasFloor {
		return fmt.Errorf("-primitives hog compares with the floor: name it in -libs")
	}
	measure := func(what string) (map[string]hogRun, error) {
		fmt.Fprintf(os.Stderr, "%s: uncontended…\n", what)
		un, _, err := uncontended(ctx, chosen, addr, iters)
		if err != nil {
			return nil, err
		}
		out := map[string]hogRun{}
		ds := map[string]distinct{}
		for _, l := range chosen {
			fmt.Fprintf(os.Stderr, "%s: %s distinct keys…\n", what, l.name)
			if ds[l.name], err = distinctKeys(ctx, l, addr, distinctGoroutines, distinctDur); err != nil {
				return nil, fmt.Errorf("%s: %w", l.name, err)
			}
		}
		f, fd := un["floor"], ds["floor"]
		for _, l := range chosen {
			d := ds[l.name]
			out[l.name] = hogRun{p50: float64(un[l.name].p50) / float64(f.p50),
				distinctPerSec: d.perSec / fd.perSec, redisCPU: float64(d.redisCPU) / float64(fd.redisCPU)}
		}
		return out, nil
	}
	quiet, err := measure("quiet")
	if err != nil {
		return err
	}
	h, err := startHog()
	if err != nil {
		return err
	}
	loaded, err := measure(fmt.Sprintf("CPU hog (%d × yes)", len(h.cmds)))
	h.stop()
	if err != nil {
		return err
	}
	fmt.Printf("\n### Quiet, then with a CPU hog on each core (%d × `yes >/dev/null`, started and stopped by the bench)\n\n", runtime.NumCPU())
	fmt.Printf("Ratios to the floor of the same condition; growth is loaded against quiet (for pairs/s, a drop is growth of the gap: quiet/loaded).\n\n")
	fmt.Printf("| library | uncontended p50 × floor, quiet → hog (growth) | distinct keys pairs/s × floor, quiet → hog (growth) | Redis CPU / pair × floor, quiet → hog (growth) |\n|---|---|---|---|\n")
	for _, l := range chosen {
		if l.floor {
			continue
		}
		q, g := quiet[l.name], loaded[l.name]
		fmt.Printf("| %s | %.2f× → %.2f× (%s) | %.2f× → %.2f× (%s) | %.2f× → %.2f× (%s) |\n", l.name,
			q.p50, g.p50, growth(g.p50/q.p50), q.distinctPerSec, g.distinctPerSec, growth(q.distinctPerSec/g.distinctPerSec),
			q.redisCPU, g.redisCPU, growth(g.redisCPU/q.redisCPU))
	}
	return nil
}

// growth writes a ratio of ratios as a signed percentage.
func growth(r float64) string {
	s := fmt.Sprintf("%+.0f%%", (r-1)*100)
	return strings.Replace(s, "+0%", "0%", 1)
}

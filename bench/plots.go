package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotsDir is where the run writes its charts (-plots); none if empty.
var plotsDir string

// savePlot writes p as an SVG file in plotsDir and says so on stderr.
func savePlot(p *plot.Plot, name string) {
	if plotsDir == "" {
		return
	}
	if err := os.MkdirAll(plotsDir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "plots: %v\n", err)
		return
	}
	path := filepath.Join(plotsDir, name)
	if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
		fmt.Fprintf(os.Stderr, "plot %s: %v\n", name, err)
		return
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", path)
}

// plotHandoffCDF charts the distribution of every library's hand-offs under contention.
func plotHandoffCDF(rows []row) {
	p := plot.New()
	p.Title.Text = "Hand-off latency under contention (4 processes × 4 goroutines, one key)"
	p.X.Label.Text = "Unlock call → next Lock return in another goroutine (ms, log scale)"
	p.Y.Label.Text = "share of hand-offs at or below"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = false
	p.Legend.Left = false
	var lines []any
	for _, r := range rows {
		hs := slices.Clone(r.cont.handoffs)
		if !r.contention || r.contErr != nil || len(hs) == 0 {
			continue
		}
		slices.Sort(hs)
		// At most 500 points: the CDF's shape, not every sample.
		step := max(1, len(hs)/500)
		var xy plotter.XYs
		for i := 0; i < len(hs); i += step {
			xy = append(xy, plotter.XY{X: math.Max(ms(hs[i]), 0.001), Y: float64(i+1) / float64(len(hs))})
		}
		xy = append(xy, plotter.XY{X: math.Max(ms(hs[len(hs)-1]), 0.001), Y: 1})
		lines = append(lines, r.lib.name, xy)
	}
	if len(lines) == 0 {
		return
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		fmt.Fprintf(os.Stderr, "plot: %v\n", err)
		return
	}
	savePlot(p, "handoff-cdf.svg")
}

// plotRedisCPU charts the Redis CPU time per contended acquisition of every library.
func plotRedisCPU(rows []row) {
	var vals plotter.Values
	var names []string
	for _, r := range rows {
		if r.contention && r.contErr == nil {
			vals = append(vals, float64(r.cont.redisCPU)/float64(time.Microsecond))
			names = append(names, r.lib.name)
		}
	}
	if len(vals) == 0 {
		return
	}
	p := plot.New()
	p.Title.Text = "Redis CPU per acquisition under contention (INFO cpu)"
	p.Y.Label.Text = "µs of redis-server CPU per acquisition"
	bars, err := plotter.NewBarChart(vals, vg.Points(40))
	if err != nil {
		fmt.Fprintf(os.Stderr, "plot: %v\n", err)
		return
	}
	bars.Color = color.RGBA{R: 70, G: 110, B: 170, A: 255}
	p.Add(bars)
	p.NominalX(names...)
	savePlot(p, "redis-cpu.svg")
}

// plotScale charts hand-off p50 and p99 against the number of contenders, per primitive.
func plotScale(pts []scalePoint) {
	p := plot.New()
	p.Title.Text = "Hand-off latency against the number of contenders on one name"
	p.X.Label.Text = "contenders (log scale)"
	p.Y.Label.Text = "hand-off (ms)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	var lines []any
	for _, k := range scaleKinds {
		var p50, p99 plotter.XYs
		for _, pt := range pts {
			if pt.kind == k.name && pt.err == nil && pt.contenders > 1 {
				p50 = append(p50, plotter.XY{X: float64(pt.contenders), Y: ms(pt.handoffP50)})
				p99 = append(p99, plotter.XY{X: float64(pt.contenders), Y: ms(pt.handoffP99)})
			}
		}
		if len(p50) > 0 {
			lines = append(lines, k.name+" p50", p50, k.name+" p99", p99)
		}
	}
	if len(lines) == 0 {
		return
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		fmt.Fprintf(os.Stderr, "plot: %v\n", err)
		return
	}
	savePlot(p, "scale-handoff.svg")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

package bench

import (
	"fmt"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot files WritePlots writes.
const (
	PlotThroughput = "throughput.png"
	PlotTTFT       = "ttft.png"
	PlotTPOT       = "tpot.png"
)

// series is one line of a plot: a target (its color) and, for
// percentiles, which one (its dash).
type series struct {
	name        string
	color, dash int
	xs, ys      []float64
}

// WritePlots draws output-token throughput, and TTFT and TPOT
// percentiles, against the sweep's levels, one line per target (and
// percentile), into dir. It returns the files written.
func WritePlots(dir string, r *Report) ([]string, error) {
	levels := r.Config.Workload.Levels
	xlabel := "concurrency"
	if len(levels) > 0 && levels[0].OpenLoop() {
		xlabel = "request rate (req/s)"
	}
	var thr, ttft, tpot []series
	pcts := []struct {
		name string
		get  func(Stats) float64
	}{{"p50", func(s Stats) float64 { return s.P50 }}, {"p90", func(s Stats) float64 { return s.P90 }}, {"p99", func(s Stats) float64 { return s.P99 }}}
	for ti, t := range r.Targets {
		th := series{name: t.Target.Name, color: ti}
		for _, l := range t.Levels {
			if l.Summary.Completed > 0 {
				th.xs, th.ys = append(th.xs, l.Level.x()), append(th.ys, l.Summary.OutputThroughput)
			}
		}
		thr = append(thr, th)
		for pi, p := range pcts {
			a := series{name: t.Target.Name + " " + p.name, color: ti, dash: pi}
			b := a
			for _, l := range t.Levels {
				if s := l.Summary.TTFT; s.N > 0 {
					a.xs, a.ys = append(a.xs, l.Level.x()), append(a.ys, p.get(s))
				}
				if s := l.Summary.TPOT; s.N > 0 {
					b.xs, b.ys = append(b.xs, l.Level.x()), append(b.ys, p.get(s))
				}
			}
			ttft, tpot = append(ttft, a), append(tpot, b)
		}
	}
	charts := []struct {
		file, title, ylabel string
		lines               []series
	}{
		{PlotThroughput, "Output token throughput", "output tokens/s", thr},
		{PlotTTFT, "Time to first token", "TTFT (ms)", ttft},
		{PlotTPOT, "Time per output token", "TPOT (ms)", tpot},
	}
	var files []string
	for _, c := range charts {
		p, err := chart(c.title, xlabel, c.ylabel, levels, c.lines)
		if err != nil {
			return files, fmt.Errorf("bench: plot %s: %w", c.file, err)
		}
		path := filepath.Join(dir, c.file)
		if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
			return files, fmt.Errorf("bench: save plot: %w", err)
		}
		files = append(files, path)
	}
	return files, nil
}

// chart draws lines against the levels, ticked at each level. The x axis
// is logarithmic when the levels span a factor of four or more, as
// doubling sweeps do.
func chart(title, xlabel, ylabel string, levels []Level, lines []series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(12)
	p.Add(plotter.NewGrid())
	var ticks plot.ConstantTicks
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, l := range levels {
		x := l.x()
		ticks = append(ticks, plot.Tick{Value: x, Label: fmt.Sprint(x)})
		lo, hi = min(lo, x), max(hi, x)
	}
	p.X.Tick.Marker = ticks
	if lo > 0 && hi/lo >= 4 {
		p.X.Scale = plot.LogScale{}
	}
	drawn := 0
	for _, s := range lines {
		if len(s.xs) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.xs))
		for i := range s.xs {
			xys[i].X, xys[i].Y = s.xs[i], s.ys[i]
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		line.Color = plotutil.Color(s.color)
		line.Dashes = plotutil.Dashes(s.dash)
		points.Color = plotutil.Color(s.color)
		points.Shape = plotutil.Shape(s.dash)
		p.Add(line, points)
		p.Legend.Add(s.name, line, points)
		drawn++
	}
	if drawn == 0 {
		p.Title.Text += " (no successful requests)"
	}
	// Headroom above the data keeps the legend off the lines.
	p.Y.Max *= 1 + 0.06*float64(drawn+1)
	if lo <= hi {
		p.X.Min, p.X.Max = lo, hi
	}
	return p, nil
}

package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Driver runs a workload against targets. The zero value is ready to
// use.
type Driver struct {
	// Client sends the requests; nil builds one with a connection pool
	// large enough for any level, no proxy and no compression.
	Client *http.Client
	// Progress receives a one-line progress bar, redrawn with \r; nil
	// shows none.
	Progress io.Writer
}

// Report is the outcome of a run.
type Report struct {
	Config  Config         `json:"config"`
	Targets []TargetResult `json:"targets"`
}

// TargetResult holds one target's levels, in the workload's order.
type TargetResult struct {
	Target Target        `json:"target"`
	Levels []LevelResult `json:"levels"`
}

// LevelResult is one level against one target.
type LevelResult struct {
	Level   Level   `json:"level"`
	Summary Summary `json:"summary"`
	// Records are the level's requests in prompt order.
	Records []Record `json:"requests,omitempty"`
}

// Run sends the workload to every target. Levels interleave: each level
// runs against every target in turn before the next level starts, so a
// drift in the machine's load touches all targets alike. A target's
// warmup runs just before its first level.
//
// A failing target yields failed records, not an error. The error is for
// an invalid config or a canceled ctx; with the latter the report holds
// the levels that ran.
func (d *Driver) Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	client := d.Client
	if client == nil {
		client = newClient()
		defer client.CloseIdleConnections()
	}
	w := cfg.Workload
	rep := &Report{Config: cfg, Targets: make([]TargetResult, len(cfg.Targets))}
	for i, t := range cfg.Targets {
		rep.Targets[i].Target = t
	}
	for li, lvl := range w.Levels {
		prompts := w.levelPrompts(li)
		var arrivals []time.Duration
		if lvl.OpenLoop() {
			arrivals = poisson(source(w.Seed, streamArrivals, li), lvl.Rate, w.Requests)
		}
		for ti := range rep.Targets {
			tr := &rep.Targets[ti]
			if li == 0 {
				d.warmup(ctx, client, tr.Target, &w)
			}
			tr.Levels = append(tr.Levels, d.level(ctx, client, tr.Target, &w, lvl, prompts, arrivals))
			if err := ctx.Err(); err != nil {
				return rep, fmt.Errorf("bench: run stopped at %s %s: %w", tr.Target.Name, lvl.Label(), err)
			}
		}
	}
	return rep, nil
}

func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

// warmup sends the target a few unmeasured requests, one at a time.
func (d *Driver) warmup(ctx context.Context, client *http.Client, t Target, w *Workload) {
	if w.Warmup == 0 {
		return
	}
	url := t.base() + w.Endpoint.path()
	bar := newProgress(d.Progress, t.Name+" warmup", w.Warmup)
	origin := time.Now()
	for _, p := range w.warmupPrompts() {
		if ctx.Err() != nil {
			break
		}
		bar.add(send(ctx, client, url, w, p, origin))
	}
	bar.finish()
}

// level runs one level against one target: closed loop, each worker
// takes the next prompt when its request ends; open loop, each request
// is sent at its arrival time.
func (d *Driver) level(ctx context.Context, client *http.Client, t Target, w *Workload, lvl Level, prompts []Prompt, arrivals []time.Duration) LevelResult {
	url := t.base() + w.Endpoint.path()
	bar := newProgress(d.Progress, t.Name+" "+lvl.Label(), len(prompts))
	done := make(chan Record, len(prompts))
	origin := time.Now()
	issue := func(i int) {
		r := send(ctx, client, url, w, prompts[i], origin)
		r.Index = i
		done <- r
	}
	var wg sync.WaitGroup
	if lvl.OpenLoop() {
		wg.Go(func() { arrive(ctx, &wg, lvl.Concurrency, origin, arrivals, issue) })
	} else {
		var next atomic.Int64
		for range min(lvl.Concurrency, len(prompts)) {
			wg.Go(func() {
				for ctx.Err() == nil {
					i := int(next.Add(1)) - 1
					if i >= len(prompts) {
						return
					}
					issue(i)
				}
			})
		}
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	records := make([]Record, 0, len(prompts))
	for r := range done {
		records = append(records, r)
		bar.add(r)
	}
	bar.finish()
	slices.SortFunc(records, func(a, b Record) int { return a.Index - b.Index })
	return LevelResult{Level: lvl, Summary: Summarize(records, span(records), w.SLO), Records: records}
}

// arrive issues request i at origin+arrivals[i], waiting for one of
// limit slots when limit is above zero.
func arrive(ctx context.Context, wg *sync.WaitGroup, limit int, origin time.Time, arrivals []time.Duration, issue func(int)) {
	var slots chan struct{}
	if limit > 0 {
		slots = make(chan struct{}, limit)
	}
	for i, at := range arrivals {
		if wait := time.Until(origin.Add(at)); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return
			}
		}
		if slots != nil {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		wg.Go(func() {
			issue(i)
			if slots != nil {
				<-slots
			}
		})
	}
}

// poisson is the arrival schedule of n requests at rate per second: the
// first at zero, then exponentially distributed gaps.
func poisson(r *rand.Rand, rate float64, n int) []time.Duration {
	at := make([]time.Duration, n)
	for i := 1; i < n; i++ {
		at[i] = at[i-1] + time.Duration(r.ExpFloat64()/rate*float64(time.Second))
	}
	return at
}

// span is a level's duration: from its start to its last completion.
func span(records []Record) time.Duration {
	var end time.Duration
	for _, r := range records {
		end = max(end, r.Sent+r.E2E)
	}
	return end
}

// progress draws a one-line bar. It is used by one goroutine.
type progress struct {
	w      io.Writer
	label  string
	total  int
	done   int
	failed int
	first  *Failure
	start  time.Time
	drawn  time.Time
}

const (
	barWidth    = 30
	redrawEvery = 100 * time.Millisecond
)

func newProgress(w io.Writer, label string, total int) *progress {
	p := &progress{w: w, label: label, total: total, start: time.Now()}
	p.draw()
	return p
}

func (p *progress) add(r Record) {
	p.done++
	if !r.OK() {
		p.failed++
		if p.first == nil {
			p.first = r.Failure
		}
	}
	if p.done == p.total || time.Since(p.drawn) >= redrawEvery {
		p.draw()
	}
}

func (p *progress) draw() {
	if p.w == nil {
		return
	}
	p.drawn = time.Now()
	filled := barWidth
	if p.total > 0 {
		filled = p.done * barWidth / p.total
	}
	fmt.Fprintf(p.w, "\r%-28s [%s%s] %d/%d failed %d %6.1fs", p.label,
		strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled),
		p.done, p.total, p.failed, p.drawn.Sub(p.start).Seconds())
}

// finish ends the bar's line and names the first failure, if any.
func (p *progress) finish() {
	if p.w == nil {
		return
	}
	if p.done != p.total {
		p.draw()
	}
	fmt.Fprintln(p.w)
	if p.first != nil {
		fmt.Fprintf(p.w, "  first failure: %s: %s\n", p.first.Kind, p.first.Reason)
	}
}

package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Comparison holds the ratios of the first target to another, level by
// level.
type Comparison struct {
	Base   string        `json:"base"`
	Other  string        `json:"other"`
	Levels []LevelRatios `json:"levels"`
}

// LevelRatios maps each compared metric to base / other; nil where
// either side has no value or the other's is zero.
type LevelRatios struct {
	Level  Level               `json:"level"`
	Ratios map[string]*float64 `json:"ratios"`
}

// ratioMetric is one compared column: its key in JSON, its header in
// markdown, and its value in a summary (ok false when it has none).
type ratioMetric struct {
	key, header string
	value       func(Summary) (float64, bool)
}

var ratioMetrics = []ratioMetric{
	{"output_throughput", "out tok/s", func(s Summary) (float64, bool) { return s.OutputThroughput, s.Duration > 0 }},
	{"request_throughput", "req/s", func(s Summary) (float64, bool) { return s.RequestThroughput, s.Duration > 0 }},
	{"goodput", "goodput", func(s Summary) (float64, bool) { return s.Goodput, s.Duration > 0 }},
	{"ttft_p50", "TTFT p50", func(s Summary) (float64, bool) { return s.TTFT.P50, s.TTFT.N > 0 }},
	{"ttft_p99", "TTFT p99", func(s Summary) (float64, bool) { return s.TTFT.P99, s.TTFT.N > 0 }},
	{"tpot_p50", "TPOT p50", func(s Summary) (float64, bool) { return s.TPOT.P50, s.TPOT.N > 0 }},
	{"tpot_p99", "TPOT p99", func(s Summary) (float64, bool) { return s.TPOT.P99, s.TPOT.N > 0 }},
	{"itl_p50", "ITL p50", func(s Summary) (float64, bool) { return s.ITL.P50, s.ITL.N > 0 }},
	{"e2e_p50", "E2E p50", func(s Summary) (float64, bool) { return s.E2E.P50, s.E2E.N > 0 }},
}

// Compare sets the first target against each other one. Levels pair by
// position, which the shared workload makes the same level.
func Compare(r *Report) []Comparison {
	if len(r.Targets) < 2 {
		return nil
	}
	base := r.Targets[0]
	var out []Comparison
	for _, other := range r.Targets[1:] {
		c := Comparison{Base: base.Target.Name, Other: other.Target.Name}
		for i := range min(len(base.Levels), len(other.Levels)) {
			lr := LevelRatios{Level: base.Levels[i].Level, Ratios: map[string]*float64{}}
			for _, m := range ratioMetrics {
				lr.Ratios[m.key] = ratio(m, base.Levels[i].Summary, other.Levels[i].Summary)
			}
			c.Levels = append(c.Levels, lr)
		}
		out = append(out, c)
	}
	return out
}

func ratio(m ratioMetric, base, other Summary) *float64 {
	b, okb := m.value(base)
	o, oko := m.value(other)
	if !okb || !oko || o == 0 {
		return nil
	}
	v := b / o
	return &v
}

// resultsNotes states the units and definitions next to the numbers.
type resultsNotes struct {
	Latency    string `json:"latency"`
	Percentile string `json:"percentile"`
	Throughput string `json:"throughput"`
	TPOT       string `json:"tpot"`
	Tokens     string `json:"tokens"`
}

var notes = resultsNotes{
	Latency:    "milliseconds; TTFT to the first content chunk, E2E to [DONE], ITL every gap between content chunks",
	Percentile: "linear interpolation between closest ranks, rank = p/100*(n-1) (numpy default)",
	Throughput: "per second of the level's duration, first send to last completion; successful requests only",
	TPOT:       "(E2E - TTFT) / (output tokens - 1), requests with more than one output token",
	Tokens:     "from the stream's usage when sent, else content chunks counted (token_source per request)",
}

// WriteJSON writes the report as results.json; records adds every
// request of every level.
func WriteJSON(w io.Writer, r *Report, records bool) error {
	targets := make([]TargetResult, len(r.Targets))
	for i, t := range r.Targets {
		targets[i] = TargetResult{Target: t.Target, Levels: slices.Clone(t.Levels)}
		if !records {
			for j := range targets[i].Levels {
				targets[i].Levels[j].Records = nil
			}
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	err := enc.Encode(struct {
		Notes       resultsNotes   `json:"notes"`
		Config      Config         `json:"config"`
		Targets     []TargetResult `json:"targets"`
		Comparisons []Comparison   `json:"comparisons,omitempty"`
	}{notes, r.Config, targets, Compare(r)})
	if err != nil {
		return fmt.Errorf("bench: write results: %w", err)
	}
	return nil
}

// WriteTable writes a terminal table of every target and level, then
// each level's failures by kind.
func WriteTable(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tlevel\tok\tfailed\tdur s\treq/s\tout tok/s\tgoodput\t"+
		"TTFT mean\tp50\tp90\tp99\tTPOT mean\tp50\tp90\tp99\tITL p50\tp99\tE2E p50\tp99\t")
	for _, t := range r.Targets {
		for _, l := range t.Levels {
			s := l.Summary
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.2f\t%.2f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
				t.Target.Name, l.Level.Label(), s.Completed, s.Failed, s.Duration.Seconds(),
				s.RequestThroughput, s.OutputThroughput, goodput(s, r.Config.Workload.SLO),
				num(s.TTFT, s.TTFT.Mean), num(s.TTFT, s.TTFT.P50), num(s.TTFT, s.TTFT.P90), num(s.TTFT, s.TTFT.P99),
				num(s.TPOT, s.TPOT.Mean), num(s.TPOT, s.TPOT.P50), num(s.TPOT, s.TPOT.P90), num(s.TPOT, s.TPOT.P99),
				num(s.ITL, s.ITL.P50), num(s.ITL, s.ITL.P99), num(s.E2E, s.E2E.P50), num(s.E2E, s.E2E.P99))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	fmt.Fprintln(w, "latencies in ms; percentiles interpolate linearly (numpy default)")
	for _, t := range r.Targets {
		for _, l := range t.Levels {
			if l.Summary.Failed > 0 {
				fmt.Fprintf(w, "%s %s: %d failed (%s)\n", t.Target.Name, l.Level.Label(), l.Summary.Failed, failureCounts(l.Summary))
			}
			if l.Summary.Retries > 0 {
				fmt.Fprintf(w, "%s %s: %s on a fresh connection\n", t.Target.Name, l.Level.Label(), retries(l.Summary.Retries))
			}
		}
	}
	return nil
}

// WriteMarkdown writes report.md: the workload, a table per target and,
// with several targets, the ratios of the first to each other.
func WriteMarkdown(w io.Writer, r *Report) error {
	var b strings.Builder
	wl := r.Config.Workload
	b.WriteString("# Benchmark\n\n")
	fmt.Fprintf(&b, "- endpoint: `%s`", wl.Endpoint.path())
	if wl.Model != "" {
		fmt.Fprintf(&b, ", model: `%s`", wl.Model)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "- workload: %s; %d requests per level; warmup %d per target\n", loopText(wl.Levels), wl.Requests, wl.Warmup)
	fmt.Fprintf(&b, "- prompts: %s; max_tokens %d; temperature 0; ignore_eos %v; seed %d\n", promptText(wl.Prompts), wl.MaxTokens, wl.IgnoreEOS, wl.Seed)
	if len(wl.ResponseFormat) > 0 {
		fmt.Fprintf(&b, "- response_format: `%s`\n", wl.ResponseFormat)
	}
	fmt.Fprintf(&b, "- timeout %s; SLO: %s\n\n", wl.timeout(), sloText(wl.SLO))
	b.WriteString("Latencies in ms. Percentiles interpolate linearly between the closest ranks (numpy's default). " +
		"Throughput and goodput count successful requests per second of the level's duration, from its first send to its last completion. " +
		"TPOT = (E2E - TTFT) / (output tokens - 1) over requests with more than one output token. " +
		"Output tokens come from the server's usage where it sent one (column *usage* counts those requests), else from counted content chunks.\n")
	for _, t := range r.Targets {
		fmt.Fprintf(&b, "\n## %s (%s)\n\n", cell(t.Target.Name), cell(t.Target.URL))
		b.WriteString("| level | ok | failed | usage | duration s | req/s | out tok/s | total tok/s | goodput req/s |" +
			" TTFT mean | TTFT p50 | TTFT p90 | TTFT p99 | TPOT mean | TPOT p50 | TPOT p90 | TPOT p99 |" +
			" ITL mean | ITL p50 | ITL p90 | ITL p99 | E2E mean | E2E p50 | E2E p90 | E2E p99 |\n")
		b.WriteString("|---|" + strings.Repeat("---:|", 24) + "\n")
		for _, l := range t.Levels {
			s := l.Summary
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %.2f | %.2f | %.1f | %.1f | %s |", l.Level.Label(), s.Completed, s.Failed,
				s.UsageReported, s.Duration.Seconds(), s.RequestThroughput, s.OutputThroughput, s.TotalTokenThroughput, goodput(s, wl.SLO))
			for _, st := range []Stats{s.TTFT, s.TPOT, s.ITL, s.E2E} {
				fmt.Fprintf(&b, " %s | %s | %s | %s |", num(st, st.Mean), num(st, st.P50), num(st, st.P90), num(st, st.P99))
			}
			b.WriteString("\n")
		}
		listLevels(&b, t.Levels, "Failures:", func(s Summary) string {
			if s.Failed == 0 {
				return ""
			}
			return fmt.Sprintf("%d of %d (%s)", s.Failed, s.Requests, failureCounts(s))
		})
		listLevels(&b, t.Levels, "Sent again on a fresh connection (the connection broke before any response; timed from the last attempt):", func(s Summary) string {
			if s.Retries == 0 {
				return ""
			}
			return retries(s.Retries)
		})
	}
	for _, c := range Compare(r) {
		fmt.Fprintf(&b, "\n## Ratios: %s / %s\n\n", cell(c.Base), cell(c.Other))
		fmt.Fprintf(&b, "Throughput and goodput above 1, and latencies below 1, favour %s.\n\n", cell(c.Base))
		b.WriteString("| level |")
		for _, m := range ratioMetrics {
			b.WriteString(" " + m.header + " |")
		}
		b.WriteString("\n|---|" + strings.Repeat("---:|", len(ratioMetrics)) + "\n")
		for _, l := range c.Levels {
			b.WriteString("| " + l.Level.Label() + " |")
			for _, m := range ratioMetrics {
				if v := l.Ratios[m.key]; v != nil {
					fmt.Fprintf(&b, " %.2f |", *v)
				} else {
					b.WriteString(" n/a |")
				}
			}
			b.WriteString("\n")
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("bench: write markdown: %w", err)
	}
	return nil
}

// num formats a statistic in ms, or "-" when the distribution is empty.
func num(s Stats, v float64) string {
	if s.N == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// goodput formats goodput, "-" when no SLO makes it differ from the
// request throughput.
func goodput(s Summary, slo SLO) string {
	if !slo.Set() {
		return "-"
	}
	return strconv.FormatFloat(s.Goodput, 'f', 2, 64)
}

// listLevels writes heading and a "- level: text" line for every level
// whose line is not empty; nothing when none has one.
func listLevels(b *strings.Builder, levels []LevelResult, heading string, line func(Summary) string) {
	first := true
	for _, l := range levels {
		text := line(l.Summary)
		if text == "" {
			continue
		}
		if first {
			fmt.Fprintf(b, "\n%s\n\n", heading)
			first = false
		}
		fmt.Fprintf(b, "- %s: %s\n", l.Level.Label(), text)
	}
}

// retries counts retries in words: "1 retry", "3 retries".
func retries(n int) string {
	if n == 1 {
		return "1 retry"
	}
	return strconv.Itoa(n) + " retries"
}

func failureCounts(s Summary) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.Failures)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.Failures[k]))
	}
	return strings.Join(parts, ", ")
}

func loopText(levels []Level) string {
	var xs []string
	for _, l := range levels {
		if l.OpenLoop() {
			xs = append(xs, strconv.FormatFloat(l.Rate, 'g', 4, 64))
		} else {
			xs = append(xs, strconv.Itoa(l.Concurrency))
		}
	}
	if len(levels) > 0 && levels[0].OpenLoop() {
		s := "open loop, Poisson arrivals at " + strings.Join(xs, ", ") + " req/s"
		if c := levels[0].Concurrency; c > 0 {
			s += fmt.Sprintf(", at most %d in flight", c)
		}
		return s
	}
	return "closed loop, concurrency " + strings.Join(xs, ", ")
}

func promptText(p PromptSet) string {
	switch p.Shape {
	case PromptsRandom:
		return fmt.Sprintf("random, ~%d tokens ±%.0f%%", p.Tokens, p.spread()*100)
	case PromptsSharedPrefix:
		return fmt.Sprintf("shared-prefix, ~%d tokens of which %d are one of %d prefixes", p.Tokens, p.prefixTokens(), p.prefixes())
	}
	return fmt.Sprintf("%s, ~%d tokens", p.Shape, p.Tokens)
}

func sloText(s SLO) string {
	if !s.Set() {
		return "none"
	}
	var parts []string
	for _, b := range []struct {
		name string
		d    time.Duration
	}{{"TTFT", s.TTFT}, {"TPOT", s.TPOT}, {"E2E", s.E2E}} {
		if b.d > 0 {
			parts = append(parts, fmt.Sprintf("%s ≤ %s", b.name, b.d))
		}
	}
	return strings.Join(parts, ", ")
}

// cell escapes text for a markdown table or heading.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

package bench

import (
	"bytes"
	"encoding/json"
	"flag"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// sampleReport runs a fixed workload against a steady target, a slower
// one, and one that breaks one stream of each level.
func sampleReport(t *testing.T) *Report {
	t.Helper()
	var rep *Report
	synctest.Test(t, func(t *testing.T) {
		var mem memNet
		_, ours := mem.serve("ours:80", steady)
		defer ours.Close()
		_, peer := mem.serve("peer:80", reply{tokens: tokens(4, 100*msec, 20*msec)},
			reply{tokens: tokens(1, 100*msec, 0)}, reply{tokens: tokens(2, 100*msec, 20*msec), abort: true},
			reply{tokens: tokens(4, 100*msec, 20*msec), noUsage: true})
		defer peer.Close()
		client := mem.client()
		defer client.CloseIdleConnections()

		w := testWorkload()
		w.Levels = []Level{{Concurrency: 1}, {Concurrency: 2}}
		w.SLO = SLO{TTFT: 60 * msec, TPOT: 15 * msec}
		targets := []Target{{Name: "ours", URL: ours.URL}, {Name: "peer", URL: peer.URL}}
		var err error
		rep, err = (&Driver{Client: client}).Run(t.Context(), Config{Targets: targets, Workload: w})
		if err != nil {
			t.Fatal(err)
		}
	})
	return rep
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run with -update to accept):\n%s", name, got)
	}
}

func TestMarkdownReport(t *testing.T) {
	rep := sampleReport(t)
	var b bytes.Buffer
	if err := WriteMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"## ours (http://ours:80)",
		"| level | ok | failed | usage | duration s | req/s | out tok/s |",
		"## Ratios: ours / peer",
		"| level | out tok/s | req/s | goodput | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | ITL p50 | E2E p50 |",
		"- c=1: 1 of 4 (truncated 1)",
		"SLO: TTFT ≤ 60ms, TPOT ≤ 15ms",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Every table row has as many cells as its header.
	cols := 0
	for line := range strings.SplitSeq(md, "\n") {
		switch {
		case strings.HasPrefix(line, "| level"):
			cols = strings.Count(line, "|")
		case strings.HasPrefix(line, "|") && strings.Count(line, "|") != cols:
			t.Errorf("row with %d bars, header has %d: %s", strings.Count(line, "|"), cols, line)
		}
	}
	golden(t, "report.md", b.Bytes())
}

func TestJSONResults(t *testing.T) {
	rep := sampleReport(t)
	for _, records := range []bool{false, true} {
		var b bytes.Buffer
		if err := WriteJSON(&b, rep, records); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Notes   map[string]string `json:"notes"`
			Config  map[string]any    `json:"config"`
			Targets []struct {
				Target Target `json:"target"`
				Levels []struct {
					Level    Level                      `json:"level"`
					Summary  map[string]json.RawMessage `json:"summary"`
					Requests []map[string]any           `json:"requests"`
				} `json:"levels"`
			} `json:"targets"`
			Comparisons []struct {
				Base, Other string
				Levels      []struct {
					Ratios map[string]*float64 `json:"ratios"`
				}
			} `json:"comparisons"`
		}
		if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Notes["percentile"] == "" || doc.Config["workload"] == nil || len(doc.Targets) != 2 || len(doc.Comparisons) != 1 {
			t.Fatalf("document shape: %+v", doc)
		}
		wl := doc.Config["workload"].(map[string]any)
		if wl["timeout_s"] != 10.0 || wl["slo"].(map[string]any)["ttft_ms"] != 60.0 {
			t.Errorf("workload %v", wl)
		}
		lv := doc.Targets[1].Levels[0]
		if lv.Level != (Level{Concurrency: 1}) {
			t.Errorf("level %+v", lv.Level)
		}
		for _, k := range []string{"requests", "completed", "failed", "failures", "duration_s", "request_throughput",
			"output_throughput", "goodput", "ttft", "tpot", "itl", "e2e"} {
			if lv.Summary[k] == nil {
				t.Errorf("summary lacks %s", k)
			}
		}
		var ttft Stats
		if err := json.Unmarshal(lv.Summary["ttft"], &ttft); err != nil || ttft.P50 != 100 || ttft.N != 3 {
			t.Errorf("peer ttft %s: %+v %v", lv.Summary["ttft"], ttft, err)
		}
		if got := doc.Comparisons[0].Levels[0].Ratios["ttft_p50"]; got == nil || *got != 0.5 {
			t.Errorf("ttft ratio %v, want 0.5", got)
		}
		if !records {
			if lv.Requests != nil {
				t.Error("requests written without asking")
			}
			continue
		}
		if len(lv.Requests) != 4 {
			t.Fatalf("%d requests, want 4", len(lv.Requests))
		}
		for i, want := range []map[string]any{
			{"ok": true, "ttft_ms": 100.0, "tpot_ms": 20.0, "e2e_ms": 160.0, "token_source": "usage", "output_tokens": 4.0},
			{"ok": true, "ttft_ms": 100.0, "tpot_ms": nil, "output_tokens": 1.0},
			{"ok": false, "chunks": 2.0, "failure": map[string]any{"kind": "truncated", "reason": lv.Requests[2]["failure"].(map[string]any)["reason"]}},
			{"ok": true, "token_source": "chunks", "output_tokens": 4.0, "prompt_tokens": 8.0, "itl_ms": []any{20.0, 20.0, 20.0}},
		} {
			for k, v := range want {
				if !equalJSON(lv.Requests[i][k], v) {
					t.Errorf("request %d: %s = %v, want %v", i, k, lv.Requests[i][k], v)
				}
			}
		}
		golden(t, "results.json", b.Bytes())
	}
}

func TestPlots(t *testing.T) {
	full := sampleReport(t)
	dead := &Report{
		Config:  Config{Workload: Workload{Levels: []Level{{Rate: 2}}}},
		Targets: []TargetResult{{Target: Target{Name: "down"}, Levels: []LevelResult{{Level: Level{Rate: 2}, Summary: Summarize(scripted()[3:], time.Second, SLO{})}}}},
	}
	for _, tc := range []struct {
		name string
		rep  *Report
	}{{"two targets, two levels", full}, {"nothing completed, one open-loop level", dead}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files, err := WritePlots(dir, tc.rep)
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != 3 {
				t.Fatalf("files %v, want 3", files)
			}
			for _, name := range []string{PlotThroughput, PlotTTFT, PlotTPOT} {
				checkPNG(t, filepath.Join(dir, name))
			}
		})
	}
}

// checkPNG wants a non-empty file with the PNG signature that decodes
// to an 8x5 inch image at 96 dpi.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s: no PNG signature (%d bytes)", path, len(b))
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if cfg.Width != 768 || cfg.Height != 480 {
		t.Errorf("%s: %dx%d, want 768x480", path, cfg.Width, cfg.Height)
	}
}

func TestTable(t *testing.T) {
	rep := sampleReport(t)
	var b bytes.Buffer
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"target", "TTFT mean", "ours", "c=2", "peer c=1: 1 failed (truncated 1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

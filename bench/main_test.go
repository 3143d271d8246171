package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCLITwoTargets(t *testing.T) {
	_, ours := loopback(t, reply{tokens: tokens(3, 0, 0)})
	peer, peerSrv := loopback(t, reply{tokens: tokens(3, 0, 0), noUsage: true})
	out := filepath.Join(t.TempDir(), "run")
	var stdout, stderr bytes.Buffer
	code := Main([]string{
		"--target", "ours=" + ours.URL, "--target", "peer=" + peerSrv.URL + "/v1",
		"--model", "tiny", "--endpoint", "completions", "--concurrency", "1,2", "--requests", "3",
		"--prompts", "shared-prefix", "--prompt-tokens", "16", "--max-tokens", "3", "--timeout", "30s",
		"--slo-ttft", "1s", "--seed", "9", "--out", out, "--records",
	}, &stdout, &stderr)
	if code != ExitOK {
		t.Fatalf("exit %d\nstderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{"TTFT mean", "ours", "peer", "## Ratios: ours / peer", "| c=2 |"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	for _, want := range []string{"\rours warmup", "\rpeer c=2", "3/3 failed 0", "wrote " + filepath.Join(out, "results.json")} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	// One warmup and two levels of three, all on the completions route.
	if got := len(peer.requests()); got != 7 {
		t.Errorf("peer got %d requests, want 7", got)
	}
	for _, p := range peer.paths {
		if p != "/v1/completions" {
			t.Errorf("request to %s", p)
		}
	}
	for _, name := range []string{"results.json", "report.md", PlotThroughput, PlotTTFT, PlotTPOT} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{PlotThroughput, PlotTTFT, PlotTPOT} {
		checkPNG(t, filepath.Join(out, name))
	}
	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Config struct {
			Workload Workload `json:"workload"`
		} `json:"config"`
		Targets []struct {
			Levels []struct {
				Requests []json.RawMessage `json:"requests"`
			} `json:"levels"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	wl := doc.Config.Workload
	if wl.Endpoint != EndpointCompletions || wl.Seed != 9 || wl.Prompts.Shape != PromptsSharedPrefix || wl.Requests != 3 || len(wl.Levels) != 2 {
		t.Errorf("workload in results: %+v", wl)
	}
	if len(doc.Targets) != 2 || len(doc.Targets[1].Levels[1].Requests) != 3 {
		t.Errorf("results lack the requests: %s", raw)
	}
}

func TestCLIDeadTarget(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Main([]string{"--target", "down=" + closedPort(t), "--requests", "2", "--concurrency", "1", "--progress=false"}, &stdout, &stderr)
	if code != ExitFailed {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", code, ExitFailed, stderr.String())
	}
	if !strings.Contains(stderr.String(), "down c=1: no request completed") || strings.Contains(stderr.String(), "\r") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "down c=1: 2 failed (connect 2)") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
}

func TestCLIUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"help", []string{"--help"}, ExitOK, "-poisson-rate rates"},
		{"no target", []string{}, ExitUsage, "no target"},
		{"bad target", []string{"--target", "ours=localhost:8000"}, ExitUsage, "want name=http://host:port"},
		{"bad endpoint", []string{"--target", "a=http://a:1", "--endpoint", "embeddings"}, ExitUsage, "endpoint"},
		{"bad concurrency", []string{"--target", "a=http://a:1", "--concurrency", "1,x"}, ExitUsage, "--concurrency"},
		{"fractional concurrency", []string{"--target", "a=http://a:1", "--concurrency", "1.5"}, ExitUsage, "whole numbers"},
		{"zero rate", []string{"--target", "a=http://a:1", "--poisson-rate", "0"}, ExitUsage, "--poisson-rate"},
		{"bad prompts", []string{"--target", "a=http://a:1", "--prompts", "sharegpt"}, ExitUsage, "prompts"},
		{"stray argument", []string{"--target", "a=http://a:1", "now"}, ExitUsage, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := Main(tc.args, &stdout, &stderr); code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Target
	}{
		{"ours=http://127.0.0.1:8000", Target{"ours", "http://127.0.0.1:8000"}},
		{"http://127.0.0.1:8001/v1", Target{"127.0.0.1:8001", "http://127.0.0.1:8001/v1"}},
		{"http://h:1/?a=b", Target{"h:1", "http://h:1/?a=b"}},
		{"peer=https://h/x?a=b", Target{"peer", "https://h/x?a=b"}},
	} {
		got, err := ParseTarget(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseTarget(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"ours=127.0.0.1:8000", "ours=", "ftp://h", "x=http://"} {
		if _, err := ParseTarget(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseTarget(%q): error %v, want ErrConfig", bad, err)
		}
	}
	if got := (Target{URL: "http://h:1/v1/"}).base(); got != "http://h:1" {
		t.Errorf("base of a /v1/ URL: %q", got)
	}
}

func TestParseFlagsOpenLoop(t *testing.T) {
	cfg, _, err := parseFlags([]string{"--target", "http://127.0.0.1:8000", "--poisson-rate", "0.5,2", "--max-concurrency", "8"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Targets[0].Name != "127.0.0.1:8000" || cfg.Targets[0].URL != "http://127.0.0.1:8000" {
		t.Errorf("bare target named %q", cfg.Targets[0].Name)
	}
	want := []Level{{Rate: 0.5, Concurrency: 8}, {Rate: 2, Concurrency: 8}}
	if got := cfg.Workload.Levels; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("levels %+v, want %+v", got, want)
	}
}

package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/mlx"
)

func TestDeriveKVBudget(t *testing.T) {
	const gib = int64(1) << 30
	for _, tt := range []struct {
		name              string
		dev               mlx.DeviceMemory
		physical, weights int64
		wantSource        string
		wantMemory        int64
		wantBudget        int64
		wantErr           bool
	}{
		{
			// 0.9 x 64 GiB = 57.6 GiB (below 62 GiB), less 4 GiB of weights
			// and 3 GiB of activations.
			name: "cpu", dev: mlx.DeviceMemory{Free: -1}, physical: 64 * gib, weights: 4 * gib,
			wantSource: "physical memory", wantMemory: 64 * gib, wantBudget: 64*gib*9/10 - 7*gib,
		},
		{
			// Small memory: physical - 2 GiB binds before 0.9 x physical.
			name: "cpu small", dev: mlx.DeviceMemory{Free: -1}, physical: 8 * gib, weights: gib,
			wantSource: "physical memory", wantMemory: 8 * gib, wantBudget: 2 * gib,
		},
		{
			name: "cpu no room", dev: mlx.DeviceMemory{Free: -1}, physical: 4 * gib, weights: gib,
			wantSource: "physical memory", wantMemory: 4 * gib, wantBudget: 0,
		},
		{
			// A CPU device that reported memory still uses physical memory.
			name: "cpu reported", dev: mlx.DeviceMemory{Total: 8 * gib, TotalKey: "total_memory", Free: -1}, physical: 64 * gib, weights: 4 * gib,
			wantSource: "physical memory", wantMemory: 64 * gib, wantBudget: 64*gib*9/10 - 7*gib,
		},
		{
			// An H200 on a host with less RAM than the GPU: the GPU's
			// memory decides, not the host's.
			name: "cuda", dev: mlx.DeviceMemory{GPU: true, Total: 141 * gib, TotalKey: "total_memory", Free: 120 * gib}, physical: 32 * gib, weights: 14 * gib,
			wantSource: "gpu total_memory", wantMemory: 141 * gib, wantBudget: 141*gib*9/10 - 17*gib,
		},
		{
			name: "metal", dev: mlx.DeviceMemory{GPU: true, Total: 24 * gib, TotalKey: "max_recommended_working_set_size", Free: -1}, physical: 32 * gib, weights: 2 * gib,
			wantSource: "gpu max_recommended_working_set_size", wantMemory: 24 * gib, wantBudget: 24*gib*9/10 - 5*gib,
		},
		{
			name: "gpu weights over memory", dev: mlx.DeviceMemory{GPU: true, Total: 16 * gib, TotalKey: "total_memory", Free: 0}, physical: 256 * gib, weights: 20 * gib,
			wantSource: "gpu total_memory", wantMemory: 16 * gib, wantBudget: 0,
		},
		{
			name: "gpu memory unknown", dev: mlx.DeviceMemory{GPU: true, Free: -1}, physical: 64 * gib, weights: gib,
			wantSource: "gpu memory", wantErr: true,
		},
		{
			name: "physical memory unknown", dev: mlx.DeviceMemory{Free: -1}, physical: 0, weights: gib,
			wantSource: "physical memory", wantErr: true,
		},
	} {
		budget, src, err := deriveKVBudget(tt.dev, tt.physical, tt.weights)
		if tt.wantErr {
			if err == nil || tt.wantSource != "" && !strings.Contains(err.Error(), tt.wantSource+" unknown") {
				t.Errorf("%s: budget %d from %+v, error %v; want an error naming %q", tt.name, budget, src, err, tt.wantSource)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if budget != tt.wantBudget || src.name != tt.wantSource || src.bytes != tt.wantMemory {
			t.Errorf("%s: budget %d from %q (%d bytes), want %d from %q (%d bytes)",
				tt.name, budget, src.name, src.bytes, tt.wantBudget, tt.wantSource, tt.wantMemory)
		}
	}
}

func TestConcurrencyCap(t *testing.T) {
	for _, tt := range []struct{ in, want int }{{1, 1}, {4, 4}, {8, 8}, {64, 64}, {256, 256}, {257, engine.MaxConcurrentLimit}, {1 << 40, engine.MaxConcurrentLimit}} {
		if got, err := concurrencyCap(tt.in); err != nil || got != tt.want {
			t.Errorf("concurrencyCap(%d) = %d, %v, want %d", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []int{0, -1} {
		var ue usageError
		if _, err := concurrencyCap(in); !errors.As(err, &ue) {
			t.Errorf("concurrencyCap(%d) error %v, want a usage error", in, err)
		}
	}
}

// Steps are built ahead by default on a GPU only; the setting overrides
// either way, and a malformed one is refused.
func TestStepAhead(t *testing.T) {
	for _, tt := range []struct {
		v    string
		cpu  bool
		want bool
	}{{"", false, true}, {"", true, false}, {"0", false, false}, {"1", true, true}, {"0", true, false}, {"1", false, true}} {
		if got, err := stepAhead(tt.v, tt.cpu); err != nil || got != tt.want {
			t.Errorf("stepAhead(%q, cpu %v) = %v, %v, want %v", tt.v, tt.cpu, got, err, tt.want)
		}
	}
	for _, v := range []string{"yes", "2", " 1"} {
		if _, err := stepAhead(v, false); err == nil {
			t.Errorf("stepAhead(%q) accepted", v)
		}
	}
}

func TestStepBudget(t *testing.T) {
	for _, tt := range []struct {
		flag int
		cpu  bool
		want int
	}{{0, true, cpuStepTokens}, {0, false, engine.DefaultTokenBudget}, {1024, true, 1024}, {64, false, 64}} {
		if got := stepBudget(tt.flag, tt.cpu); got != tt.want {
			t.Errorf("stepBudget(%d, cpu %v) = %d, want %d", tt.flag, tt.cpu, got, tt.want)
		}
	}
	if cpuStepTokens != engine.DefaultPrefillChunk {
		t.Errorf("cpuStepTokens %d, want one prefill chunk (%d)", cpuStepTokens, engine.DefaultPrefillChunk)
	}
}

// TestServeStepTokensRefused: a negative --step-tokens, or one below
// --max-concurrent (a decoding request would get no token in some steps),
// is a usage error named in one line.
func TestServeStepTokensRefused(t *testing.T) {
	for _, args := range [][]string{{"--step-tokens", "-1"}, {"--step-tokens", "4", "--max-concurrent", "8"}} {
		_, stderr, code := run(t, append([]string{"serve", "--model", stories, "--addr", "127.0.0.1:0"}, args...)...)
		if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "--step-tokens "+args[1]) {
			t.Errorf("serve %v: exit %d, stderr %q; want 2 and one line naming --step-tokens", args, code, stderr)
		}
	}
}

func TestServeMaxConcurrentBelowOne(t *testing.T) {
	_, stderr, code := run(t, "serve", "--model", stories, "--addr", "127.0.0.1:0", "--max-concurrent", "0")
	if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "--max-concurrent 0") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// On the CPU the budget comes from physical memory, and a cap above the
// limit is clamped with a warning, never silently.
func TestServeLogsBudgetSourceAndClamp(t *testing.T) {
	lines, _ := serve(t, "--model", stories, "--addr", "127.0.0.1:0", "--device", "cpu", "--max-concurrent", "1000", "--log-format", "text")
	var clamped, budget, prefix, ready bool
	var log []string
	for !ready && lines.Scan() {
		line := lines.Text()
		log = append(log, line)
		clamped = clamped || strings.Contains(line, "level=WARN") && strings.Contains(line, "requested=1000 max_concurrent=256")
		budget = budget || strings.Contains(line, `msg="kv budget" source="physical memory"`)
		prefix = prefix || strings.Contains(line, `msg="prefix cache" model=stories260K`) && strings.Contains(line, "on=true ssd=true")
		ready = strings.Contains(line, `msg="model ready"`)
	}
	if !clamped || !budget || !prefix || !ready {
		t.Fatalf("clamp warned %v, budget source logged %v, prefix cache with SSD tier %v, ready %v; log:\n%s", clamped, budget, prefix, ready, strings.Join(log, "\n"))
	}
}

func TestPrefixBudget(t *testing.T) {
	const gib = int64(1) << 30
	block := int64(12 << 20)
	for _, c := range []struct {
		name                       string
		requested, physical, grant int64
		want                       int64
	}{
		{"default is physical/8", 0, 24 * gib, 16 * gib, 3 * gib},
		{"requested", 2 * gib, 24 * gib, 16 * gib, 2 * gib},
		{"the engine keeps 1 GiB", 0, 64 * gib, 5 * gib, 4 * gib},
		{"less than a block is off", 0, 24 * gib, gib + block - 1, 0},
		{"one block", 0, 24 * gib, gib + block, block},
		{"grant under 1 GiB", 0, 24 * gib, gib / 2, 0},
	} {
		if got := prefixBudget(c.requested, c.physical, c.grant, block); got != c.want {
			t.Errorf("%s: prefixBudget = %d, want %d", c.name, got, c.want)
		}
	}
}

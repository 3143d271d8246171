package main

import (
	"slices"
	"strings"
	"testing"
)

func TestWarmPlan(t *testing.T) {
	for _, c := range []struct {
		conc, ctx int
		rows      []int
		longest   int
	}{
		{64, 4096, []int{2, 4, 8, 16, 32, 64}, 255},
		{12, 0, []int{2, 4, 8, 12}, 255},
		{1, 100, nil, 96},
		{4, 2, []int{2, 4}, 1},
	} {
		prefills, rows := warmPlan(c.conc, c.ctx)
		if !slices.Equal(rows, c.rows) {
			t.Errorf("warmPlan(%d, %d) rows %v, want %v", c.conc, c.ctx, rows, c.rows)
		}
		if !slices.IsSorted(prefills) || prefills[0] != 1 || prefills[len(prefills)-1] != c.longest {
			t.Errorf("warmPlan(%d, %d) prefills %v: want ascending from 1 to %d", c.conc, c.ctx, prefills, c.longest)
		}
		for _, n := range prefills {
			if n >= 256 || (c.ctx > 0 && n >= c.ctx) {
				t.Errorf("warmPlan(%d, %d): prefill of %d tokens fills a cache block or the context", c.conc, c.ctx, n)
			}
		}
	}
}

// TestServeWarmUp runs serve's warm-up (forced on the CPU) through a real
// engine: every planned generation finishes before the port opens, and
// the model then answers.
func TestServeWarmUp(t *testing.T) {
	_, url, log, _ := startServe(t, []string{"PROVIDER_WARMUP=1"}, "--model", stories, "--max-concurrent", "8")
	if !strings.Contains(log(), "msg=\"warm-up done\"") {
		t.Fatalf("no warm-up in the log:\n%s", log())
	}
	if d := firstToken(t, url); d <= 0 {
		t.Fatalf("first token after %v", d)
	}
}

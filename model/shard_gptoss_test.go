package model

import (
	"fmt"
	"testing"
)

// TestPlanGPTOSSExperts: packed experts split by width when each rank's
// share is whole quantization groups (the packed down projection keeps
// the matching words and scales, the fused gate and up its alternating
// rows), and whole experts otherwise.
func TestPlanGPTOSSExperts(t *testing.T) {
	mxfp4 := QuantLevel{Mode: "mxfp4", Bits: 4, GroupSize: 32}
	const p = "model.layers.0.mlp.experts."
	for _, tc := range []struct {
		width   int
		want    map[string]Part
		experts [2]int
	}{
		{64, map[string]Part{
			p + "gate_up_proj.weight": {Axis: -2, Lo: 64, Hi: 128},
			p + "gate_up_proj.bias":   {Axis: -1, Lo: 64, Hi: 128},
			p + "down_proj.weight":    {Axis: -1, Lo: 4, Hi: 8},
			p + "down_proj.scales":    {Axis: -1, Lo: 1, Hi: 2},
		}, [2]int{}},
		{32, map[string]Part{
			p + "gate_up_proj.weight": {Axis: 0, Lo: 4, Hi: 8},
			p + "down_proj.scales":    {Axis: 0, Lo: 4, Hi: 8},
			p + "down_proj.bias":      {Axis: 0, Lo: 4, Hi: 8},
		}, [2]int{4, 8}},
	} {
		t.Run(fmt.Sprint(tc.width), func(t *testing.T) {
			c := Config{Arch: "gpt_oss", Vocab: 8, Hidden: 64, Intermediate: tc.width, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 16,
				Kinds: uniformKinds(1, 2, 16),
				GPTOSS: &GPTOSSFacts{Experts: 8, PerToken: 2, Packed: map[string]QuantLevel{
					p + "gate_up_proj.weight": mxfp4, p + "down_proj.weight": mxfp4}}}
			tensors := map[string]*Tensor{p + "gate_up_proj.weight": {}, p + "down_proj.weight": {}}
			s, local, err := planShards(c, tensors, 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.want {
				if got := s.Parts[name]; got != want {
					t.Errorf("%s: part %+v, want %+v", name, got, want)
				}
			}
			if _, split := s.Parts[p+"down_proj.bias"]; split != (tc.experts[1] > 0) {
				t.Errorf("down bias split %v with experts %v", split, tc.experts)
			}
			if s.Experts != tc.experts || local.GPTOSS.ExpertRange != tc.experts || c.GPTOSS.ExpertRange != [2]int{} {
				t.Errorf("experts %v, local %v, whole %v; want %v", s.Experts, local.GPTOSS.ExpertRange, c.GPTOSS.ExpertRange, tc.experts)
			}
			if !s.Reduce[p+"down_proj.weight"] || local.Heads != 2 || local.Kinds[0].KVHeads != 1 {
				t.Errorf("reduce %v, local heads %d, kv heads %d", s.Reduce, local.Heads, local.Kinds[0].KVHeads)
			}
		})
	}
}

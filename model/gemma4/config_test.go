package gemma4

import (
	"math"
	"os"
	"testing"

	"github.com/goprovider/provider/model"
)

// TestPublishedConfig reads the published gemma-4-26B-A4B config.json and
// checks the facts the forward pass takes from it, and that the manifest
// counts the text decoder's published 25.2 B parameters (as DescribeHF
// counts them from the same config).
func TestPublishedConfig(t *testing.T) {
	data, err := os.ReadFile("../../testdata/configs/gemma-4-26B-A4B.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := model.ReadHFConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	g := c.Gemma4
	switch {
	case c.Arch != "gemma4" || g == nil:
		t.Fatalf("arch %q, facts %v", c.Arch, g)
	case g.Experts != 128 || g.TopK != 8 || g.ExpertWidth != 704:
		t.Errorf("experts %d top-%d width %d", g.Experts, g.TopK, g.ExpertWidth)
	case !g.KEqV || g.PerLayerInput != 0 || c.AttnScale != 1 || c.FinalLogitSoftcap != 30:
		t.Errorf("k_eq_v %v, per-layer input %d, attention scale %v, softcap %v", g.KEqV, g.PerLayerInput, c.AttnScale, c.FinalLogitSoftcap)
	case c.LocalRoPE.Dims != 256 || c.LocalRoPE.Base != 1e4 || c.LocalRoPE.Freqs != nil:
		t.Errorf("sliding rope %+v", c.LocalRoPE)
	}
	for i, w := range g.MLPWidths {
		if w != 2112 {
			t.Errorf("layer %d MLP width %d", i, w)
		}
	}
	// Proportional RoPE over a quarter of the 512-wide global head: 64 of
	// 256 pairs rotate, with periods 1e6^(2i/512); the rest never do.
	r := g.GlobalRoPE
	if r.Dims != 512 || len(r.Freqs) != 256 {
		t.Fatalf("global rope %d dims, %d periods", r.Dims, len(r.Freqs))
	}
	for i, p := range r.Freqs {
		want := math.Inf(1)
		if i < 64 {
			want = math.Pow(1e6, float64(2*i)/512)
		}
		if float64(p) != float64(float32(want)) {
			t.Fatalf("pair %d: period %v, want %v", i, p, want)
		}
	}
	var params int64
	for _, s := range TensorManifest(c) {
		n := int64(1)
		for _, d := range s.Shape {
			n *= int64(d)
		}
		params += n
	}
	info, err := model.DescribeHF(data)
	if err != nil {
		t.Fatal(err)
	}
	// Both count every tensor, the 30 per-layer output scalars included.
	if params != info.Params {
		t.Errorf("manifest counts %d parameters, DescribeHF %d", params, info.Params)
	}
	t.Logf("manifest: %d tensors, %d parameters", len(TensorManifest(c)), params)
}

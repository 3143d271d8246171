package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

const configs = "../../testdata/configs/"

func runInfoJSON(t *testing.T, args ...string) infoReport {
	t.Helper()
	out, errOut, code := run(t, append([]string{"info"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r infoReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return r
}

func TestInfoPublishedConfigs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), mustRead(t, configs+"gpt-oss-20b.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, source string
		tokens             []string
		modelType          string
		layers, sliding    int
		perToken           int64
		adoption           int
		wantTokens         int
		perSequence        int64
	}{
		// gpt-oss-20b: 12 full layers x 2 x 8 heads x 64 x 2 bytes; 12
		// sliding layers of 128 tokens (24,576 bytes a token between them).
		// The KV pool charges whole blocks of 256 tokens: at 8,192 tokens
		// the full half holds 32 blocks and the sliding half its ring of
		// two blocks (the 127 positions before the next query can straddle
		// a block boundary), 512 tokens.
		{"gpt-oss-20b", configs + "gpt-oss-20b.json", "config.json", []string{"--tokens", "8192"}, "gpt_oss",
			24, 12, 24_576, 1_536, 8192, 512*24_576 + 8192*24_576},
		// gemma-4-26B-A4B: 5 global layers x 2 x 2 heads x 512 x 2 bytes;
		// 25 sliding layers of 1,024 tokens (204,800 bytes a token between
		// them), whose ring is 5 blocks (1,280 tokens).
		{"gemma-4-26B-A4B", configs + "gemma-4-26B-A4B.json", "config.json", nil, "gemma4",
			30, 25, 20_480, 25_600, 262_144, 1_280*204_800 + 262_144*20_480},
		{"HF directory", dir, "hf", nil, "gpt_oss",
			24, 12, 24_576, 1_536, 131_072, 512*24_576 + 131_072*24_576},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runInfoJSON(t, append([]string{"--model", tt.path}, tt.tokens...)...)
			if r.ModelType != tt.modelType || r.Source != tt.source || r.Adapter == nil || *r.Adapter != tt.modelType {
				t.Errorf("model_type %q source %q adapter %v", r.ModelType, r.Source, r.Adapter)
			}
			if r.KVBytesPerToken != tt.perToken || r.AdoptionBound != tt.adoption {
				t.Errorf("kv_bytes_per_token %d adoption_bound %d, want %d and %d", r.KVBytesPerToken, r.AdoptionBound, tt.perToken, tt.adoption)
			}
			if r.Tokens != tt.wantTokens || r.KVBytesPerSequence != tt.perSequence {
				t.Errorf("kv_bytes_per_sequence(%d) = %d, want %d at %d", r.Tokens, r.KVBytesPerSequence, tt.perSequence, tt.wantTokens)
			}
			if r.KVElementBytes != 2 || r.KVDType != "bfloat16" {
				t.Errorf("kv element %d bytes of %s, want 2 of bfloat16", r.KVElementBytes, r.KVDType)
			}
			sliding := 0
			for _, l := range r.Layers {
				if l.Attention == "sliding" {
					sliding++
				}
			}
			if len(r.Layers) != tt.layers || sliding != tt.sliding {
				t.Errorf("%d layers, %d sliding", len(r.Layers), sliding)
			}
			if r.WeightBytes == nil || *r.WeightBytes <= 0 || len(r.Weights) == 0 {
				t.Errorf("no weight estimate")
			}
		})
	}
}

func TestInfoGGUF(t *testing.T) {
	r := runInfoJSON(t, "--model", stories)
	// stories260K: 5 llama layers of 4 KV heads x 8, cached in float32.
	if r.Source != "gguf" || r.Adapter == nil || *r.Adapter != "llama" {
		t.Fatalf("source %q adapter %v", r.Source, r.Adapter)
	}
	if len(r.Layers) != 5 || r.KVElementBytes != 4 || r.KVBytesPerToken != 5*2*4*8*4 || r.AdoptionBound != 0 {
		t.Errorf("%d layers, %d-byte elements, %d bytes/token, bound %d", len(r.Layers), r.KVElementBytes, r.KVBytesPerToken, r.AdoptionBound)
	}
	if r.Tokens != r.ContextLength || r.KVBytesPerSequence != int64(r.ContextLength)*r.KVBytesPerToken {
		t.Errorf("sequence of %d tokens (context %d): %d bytes", r.Tokens, r.ContextLength, r.KVBytesPerSequence)
	}
	if !strings.Contains(r.KVDTypeReason, "float32") {
		t.Errorf("kv_dtype_reason %q", r.KVDTypeReason)
	}
	// A GGUF file declares no dtype: a GPU caches llama in float16.
	if r.GPUKVDType != "float16" || r.GPUKVBytesPerToken != r.KVBytesPerToken/2 || r.GPUKVBytesPerSequence != r.KVBytesPerSequence/2 {
		t.Errorf("on a GPU: %s, %d bytes/token, %d bytes/sequence", r.GPUKVDType, r.GPUKVBytesPerToken, r.GPUKVBytesPerSequence)
	}
	st, err := os.Stat(stories)
	if err != nil {
		t.Fatal(err)
	}
	if r.WeightBytes == nil || *r.WeightBytes <= 0 || r.WeightBytesOnDisk == nil || *r.WeightBytesOnDisk != st.Size() {
		t.Errorf("weight_bytes %v on disk %v", r.WeightBytes, r.WeightBytesOnDisk)
	}
}

func TestInfoFailsWithOneClearLine(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "config.json")
	if err := os.WriteFile(unknown, []byte(`{"model_type": "mamba", "hidden_size": 64}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown model_type", []string{"--model", unknown}, 1, `unsupported model architecture: model_type "mamba"`},
		{"unknown model_type in a directory", []string{"--model", dir}, 1, "unsupported model architecture"},
		{"missing", []string{"--model", filepath.Join(dir, "nope.json")}, 1, "no such file"},
		{"bad tokens", []string{"--model", unknown, "--tokens", "-2"}, 2, "--tokens"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := run(t, append([]string{"info"}, tc.args...)...)
			lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
			if code != tc.code || out != "" || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and one line with %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}
}

func TestDescribeReportsSharingAndAdapter(t *testing.T) {
	c := model.Config{Arch: "toy", ContextLength: 64, ActDType: mlx.Float16, Kinds: []model.LayerKind{
		{KVHeads: 2, HeadDim: 4, SharedFrom: -1},
		{Window: 16, KVHeads: 2, HeadDim: 4, SharedFrom: -1},
		{KVHeads: 2, HeadDim: 4, SharedFrom: 0},
	}}
	r := describe(model.Info{ModelType: "toy", Config: c}, -1, []string{"toy"})
	if r.Adapter == nil || *r.Adapter != "toy" || r.Tokens != 64 {
		t.Fatalf("adapter %v tokens %d", r.Adapter, r.Tokens)
	}
	// Only layer 0 owns a full-attention cache: 2 x 2 x 4 x 2 bytes. At 64
	// tokens layers 0 and 1 each hold one 256-token block of the KV pool.
	if r.KVBytesPerToken != 32 || r.AdoptionBound != 16 || r.KVBytesPerSequence != 256*32+256*32 {
		t.Errorf("per token %d bound %d sequence %d", r.KVBytesPerToken, r.AdoptionBound, r.KVBytesPerSequence)
	}
	if r.Layers[2].SharedFrom == nil || *r.Layers[2].SharedFrom != 0 || r.Layers[0].SharedFrom != nil || r.Layers[1].Window != 16 {
		t.Errorf("layers %+v", r.Layers)
	}
	if r.WeightBytes != nil {
		t.Errorf("weight_bytes %d without an estimate", *r.WeightBytes)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInfoTensorParallel: info --tp 2 describes each rank's share: the
// ranks' heads and widths tile the model's, each rank holds less than the
// whole, and rank 0 (the ledger's) holds at least as much KV per token as
// any other.
func TestInfoTensorParallel(t *testing.T) {
	for _, path := range []string{smolLM2, "../../testdata/configs/gpt-oss-120b.json"} {
		stdout, stderr, code := run(t, "info", "--model", path, "--tp", "2", "--tokens", "1024")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", path, code, stderr)
		}
		var r infoReport
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatal(err)
		}
		if len(r.TensorParallel) != 2 || r.WeightBytes == nil {
			t.Fatalf("%s: %d ranks, weight bytes %v", path, len(r.TensorParallel), r.WeightBytes)
		}
		r0, r1 := r.TensorParallel[0], r.TensorParallel[1]
		if r0.Heads[0] != 0 || r0.Heads[1] != r1.Heads[0] || r0.FFN[1] != r1.FFN[0] || r0.KVHeads[1] != r1.KVHeads[0] {
			t.Errorf("%s: ranks do not tile the model: %+v %+v", path, r0, r1)
		}
		for _, rr := range r.TensorParallel {
			if rr.WeightBytes <= 0 || rr.WeightBytes >= *r.WeightBytes {
				t.Errorf("%s: rank %d holds %d of %d weight bytes", path, rr.Rank, rr.WeightBytes, *r.WeightBytes)
			}
		}
		if r0.KVBytesPerToken < r1.KVBytesPerToken || r0.KVBytesPerToken+r1.KVBytesPerToken != r.KVBytesPerToken {
			t.Errorf("%s: KV per token %d + %d, whole %d; want rank 0 the larger and the sum the whole", path, r0.KVBytesPerToken, r1.KVBytesPerToken, r.KVBytesPerToken)
		}
	}
}

package engine

import (
	"math"
	"testing"
)

// gptOSS20B is gpt-oss-20b's cache: 24 layers alternating a 128-token
// sliding window (even layers) and full attention, 8 KV heads of 64, bf16.
func gptOSS20B() KVLayout {
	var l KVLayout
	for i := range 24 {
		layer := LayerKV{KVHeads: 8, HeadDim: 64, ElemBytes: 2, SharedFrom: -1}
		if i%2 == 0 {
			layer.Window = 128
		}
		l.Layers = append(l.Layers, layer)
	}
	return l
}

// gemma26BA4B is gemma-4-26B-A4B's text cache as its config.json gives it:
// 30 layers, every sixth (5, 11, 17, 23, 29) global and the other 25 sliding
// with a 1,024-token window; sliding layers have 8 KV heads of 256, global
// layers 2 KV heads (num_global_key_value_heads) of 512 (global_head_dim);
// no layer shares another's cache (num_kv_shared_layers 0); bf16.
// Assumption: the global layers set attention_k_eq_v (values equal keys),
// and the cache still stores keys and values separately, so they cost the
// same 2 x heads x dim as any layer; that is what the published 20,480
// bytes per token counts.
func gemma26BA4B() KVLayout {
	var l KVLayout
	for i := range 30 {
		layer := LayerKV{KVHeads: 8, HeadDim: 256, ElemBytes: 2, Window: 1024, SharedFrom: -1}
		if (i+1)%6 == 0 {
			layer = LayerKV{KVHeads: 2, HeadDim: 512, ElemBytes: 2, SharedFrom: -1}
		}
		l.Layers = append(l.Layers, layer)
	}
	return l
}

func TestPublishedModelFigures(t *testing.T) {
	tests := []struct {
		name          string
		layout        KVLayout
		bytesPerToken int64
		adoption      int
	}{
		{"gpt-oss-20b", gptOSS20B(), 24_576, 1_536},
		{"gemma-4-26B-A4B", gemma26BA4B(), 20_480, 25_600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.layout.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := tt.layout.BytesPerToken(); got != tt.bytesPerToken {
				t.Errorf("BytesPerToken = %d, want %d", got, tt.bytesPerToken)
			}
			if got := tt.layout.AdoptionBound(); got != tt.adoption {
				t.Errorf("AdoptionBound = %d, want %d", got, tt.adoption)
			}
		})
	}
}

func TestSequenceBytes(t *testing.T) {
	// gpt-oss-20b: both halves cost 24,576 bytes per token; the sliding half
	// stops at 128 tokens (3,145,728 bytes).
	// gemma-4-26B-A4B: the sliding layers cost 25 x 2 x 8 x 256 x 2 = 204,800
	// bytes per token up to 1,024 tokens (209,715,200 bytes), the global
	// layers 20,480 per token.
	tests := []struct {
		name   string
		layout KVLayout
		tokens int
		want   int64
	}{
		{"gpt-oss empty", gptOSS20B(), 0, 0},
		{"gpt-oss negative", gptOSS20B(), -5, 0},
		{"gpt-oss 1", gptOSS20B(), 1, 2 * 24_576},
		{"gpt-oss 128", gptOSS20B(), 128, 128 * 2 * 24_576},
		{"gpt-oss 129", gptOSS20B(), 129, 3_145_728 + 129*24_576},
		{"gpt-oss 8192", gptOSS20B(), 8192, 3_145_728 + 8192*24_576},
		{"gemma 1", gemma26BA4B(), 1, 204_800 + 20_480},
		{"gemma 1024", gemma26BA4B(), 1024, 1024 * (204_800 + 20_480)},
		{"gemma 1025", gemma26BA4B(), 1025, 209_715_200 + 1025*20_480},
		{"gemma 131072", gemma26BA4B(), 131_072, 209_715_200 + 131_072*20_480},
		{"no layers", KVLayout{}, 100, 0},
		{"saturates", KVLayout{Layers: []LayerKV{{KVHeads: 1 << 20, HeadDim: 1 << 20, ElemBytes: 4, SharedFrom: -1}}}, math.MaxInt, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.layout.SequenceBytes(tt.tokens); got != tt.want {
				t.Errorf("SequenceBytes(%d) = %d, want %d", tt.tokens, got, tt.want)
			}
		})
	}
}

func TestSequenceBytesPlateausAtWindow(t *testing.T) {
	l := KVLayout{Layers: []LayerKV{
		{KVHeads: 1, HeadDim: 1, ElemBytes: 1, Window: 8, SharedFrom: -1},
		{KVHeads: 1, HeadDim: 1, ElemBytes: 1, Window: 4, SharedFrom: -1},
	}}
	prev := int64(-1)
	for tokens := range 20 {
		got := l.SequenceBytes(tokens)
		want := int64(2*min(tokens, 8) + 2*min(tokens, 4))
		if got != want {
			t.Fatalf("SequenceBytes(%d) = %d, want %d", tokens, got, want)
		}
		if got < prev {
			t.Fatalf("SequenceBytes decreased at %d", tokens)
		}
		prev = got
	}
	if got := l.BytesPerToken(); got != 0 {
		t.Errorf("BytesPerToken of a sliding-only layout = %d, want 0", got)
	}
	if got := l.AdoptionBound(); got != 16 {
		t.Errorf("AdoptionBound = %d, want 2 x 8", got)
	}
}

func TestSharedLayersCostNothing(t *testing.T) {
	owner := LayerKV{KVHeads: 2, HeadDim: 4, ElemBytes: 2, SharedFrom: -1}
	window := LayerKV{KVHeads: 2, HeadDim: 4, ElemBytes: 2, Window: 16, SharedFrom: -1}
	l := KVLayout{Layers: []LayerKV{
		owner,
		window,
		{KVHeads: 2, HeadDim: 4, ElemBytes: 2, SharedFrom: 0},
		{KVHeads: 2, HeadDim: 4, ElemBytes: 2, Window: 16, SharedFrom: 1},
	}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	alone := KVLayout{Layers: []LayerKV{owner, window}}
	for _, tokens := range []int{1, 16, 17, 1000} {
		if got, want := l.SequenceBytes(tokens), alone.SequenceBytes(tokens); got != want {
			t.Errorf("SequenceBytes(%d) = %d, want %d (sharing layers are free)", tokens, got, want)
		}
	}
	if got := l.BytesPerToken(); got != 32 {
		t.Errorf("BytesPerToken = %d, want 2 x 2 x 4 x 2", got)
	}
	if got := l.AdoptionBound(); got != 16 {
		t.Errorf("AdoptionBound = %d, want 1 x 16", got)
	}
}

func TestValidate(t *testing.T) {
	ok := LayerKV{KVHeads: 1, HeadDim: 1, ElemBytes: 1, SharedFrom: -1}
	tests := []struct {
		name   string
		layers []LayerKV
		valid  bool
	}{
		{"empty", nil, true},
		{"one", []LayerKV{ok}, true},
		{"share earlier", []LayerKV{ok, {SharedFrom: 0}}, true},
		{"share later", []LayerKV{{SharedFrom: 1}, ok}, true},
		{"share self", []LayerKV{ok, {SharedFrom: 1}}, false},
		{"share outside", []LayerKV{ok, {SharedFrom: 2}}, false},
		{"share a sharer", []LayerKV{ok, {SharedFrom: 0}, {SharedFrom: 1}}, false},
		{"zero heads", []LayerKV{{HeadDim: 1, ElemBytes: 1, SharedFrom: -1}}, false},
		{"zero dim", []LayerKV{{KVHeads: 1, ElemBytes: 1, SharedFrom: -1}}, false},
		{"zero elem", []LayerKV{{KVHeads: 1, HeadDim: 1, SharedFrom: -1}}, false},
		{"negative window", []LayerKV{{KVHeads: 1, HeadDim: 1, ElemBytes: 1, Window: -1, SharedFrom: -1}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := KVLayout{Layers: tt.layers}.Validate()
			if (err == nil) != tt.valid {
				t.Errorf("Validate() = %v, want valid %v", err, tt.valid)
			}
		})
	}
}

package model

import (
	"errors"
	"fmt"
	"strings"

	"github.com/goprovider/provider/mlx"
)

// Errors a loader returns; callers test them with errors.Is.
var (
	ErrUnsupportedArch = errors.New("unsupported model architecture")
	ErrUnsupportedType = errors.New("unsupported tensor type")
	ErrMissingTensor   = errors.New("missing tensor")
	ErrBadConfig       = errors.New("invalid model config")
)

// RoPE describes rotary position embedding for an architecture.
type RoPE struct {
	Dims        int     // rotated features per head
	Base        float32 // theta
	Scale       float32 // position multiplier (linear scaling is 1/factor); 1 when unscaled
	Traditional bool    // rotate adjacent pairs (GGUF llama layout) instead of halves
	// Freqs, when non-nil, replaces Base: per-pair periods (base^(2i/d)
	// times a scaling factor), as llama3-style scaling produces.
	Freqs []float32
}

// LayerKind is the attention facts of one layer.
type LayerKind struct {
	Window     int // 0: full attention; otherwise sliding window in tokens
	KVHeads    int
	HeadDim    int
	SharedFrom int // -1: owns its KV; else the layer whose KV it reuses
}

// Config is an architecture's shape, independent of the weight format.
type Config struct {
	Arch          string // model_type: "llama", ...
	Vocab         int
	Hidden        int
	Intermediate  int
	Layers        int
	Heads         int
	KVHeads       int
	HeadDim       int
	NormEps       float32
	RoPE          RoPE
	ContextLength int
	TiedEmbedding bool
	BOS           int32 // -1 when none
	EOS           []int32
	// ActDType is the dtype of activations and KV cache. Float32 on CPU keeps
	// outputs comparable with reference implementations.
	ActDType mlx.Dtype
	// CheckpointDType is the float type the checkpoint's config.json
	// declares for its unquantized weights ("bfloat16", "float16",
	// "float32"); empty when it declares none (GGUF files).
	CheckpointDType string
	Kinds           []LayerKind
	// ReferenceNumerics makes the forward pass compute as llama.cpp's CPU
	// backend does, so outputs can be compared with llama.cpp token for
	// token. Matmuls with Q4_1, Q8_0 and F32 weights, and in the llama
	// family RMSNorm, RoPE, attention and SwiGLU, run as the mlx Ref ops:
	// ggml's x86 AVX2 kernels copied rounding for rounding, on the CPU, in
	// float32, slowly; a single sequence then reproduces llama.cpp's logits
	// bit for bit. Matmuls with other ggml-quantized weights only quantize
	// their input activations to 8-bit blocks first, as llama.cpp does. Off
	// by default: float activations are more exact.
	ReferenceNumerics bool
	// Int8Activations makes matmuls with 4- and 8-bit affine weights on
	// the CPU quantize their input activations to signed 8-bit blocks of
	// 32 (a float scale each, as llama.cpp's Q8 activation blocks) and
	// multiply in integers (mlx.Frame.AffineLinearQ8, where the processor
	// has AVX2; mlx.CPUInt8). Faster at decode batch sizes; outputs move
	// by the activations' rounding. Serving turns it on for CPU streams;
	// off (float activations) by default and in the reference suites.
	// ReferenceNumerics takes precedence.
	Int8Activations bool
	// LocalRoPE, when its Dims is non-zero, is the rotary embedding of the
	// sliding-window layers (Kinds[i].Window > 0); RoPE then serves the
	// full-attention layers only (Gemma 3: base 10,000 local, 1,000,000
	// global).
	LocalRoPE RoPE
	// AttnScale multiplies query-key products; 0 means 1/sqrt(HeadDim).
	AttnScale float32
	// FinalLogitSoftcap, when positive, maps logits to c*tanh(logits/c).
	FinalLogitSoftcap float32
	// Gemma4 holds the Gemma 4 text decoder's further facts (Arch
	// "gemma4"); nil for every other architecture.
	Gemma4 *Gemma4Facts
	// GPTOSS holds gpt-oss's mixture-of-experts facts (Arch "gpt_oss");
	// nil for every other architecture.
	GPTOSS *GPTOSSFacts
}

// Validate checks the facts a forward pass relies on.
func (c *Config) Validate() error {
	switch {
	case c.Vocab <= 0, c.Hidden <= 0, c.Layers <= 0, c.Heads <= 0, c.KVHeads <= 0, c.HeadDim <= 0, c.Intermediate <= 0:
		return fmt.Errorf("%w: non-positive dimension (vocab %d hidden %d layers %d heads %d kv heads %d head dim %d ffn %d)",
			ErrBadConfig, c.Vocab, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.Intermediate)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("%w: %d heads not a multiple of %d KV heads", ErrBadConfig, c.Heads, c.KVHeads)
	case c.RoPE.Dims <= 0 || c.RoPE.Dims > c.HeadDim || c.RoPE.Dims%2 != 0:
		return fmt.Errorf("%w: rope dims %d for head dim %d", ErrBadConfig, c.RoPE.Dims, c.HeadDim)
	case c.Layers > 4096 || c.Hidden > 1<<20 || c.Vocab > 1<<24:
		return fmt.Errorf("%w: implausible size", ErrBadConfig)
	case len(c.Kinds) != c.Layers:
		return fmt.Errorf("%w: %d layer kinds for %d layers", ErrBadConfig, len(c.Kinds), c.Layers)
	}
	return nil
}

func uniformKinds(layers, kvHeads, headDim int) []LayerKind {
	kinds := make([]LayerKind, layers)
	for i := range kinds {
		kinds[i] = LayerKind{KVHeads: kvHeads, HeadDim: headDim, SharedFrom: -1}
	}
	return kinds
}

// AcceleratorDType is the type activations and the KV cache take on a GPU,
// where float32 would double every activation's and every cached key's
// traffic and select the slower matmul kernels: the checkpoint's declared
// float type; bfloat16 for the Gemma families (their activations overflow
// float16) unless float32 is declared; float16 otherwise (what llama.cpp
// computes in on a GPU).
func (c Config) AcceleratorDType() mlx.Dtype {
	d, ok := FloatDType(c.CheckpointDType)
	switch {
	case strings.HasPrefix(c.Arch, "gemma") && d != mlx.Float32:
		return mlx.BFloat16
	case ok:
		return d
	}
	return mlx.Float16
}

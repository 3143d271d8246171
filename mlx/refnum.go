package mlx

/*
#include "mlxc.h"
*/
import "C"

// Reference-numerics ops: evaluated on the CPU exactly as ggml's CPU backend
// (an x86-64 AVX2+FMA build of llama.cpp) evaluates them, so that a forward
// pass composed of them reproduces llama.cpp's logits bit for bit rather than
// approximately; refnum.cpp explains why nothing less works with 8-bit
// activation rounding. They take and return float32, run on the CPU stream
// whatever the Frame's stream, and are slow: use them to compare with
// llama.cpp, not to serve.

// RefKind is the weight format of RefLinear.
type RefKind int

const (
	// RefF32 is a dense float32 [out, in] weight (ggml F32).
	RefF32 RefKind = C.MLX_REF_F32
	// RefQ4_1 is ggml Q4_1 as 4-bit affine groups of 32 (scale d, bias m);
	// activations are rounded to Q8_1 blocks.
	RefQ4_1 RefKind = C.MLX_REF_Q4_1
	// RefQ8_0 is ggml Q8_0 as 8-bit affine groups of 32 (stored q+128,
	// scale d, bias -128d); activations are rounded to Q8_0 blocks.
	RefQ8_0 RefKind = C.MLX_REF_Q8_0
)

// RefLinear computes x @ W.T for x [..., in] as ggml's mul_mat does; scales
// and biases are the quantized weight's float group parameters [out, in/32]
// (ignored for RefF32).
func (f *Frame) RefLinear(x, w, scales, biases Array, kind RefKind) Array {
	inputs := []Array{x, w}
	if kind != RefF32 {
		inputs = append(inputs, scales, biases)
	}
	return f.op("ref_linear", func(r *C.mlx_array) C.int {
		return C.mlx_ref_linear(r, x.c, w.c, scales.c, biases.c, C.int(kind))
	}, inputs...)
}

// RefRMSNorm is ggml's rms_norm of the last axis followed by the product with
// weight.
func (f *Frame) RefRMSNorm(x, weight Array, eps float32) Array {
	return f.op("ref_rms_norm", func(r *C.mlx_array) C.int {
		return C.mlx_ref_rms_norm(r, x.c, weight.c, C.float(eps))
	}, x, weight)
}

// RefRoPE is ggml's rope on x [B, heads, T, headDim]: row b's token t sits
// at position offsets[b]+t (offsets int32 [B]); the first dims features
// rotate, as adjacent pairs when traditional (GGML_ROPE_TYPE_NORMAL) or as
// halves (NEOX); scale multiplies the positions.
func (f *Frame) RefRoPE(x Array, dims int, traditional bool, base, scale float32, offsets Array) Array {
	return f.op("ref_rope", func(r *C.mlx_array) C.int {
		return C.mlx_ref_rope(r, x.c, C.int(dims), C.bool(traditional), C.float(base), C.float(scale), offsets.c)
	}, x, offsets)
}

// RefAttention is llama.cpp's attention without flash attention over a
// float32 cache: q [B, heads, T, D] against k and v [B, kvHeads, S, D],
// query t at position S-T+t seeing keys up to it (causal), softmax of
// scale*q.k. batched tells whether llama.cpp would have evaluated more than
// one token in the batch, which changes its summation order.
func (f *Frame) RefAttention(q, k, v Array, scale float32, batched bool) Array {
	return f.op("ref_attention", func(r *C.mlx_array) C.int {
		return C.mlx_ref_attention(r, q.c, k.c, v.c, C.float(scale), C.bool(batched))
	}, q, k, v)
}

// RefSwiGLU is ggml's swiglu: silu(gate) * up.
func (f *Frame) RefSwiGLU(gate, up Array) Array {
	return f.op("ref_swiglu", func(r *C.mlx_array) C.int {
		return C.mlx_ref_swiglu(r, gate.c, up.c)
	}, gate, up)
}

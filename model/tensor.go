package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/goprovider/provider/mlx"
)

// Quant describes an MLX-quantized host tensor: Tensor.Data holds the packed
// uint32 words, Scales and Biases the per-group parameters.
type Quant struct {
	Bits, GroupSize int
	Mode            string // "affine"
	Scales, Biases  []byte
	ScaleDType      mlx.Dtype
}

// Tensor is one weight on the host, row-major.
type Tensor struct {
	Name  string
	Shape []int // logical shape; for a quantized matrix [out, in] of the unpacked values
	DType mlx.Dtype
	Data  []byte
	Quant *Quant
	// GGMLType names the llama.cpp quantization the tensor came from ("" when
	// it came from elsewhere).
	GGMLType string
	// raw holds a GGUF tensor not yet converted (Data and Quant unset):
	// see OpenToShard.
	raw *ggufRaw
}

// Bytes is the host memory the tensor's data occupies (for a GGUF tensor
// not yet converted, its file bytes).
func (t *Tensor) Bytes() int {
	if t.raw != nil {
		return len(t.raw.data)
	}
	n := len(t.Data)
	if t.Quant != nil {
		n += len(t.Quant.Scales) + len(t.Quant.Biases)
	}
	return n
}

func float32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*4)
}

func uint32Bytes(v []uint32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*4)
}

func uint16Bytes(v []uint16) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*2)
}

// Float32s decodes a dense float tensor (F32, F16, BF16) on the host.
func (t *Tensor) Float32s() ([]float32, error) {
	if t.Quant != nil {
		return nil, fmt.Errorf("%s: quantized tensor has no dense host values", t.Name)
	}
	switch t.DType {
	case mlx.Float32:
		out := make([]float32, len(t.Data)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%s: %w: host decode of %v", t.Name, ErrUnsupportedType, t.DType)
	}
}

// Weight is a tensor on the MLX device.
type Weight struct {
	W, Scales, Biases mlx.Array
	Bits, GroupSize   int
	Mode              string
	// Ref makes Linear compute as llama.cpp's CPU matmul does, bit for bit
	// (mlx.Frame.RefLinear with RefKind): for ggml Q4_1, Q8_0 and F32 weights
	// under Config.ReferenceNumerics.
	Ref     bool
	RefKind mlx.RefKind
	// ActBlock > 0 quantizes the activations entering Linear to signed 8-bit
	// blocks of that size first, as llama.cpp's CPU kernels do for the other
	// ggml quantized weights (see Config.ReferenceNumerics). This only
	// approximates llama.cpp: its block sums and their order are not
	// reproduced.
	ActBlock int
	// ActScaleHalf rounds each block's scale to float16, as Q8_0 and Q8_1
	// activation blocks store it (Q8_K keeps float32).
	ActScaleHalf bool
	// Int8 computes Linear with mlx.Frame.AffineLinearQ8 (see
	// Config.Int8Activations).
	Int8 bool
	// Packed says W, Scales and Biases are laid out for the packed integer
	// kernel (mlx.PackQ8): Linear runs mlx.Frame.AffineLinearPacked and
	// Embed mlx.Frame.PackedEmbed. Set by Pack.
	Packed bool
	// Reduce, when valid, sums Linear's output over the group: the weight
	// holds this rank's columns of a row-parallel matrix (see Sharding).
	Reduce mlx.Group
	// Gather, when valid, concatenates Linear's output over the group
	// along its last axis: the weight holds this rank's rows of a
	// vocabulary-split output head.
	Gather mlx.Group
	// Parts, for a weight FuseProjections made, are the rows of each
	// weight it joined, in order (LinearParts splits the product so).
	Parts []int
}

// Pack lays an Int8 weight out for the packed integer kernel where it
// can take it (mlx.PackedQ8: a 2-D affine weight, groups a multiple of 32,
// on a processor with AVX2 or AVX-512 VNNI), replacing its arrays; elsewhere it
// leaves w as it is. s is the CPU stream the weight lives on.
func (w *Weight) Pack(s mlx.Stream) error {
	if !w.Int8 || w.Packed || !w.Quantized() || !w.Biases.Valid() || w.W.Ndim() != 2 || w.GroupSize%32 != 0 {
		return nil
	}
	k := w.W.Shape()[1] * 32 / w.Bits
	if !mlx.PackedQ8(k, w.Bits) {
		return nil
	}
	pw, ps, pb, err := mlx.PackQ8(s, w.W, w.Scales, w.Biases, w.GroupSize, w.Bits)
	if err != nil {
		return err
	}
	w.W.Free()
	w.Scales.Free()
	w.Biases.Free()
	w.W, w.Scales, w.Biases, w.Packed = pw, ps, pb, true
	return nil
}

// Quantized reports whether W holds packed quantized values.
func (w *Weight) Quantized() bool { return w.Scales.Valid() }

// Free releases the arrays.
func (w *Weight) Free() {
	w.W.Free()
	w.Scales.Free()
	w.Biases.Free()
}

// Bytes is the device memory of the weight.
func (w *Weight) Bytes() int {
	n := 0
	for _, a := range []mlx.Array{w.W, w.Scales, w.Biases} {
		if a.Valid() {
			n += a.Nbytes()
		}
	}
	return n
}

// Linear computes x @ W.T.
func (w *Weight) Linear(f *mlx.Frame, x mlx.Array) mlx.Array {
	y := w.linear(f, x)
	if w.Reduce.Valid() {
		y = f.AllSum(y, w.Reduce)
	}
	if w.Gather.Valid() {
		y = gatherLast(f, y, w.Gather)
	}
	return y
}

// LinearAdd is res + Linear(x), res shaped as the product (a residual
// connection): one kernel where mlx.Frame.AffineLinearAdd makes it one.
func (w *Weight) LinearAdd(f *mlx.Frame, x, res mlx.Array) mlx.Array {
	if w.plainAffine() {
		return f.AffineLinearAdd(x, w.W, w.Scales, w.Biases, w.GroupSize, w.Bits, res)
	}
	return f.Add(res, w.Linear(f, x))
}

// LinearSwiGLU is SwiGLUHalves(Linear(RMSNorm(x, norm, eps))) for a fused
// gate/up projection (no RMSNorm where norm is invalid): one kernel where
// mlx.Frame.AffineLinearSwiGLU makes it one.
func (w *Weight) LinearSwiGLU(f *mlx.Frame, x, norm mlx.Array, eps float32) mlx.Array {
	if w.plainAffine() {
		return f.AffineLinearSwiGLU(x, w.W, w.Scales, w.Biases, w.GroupSize, w.Bits, norm, eps)
	}
	return f.SwiGLUHalves(w.Linear(f, f.RMSNormIf(x, norm, eps)))
}

// LinearHeadsRoPE is HeadsRoPE(Linear(RMSNorm(x, norm, eps)), ...) for a
// fused q/k/v projection (no RMSNorm where norm is invalid): one kernel
// where mlx.Frame.AffineLinearHeadsRoPE makes it one, which writes k and v
// into kv's pool too where it can (stored).
func (w *Weight) LinearHeadsRoPE(f *mlx.Frame, x, norm mlx.Array, eps float32, heads, kvHeads, headDim, dims int, traditional bool, base, scale float32, positions, freqs mlx.Array, kv mlx.KVStore) (q, k, v mlx.Array, stored bool) {
	if w.plainAffine() {
		return f.AffineLinearHeadsRoPE(x, w.W, w.Scales, w.Biases, w.GroupSize, w.Bits, norm, eps, heads, kvHeads, headDim,
			dims, traditional, base, scale, positions, freqs, kv)
	}
	return f.HeadsRoPE(w.Linear(f, f.RMSNormIf(x, norm, eps)), heads, kvHeads, headDim, dims, traditional, base, scale, positions, freqs, kv)
}

// plainAffine reports whether Linear is mlx.Frame.AffineLinear alone: an
// affine quantized weight with none of the reference, activation-block,
// integer, packed or sharded variants.
func (w *Weight) plainAffine() bool {
	return w.Quantized() && (w.Mode == "" || w.Mode == "affine") && !w.Ref && w.ActBlock == 0 && !w.Int8 &&
		!w.Packed && !w.Reduce.Valid() && !w.Gather.Valid()
}

// gatherLast concatenates y of every rank of g along its last axis, in
// rank order.
func gatherLast(f *mlx.Frame, y mlx.Array, g mlx.Group) mlx.Array {
	if f.Err() != nil {
		return mlx.Array{}
	}
	shape := y.Shape()
	n, last := g.Size(), shape[len(shape)-1]
	rows := 1
	for _, d := range shape[:len(shape)-1] {
		rows *= d
	}
	all := f.AllGather(f.Reshape(y, rows, last), g) // [n*rows, last], rank-major
	all = f.Transpose(f.Reshape(all, n, rows, last), 1, 0, 2)
	out := append(slices.Clone(shape[:len(shape)-1]), n*last)
	return f.Reshape(all, out...)
}

func (w *Weight) linear(f *mlx.Frame, x mlx.Array) mlx.Array {
	if w.Ref {
		return f.RefLinear(x, w.W, w.Scales, w.Biases, w.RefKind)
	}
	if w.ActBlock > 0 {
		x = quantizeActivations(f, x, w.ActBlock, w.ActScaleHalf)
	}
	if w.Packed {
		return f.AffineLinearPacked(x, w.W, w.Scales, w.Biases, w.Bits)
	}
	if w.Quantized() {
		if w.Int8 {
			return f.AffineLinearQ8(x, w.W, w.Scales, w.Biases, w.GroupSize, w.Bits)
		}
		if w.Mode == "" || w.Mode == "affine" {
			return f.AffineLinear(x, w.W, w.Scales, w.Biases, w.GroupSize, w.Bits)
		}
		return f.QuantizedMatMul(x, w.W, w.Scales, w.Biases, true, w.GroupSize, w.Bits, w.Mode)
	}
	return f.MatMul(x, f.Transpose(w.W, 1, 0))
}

// quantizeActivations rounds x the way llama.cpp's quantize_row_q8_*
// does: per block of the last axis, amax = max|x|, q = round(x*(127/amax)),
// d = amax/127, and the matmul then sees q*d (d rounded to float16 when
// halfScale).
func quantizeActivations(f *mlx.Frame, x mlx.Array, block int, halfScale bool) mlx.Array {
	shape := x.Shape()
	if len(shape) == 0 || shape[len(shape)-1]%block != 0 {
		f.Fail(fmt.Errorf("model: activation length %v is not whole blocks of %d", shape, block))
		return mlx.Array{}
	}
	blocked := append(append([]int{}, shape[:len(shape)-1]...), shape[len(shape)-1]/block, block)
	xr := f.Reshape(x, blocked...)
	amax := f.Max(f.Abs(xr), -1, true)
	d := f.Divide(amax, f.Scalar(127))
	zero := f.Scalar(0)
	inv := f.Where(f.Greater(amax, zero), f.Divide(f.Scalar(127), amax), zero)
	q := f.Round(f.Multiply(xr, inv), 0)
	if halfScale {
		d = f.AsType(f.AsType(d, mlx.Float16), mlx.Float32)
	}
	return f.Reshape(f.Multiply(q, d), shape...)
}

// Embed gathers rows of W for token ids.
func (w *Weight) Embed(f *mlx.Frame, ids mlx.Array) mlx.Array {
	if !w.Quantized() {
		return f.Take(w.W, ids, 0)
	}
	if w.Packed {
		return f.PackedEmbed(ids, w.W, w.Scales, w.Biases, w.Bits)
	}
	rows := f.Take(w.W, ids, 0)
	sc := f.Take(w.Scales, ids, 0)
	var bi mlx.Array
	if w.Biases.Valid() {
		bi = f.Take(w.Biases, ids, 0)
	}
	return f.Dequantize(rows, sc, bi, w.GroupSize, w.Bits, w.Mode)
}

// upload copies a host tensor to the device, converting float data and
// quantization parameters to act.
func upload(s mlx.Stream, t *Tensor, act mlx.Dtype, reference bool) (*Weight, error) {
	w, err := uploadData(s, t, act)
	if err != nil || !reference {
		return w, err
	}
	switch {
	case t.GGMLType == "Q4_1" && w.Quantized() && w.Bits == 4 && w.GroupSize == 32:
		w.Ref, w.RefKind = true, mlx.RefQ4_1
	case t.GGMLType == "Q8_0" && w.Quantized() && w.Bits == 8 && w.GroupSize == 32:
		w.Ref, w.RefKind = true, mlx.RefQ8_0
	case t.GGMLType == "" && t.DType == mlx.Float32 && len(t.Shape) == 2:
		w.Ref, w.RefKind = true, mlx.RefF32
	case t.GGMLType == "Q4_0" || t.GGMLType == "Q4_1" || t.GGMLType == "Q5_0" || t.GGMLType == "Q5_1" || t.GGMLType == "Q8_0":
		// Q4_0 is repacked by llama.cpp's CPU backend on AVX2 (other kernels,
		// other rounding); these are approximations.
		w.ActBlock, w.ActScaleHalf = 32, true
	case t.GGMLType == "Q2_K" || t.GGMLType == "Q3_K" || t.GGMLType == "Q4_K" || t.GGMLType == "Q5_K" || t.GGMLType == "Q6_K":
		w.ActBlock = 256
	}
	return w, nil
}

func uploadData(s mlx.Stream, t *Tensor, act mlx.Dtype) (*Weight, error) {
	f := mlx.NewFrame(s)
	defer f.Free()
	if t.Quant == nil {
		a, err := mlx.FromBytes(t.Data, t.DType, t.Shape...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.Name, err)
		}
		w := &Weight{W: a}
		if t.DType != act && isFloat(t.DType) {
			conv := f.Keep(f.AsType(a, act))
			if err := f.Eval(conv); err != nil {
				a.Free()
				return nil, fmt.Errorf("%s: %w", t.Name, err)
			}
			a.Free()
			w.W = conv
		}
		return w, nil
	}
	q := t.Quant
	if len(t.Shape) != 2 {
		return nil, fmt.Errorf("%s: quantized tensor of rank %d", t.Name, len(t.Shape))
	}
	rows, cols := t.Shape[0], t.Shape[1]
	data, bits := t.Data, q.Bits
	if s.IsCPU() && (q.Mode == "" || q.Mode == "affine") && bits != 4 && bits != 8 && bits < 8 {
		// The CPU's fast affine kernel takes 4 and 8 bits; MLX's generic
		// one is many times slower. Every q fits 8 bits unchanged, so the
		// widened matrix has the same values.
		data, bits = widenTo8(data, rows, cols, bits), 8
	}
	packed, err := mlx.FromBytes(data, mlx.Uint32, rows, cols*bits/32)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.Name, err)
	}
	w := &Weight{W: packed, Bits: bits, GroupSize: q.GroupSize, Mode: q.Mode}
	for _, p := range []struct {
		dst *mlx.Array
		src []byte
	}{{&w.Scales, q.Scales}, {&w.Biases, q.Biases}} {
		if p.src == nil {
			continue
		}
		a, err := mlx.FromBytes(p.src, q.ScaleDType, rows, cols/q.GroupSize)
		if err != nil {
			w.Free()
			return nil, fmt.Errorf("%s: %w", t.Name, err)
		}
		conv := f.Keep(f.AsType(a, act))
		if err := f.Eval(conv); err != nil {
			a.Free()
			w.Free()
			return nil, fmt.Errorf("%s: %w", t.Name, err)
		}
		a.Free()
		*p.dst = conv
	}
	return w, nil
}

// widenTo8 repacks a [rows, cols] affine matrix of bits-wide values (each
// row a little-endian bit stream, element c at bits c*bits..) to one byte
// per value, MLX's 8-bit packing.
func widenTo8(data []byte, rows, cols, bits int) []byte {
	out := make([]byte, rows*cols)
	rowBytes := cols * bits / 8
	mask := uint32(1)<<bits - 1
	for r := range rows {
		in := data[r*rowBytes : (r+1)*rowBytes]
		dst := out[r*cols : (r+1)*cols]
		for c := range cols {
			bit := c * bits
			// Read up to 16 bits around the value (bits <= 7 spans at most
			// two bytes).
			v := uint32(in[bit/8])
			if bit/8+1 < len(in) {
				v |= uint32(in[bit/8+1]) << 8
			}
			dst[c] = byte(v >> (bit % 8) & mask)
		}
	}
	return out
}

func isFloat(d mlx.Dtype) bool {
	return d == mlx.Float32 || d == mlx.Float16 || d == mlx.BFloat16
}

package gguf

import (
	"fmt"
	"math/bits"
)

// TensorType is a ggml tensor type id as stored in GGUF tensor descriptions.
type TensorType uint32

// The ids are fixed by ggml's enum ggml_type; gaps are ids ggml has retired.
const (
	F32     TensorType = 0
	F16     TensorType = 1
	Q4_0    TensorType = 2
	Q4_1    TensorType = 3
	Q5_0    TensorType = 6
	Q5_1    TensorType = 7
	Q8_0    TensorType = 8
	Q8_1    TensorType = 9
	Q2_K    TensorType = 10
	Q3_K    TensorType = 11
	Q4_K    TensorType = 12
	Q5_K    TensorType = 13
	Q6_K    TensorType = 14
	Q8_K    TensorType = 15
	IQ2_XXS TensorType = 16
	IQ2_XS  TensorType = 17
	IQ3_XXS TensorType = 18
	IQ1_S   TensorType = 19
	IQ4_NL  TensorType = 20
	IQ3_S   TensorType = 21
	IQ2_S   TensorType = 22
	IQ4_XS  TensorType = 23
	I8      TensorType = 24
	I16     TensorType = 25
	I32     TensorType = 26
	I64     TensorType = 27
	F64     TensorType = 28
	IQ1_M   TensorType = 29
	BF16    TensorType = 30
	TQ1_0   TensorType = 34
	TQ2_0   TensorType = 35
	MXFP4   TensorType = 39
)

// qk is ggml's super-block length for the K and IQ families.
const qk = 256

type typeTraits struct {
	name      string
	blockSize int // elements per block
	typeSize  int // bytes per block
}

// traits lists every type this package can lay out. Knowing the sizes is
// enough to parse a file and hand out tensor bytes; decoding is a separate
// question answered by Dequantize.
var traits = map[TensorType]typeTraits{
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	Q4_0:    {"Q4_0", 32, 2 + 16},
	Q4_1:    {"Q4_1", 32, 2 + 2 + 16},
	Q5_0:    {"Q5_0", 32, 2 + 4 + 16},
	Q5_1:    {"Q5_1", 32, 2 + 2 + 4 + 16},
	Q8_0:    {"Q8_0", 32, 2 + 32},
	Q8_1:    {"Q8_1", 32, 4 + 4 + 32},
	Q2_K:    {"Q2_K", qk, 2 + 2 + qk/16 + qk/4},
	Q3_K:    {"Q3_K", qk, 2 + qk/4 + qk/8 + 12},
	Q4_K:    {"Q4_K", qk, 2 + 2 + qk/2 + 12},
	Q5_K:    {"Q5_K", qk, 2 + 2 + qk/2 + qk/8 + 12},
	Q6_K:    {"Q6_K", qk, 2 + qk/2 + qk/4 + qk/16},
	Q8_K:    {"Q8_K", qk, 4 + qk + qk/8},
	IQ2_XXS: {"IQ2_XXS", qk, 2 + qk/4},
	IQ2_XS:  {"IQ2_XS", qk, 2 + qk/4 + qk/32},
	IQ3_XXS: {"IQ3_XXS", qk, 2 + qk/4 + qk/8},
	IQ1_S:   {"IQ1_S", qk, 2 + qk/8 + qk/16},
	IQ4_NL:  {"IQ4_NL", 32, 2 + 16},
	IQ3_S:   {"IQ3_S", qk, 2 + qk/4 + qk/8 + qk/32 + 4},
	IQ2_S:   {"IQ2_S", qk, 2 + qk/4 + qk/16},
	IQ4_XS:  {"IQ4_XS", qk, 2 + 2 + qk/2 + qk/64},
	I8:      {"I8", 1, 1},
	I16:     {"I16", 1, 2},
	I32:     {"I32", 1, 4},
	I64:     {"I64", 1, 8},
	F64:     {"F64", 1, 8},
	IQ1_M:   {"IQ1_M", qk, qk/8 + qk/16 + qk/32},
	BF16:    {"BF16", 1, 2},
	TQ1_0:   {"TQ1_0", qk, 2 + 4*13},
	TQ2_0:   {"TQ2_0", qk, 2 + 64},
	MXFP4:   {"MXFP4", 32, 1 + 16},
}

// String returns ggml's name for the type, or TensorType(n) for unknown ids.
func (t TensorType) String() string {
	if tr, ok := traits[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("TensorType(%d)", uint32(t))
}

// BlockSize is the number of elements in one block; 0 for unknown types.
func (t TensorType) BlockSize() int { return traits[t].blockSize }

// TypeSize is the number of bytes in one block; 0 for unknown types.
func (t TensorType) TypeSize() int { return traits[t].typeSize }

// known reports whether the type's layout is known.
func (t TensorType) known() bool {
	_, ok := traits[t]
	return ok
}

// TensorInfo describes one tensor of a File.
type TensorInfo struct {
	Name string
	// Dims in ggml order: Dims[0] is the fastest-varying dimension.
	Dims []uint64
	Type TensorType
	// Offset of the tensor's bytes, relative to the start of the data
	// section.
	Offset uint64
}

// Elements is the product of Dims. It is exact for tensors from a parsed
// File; for a hand-built TensorInfo whose product overflows it returns 0.
func (t TensorInfo) Elements() uint64 {
	n, ok := elements(t.Dims)
	if !ok {
		return 0
	}
	return n
}

// Bytes is the size of the tensor's data. It is exact for tensors from a
// parsed File; for a hand-built TensorInfo that is inconsistent (unknown
// type, partial block, overflow) it returns 0.
func (t TensorInfo) Bytes() uint64 {
	n, ok := tensorBytes(t.Type, t.Dims)
	if !ok {
		return 0
	}
	return n
}

// elements multiplies dims, reporting false on overflow past int64, the
// largest count the rest of the program can index.
func elements(dims []uint64) (uint64, bool) {
	n := uint64(1)
	for _, d := range dims {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 || lo > 1<<63-1 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// tensorBytes is the data size of a tensor, reporting false when the type is
// unknown, the row is not whole blocks, or the size overflows.
func tensorBytes(t TensorType, dims []uint64) (uint64, bool) {
	tr, ok := traits[t]
	if !ok {
		return 0, false
	}
	n, ok := elements(dims)
	if !ok {
		return 0, false
	}
	bs := uint64(tr.blockSize)
	if len(dims) > 0 && dims[0]%bs != 0 {
		return 0, false
	}
	if n%bs != 0 {
		return 0, false
	}
	hi, size := bits.Mul64(n/bs, uint64(tr.typeSize))
	if hi != 0 || size > 1<<63-1 {
		return 0, false
	}
	return size, true
}

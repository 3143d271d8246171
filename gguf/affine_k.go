package gguf

import (
	"encoding/binary"
	"fmt"
)

// AffineF32 is a matrix in MLX's affine quantization layout with float32
// group parameters: for a row-major [rows, cols] matrix, w[r][c] =
// Scales[r][c/GroupSize]*q[r][c] + Biases[r][c/GroupSize], q unsigned in
// [0, 2^Bits).
//
// It serves the ggml types whose per-group scale is a product binary16
// cannot hold: a K-quant sub-block's scale is d*sc, an 11-bit significand
// times a 6-bit integer, which is exact in float32 (17 bits) but not in
// binary16.
type AffineF32 struct {
	Bits, GroupSize int
	// Packed is [rows, cols*Bits/32]: each row is a little-endian bit stream
	// with element c at bits [c*Bits, (c+1)*Bits), read as uint32 words.
	// That is MLX's packing for every width (for 5 bits: eight elements in
	// five bytes).
	Packed         []uint32
	Scales, Biases []float32 // [rows, cols/GroupSize]
}

// ToAffineF32 converts the first rows*cols elements of a Q4_K, Q5_K or Q5_0
// tensor (GGUF Dims [cols, rows]) to the affine layout with group size 32
// without changing any value:
//
//   - Q4_K and Q5_K: each 256-element super-block holds eight 32-element
//     sub-blocks with w = (d*sc)*q - dmin*m; sub-block k becomes one group
//     with scale d*sc_k and bias -(dmin*m_k), 4 or 5 bits.
//   - Q5_0: w = (q-16)*d becomes 5-bit q with scale d and bias -16d.
//
// Reconstructing scale*q + bias in float32 (one rounding per operation)
// gives Dequantize's values bit for bit for Q4_K and Q5_K; for Q5_0 the
// values are equal and only the sign of a zero may differ (d*16 + (-16d) is
// +0 where (16-16)*d is -0 for d < 0).
func ToAffineF32(t TensorType, data []byte, rows, cols int) (*AffineF32, error) {
	var bits int
	switch t {
	case Q4_K:
		bits = 4
	case Q5_K, Q5_0:
		bits = 5
	default:
		return nil, fmt.Errorf("%w: no exact float32 affine form for %s", ErrUnsupportedType, t)
	}
	bs, ts := t.BlockSize(), t.TypeSize()
	if rows < 0 || cols <= 0 || cols%bs != 0 {
		return nil, fmt.Errorf("%w: %dx%d matrix is not whole rows of %d-element %s blocks", ErrInvalid, rows, cols, bs, t)
	}
	perRow := cols / bs
	if rows > 0 && perRow > len(data)/ts/rows {
		return nil, fmt.Errorf("%w: %dx%d %s matrix needs %d-byte blocks, have %d bytes", ErrTruncated, rows, cols, t, ts, len(data))
	}
	blocks := rows * perRow // fits: bounded by len(data)/ts
	groupsPerBlock := bs / affineGroup
	wordsPerBlock := bs * bits / 32
	a := &AffineF32{
		Bits:      bits,
		GroupSize: affineGroup,
		Packed:    make([]uint32, blocks*wordsPerBlock),
		Scales:    make([]float32, blocks*groupsPerBlock),
		Biases:    make([]float32, blocks*groupsPerBlock),
	}
	// Blocks run along rows and every block is whole groups and whole
	// words, so block b owns a contiguous run of words and groups.
	for b := 0; b < blocks; b++ {
		blk := data[b*ts : (b+1)*ts]
		words := a.Packed[b*wordsPerBlock : (b+1)*wordsPerBlock]
		scales := a.Scales[b*groupsPerBlock : (b+1)*groupsPerBlock]
		biases := a.Biases[b*groupsPerBlock : (b+1)*groupsPerBlock]
		switch t {
		case Q5_0:
			d := half(blk)
			scales[0], biases[0] = d, -16*d // exact: a power of two times a half
			qh := binary.LittleEndian.Uint32(blk[2:])
			for j, q := range blk[6:22] {
				putBits(words, j, bits, uint32(q&0xf)|(qh>>j&1)<<4)
				putBits(words, j+16, bits, uint32(q>>4)|(qh>>(j+16)&1)<<4)
			}
		case Q4_K, Q5_K:
			kQuantGroups(t, blk, words, scales, biases)
		}
	}
	return a, nil
}

// kQuantGroups unpacks one Q4_K or Q5_K super-block into eight groups, in
// the element order decodeQ4K and decodeQ5K use.
func kQuantGroups(t TensorType, blk []byte, words []uint32, scales, biases []float32) {
	d, dmin := half(blk), half(blk[2:])
	table := blk[4:16]
	var qh, qs []byte
	bits := 4
	if t == Q5_K {
		qh, qs, bits = blk[16:48], blk[48:176], 5
	} else {
		qs = blk[16:144]
	}
	for g := 0; g < 8; g++ {
		sc, m := scaleMinK4(g, table)
		scales[g] = float32(d * float32(sc))
		biases[g] = -float32(dmin * float32(m))
	}
	for c := 0; c < 4; c++ {
		q := qs[32*c : 32*c+32]
		for l := 0; l < 32; l++ {
			lo, hi := uint32(q[l]&0xf), uint32(q[l]>>4)
			if qh != nil {
				lo |= uint32(qh[l]>>(2*c)&1) << 4
				hi |= uint32(qh[l]>>(2*c+1)&1) << 4
			}
			putBits(words, 64*c+l, bits, lo)
			putBits(words, 64*c+32+l, bits, hi)
		}
	}
}

// putBits ORs the bits-wide value q in as element i of a little-endian bit
// stream of uint32 words; an element may straddle two words.
func putBits(words []uint32, i, bits int, q uint32) {
	off := i * bits
	w, s := off/32, off%32
	words[w] |= q << s
	if s+bits > 32 {
		words[w+1] |= q >> (32 - s)
	}
}

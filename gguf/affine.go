package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// affineGroup is the group size ToAffine produces: ggml's Q4_0, Q4_1 and
// Q8_0 blocks are 32 elements, and each block becomes one group.
const affineGroup = 32

// Affine is a matrix in MLX's affine quantization layout: for a row-major
// [rows, cols] matrix, w[r][c] = scale[r][c/G]*q[r][c] + bias[r][c/G] with q
// unsigned in [0, 2^Bits).
type Affine struct {
	Bits, GroupSize int
	// Packed is [rows, cols*Bits/32]; element c of a row sits in word
	// c*Bits/32 at bit offset (c%(32/Bits))*Bits, lowest column lowest.
	Packed []uint32
	// Scales and Biases are [rows, cols/GroupSize] IEEE binary16 bits.
	Scales, Biases []uint16
}

// ToAffine converts the first rows*cols elements of a Q4_0, Q4_1 or Q8_0
// tensor (a GGUF tensor with Dims [cols, rows]) to the affine layout without
// changing any value:
//
//   - Q4_1 (w = d*q + m) maps directly: scale d, bias m.
//   - Q4_0 (w = d*(q-8)) becomes scale d, bias -8d.
//   - Q8_0 (w = d*q, q signed) becomes 8-bit q+128, scale d, bias -128d.
//
// The biases of Q4_0 and Q8_0 are computed in binary16; multiplying by a
// power of two is exact there unless it overflows, and an overflowing or
// non-finite scale is reported as an error rather than rounded.
func ToAffine(t TensorType, data []byte, rows, cols int) (*Affine, error) {
	var bits int
	switch t {
	case Q4_0, Q4_1:
		bits = 4
	case Q8_0:
		bits = 8
	default:
		return nil, fmt.Errorf("%w: no exact affine form for %s", ErrUnsupportedType, t)
	}
	if rows < 0 || cols <= 0 || cols%affineGroup != 0 {
		return nil, fmt.Errorf("%w: %dx%d matrix is not whole rows of %d-element %s blocks", ErrInvalid, rows, cols, affineGroup, t)
	}
	perRow := cols / affineGroup
	ts := t.TypeSize()
	if rows > 0 && perRow > len(data)/ts/rows {
		return nil, fmt.Errorf("%w: %dx%d %s matrix needs %d-byte blocks, have %d bytes", ErrTruncated, rows, cols, t, ts, len(data))
	}
	groups := rows * perRow // fits: bounded by len(data)/ts
	wordsPerGroup := affineGroup * bits / 32
	a := &Affine{
		Bits:      bits,
		GroupSize: affineGroup,
		Packed:    make([]uint32, groups*wordsPerGroup),
		Scales:    make([]uint16, groups),
		Biases:    make([]uint16, groups),
	}
	// GGUF blocks run along rows, so block g of the data is group g of the
	// [rows, cols/32] scale grid, and its packed words are contiguous.
	for g := 0; g < groups; g++ {
		blk := data[g*ts : (g+1)*ts]
		words := a.Packed[g*wordsPerGroup : (g+1)*wordsPerGroup]
		d := binary.LittleEndian.Uint16(blk)
		a.Scales[g] = d
		switch t {
		case Q4_1:
			a.Biases[g] = binary.LittleEndian.Uint16(blk[2:])
			packNibbles(words, blk[4:20])
		case Q4_0:
			b, err := scaledBias(d, -8)
			if err != nil {
				return nil, fmt.Errorf("%s block %d (row %d): %w", t, g, g/perRow, err)
			}
			a.Biases[g] = b
			packNibbles(words, blk[2:18])
		case Q8_0:
			b, err := scaledBias(d, -128)
			if err != nil {
				return nil, fmt.Errorf("%s block %d (row %d): %w", t, g, g/perRow, err)
			}
			a.Biases[g] = b
			for w := range words {
				q := blk[2+4*w : 6+4*w]
				// Flipping the sign bit adds 128 to a two's complement int8.
				words[w] = uint32(q[0]^0x80) | uint32(q[1]^0x80)<<8 | uint32(q[2]^0x80)<<16 | uint32(q[3]^0x80)<<24
			}
		}
	}
	return a, nil
}

// packNibbles packs a ggml 4-bit block (element j in the low nibble of qs[j],
// element j+16 in the high nibble) into four words, eight elements each in
// column order.
func packNibbles(words []uint32, qs []byte) {
	for e := 0; e < affineGroup; e++ {
		var q uint32
		if e < 16 {
			q = uint32(qs[e] & 0xf)
		} else {
			q = uint32(qs[e-16] >> 4)
		}
		words[e/8] |= q << (4 * (e % 8))
	}
}

// scaledBias returns k*d in binary16, failing unless that product is exact.
func scaledBias(d uint16, k float32) (uint16, error) {
	df := halfToFloat(d)
	if math.IsInf(float64(df), 0) || math.IsNaN(float64(df)) {
		return 0, fmt.Errorf("%w: non-finite scale %#04x", ErrInvalid, d)
	}
	want := k * df // exact in float32: an 11-bit significand times a power of two
	b := floatToHalf(want)
	if halfToFloat(b) != want {
		return 0, fmt.Errorf("%w: bias %g*%g is not representable in binary16", ErrInvalid, k, df)
	}
	return b, nil
}

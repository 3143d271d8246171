package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Dequantize decodes the first n elements of data, which holds tensor bytes
// of type t, to float32. n must be a whole number of blocks and data must
// hold at least those blocks. Types without a decoder here (integer types,
// Q8_1, Q8_K, the IQ and TQ families, MXFP4) return ErrUnsupportedType.
//
// Results match ggml's reference dequantize_row_* bit for bit: each product
// and sum is rounded to float32 separately, in ggml's order, with explicit
// conversions that keep the compiler from fusing them.
func Dequantize(t TensorType, data []byte, n int) ([]float32, error) {
	dec, ok := decoders[t]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnsupportedType, t)
	}
	bs, ts := t.BlockSize(), t.TypeSize()
	if n < 0 || n%bs != 0 {
		return nil, fmt.Errorf("%w: %d elements is not a whole number of %s blocks of %d", ErrInvalid, n, t, bs)
	}
	blocks := n / bs
	if blocks > len(data)/ts {
		return nil, fmt.Errorf("%w: %d %s elements need %d blocks of %d bytes, have %d bytes",
			ErrTruncated, n, t, blocks, ts, len(data))
	}
	out := make([]float32, n)
	for b := 0; b < blocks; b++ {
		dec(out[b*bs:(b+1)*bs], data[b*ts:(b+1)*ts])
	}
	return out, nil
}

// A decoder expands one block (len(src) == TypeSize) into len(dst) ==
// BlockSize floats.
type decoder func(dst []float32, src []byte)

var decoders = map[TensorType]decoder{
	F32:  decodeF32,
	F16:  decodeF16,
	BF16: decodeBF16,
	Q4_0: decodeQ4_0,
	Q4_1: decodeQ4_1,
	Q5_0: decodeQ5_0,
	Q5_1: decodeQ5_1,
	Q8_0: decodeQ8_0,
	Q2_K: decodeQ2K,
	Q3_K: decodeQ3K,
	Q4_K: decodeQ4K,
	Q5_K: decodeQ5K,
	Q6_K: decodeQ6K,
}

func half(b []byte) float32 { return halfToFloat(binary.LittleEndian.Uint16(b)) }

func decodeF32(dst []float32, src []byte) {
	dst[0] = math.Float32frombits(binary.LittleEndian.Uint32(src))
}

func decodeF16(dst []float32, src []byte) { dst[0] = half(src) }

func decodeBF16(dst []float32, src []byte) {
	dst[0] = bf16ToFloat(binary.LittleEndian.Uint16(src))
}

// Q4_0: d f16, qs[16]. Element j is the low nibble of qs[j], element j+16
// the high nibble; w = (q-8)*d.
func decodeQ4_0(dst []float32, src []byte) {
	d := half(src)
	qs := src[2:18]
	for j, q := range qs {
		dst[j] = float32(int(q&0xf)-8) * d
		dst[j+16] = float32(int(q>>4)-8) * d
	}
}

// Q4_1: d f16, m f16, qs[16], nibbles as in Q4_0; w = q*d + m.
func decodeQ4_1(dst []float32, src []byte) {
	d, m := half(src), half(src[2:])
	qs := src[4:20]
	for j, q := range qs {
		dst[j] = float32(float32(q&0xf)*d) + m
		dst[j+16] = float32(float32(q>>4)*d) + m
	}
}

// Q5_0: d f16, qh u32 (bit j is the fifth bit of element j), qs[16];
// w = (q-16)*d.
func decodeQ5_0(dst []float32, src []byte) {
	d := half(src)
	qh := binary.LittleEndian.Uint32(src[2:])
	qs := src[6:22]
	for j, q := range qs {
		lo := int(q&0xf) | int(qh>>j&1)<<4
		hi := int(q>>4) | int(qh>>(j+16)&1)<<4
		dst[j] = float32(lo-16) * d
		dst[j+16] = float32(hi-16) * d
	}
}

// Q5_1: d f16, m f16, qh u32, qs[16]; w = q*d + m.
func decodeQ5_1(dst []float32, src []byte) {
	d, m := half(src), half(src[2:])
	qh := binary.LittleEndian.Uint32(src[4:])
	qs := src[8:24]
	for j, q := range qs {
		lo := uint32(q&0xf) | (qh>>j&1)<<4
		hi := uint32(q>>4) | (qh>>(j+16)&1)<<4
		dst[j] = float32(float32(lo)*d) + m
		dst[j+16] = float32(float32(hi)*d) + m
	}
}

// Q8_0: d f16, qs[32] int8; w = q*d.
func decodeQ8_0(dst []float32, src []byte) {
	d := half(src)
	for j, q := range src[2:34] {
		dst[j] = float32(int8(q)) * d
	}
}

// Q2_K super-block: scales[16] (low nibble scale, high nibble min), qs[64]
// (2-bit quants, four per byte), d f16, dmin f16. Sub-block k of 16
// elements: w = d*scale_k*q - dmin*min_k.
func decodeQ2K(dst []float32, src []byte) {
	scales, qs := src[:16], src[16:80]
	d, dmin := half(src[80:]), half(src[82:])
	y, is := 0, 0
	for part := 0; part < 2; part++ {
		q := qs[32*part : 32*part+32]
		for shift := 0; shift < 8; shift += 2 {
			for g := 0; g < 2; g++ {
				sc := scales[is]
				is++
				dl := float32(d * float32(sc&0xf))
				ml := float32(dmin * float32(sc>>4))
				for l := 0; l < 16; l++ {
					v := float32(q[16*g+l] >> shift & 3)
					dst[y] = float32(dl*v) - ml
					y++
				}
			}
		}
	}
}

// Q3_K super-block: hmask[32] (third bit, inverted sense), qs[64] (low two
// bits), scales[12] (sixteen 6-bit scales biased by 32), d f16.
func decodeQ3K(dst []float32, src []byte) {
	hmask, qs, sc := src[:32], src[32:96], src[96:108]
	d := half(src[108:])
	var scales [16]int
	for k := range scales {
		lo := sc[k%8] >> (4 * (k / 8)) & 0xf
		hi := sc[8+k%4] >> (2 * (k / 4)) & 3
		scales[k] = int(lo|hi<<4) - 32
	}
	y, is := 0, 0
	m := byte(1)
	for part := 0; part < 2; part++ {
		q := qs[32*part : 32*part+32]
		for shift := 0; shift < 8; shift += 2 {
			for g := 0; g < 2; g++ {
				dl := float32(d * float32(scales[is]))
				is++
				for l := 16 * g; l < 16*g+16; l++ {
					v := int(q[l] >> shift & 3)
					if hmask[l]&m == 0 {
						v -= 4
					}
					dst[y] = dl * float32(v)
					y++
				}
			}
			m <<= 1
		}
	}
}

// scaleMinK4 unpacks the 6-bit scale and min of sub-block j from the
// 12-byte table shared by Q4_K and Q5_K.
func scaleMinK4(j int, q []byte) (sc, m byte) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// Q4_K super-block: d f16, dmin f16, scales[12], qs[128]. Each 64-element
// chunk uses 32 bytes: low nibbles for the first 32 elements, high nibbles
// for the next 32; w = d*sc*q - dmin*m.
func decodeQ4K(dst []float32, src []byte) {
	d, dmin := half(src), half(src[2:])
	scales, qs := src[4:16], src[16:144]
	y := 0
	for c := 0; c < 4; c++ {
		q := qs[32*c : 32*c+32]
		sc1, m1 := scaleMinK4(2*c, scales)
		sc2, m2 := scaleMinK4(2*c+1, scales)
		d1, min1 := float32(d*float32(sc1)), float32(dmin*float32(m1))
		d2, min2 := float32(d*float32(sc2)), float32(dmin*float32(m2))
		for l := 0; l < 32; l++ {
			dst[y+l] = float32(d1*float32(q[l]&0xf)) - min1
			dst[y+32+l] = float32(d2*float32(q[l]>>4)) - min2
		}
		y += 64
	}
}

// Q5_K super-block: d f16, dmin f16, scales[12], qh[32], qs[128]; as Q4_K
// with a fifth bit per element taken from qh, two bit planes per chunk.
func decodeQ5K(dst []float32, src []byte) {
	d, dmin := half(src), half(src[2:])
	scales, qh, qs := src[4:16], src[16:48], src[48:176]
	y := 0
	for c := 0; c < 4; c++ {
		q := qs[32*c : 32*c+32]
		u1, u2 := byte(1)<<(2*c), byte(2)<<(2*c)
		sc1, m1 := scaleMinK4(2*c, scales)
		sc2, m2 := scaleMinK4(2*c+1, scales)
		d1, min1 := float32(d*float32(sc1)), float32(dmin*float32(m1))
		d2, min2 := float32(d*float32(sc2)), float32(dmin*float32(m2))
		for l := 0; l < 32; l++ {
			lo, hi := q[l]&0xf, q[l]>>4
			if qh[l]&u1 != 0 {
				lo += 16
			}
			if qh[l]&u2 != 0 {
				hi += 16
			}
			dst[y+l] = float32(d1*float32(lo)) - min1
			dst[y+32+l] = float32(d2*float32(hi)) - min2
		}
		y += 64
	}
}

// Q6_K super-block: ql[128] (low four bits), qh[64] (high two bits),
// scales[16] int8, d f16; w = d*scale*(q-32).
func decodeQ6K(dst []float32, src []byte) {
	qlAll, qhAll, scAll := src[:128], src[128:192], src[192:208]
	d := half(src[208:])
	for n := 0; n < 2; n++ {
		ql, qh, sc := qlAll[64*n:64*n+64], qhAll[32*n:32*n+32], scAll[8*n:8*n+8]
		y := dst[128*n : 128*n+128]
		for l := 0; l < 32; l++ {
			is := l / 16
			q1 := int(ql[l]&0xf|(qh[l]>>0&3)<<4) - 32
			q2 := int(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
			q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			y[l] = float32(d*float32(int8(sc[is]))) * float32(q1)
			y[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
			y[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
			y[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
		}
	}
}

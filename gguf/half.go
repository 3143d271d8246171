package gguf

import "math"

// halfToFloat converts IEEE 754 binary16 bits to float32. Every binary16
// value, subnormals included, is exactly representable in float32, so the
// conversion is exact; NaN payloads are preserved in the high mantissa bits.
func halfToFloat(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal: rebias the exponent from 15 to 127
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0: // signed zero
		return math.Float32frombits(sign)
	default: // subnormal: value is man * 2^-24, exact in float32
		f := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
}

// floatToHalf converts float32 to binary16 bits with round-to-nearest-even,
// overflowing to infinity like a hardware conversion does.
func floatToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man == 0 {
			return sign | 0x7c00
		}
		// Keep the NaN quiet and non-zero after truncating the payload.
		return sign | 0x7e00 | uint16(man>>13)
	}
	e := exp - 127 + 15 // binary16 biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal (or zero) result: shift the full significand, with its
		// implicit bit, into place and round on the bits shifted out.
		if e < -10 {
			return sign // below half of the smallest subnormal
		}
		m := man | 0x800000
		shift := uint32(14 - e) // 13 to drop fp32 extra bits, plus 1-e
		return sign | uint16(roundShift(m, shift))
	}
	// Normal: a carry out of the mantissa correctly bumps the exponent, and
	// into infinity when it overflows.
	v := uint32(e)<<10 | man>>13
	return sign | uint16(v+roundBit(man, 13))
}

// roundShift returns m >> shift rounded to nearest, ties to even.
func roundShift(m, shift uint32) uint32 {
	return m>>shift + roundBit(m, shift)
}

// roundBit is 1 when the low shift bits of m round m>>shift upward under
// round-to-nearest-even.
func roundBit(m, shift uint32) uint32 {
	half := uint32(1) << (shift - 1)
	rest := m & (1<<shift - 1)
	if rest > half || (rest == half && (m>>shift)&1 == 1) {
		return 1
	}
	return 0
}

// bf16ToFloat converts bfloat16 bits, which are the high half of a float32.
func bf16ToFloat(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

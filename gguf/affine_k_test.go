package gguf

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// reconstructF32 evaluates scale*q + bias in float32 with one rounding per
// operation, reading q from the little-endian bit stream of each row.
func reconstructF32(a *AffineF32, rows, cols int) []float32 {
	out := make([]float32, rows*cols)
	wordsPerRow := cols * a.Bits / 32
	groupsPerRow := cols / a.GroupSize
	mask := uint64(1)<<a.Bits - 1
	for r := 0; r < rows; r++ {
		row := a.Packed[r*wordsPerRow : (r+1)*wordsPerRow]
		for c := 0; c < cols; c++ {
			off := c * a.Bits
			lo := uint64(row[off/32])
			if off/32+1 < len(row) {
				lo |= uint64(row[off/32+1]) << 32
			}
			q := lo >> (off % 32) & mask
			g := r*groupsPerRow + c/a.GroupSize
			out[r*cols+c] = float32(a.Scales[g]*float32(q)) + a.Biases[g]
		}
	}
	return out
}

// randomBlocks returns n blocks of t with random quants and scale tables,
// and finite random binary16 super-block scales of either sign, so that
// every code path (high bits, negative d, zero mins) is exercised.
func randomBlocks(t TensorType, n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	ts := t.TypeSize()
	raw := make([]byte, n*ts)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	halfAt := func(off int) {
		v := float32(rng.NormFloat64() * 0.01)
		if rng.IntN(8) == 0 {
			v = 0
		}
		h := floatToHalf(v)
		raw[off], raw[off+1] = byte(h), byte(h>>8)
	}
	for b := 0; b < n; b++ {
		halfAt(b * ts)
		if t == Q4_K || t == Q5_K {
			halfAt(b*ts + 2)
		}
	}
	return raw
}

func TestToAffineF32MatchesDequantize(t *testing.T) {
	for _, typ := range []TensorType{Q4_K, Q5_K, Q5_0} {
		t.Run(typ.String(), func(t *testing.T) {
			fixture, _ := loadQuantFixture(t, typ)
			for _, tc := range []struct {
				name string
				raw  []byte
			}{
				{"reference fixture", fixture},
				{"random blocks", randomBlocks(typ, 64, uint64(typ))},
			} {
				bs, ts := typ.BlockSize(), typ.TypeSize()
				n := len(tc.raw) / ts * bs
				for _, cols := range []int{bs, 2 * bs, n} {
					if n%cols != 0 {
						continue
					}
					rows := n / cols
					a, err := ToAffineF32(typ, tc.raw, rows, cols)
					if err != nil {
						t.Fatal(err)
					}
					want, err := Dequantize(typ, tc.raw, n)
					if err != nil {
						t.Fatal(err)
					}
					got := reconstructF32(a, rows, cols)
					for i := range want {
						same := math.Float32bits(got[i]) == math.Float32bits(want[i])
						if typ == Q5_0 {
							same = got[i] == want[i] // only a zero's sign may differ
						}
						if !same {
							t.Fatalf("%s, %d cols: element %d: affine %g (%#08x), dequantized %g (%#08x)", tc.name, cols, i,
								got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
						}
					}
				}
			}
		})
	}
}

func TestPutBitsStraddlesWords(t *testing.T) {
	// Eight 5-bit elements with values 1..8 fill 40 bits; element 6 spans
	// bits 30..34, across the first word boundary.
	words := make([]uint32, 2)
	for i := range 8 {
		putBits(words, i, 5, uint32(i+1))
	}
	var stream uint64
	for i := range 8 {
		stream |= uint64(i+1) << (5 * i)
	}
	if got := uint64(words[0]) | uint64(words[1])<<32; got != stream {
		t.Fatalf("packed %#x, want %#x", got, stream)
	}
}

func TestToAffineF32Rejects(t *testing.T) {
	q4k := randomBlocks(Q4_K, 2, 7)
	for _, tc := range []struct {
		name       string
		typ        TensorType
		data       []byte
		rows, cols int
		want       error
	}{
		{"type without an exact form", Q6_K, make([]byte, Q6_K.TypeSize()), 1, 256, ErrUnsupportedType},
		{"row not whole super-blocks", Q4_K, q4k, 2, 128, ErrInvalid},
		{"zero columns", Q4_K, q4k, 1, 0, ErrInvalid},
		{"negative rows", Q4_K, q4k, -1, 256, ErrInvalid},
		{"truncated data", Q4_K, q4k, 3, 256, ErrTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ToAffineF32(tc.typ, tc.data, tc.rows, tc.cols); !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
}

package model

import (
	"math/rand/v2"
	"testing"
)

// TestWidenTo8 packs random values of every narrow width as MLX does (a
// little-endian bit stream per row) and checks the widened bytes are the
// values.
func TestWidenTo8(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, bits := range []int{2, 3, 5, 6} {
		const rows, cols = 3, 64
		vals := make([]byte, rows*cols)
		packed := make([]byte, rows*cols*bits/8)
		for i := range vals {
			vals[i] = byte(r.IntN(1 << bits))
			row, c := i/cols, i%cols
			for b := range bits {
				if vals[i]>>b&1 == 1 {
					pos := row*cols*bits + c*bits + b
					packed[pos/8] |= 1 << (pos % 8)
				}
			}
		}
		got := widenTo8(packed, rows, cols, bits)
		for i := range vals {
			if got[i] != vals[i] {
				t.Fatalf("%d bits: value %d widened to %d, want %d", bits, i, got[i], vals[i])
			}
		}
	}
}

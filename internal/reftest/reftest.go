// Package reftest reads the reference fixtures the model suites compare
// against: raw little-endian float32 files, and the largest difference
// between two vectors.
package reftest

import (
	"encoding/binary"
	"math"
	"os"
	"testing"
)

// ReadF32 reads a file of little-endian float32 values; a missing file
// fails the test.
func ReadF32(tb testing.TB, path string) []float32 {
	tb.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

// MaxAbsDiff is the largest |a[i] - b[i]| and its index (-1 when a is
// empty). Vectors of different lengths differ infinitely, and a NaN
// difference counts as the largest.
func MaxAbsDiff(a, b []float32) (float64, int) {
	if len(a) != len(b) {
		return math.Inf(1), -1
	}
	worst, at := 0.0, -1
	for i := range a {
		if d := math.Abs(float64(a[i]) - float64(b[i])); d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	return worst, at
}

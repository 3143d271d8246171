package gguf

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// loadQuantFixture reads the block bytes and reference floats written by
// scripts/gen_gguf_fixtures.py.
func loadQuantFixture(t *testing.T, typ TensorType) ([]byte, []float32) {
	t.Helper()
	base := filepath.Join("testdata", "quant", typ.String())
	raw, err := os.ReadFile(base + ".raw")
	if err != nil {
		t.Fatalf("fixture missing (regenerate with scripts/gen_gguf_fixtures.py): %v", err)
	}
	fb, err := os.ReadFile(base + ".f32")
	if err != nil {
		t.Fatalf("fixture missing (regenerate with scripts/gen_gguf_fixtures.py): %v", err)
	}
	want := make([]float32, len(fb)/4)
	for i := range want {
		want[i] = math.Float32frombits(binary.LittleEndian.Uint32(fb[4*i:]))
	}
	return raw, want
}

// The reference computes in float32 with one rounding per operation, the
// same as ggml, so the comparison is on bits with no tolerance (this also
// pins the sign of zeros).
func TestDequantizeMatchesReference(t *testing.T) {
	types := []TensorType{F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}
	for _, typ := range types {
		t.Run(typ.String(), func(t *testing.T) {
			raw, want := loadQuantFixture(t, typ)
			if len(raw)/typ.TypeSize()*typ.BlockSize() != len(want) {
				t.Fatalf("fixture sizes disagree: %d bytes, %d floats", len(raw), len(want))
			}
			got, err := Dequantize(typ, raw, len(want))
			if err != nil {
				t.Fatal(err)
			}
			mismatches := 0
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					if mismatches < 5 {
						t.Errorf("element %d (block %d): got %g (%#08x), want %g (%#08x)", i, i/typ.BlockSize(),
							got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
					mismatches++
				}
			}
			if mismatches > 0 {
				t.Errorf("%d of %d elements differ", mismatches, len(want))
			}
		})
	}
}

func TestDequantizeErrors(t *testing.T) {
	tests := []struct {
		name string
		typ  TensorType
		data []byte
		n    int
		want error
	}{
		{"integer type", I32, make([]byte, 8), 2, ErrUnsupportedType},
		{"iq type", IQ2_XXS, make([]byte, 66), 256, ErrUnsupportedType},
		{"unknown id", TensorType(99), nil, 0, ErrUnsupportedType},
		{"partial block", Q4_0, make([]byte, 18), 16, ErrInvalid},
		{"negative count", F32, nil, -4, ErrInvalid},
		{"short data", Q8_0, make([]byte, 33), 32, ErrTruncated},
		{"huge count", F32, make([]byte, 4), math.MaxInt, ErrTruncated},
		{"huge K count", Q6_K, make([]byte, 210), math.MaxInt / 256 * 256, ErrTruncated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Dequantize(tc.typ, tc.data, tc.n)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestDequantizeUsesOnlyLeadingBlocks(t *testing.T) {
	raw, want := loadQuantFixture(t, Q4_K)
	got, err := Dequantize(Q4_K, raw, 256) // first block of a longer buffer
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("element %d: got %g want %g", i, got[i], want[i])
		}
	}
	if out, err := Dequantize(Q4_K, nil, 0); err != nil || len(out) != 0 {
		t.Fatalf("empty: got %v, %v", out, err)
	}
}

func TestTensorTypeTraits(t *testing.T) {
	tests := []struct {
		typ        TensorType
		name       string
		block, siz int
	}{
		{F32, "F32", 1, 4},
		{F16, "F16", 1, 2},
		{BF16, "BF16", 1, 2},
		{Q4_0, "Q4_0", 32, 18},
		{Q4_1, "Q4_1", 32, 20},
		{Q5_0, "Q5_0", 32, 22},
		{Q5_1, "Q5_1", 32, 24},
		{Q8_0, "Q8_0", 32, 34},
		{Q2_K, "Q2_K", 256, 84},
		{Q3_K, "Q3_K", 256, 110},
		{Q4_K, "Q4_K", 256, 144},
		{Q5_K, "Q5_K", 256, 176},
		{Q6_K, "Q6_K", 256, 210},
		{Q8_K, "Q8_K", 256, 292},
		{I64, "I64", 1, 8},
		{TensorType(4), "TensorType(4)", 0, 0},
	}
	for _, tc := range tests {
		if got := tc.typ.String(); got != tc.name {
			t.Errorf("%d: String = %q, want %q", uint32(tc.typ), got, tc.name)
		}
		if tc.typ.BlockSize() != tc.block || tc.typ.TypeSize() != tc.siz {
			t.Errorf("%s: block %d size %d, want %d %d", tc.name, tc.typ.BlockSize(), tc.typ.TypeSize(), tc.block, tc.siz)
		}
	}
}

func TestTensorInfoSizes(t *testing.T) {
	tests := []struct {
		name  string
		info  TensorInfo
		elems uint64
		bytes uint64
	}{
		{"matrix", TensorInfo{Dims: []uint64{64, 3}, Type: Q4_1}, 192, 6 * 20},
		{"scalar", TensorInfo{Dims: nil, Type: F32}, 1, 4},
		{"empty", TensorInfo{Dims: []uint64{0, 5}, Type: F16}, 0, 0},
		{"partial block", TensorInfo{Dims: []uint64{16, 2}, Type: Q4_0}, 32, 0},
		{"overflow", TensorInfo{Dims: []uint64{1 << 40, 1 << 40}, Type: F32}, 0, 0},
		{"unknown type", TensorInfo{Dims: []uint64{4}, Type: 77}, 4, 0},
	}
	for _, tc := range tests {
		if got := tc.info.Elements(); got != tc.elems {
			t.Errorf("%s: Elements = %d, want %d", tc.name, got, tc.elems)
		}
		if got := tc.info.Bytes(); got != tc.bytes {
			t.Errorf("%s: Bytes = %d, want %d", tc.name, got, tc.bytes)
		}
	}
}

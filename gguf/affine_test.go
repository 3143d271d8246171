package gguf

import (
	"encoding/binary"
	"errors"
	"testing"
)

// reconstruct evaluates scale*q + bias in float32 with one rounding per
// operation, the way the affine form is defined.
func reconstruct(a *Affine, rows, cols int) []float32 {
	out := make([]float32, rows*cols)
	perWord := 32 / a.Bits
	wordsPerRow := cols * a.Bits / 32
	groupsPerRow := cols / a.GroupSize
	mask := uint32(1)<<a.Bits - 1
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			w := a.Packed[r*wordsPerRow+c/perWord]
			q := w >> ((c % perWord) * a.Bits) & mask
			g := r*groupsPerRow + c/a.GroupSize
			s, b := halfToFloat(a.Scales[g]), halfToFloat(a.Biases[g])
			out[r*cols+c] = float32(s*float32(q)) + b
		}
	}
	return out
}

// checkAffineExact compares the affine reconstruction with Dequantize. The
// values must be equal as floats; only the sign of a zero may differ (for
// Q4_0 and Q8_0 a zero quant gives -0 from (q-8)*d with d < 0, but
// d*8 + (-8d) = +0), which no consumer can observe through arithmetic.
func checkAffineExact(t *testing.T, typ TensorType, raw []byte, rows, cols int) {
	t.Helper()
	a, err := ToAffine(typ, raw, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Dequantize(typ, raw, rows*cols)
	if err != nil {
		t.Fatal(err)
	}
	got := reconstruct(a, rows, cols)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s element %d (row %d col %d): affine %g, dequantized %g", typ, i, i/cols, i%cols, got[i], want[i])
		}
	}
}

func TestToAffineMatchesDequantize(t *testing.T) {
	for _, typ := range []TensorType{Q4_0, Q4_1, Q8_0} {
		t.Run(typ.String(), func(t *testing.T) {
			raw, want := loadQuantFixture(t, typ)
			n := len(want)
			for _, cols := range []int{32, 256, n} {
				checkAffineExact(t, typ, raw, n/cols, cols)
			}
		})
	}
}

func TestToAffineLayout(t *testing.T) {
	// One Q4_1 block: element j has quant j%16, so the first 16 columns are
	// 0..15 in the low nibbles and the next 16 repeat them in the high ones.
	blk := make([]byte, 20)
	binary.LittleEndian.PutUint16(blk[0:], 0x3c00) // d = 1
	binary.LittleEndian.PutUint16(blk[2:], 0xbc00) // m = -1
	for j := 0; j < 16; j++ {
		blk[4+j] = byte(j) | byte(j)<<4
	}
	a, err := ToAffine(Q4_1, blk, 1, 32)
	if err != nil {
		t.Fatal(err)
	}
	wantWords := []uint32{0x76543210, 0xfedcba98, 0x76543210, 0xfedcba98}
	for i, w := range wantWords {
		if a.Packed[i] != w {
			t.Errorf("word %d = %#08x, want %#08x", i, a.Packed[i], w)
		}
	}
	if a.Bits != 4 || a.GroupSize != 32 || a.Scales[0] != 0x3c00 || a.Biases[0] != 0xbc00 {
		t.Errorf("got bits %d group %d scale %#04x bias %#04x", a.Bits, a.GroupSize, a.Scales[0], a.Biases[0])
	}

	// One Q8_0 block with quants -128, -1, 0, 127, ... and d = 0.5.
	q8 := make([]byte, 34)
	binary.LittleEndian.PutUint16(q8, 0x3800)
	copy(q8[2:], []byte{0x80, 0xff, 0x00, 0x7f})
	a, err = ToAffine(Q8_0, q8, 1, 32)
	if err != nil {
		t.Fatal(err)
	}
	if a.Packed[0] != 0xff807f00 {
		t.Errorf("q8 word 0 = %#08x, want 0xff807f00", a.Packed[0])
	}
	if a.Biases[0] != floatToHalf(-64) {
		t.Errorf("q8 bias = %#04x, want -64", a.Biases[0])
	}
	if len(a.Packed) != 8 {
		t.Errorf("q8 words per group = %d, want 8", len(a.Packed))
	}
}

func TestToAffineErrors(t *testing.T) {
	q40 := func(d uint16) []byte {
		b := make([]byte, 18)
		binary.LittleEndian.PutUint16(b, d)
		return b
	}
	q80 := func(d uint16) []byte {
		b := make([]byte, 34)
		binary.LittleEndian.PutUint16(b, d)
		return b
	}
	tests := []struct {
		name       string
		typ        TensorType
		data       []byte
		rows, cols int
		want       error
	}{
		{"unsupported", Q5_0, make([]byte, 22), 1, 32, ErrUnsupportedType},
		{"k quant", Q4_K, make([]byte, 144), 1, 256, ErrUnsupportedType},
		{"cols not whole blocks", Q4_0, make([]byte, 36), 1, 48, ErrInvalid},
		{"zero cols", Q4_0, nil, 1, 0, ErrInvalid},
		{"negative rows", Q4_0, nil, -1, 32, ErrInvalid},
		{"short data", Q4_1, make([]byte, 39), 2, 32, ErrTruncated},
		{"huge shape", Q8_0, make([]byte, 34), 1 << 40, 1 << 20, ErrTruncated},
		{"q4_0 bias overflows", Q4_0, q40(floatToHalf(16384)), 1, 32, ErrInvalid},
		{"q8_0 bias overflows", Q8_0, q80(floatToHalf(1024)), 1, 32, ErrInvalid},
		{"infinite scale", Q4_0, q40(0x7c00), 1, 32, ErrInvalid},
		{"nan scale", Q8_0, q80(0x7e00), 1, 32, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ToAffine(tc.typ, tc.data, tc.rows, tc.cols)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// The largest scales whose biases still fit are accepted exactly.
	for _, tc := range []struct {
		typ  TensorType
		data []byte
	}{
		{Q4_0, q40(floatToHalf(8188))},
		{Q8_0, q80(floatToHalf(511.75))},
		{Q4_0, q40(0x0001)}, // smallest subnormal
	} {
		checkAffineExact(t, tc.typ, tc.data, 1, 32)
	}
}

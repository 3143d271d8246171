package model

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/goprovider/provider/mlx"
)

// TestHeadRange: every query head lands on exactly one rank with its KV
// head, uneven splits put the extra heads first, and a KV head shared by
// ranks splits its query heads.
func TestHeadRange(t *testing.T) {
	for _, tc := range []struct {
		heads, kv, size int
		want            [][4]int // qa, qb, ka, kb per rank
	}{
		{9, 3, 2, [][4]int{{0, 6, 0, 2}, {6, 9, 2, 3}}},
		{9, 3, 3, [][4]int{{0, 3, 0, 1}, {3, 6, 1, 2}, {6, 9, 2, 3}}},
		{4, 1, 2, [][4]int{{0, 2, 0, 1}, {2, 4, 0, 1}}},
		{8, 2, 4, [][4]int{{0, 2, 0, 1}, {2, 4, 0, 1}, {4, 6, 1, 2}, {6, 8, 1, 2}}},
		{64, 8, 4, [][4]int{{0, 16, 0, 2}, {16, 32, 2, 4}, {32, 48, 4, 6}, {48, 64, 6, 8}}},
	} {
		for r, w := range tc.want {
			qa, qb, ka, kb, err := HeadRange(tc.heads, tc.kv, r, tc.size)
			if err != nil || [4]int{qa, qb, ka, kb} != w {
				t.Errorf("HeadRange(%d, %d, %d, %d) = %d %d %d %d %v, want %v", tc.heads, tc.kv, r, tc.size, qa, qb, ka, kb, err, w)
			}
		}
	}
	if _, _, _, _, err := HeadRange(4, 1, 0, 3); err == nil {
		t.Error("one KV head of 4 query heads over 3 ranks: no error")
	}
}

func TestEvenRange(t *testing.T) {
	lo, hi, _ := EvenRange(96, 32, 0, 2)
	lo2, hi2, _ := EvenRange(96, 32, 1, 2)
	if lo != 0 || hi != 64 || lo2 != 64 || hi2 != 96 {
		t.Errorf("96 in units of 32 over 2: [%d,%d) [%d,%d), want [0,64) [64,96)", lo, hi, lo2, hi2)
	}
	if _, _, err := EvenRange(100, 32, 0, 2); err == nil {
		t.Error("100 in units of 32: no error")
	}
}

// TestSliceQuantized: slicing a packed 4-bit matrix along either axis keeps
// the words, scales and biases of the part, as slicing the unpacked values
// would.
func TestSliceQuantized(t *testing.T) {
	const rows, cols, g = 4, 128, 32
	words := make([]byte, rows*cols/8*4)
	for i := range words {
		words[i] = byte(i)
	}
	scales := make([]byte, rows*cols/g*2)
	for i := range scales {
		scales[i] = byte(100 + i)
	}
	tt := &Tensor{Name: "w", Shape: []int{rows, cols}, DType: mlx.Uint32, Data: words,
		Quant: &Quant{Bits: 4, GroupSize: g, Scales: scales, Biases: scales, ScaleDType: mlx.Float16}}
	cs, err := tt.Slice(Part{Axis: -1, Lo: 64, Hi: 128})
	if err != nil {
		t.Fatal(err)
	}
	rowWords, rowScales := cols/8*4, cols/g*2
	for r := range rows {
		if !bytes.Equal(cs.Data[r*rowWords/2:(r+1)*rowWords/2], words[r*rowWords+rowWords/2:(r+1)*rowWords]) {
			t.Errorf("row %d words differ", r)
		}
		if !bytes.Equal(cs.Quant.Scales[r*rowScales/2:(r+1)*rowScales/2], scales[r*rowScales+rowScales/2:(r+1)*rowScales]) {
			t.Errorf("row %d scales differ", r)
		}
	}
	rs, err := tt.Slice(Part{Axis: 0, Lo: 1, Hi: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rs.Data, words[rowWords:3*rowWords]) || !bytes.Equal(rs.Quant.Biases, scales[rowScales:3*rowScales]) {
		t.Error("row slice differs")
	}
	if _, err := tt.Slice(Part{Axis: -1, Lo: 16, Hi: 64}); err == nil {
		t.Error("a cut through a quantization group: no error")
	}
}

// TestSliceBlocks: a part of a stacked gate and up projection keeps the
// same rows of both halves, gate rows first.
func TestSliceBlocks(t *testing.T) {
	// [experts 2, rows 2*3, cols 2] of float32, element value its index.
	shape := []int{2, 6, 2}
	data := make([]float32, 2*6*2)
	for i := range data {
		data[i] = float32(i)
	}
	tt := &Tensor{Name: "gate_up", Shape: shape, DType: mlx.Float32, Data: float32Bytes(data)}
	s, err := tt.Slice(Part{Axis: 1, Lo: 1, Hi: 3, Blocks: 2})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	// Rows 1, 2 (gate) and 4, 5 (up) of each expert.
	want := []float32{2, 3, 4, 5, 8, 9, 10, 11, 14, 15, 16, 17, 20, 21, 22, 23}
	if fmt.Sprint(s.Shape) != "[2 4 2]" || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("shape %v values %v, want [2 4 2] %v", s.Shape, got, want)
	}
}

package gguf

import (
	"math"
	"testing"
)

// Every non-NaN binary16 value must survive a round trip through float32.
func TestHalfRoundTripExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := halfToFloat(h)
		if math.IsNaN(float64(f)) {
			if h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
				t.Fatalf("%#04x decoded to NaN", h)
			}
			if back := floatToHalf(f); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x re-encoded as non-NaN %#04x", h, back)
			}
			continue
		}
		if back := floatToHalf(f); back != h {
			t.Fatalf("%#04x -> %g -> %#04x", h, f, back)
		}
	}
}

func TestFloatToHalfRounding(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"tie to even down", 1 + 1.0/2048, 0x3c00},
		{"tie to even up", 1 + 3.0/2048, 0x3c02},
		{"above tie", 1 + 1.0/2048 + 1.0/65536, 0x3c01},
		{"max", 65504, 0x7bff},
		{"rounds to inf", 65520, 0x7c00},
		{"just below inf threshold", 65519.996, 0x7bff},
		{"smallest subnormal", 1.0 / (1 << 24), 0x0001},
		{"half smallest subnormal ties to zero", 1.0 / (1 << 25), 0x0000},
		{"above half smallest subnormal", 1.0/(1<<25) + 1.0/(1<<40), 0x0001},
		{"subnormal tie to even", 3.0 / (1 << 25), 0x0002},
		{"largest subnormal rounds to smallest normal", (1 - 1.0/4096) / (1 << 14), 0x0400},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"tiny negative", -1e-30, 0x8000},
		{"inf", float32(math.Inf(1)), 0x7c00},
		{"-inf", float32(math.Inf(-1)), 0xfc00},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := floatToHalf(tc.in); got != tc.want {
				t.Errorf("floatToHalf(%g) = %#04x, want %#04x", tc.in, got, tc.want)
			}
		})
	}
}

func TestHalfToFloatValues(t *testing.T) {
	tests := []struct {
		in   uint16
		want float32
	}{
		{0x3c00, 1},
		{0xc000, -2},
		{0x0001, 1.0 / (1 << 24)},
		{0x03ff, 1023.0 / (1 << 24)},
		{0x0400, 1.0 / (1 << 14)},
		{0x7bff, 65504},
		{0x3555, 0.333251953125},
	}
	for _, tc := range tests {
		if got := halfToFloat(tc.in); got != tc.want {
			t.Errorf("halfToFloat(%#04x) = %g, want %g", tc.in, got, tc.want)
		}
	}
	if got := bf16ToFloat(0x3f80); got != 1 {
		t.Errorf("bf16ToFloat(0x3f80) = %g, want 1", got)
	}
}

package media

import "math"

// Resample is one of PIL's resampling filters, by PIL's number.
type Resample int

// The filters Resize reproduces.
const (
	Bilinear Resample = 2
	Bicubic  Resample = 3
)

// filter is a PIL convolution kernel and its support radius at scale 1.
func (r Resample) filter() (func(float64) float64, float64, bool) {
	switch r {
	case Bilinear:
		return func(x float64) float64 {
			x = math.Abs(x)
			if x < 1 {
				return 1 - x
			}
			return 0
		}, 1, true
	case Bicubic:
		// Keys' cubic convolution with a = -0.5.
		const a = -0.5
		return func(x float64) float64 {
			x = math.Abs(x)
			// The conversions keep each product rounded on its own (no
			// fused multiply-add), as PIL's C computes it.
			switch {
			case x < 1:
				return float64(float64(float64(float64((a+2)*x)-(a+3))*x)*x) + 1
			case x < 2:
				return float64(float64(float64(float64(x-5)*x)+8)*x-4) * a
			}
			return 0
		}, 2, true
	}
	return nil, 0, false
}

// Valid reports whether Resize reproduces filter r.
func (r Resample) Valid() bool {
	_, _, ok := r.filter()
	return ok
}

// pilBits is the fixed-point precision of PIL's 8-bit resampling
// (PRECISION_BITS in its Resample.c).
const pilBits = 32 - 8 - 2

// pilCoeffs are the integer weights of one axis of a PIL resize: output
// index i reads input start[i] .. start[i]+len(weights[i])-1.
type pilCoeffs struct {
	start   []int
	weights [][]int32
}

// pilAxis computes PIL's weights for resizing inSize samples to outSize:
// each output sample centred at (i+0.5)*scale in input coordinates, the
// filter stretched by the scale when shrinking, the taps normalized to sum
// to 1 in float64 and then rounded half away from zero to pilBits
// fractional bits.
func pilAxis(inSize, outSize int, r Resample) pilCoeffs {
	filter, support, _ := r.filter()
	scale := float64(inSize) / float64(outSize)
	filterScale := max(scale, 1)
	support *= filterScale
	inv := 1 / filterScale
	c := pilCoeffs{start: make([]int, outSize), weights: make([][]int32, outSize)}
	for i := range outSize {
		center := (float64(i) + 0.5) * scale
		// Go's conversion truncates toward zero, as C's does.
		lo := max(int(center-support+0.5), 0)
		hi := min(int(center+support+0.5), inSize)
		taps := make([]float64, hi-lo)
		sum := 0.0
		for x := range taps {
			taps[x] = filter((float64(x+lo) - center + 0.5) * inv)
			sum += taps[x]
		}
		w := make([]int32, len(taps))
		for x, t := range taps {
			if sum != 0 {
				t /= sum
			}
			if t < 0 {
				w[x] = int32(-0.5 + float64(t*(1<<pilBits)))
			} else {
				w[x] = int32(0.5 + float64(t*(1<<pilBits)))
			}
		}
		c.start[i], c.weights[i] = lo, w
	}
	return c
}

// clip8 is PIL's rounding of an accumulated fixed-point sum to a byte.
func clip8(acc int32) uint8 {
	v := acc >> pilBits
	switch {
	case v < 0:
		return 0
	case v > 255:
		return 255
	}
	return uint8(v)
}

// Resize resizes packed RGB8 pixels (w x h) to outW x outH as PIL's
// Image.resize does for an RGB image with filter r and the default box:
// a horizontal pass, its result rounded to bytes, then a vertical pass,
// each skipped when that side keeps its size. The fixed-point weights and
// the rounding are PIL's, so the result is PIL's byte for byte. r must be
// Valid.
func Resize(src []uint8, w, h, outW, outH int, r Resample) []uint8 {
	if outW != w {
		c := pilAxis(w, outW, r)
		dst := make([]uint8, outW*h*3)
		for y := range h {
			row := src[y*w*3 : (y+1)*w*3]
			for x := range outW {
				for ch := range 3 {
					acc := int32(1) << (pilBits - 1)
					for k, wt := range c.weights[x] {
						acc += int32(row[(c.start[x]+k)*3+ch]) * wt
					}
					dst[(y*outW+x)*3+ch] = clip8(acc)
				}
			}
		}
		src, w = dst, outW
	}
	if outH != h {
		c := pilAxis(h, outH, r)
		dst := make([]uint8, w*outH*3)
		for y := range outH {
			for i := range w * 3 {
				acc := int32(1) << (pilBits - 1)
				for k, wt := range c.weights[y] {
					acc += int32(src[(c.start[y]+k)*w*3+i]) * wt
				}
				dst[y*w*3+i] = clip8(acc)
			}
		}
		src = dst
	}
	return src
}

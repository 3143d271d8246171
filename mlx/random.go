package mlx

/*
#include "random.h"
*/
import "C"

// RandomNormal samples an array of shape from the normal distribution of
// mean loc and standard deviation scale, in the float dtype d, from key.
// The samples are drawn on the frame's stream, so a large array never
// passes through host memory.
func (f *Frame) RandomNormal(d Dtype, loc, scale float32, key Array, shape ...int) Array {
	cs := cShape(shape)
	return f.op("random_normal", func(r *C.mlx_array) C.int {
		return C.mlx_random_normal(r, ptr(cs), C.size_t(len(cs)), C.mlx_dtype(d), C.float(loc), C.float(scale), key.c, f.s.c)
	}, key)
}

// RandomBits is an array of shape filled with uniformly random unsigned
// integers of width bytes (1, 2 or 4: uint8, uint16 or uint32), from key.
func (f *Frame) RandomBits(width int, key Array, shape ...int) Array {
	cs := cShape(shape)
	return f.op("random_bits", func(r *C.mlx_array) C.int {
		return C.mlx_random_bits(r, ptr(cs), C.size_t(len(cs)), C.int(width), key.c, f.s.c)
	}, key)
}

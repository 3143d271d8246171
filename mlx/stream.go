package mlx

/*
#include "stream.h"
*/
import "C"

// NewStreamOn makes a new stream on the device of s, for the calling MLX
// thread. Unlike the device's default stream (one per OS thread, made the
// first time the thread asks and kept for the thread's life, which may
// outlast a Thread), it is always new: on the CPU its worker starts now,
// from the calling thread, and so inherits that thread's ThreadOptions.
// Free it on the same thread.
func NewStreamOn(s Stream) (Stream, error) {
	var r C.mlx_stream
	if err := check("stream_new_on", C.mlx_stream_new_on(&r, s.c)); err != nil {
		return Stream{}, err
	}
	return Stream{r}, nil
}

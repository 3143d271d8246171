/*
 * Streams of their own, implemented in stream.cpp over the installed MLX.
 */
#ifndef PROVIDER_STREAM_H
#define PROVIDER_STREAM_H

#include "mlxc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* extension: a new stream on the device of s (MLX's new_stream), with a
 * worker of its own started from the calling thread where the device has
 * stream workers (the CPU). */
int mlx_stream_new_on(mlx_stream* res, const mlx_stream s);

#ifdef __cplusplus
}
#endif

#endif

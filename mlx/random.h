/*
 * Random sampling, with mlx-c's names and signatures (random.h upstream),
 * implemented in random.cpp over the installed MLX.
 */
#ifndef PROVIDER_RANDOM_H
#define PROVIDER_RANDOM_H

#include "mlxc.h"

#ifdef __cplusplus
extern "C" {
#endif

int mlx_random_normal(mlx_array* res, const int* shape, size_t shape_num, mlx_dtype dtype, float loc, float scale,
                      const mlx_array key, const mlx_stream s);
int mlx_random_bits(mlx_array* res, const int* shape, size_t shape_num, int width, const mlx_array key,
                    const mlx_stream s);

#ifdef __cplusplus
}
#endif

#endif

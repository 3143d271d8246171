// Package mlx drives MLX from Go through cgo, over the C API of mlx-c.
//
// The C layer (mlxc.h) keeps mlx-c's names, handle types and calling
// convention for the subset the project uses; shim.cpp implements that
// subset over the MLX C++ headers of the installed wheel, and the build tag
// mlxc links an upstream libmlxc instead. MLX errors never exit the process:
// an error handler records the message and the call returns an error.
//
// Invariants:
//   - MLX keeps per-thread state, so every call into this package happens on
//     one goroutine locked to its OS thread: a Thread's Do, or a goroutine that
//     called runtime.LockOSThread and Init.
//   - Array lifetimes are explicit. An Array returned by a Frame op belongs to
//     the Frame and dies with Frame.Free; Frame.Keep hands the caller its own
//     reference, which the caller frees with Array.Free. Package-level
//     constructors return caller-owned arrays. Nothing relies on finalizers.
//   - A Frame's first error is sticky: later ops on that Frame return empty
//     arrays and do nothing, so model code checks Err once per step.
//   - Half-precision data crosses the boundary as uint16 bit patterns (x86-64
//     has no native C float16/bfloat16).
//
// This package imports nothing of the project.
package mlx

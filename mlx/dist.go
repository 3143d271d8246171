package mlx

/*
#include <stdlib.h>
#include "mlxc.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Group is a set of processes joined by one of MLX's communication
// backends: ring (TCP; any machine, several processes of one machine
// included), nccl (NVIDIA GPUs), jaccl (RDMA between Macs) or mpi. The
// backend reads its rendezvous from the environment (ring: MLX_RANK and
// MLX_HOSTFILE; nccl: MLX_RANK, MLX_WORLD_SIZE, NCCL_HOST_IP, NCCL_PORT).
// The zero Group is a single process: its collectives are identities.
type Group struct {
	c C.mlx_distributed_group
}

// DistributedAvailable reports whether MLX was built with backend.
func DistributedAvailable(backend string) bool {
	cs := C.CString(backend)
	defer C.free(unsafe.Pointer(cs))
	return bool(C.mlx_distributed_is_available(cs))
}

// JoinGroup initializes backend and returns the group of every process it
// joins; it blocks until all of them have joined. It must run on the MLX
// thread.
func JoinGroup(backend string) (Group, error) {
	cs := C.CString(backend)
	defer C.free(unsafe.Pointer(cs))
	g := C.mlx_distributed_init(true, cs)
	if g.ctx == nil {
		return Group{}, fmt.Errorf("mlx: distributed %s: %w", backend, lastError("init"))
	}
	return Group{c: g}, nil
}

// Valid reports whether g is a joined group (not the zero Group).
func (g Group) Valid() bool { return g.c.ctx != nil }

// Rank is this process's index in g.
func (g Group) Rank() int {
	if !g.Valid() {
		return 0
	}
	return int(C.mlx_distributed_group_rank(g.c))
}

// Size is the number of processes in g.
func (g Group) Size() int {
	if !g.Valid() {
		return 1
	}
	return int(C.mlx_distributed_group_size(g.c))
}

// Free releases the handle (the backend stays up).
func (g *Group) Free() {
	if g.Valid() {
		C.mlx_distributed_group_free(g.c)
		g.c.ctx = nil
	}
}

// AllSum is the elementwise sum of x over every process of g; every
// process gets the same result.
func (f *Frame) AllSum(x Array, g Group) Array {
	if !g.Valid() {
		return x
	}
	return f.op("all_sum", func(r *C.mlx_array) C.int { return C.mlx_distributed_all_sum(r, x.c, g.c, f.s.c) }, x)
}

// AllGather concatenates x of every process of g along axis 0, in rank
// order.
func (f *Frame) AllGather(x Array, g Group) Array {
	if !g.Valid() {
		return x
	}
	return f.op("all_gather", func(r *C.mlx_array) C.int { return C.mlx_distributed_all_gather(r, x.c, g.c, f.s.c) }, x)
}

package model

import "github.com/goprovider/provider/mlx"

// Network is a family's forward pass bound to device weights. All methods
// run on the MLX thread.
type Network interface {
	Config() Config
	// NewCache returns an empty KV cache for one sequence.
	NewCache() Cache
	// Forward appends tokens[i] to caches[i] for every row and returns the
	// float32 logits of each row's last new position, [rows, vocab], owned
	// by f. Rows may add different numbers of tokens; each adds at least
	// one. After an error on f the caches involved are unusable.
	Forward(f *mlx.Frame, tokens [][]int32, caches []Cache) mlx.Array
	// Close releases what the network created (not the weights).
	Close()
}

// Cache is one sequence's KV state.
type Cache interface {
	Len() int     // tokens held
	Bytes() int64 // device memory of its buffers
	Free()
}

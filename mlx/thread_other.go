//go:build !linux

package mlx

// setupThread has nothing to apply off Linux: thread names and per-thread
// priorities are Linux's.
func setupThread(ThreadOptions) error { return nil }

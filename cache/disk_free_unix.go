//go:build linux || darwin || freebsd

package cache

import "syscall"

// freeBytes is the space statfs says an unprivileged writer may use.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

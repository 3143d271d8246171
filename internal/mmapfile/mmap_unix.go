//go:build unix

package mmapfile

import (
	"os"
	"syscall"
)

// mmap maps size bytes of fh read-only. The mapping outlives fh: closing the
// descriptor does not unmap.
func mmap(fh *os.File, size int) ([]byte, func() error, error) {
	data, err := syscall.Mmap(int(fh.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}

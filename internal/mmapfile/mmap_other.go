//go:build !unix

package mmapfile

import (
	"io"
	"os"
)

// mmap falls back to reading the whole file where mmap is unavailable; the
// File then owns an ordinary heap copy.
func mmap(fh *os.File, size int) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(fh, data); err != nil {
		return nil, nil, err
	}
	return data, nil, nil
}

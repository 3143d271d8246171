// Package mmapfile maps checkpoint files read-only for the format readers
// (gguf, safetensors). Where mmap is unavailable it reads the file into
// memory instead; callers treat both the same.
package mmapfile

import (
	"fmt"
	"os"
)

// Map maps the regular file at path read-only and returns its bytes and a
// release function (nil when there is nothing to release). An empty file
// maps to no bytes, so the caller's parser reports the truncation.
func Map(path string) ([]byte, func() error, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("not a regular file")
	}
	size := st.Size()
	if size == 0 {
		return nil, nil, nil
	}
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("file of %d bytes does not fit in memory", size)
	}
	return mmap(fh, int(size))
}

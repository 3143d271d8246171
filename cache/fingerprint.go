package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// fingerprintSpan is how much of each end of a weight file a fingerprint
// reads.
const fingerprintSpan = 1 << 20

// Fingerprint identifies model weights cheaply enough to compute at every
// start: per file (a directory stands for the regular files in it, sorted
// by name) its name, size and the SHA-256 of its first and last MiB, plus
// extra (what else decides the weights, such as a random seed). Two
// checkpoints that differ only inside their middle MiBs collide; the layout
// epoch and the token comparison on every hit remain.
func Fingerprint(extra string, paths ...string) ([32]byte, error) {
	h := sha256.New()
	field := func(b []byte) {
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
	}
	field([]byte(extra))
	for _, p := range paths {
		files, err := filesOf(p)
		if err != nil {
			return [32]byte{}, fmt.Errorf("cache: fingerprint: %w", err)
		}
		for _, f := range files {
			if err := fingerprintFile(f, field); err != nil {
				return [32]byte{}, fmt.Errorf("cache: fingerprint: %w", err)
			}
		}
	}
	var out [32]byte
	h.Sum(out[:0])
	return out, nil
}

func filesOf(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			out = append(out, filepath.Join(p, e.Name()))
		}
	}
	slices.Sort(out)
	return out, nil
}

func fingerprintFile(path string, field func([]byte)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	field([]byte(filepath.Base(path)))
	field(binary.LittleEndian.AppendUint64(nil, uint64(st.Size())))
	for _, off := range []int64{0, max(0, st.Size()-fingerprintSpan)} {
		s := sha256.New()
		if _, err := io.Copy(s, io.NewSectionReader(f, off, fingerprintSpan)); err != nil {
			return err
		}
		field(s.Sum(nil))
	}
	return nil
}

package model

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/tokenizer"
)

// Model is a loaded checkpoint on the host.
type Model struct {
	Config       Config
	Tokenizer    *tokenizer.Tokenizer
	ChatTemplate string // Jinja source; "" when the checkpoint has none
	Format       string // "gguf" or "hf"
	Path         string
	Tensors      map[string]*Tensor

	closers []io.Closer
}

// Open loads a GGUF file or an HF/MLX checkpoint directory.
func Open(path string) (*Model, error) { return open(path, false) }

// OpenToShard is Open for a model about to be sharded (Model.Shard): a
// GGUF file's quantized tensors are converted only once sliced, so a rank
// converts and holds only its part. Shard and Upload convert what remains.
func OpenToShard(path string) (*Model, error) { return open(path, true) }

func open(path string, lazy bool) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if st.IsDir() {
		return openHF(path)
	}
	return openGGUF(path, lazy)
}

// Close releases the file mappings behind the host tensors.
func (m *Model) Close() error {
	var errs []error
	for _, c := range m.closers {
		errs = append(errs, c.Close())
	}
	m.closers = nil
	m.Tensors = nil
	return errors.Join(errs...)
}

// Name is a short display name: the file or directory base name.
func (m *Model) Name() string {
	return strings.TrimSuffix(filepath.Base(filepath.Clean(m.Path)), ".gguf")
}

// WeightBytes is the host size of all tensors.
func (m *Model) WeightBytes() int64 {
	var n int64
	for _, t := range m.Tensors {
		n += int64(t.Bytes())
	}
	return n
}

// Tensor returns a required tensor.
func (m *Model) Tensor(name string) (*Tensor, error) {
	t, ok := m.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrMissingTensor, name)
	}
	return t, nil
}

// Weights is the device copy of a model's tensors.
type Weights struct {
	byName map[string]*Weight
}

// Get returns the device weight of a tensor, or nil.
func (w *Weights) Get(name string) *Weight { return w.byName[name] }

// Bytes is the device memory of all weights.
func (w *Weights) Bytes() int64 {
	var n int64
	for _, x := range w.byName {
		n += int64(x.Bytes())
	}
	return n
}

// Free releases every device array.
func (w *Weights) Free() {
	for _, x := range w.byName {
		x.Free()
	}
	w.byName = nil
}

// Upload copies every tensor to the device on stream s. It must run on the
// MLX thread.
func (m *Model) Upload(s mlx.Stream) (*Weights, error) { return m.UploadProgress(s, nil) }

// UploadProgress is Upload that reports, after each tensor, the host bytes
// uploaded so far and the total (report may be nil).
func (m *Model) UploadProgress(s mlx.Stream, report func(done, total int64)) (*Weights, error) {
	if err := m.materialize(); err != nil {
		return nil, err
	}
	var total, done int64
	for _, t := range m.Tensors {
		total += int64(t.Bytes())
	}
	names := make([]string, 0, len(m.Tensors))
	for n := range m.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	w := &Weights{byName: make(map[string]*Weight, len(names))}
	for _, n := range names {
		dw, err := upload(s, m.Tensors[n], m.Config.ActDType, m.Config.ReferenceNumerics)
		if err == nil && !m.Config.ReferenceNumerics && m.Config.Int8Activations && s.IsCPU() && dw.Quantized() &&
			(dw.Mode == "" || dw.Mode == "affine") && (dw.Bits == 4 || dw.Bits == 8) {
			dw.Int8 = true
			if err = dw.Pack(s); err != nil {
				dw.Free()
			}
		}
		if err != nil {
			w.Free()
			return nil, fmt.Errorf("model: upload: %w", err)
		}
		w.byName[n] = dw
		if report != nil {
			done += int64(m.Tensors[n].Bytes())
			report(done, total)
		}
	}
	if err := w.fuseFor(s, m.Config); err != nil {
		w.Free()
		return nil, err
	}
	return w, nil
}

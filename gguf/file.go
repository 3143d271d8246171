package gguf

import (
	"errors"
	"fmt"
	"sort"

	"github.com/goprovider/provider/internal/mmapfile"
)

// Sentinel errors; returned errors wrap one of them with the key, tensor or
// offset involved, so callers test with errors.Is.
var (
	// ErrBadMagic means the input does not start with "GGUF".
	ErrBadMagic = errors.New("gguf: bad magic")
	// ErrVersion means the format version is not 2 or 3.
	ErrVersion = errors.New("gguf: unsupported version")
	// ErrTruncated means a length, count or tensor range runs past the end
	// of the input.
	ErrTruncated = errors.New("gguf: truncated")
	// ErrUnsupportedType means a tensor type that this package cannot lay
	// out or decode.
	ErrUnsupportedType = errors.New("gguf: unsupported tensor type")
	// ErrInvalid means the input is structurally wrong in a way that is not
	// truncation: duplicate names, bad dimensions, misaligned or overlapping
	// tensors, unknown metadata types.
	ErrInvalid = errors.New("gguf: invalid file")
	// ErrClosed means the File was used after Close.
	ErrClosed = errors.New("gguf: file closed")
)

const (
	magic            = 0x46554747 // "GGUF" read as little-endian uint32
	defaultAlignment = 32
	alignmentKey     = "general.alignment"
	// maxDims is ggml's GGML_MAX_DIMS; ggml cannot represent more.
	maxDims = 4
	// maxAlignment bounds general.alignment so padding arithmetic cannot
	// overflow; real files use 32.
	maxAlignment = 1 << 30
	// maxDepth bounds nested metadata arrays so hostile nesting cannot
	// exhaust the stack; real files never nest.
	maxDepth = 8
)

// File is a parsed GGUF file. It is safe for concurrent reads; Close must not
// race with other methods.
type File struct {
	Version uint32
	KV      []KV         // metadata in file order
	Tensors []TensorInfo // in file order

	data       []byte // whole file, usually a read-only mapping
	dataOffset uint64 // start of the tensor data section
	alignment  uint64
	keys       map[string]int // key -> index into KV
	names      map[string]int // tensor name -> index into Tensors
	release    func() error   // unmaps; nil when nothing to release
	closed     bool
}

// Open maps the file read-only and parses it.
func Open(path string) (*File, error) {
	data, release, err := mmapfile.Map(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: open %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		if release != nil {
			_ = release()
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.release = release
	return f, nil
}

// Close releases the mapping. Metadata stays usable; tensor data slices
// obtained earlier must not be touched afterwards.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	f.data = nil
	if f.release == nil {
		return nil
	}
	rel := f.release
	f.release = nil
	if err := rel(); err != nil {
		return fmt.Errorf("gguf: unmap: %w", err)
	}
	return nil
}

// Alignment is the data alignment of the file (general.alignment, default
// 32).
func (f *File) Alignment() uint64 { return f.alignment }

// DataOffset is the absolute file offset of the tensor data section; a
// tensor's bytes start at DataOffset()+Offset.
func (f *File) DataOffset() uint64 { return f.dataOffset }

// Lookup returns the metadata value stored under key.
func (f *File) Lookup(key string) (Value, bool) {
	i, ok := f.keys[key]
	if !ok {
		return Value{}, false
	}
	return f.KV[i].Value, true
}

// get applies a Value accessor to key's value; a missing key is never ok,
// whatever the zero Value would convert to.
func get[T any](f *File, key string, as func(Value) (T, bool)) (T, bool) {
	v, ok := f.Lookup(key)
	if !ok {
		var zero T
		return zero, false
	}
	return as(v)
}

// String returns a string value; ok is false when missing or not a string.
func (f *File) String(key string) (string, bool) {
	return get(f, key, Value.AsString)
}

// Uint returns a non-negative value of any integer type.
func (f *File) Uint(key string) (uint64, bool) {
	return get(f, key, Value.AsUint)
}

// Int returns a value of any integer type that fits in int64.
func (f *File) Int(key string) (int64, bool) {
	return get(f, key, Value.AsInt)
}

// Float returns a float32 or float64 value.
func (f *File) Float(key string) (float64, bool) {
	return get(f, key, Value.AsFloat)
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool) {
	return get(f, key, Value.AsBool)
}

// Strings returns a string array. The slice is shared; do not modify it.
func (f *File) Strings(key string) ([]string, bool) {
	return get(f, key, Value.AsStrings)
}

// Float32s returns a float32 array as a new slice.
func (f *File) Float32s(key string) ([]float32, bool) {
	return get(f, key, Value.AsFloat32s)
}

// Int32s returns an array of any integer type converted to a new int32
// slice; ok is false when an element does not fit.
func (f *File) Int32s(key string) ([]int32, bool) {
	return get(f, key, Value.AsInt32s)
}

// Tensor returns the description of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.names[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// TensorData returns the bytes of t, a sub-slice of the file that must not
// be modified or used after Close. The range is checked again here because
// t may have been built or altered by the caller.
func (f *File) TensorData(t TensorInfo) ([]byte, error) {
	if f.closed {
		return nil, ErrClosed
	}
	size, ok := tensorBytes(t.Type, t.Dims)
	if !ok {
		if !t.Type.known() {
			return nil, fmt.Errorf("tensor %q: %w: %s", t.Name, ErrUnsupportedType, t.Type)
		}
		return nil, fmt.Errorf("%w: tensor %q: dims %v do not describe whole %s blocks", ErrInvalid, t.Name, t.Dims, t.Type)
	}
	begin, end, ok := f.dataRange(t.Offset, size)
	if !ok {
		return nil, fmt.Errorf("%w: tensor %q: data at offset %d (+%d bytes) beyond end of file (%d bytes)",
			ErrTruncated, t.Name, t.Offset, size, len(f.data))
	}
	return f.data[begin:end:end], nil
}

// dataRange converts a data-section offset and size to absolute bounds,
// reporting false when the range overflows or leaves the file.
func (f *File) dataRange(off, size uint64) (uint64, uint64, bool) {
	n := uint64(len(f.data))
	if f.dataOffset > n || off > n-f.dataOffset {
		return 0, 0, false
	}
	begin := f.dataOffset + off
	if size > n-begin {
		return 0, 0, false
	}
	return begin, begin + size, true
}

// Parse parses and validates a GGUF file held in memory. The File keeps
// data; tensor data slices alias it.
func Parse(data []byte) (*File, error) {
	r := &reader{data: data}
	m, err := r.u32("magic")
	if err != nil {
		return nil, err
	}
	if m != magic {
		return nil, fmt.Errorf("%w: %#08x", ErrBadMagic, m)
	}
	f := &File{data: data}
	if f.Version, err = r.u32("version"); err != nil {
		return nil, err
	}
	if f.Version != 2 && f.Version != 3 {
		if f.Version&0xffff == 0 && f.Version != 0 {
			return nil, fmt.Errorf("%w: %#x (a big-endian file?)", ErrVersion, f.Version)
		}
		return nil, fmt.Errorf("%w: %d", ErrVersion, f.Version)
	}
	nTensors, err := r.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := r.u64("metadata count")
	if err != nil {
		return nil, err
	}
	// Smallest encodings: a key (8-byte length) with type tag and a 1-byte
	// value; a tensor with empty name, no dims, type and offset.
	if err := r.fits(nKV, 8+4+1, "metadata count"); err != nil {
		return nil, err
	}
	if err := r.fits(nTensors, 8+4+4+8, "tensor count"); err != nil {
		return nil, err
	}

	f.KV = make([]KV, 0, nKV)
	f.keys = make(map[string]int, nKV)
	for i := uint64(0); i < nKV; i++ {
		kv, err := r.kv()
		if err != nil {
			return nil, fmt.Errorf("metadata %d: %w", i, err)
		}
		if _, dup := f.keys[kv.Key]; dup {
			return nil, fmt.Errorf("%w: duplicate metadata key %q", ErrInvalid, kv.Key)
		}
		f.keys[kv.Key] = len(f.KV)
		f.KV = append(f.KV, kv)
	}

	f.Tensors = make([]TensorInfo, 0, nTensors)
	f.names = make(map[string]int, nTensors)
	for i := uint64(0); i < nTensors; i++ {
		t, err := r.tensorInfo()
		if err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, err)
		}
		if _, dup := f.names[t.Name]; dup {
			return nil, fmt.Errorf("%w: duplicate tensor name %q", ErrInvalid, t.Name)
		}
		f.names[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}

	if f.alignment, err = f.readAlignment(); err != nil {
		return nil, err
	}
	// The header ends inside data, so padding it cannot overflow.
	end := uint64(r.off)
	f.dataOffset = (end + f.alignment - 1) / f.alignment * f.alignment
	if err := f.checkTensors(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) readAlignment() (uint64, error) {
	v, ok := f.Lookup(alignmentKey)
	if !ok {
		return defaultAlignment, nil
	}
	a, ok := v.AsUint()
	if !ok {
		return 0, fmt.Errorf("%w: %s has type %s, want an unsigned integer", ErrInvalid, alignmentKey, v.Type)
	}
	if a == 0 || a&(a-1) != 0 || a > maxAlignment {
		return 0, fmt.Errorf("%w: %s = %d is not a power of two up to %d", ErrInvalid, alignmentKey, a, maxAlignment)
	}
	return a, nil
}

// checkTensors validates every tensor's data range and that no two ranges
// overlap, which would let a write through one alias another.
func (f *File) checkTensors() error {
	type span struct {
		begin, end uint64
		name       string
	}
	spans := make([]span, 0, len(f.Tensors))
	for _, t := range f.Tensors {
		if t.Offset%f.alignment != 0 {
			return fmt.Errorf("%w: tensor %q: offset %d not aligned to %d", ErrInvalid, t.Name, t.Offset, f.alignment)
		}
		size := t.Bytes() // dims were validated while reading
		begin, end, ok := f.dataRange(t.Offset, size)
		if !ok {
			return fmt.Errorf("%w: tensor %q: data at offset %d (+%d bytes, data section at %d) beyond end of file (%d bytes)",
				ErrTruncated, t.Name, t.Offset, size, f.dataOffset, len(f.data))
		}
		if size > 0 {
			spans = append(spans, span{begin, end, t.Name})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].begin < spans[j].begin })
	for i := 1; i < len(spans); i++ {
		if spans[i].begin < spans[i-1].end {
			return fmt.Errorf("%w: tensors %q and %q overlap", ErrInvalid, spans[i-1].name, spans[i].name)
		}
	}
	return nil
}

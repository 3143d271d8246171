package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// reader decodes little-endian GGUF primitives from data, never reading or
// allocating past what the remaining bytes can justify.
type reader struct {
	data []byte
	off  int
}

func (r *reader) remaining() uint64 { return uint64(len(r.data) - r.off) }

// take returns the next n bytes.
func (r *reader) take(n uint64, what string) ([]byte, error) {
	if n > r.remaining() {
		return nil, fmt.Errorf("%w: %s needs %d bytes at offset %d, %d remain",
			ErrTruncated, what, n, r.off, r.remaining())
	}
	b := r.data[r.off : r.off+int(n)]
	r.off += int(n)
	return b, nil
}

// fits checks that count items of at least minSize bytes each could still
// follow, so a count can be trusted enough to size an allocation.
func (r *reader) fits(count, minSize uint64, what string) error {
	if count > r.remaining()/minSize {
		return fmt.Errorf("%w: %s %d at offset %d exceeds what %d remaining bytes can hold",
			ErrTruncated, what, count, r.off, r.remaining())
	}
	return nil
}

func (r *reader) u32(what string) (uint32, error) {
	b, err := r.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *reader) u64(what string) (uint64, error) {
	b, err := r.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// str reads a length-prefixed string, copying it out of data so it survives
// unmapping.
func (r *reader) str(what string) (string, error) {
	n, err := r.u64(what + " length")
	if err != nil {
		return "", err
	}
	b, err := r.take(n, what)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func (r *reader) kv() (KV, error) {
	key, err := r.str("key")
	if err != nil {
		return KV{}, err
	}
	t, err := r.u32("value type")
	if err != nil {
		return KV{}, fmt.Errorf("key %q: %w", key, err)
	}
	v, err := r.value(ValueType(t), 0)
	if err != nil {
		return KV{}, fmt.Errorf("key %q: %w", key, err)
	}
	return KV{Key: key, Value: v}, nil
}

// scalar reads one fixed-size scalar into the num encoding used by Value.
func (r *reader) scalar(t ValueType) (uint64, error) {
	n := t.size() // 0 for strings, arrays and unknown types
	if n == 0 {
		return 0, fmt.Errorf("%w: unknown value type %d at offset %d", ErrInvalid, uint32(t), r.off)
	}
	b, err := r.take(uint64(n), t.String())
	if err != nil {
		return 0, err
	}
	return decodeScalar(t, b), nil
}

func (r *reader) value(t ValueType, depth int) (Value, error) {
	switch t {
	case TypeString:
		s, err := r.str("string")
		return Value{Type: t, str: s}, err
	case TypeArray:
		return r.array(depth)
	}
	n, err := r.scalar(t)
	return Value{Type: t, num: n}, err
}

func (r *reader) array(depth int) (Value, error) {
	if depth >= maxDepth {
		return Value{}, fmt.Errorf("%w: arrays nested deeper than %d at offset %d", ErrInvalid, maxDepth, r.off)
	}
	et, err := r.u32("array element type")
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	count, err := r.u64("array count")
	if err != nil {
		return Value{}, err
	}
	minSize := uint64(elem.size())
	switch elem {
	case TypeString:
		minSize = 8
	case TypeArray:
		minSize = 4 + 8
	}
	if minSize == 0 {
		return Value{}, fmt.Errorf("%w: unknown array element type %d at offset %d", ErrInvalid, et, r.off-12)
	}
	if err := r.fits(count, minSize, "array count"); err != nil {
		return Value{}, err
	}
	v := Value{Type: TypeArray, elem: elem}
	n := int(count) // fits: bounded by the remaining bytes
	switch elem {
	case TypeString:
		strs := make([]string, n)
		for i := range strs {
			if strs[i], err = r.str("string"); err != nil {
				return Value{}, fmt.Errorf("element %d: %w", i, err)
			}
		}
		v.arr = strs
	case TypeArray:
		vals := make([]Value, n)
		for i := range vals {
			if vals[i], err = r.array(depth + 1); err != nil {
				return Value{}, fmt.Errorf("element %d: %w", i, err)
			}
		}
		v.arr = vals
	default:
		b, _ := r.take(count*minSize, elem.String()+" array") // size checked by fits
		v.arr = bytes.Clone(b)                                // the input may be unmapped later
	}
	return v, nil
}

// tensorInfo reads one tensor description and validates what can be
// checked without the rest of the file: dimension count, type, and that the
// dims describe a whole number of blocks whose size fits in int64.
func (r *reader) tensorInfo() (TensorInfo, error) {
	name, err := r.str("tensor name")
	if err != nil {
		return TensorInfo{}, err
	}
	nd, err := r.u32("dimension count")
	if err != nil {
		return TensorInfo{}, fmt.Errorf("%q: %w", name, err)
	}
	if nd > maxDims {
		return TensorInfo{}, fmt.Errorf("%w: tensor %q has %d dimensions, at most %d allowed", ErrInvalid, name, nd, maxDims)
	}
	t := TensorInfo{Name: name, Dims: make([]uint64, nd)}
	for i := range t.Dims {
		if t.Dims[i], err = r.u64("dimension"); err != nil {
			return TensorInfo{}, fmt.Errorf("%q: %w", name, err)
		}
	}
	typ, err := r.u32("tensor type")
	if err != nil {
		return TensorInfo{}, fmt.Errorf("%q: %w", name, err)
	}
	t.Type = TensorType(typ)
	if t.Offset, err = r.u64("tensor offset"); err != nil {
		return TensorInfo{}, fmt.Errorf("%q: %w", name, err)
	}
	if !t.Type.known() {
		return TensorInfo{}, fmt.Errorf("tensor %q: %w: id %d", name, ErrUnsupportedType, typ)
	}
	if _, ok := elements(t.Dims); !ok {
		return TensorInfo{}, fmt.Errorf("%w: tensor %q: dims %v overflow", ErrInvalid, name, t.Dims)
	}
	if _, ok := tensorBytes(t.Type, t.Dims); !ok {
		return TensorInfo{}, fmt.Errorf("%w: tensor %q: dims %v are not whole %s blocks of %d or overflow",
			ErrInvalid, name, t.Dims, t.Type, t.Type.BlockSize())
	}
	return t, nil
}

package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sort"
	"unicode/utf8"

	"github.com/goprovider/provider/internal/mmapfile"
)

// Sentinel errors; returned errors wrap one of them with the tensor, key or
// offset involved, so callers test with errors.Is.
var (
	// ErrTruncated means the input ends before the header or data it
	// declares.
	ErrTruncated = errors.New("safetensors: truncated")
	// ErrHeader means the JSON header is malformed: too large, not UTF-8,
	// not a JSON object of the expected shape, or with duplicate keys.
	ErrHeader = errors.New("safetensors: invalid header")
	// ErrDType means a dtype this package does not know.
	ErrDType = errors.New("safetensors: unknown dtype")
	// ErrLayout means tensor shapes and data offsets disagree: a size that
	// does not match dtype and shape, a gap, an overlap, or data that does
	// not end at the end of the file.
	ErrLayout = errors.New("safetensors: invalid data layout")
	// ErrClosed means a File was used after Close.
	ErrClosed = errors.New("safetensors: file closed")
)

const (
	// maxHeader is the reference implementation's limit; it keeps a hostile
	// length from driving allocation.
	maxHeader   = 100_000_000
	metadataKey = "__metadata__"
)

// dtypeBits gives the element width of each dtype in bits. Sub-byte types
// exist, so sizes are computed in bits and must come to whole bytes.
var dtypeBits = map[string]uint64{
	"BOOL": 8, "U8": 8, "I8": 8,
	"F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
	"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
	"I16": 16, "U16": 16, "F16": 16, "BF16": 16,
	"I32": 32, "U32": 32, "F32": 32,
	"I64": 64, "U64": 64, "F64": 64, "C64": 64,
}

// TensorInfo describes one tensor of a File.
type TensorInfo struct {
	Name  string
	DType string
	Shape []int
	// Begin and End delimit the tensor's bytes, relative to the start of
	// the data section.
	Begin, End int64
}

// File is a parsed safetensors file. It is safe for concurrent reads; Close
// must not race with other methods.
type File struct {
	Metadata map[string]string // nil when the header has none
	Tensors  []TensorInfo      // sorted by name

	data      []byte // whole file, usually a read-only mapping
	dataStart int64  // 8 + header length
	index     map[string]int
	release   func() error
	closed    bool
}

// Open maps the file read-only and parses it.
func Open(path string) (*File, error) {
	data, release, err := mmapfile.Map(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: open %s: %w", path, err)
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

// Close releases the mapping. Metadata and tensor descriptions stay usable;
// data slices obtained earlier must not be touched afterwards.
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
		return fmt.Errorf("safetensors: unmap: %w", err)
	}
	return nil
}

// DataOffset is the absolute file offset of the data section; a tensor's
// bytes start at DataOffset()+Begin.
func (f *File) DataOffset() int64 { return f.dataStart }

// Tensor returns the description of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// Data returns the bytes of t, a sub-slice of the file that must not be
// modified or used after Close. The range is checked again because t may
// have been built or altered by the caller.
func (f *File) Data(t TensorInfo) ([]byte, error) {
	if f.closed {
		return nil, ErrClosed
	}
	n := int64(len(f.data)) - f.dataStart
	if t.Begin < 0 || t.End < t.Begin || t.End > n {
		return nil, fmt.Errorf("%w: tensor %q: range [%d, %d) outside data section of %d bytes", ErrLayout, t.Name, t.Begin, t.End, n)
	}
	b, e := f.dataStart+t.Begin, f.dataStart+t.End
	return f.data[b:e:e], nil
}

// Parse parses and validates a safetensors file held in memory. The File
// keeps data; tensor data slices alias it.
func Parse(data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("%w: %d bytes, need 8 for the header length", ErrTruncated, len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > maxHeader {
		return nil, fmt.Errorf("%w: header length %d exceeds %d", ErrHeader, n, maxHeader)
	}
	if n > uint64(len(data)-8) {
		return nil, fmt.Errorf("%w: header length %d, only %d bytes follow", ErrTruncated, n, len(data)-8)
	}
	header := data[8 : 8+n]
	f := &File{data: data, dataStart: 8 + int64(n)}
	if err := f.parseHeader(header); err != nil {
		return nil, err
	}
	if err := f.checkLayout(int64(len(data)) - f.dataStart); err != nil {
		return nil, err
	}
	sort.Slice(f.Tensors, func(i, j int) bool { return f.Tensors[i].Name < f.Tensors[j].Name })
	f.index = make(map[string]int, len(f.Tensors))
	for i, t := range f.Tensors {
		f.index[t.Name] = i
	}
	return f, nil
}

// parseHeader walks the JSON object token by token so duplicate keys are
// caught (a plain map decode would keep the last silently).
func (f *File) parseHeader(header []byte) error {
	if !utf8.Valid(header) {
		return fmt.Errorf("%w: not valid UTF-8", ErrHeader)
	}
	dec := json.NewDecoder(bytes.NewReader(header))
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		key, err := objectKey(dec, seen)
		if err != nil {
			return err
		}
		if key == metadataKey {
			if f.Metadata, err = stringMap(dec); err != nil {
				return fmt.Errorf("%s: %w", metadataKey, err)
			}
			continue
		}
		t, err := tensorEntry(dec)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", key, err)
		}
		t.Name = key
		f.Tensors = append(f.Tensors, t)
	}
	if err := expectDelim(dec, '}'); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: content after the header object", ErrHeader)
	}
	return nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrHeader, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("%w: got %v at byte %d, want %q", ErrHeader, tok, dec.InputOffset(), want)
	}
	return nil
}

// objectKey reads the next key of an object, rejecting repeats.
func objectKey(dec *json.Decoder, seen map[string]bool) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrHeader, err)
	}
	key, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("%w: object key %v is not a string", ErrHeader, tok)
	}
	if seen[key] {
		return "", fmt.Errorf("%w: duplicate key %q", ErrHeader, key)
	}
	seen[key] = true
	return key, nil
}

// stringMap reads null or an object whose values are all strings.
func stringMap(dec *json.Decoder) (map[string]string, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHeader, err)
	}
	if tok == nil {
		return nil, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%w: got %v, want an object of strings", ErrHeader, tok)
	}
	m := map[string]string{}
	seen := map[string]bool{}
	for dec.More() {
		key, err := objectKey(dec, seen)
		if err != nil {
			return nil, err
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrHeader, err)
		}
		s, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("%w: value of %q is %v, want a string", ErrHeader, key, tok)
		}
		m[key] = s
	}
	return m, expectDelim(dec, '}')
}

// tensorEntry reads {"dtype": ..., "shape": [...], "data_offsets": [b, e]},
// requiring each field exactly once and nothing else.
func tensorEntry(dec *json.Decoder) (TensorInfo, error) {
	if err := expectDelim(dec, '{'); err != nil {
		return TensorInfo{}, err
	}
	var (
		t       TensorInfo
		shape   []uint64
		offsets []uint64
		seen    = map[string]bool{}
	)
	for dec.More() {
		key, err := objectKey(dec, seen)
		if err != nil {
			return TensorInfo{}, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return TensorInfo{}, fmt.Errorf("%w: %s: %v", ErrHeader, key, err)
		}
		switch key {
		case "dtype":
			err = decodeNotNull(raw, &t.DType)
		case "shape":
			err = decodeNotNull(raw, &shape)
		case "data_offsets":
			err = decodeNotNull(raw, &offsets)
		default:
			return TensorInfo{}, fmt.Errorf("%w: unknown field %q", ErrHeader, key)
		}
		if err != nil {
			return TensorInfo{}, fmt.Errorf("%w: %s: %v", ErrHeader, key, err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return TensorInfo{}, err
	}
	for _, field := range []string{"dtype", "shape", "data_offsets"} {
		if !seen[field] {
			return TensorInfo{}, fmt.Errorf("%w: missing field %q", ErrHeader, field)
		}
	}
	if len(offsets) != 2 {
		return TensorInfo{}, fmt.Errorf("%w: data_offsets has %d elements, want 2", ErrHeader, len(offsets))
	}
	bitsPer, ok := dtypeBits[t.DType]
	if !ok {
		return TensorInfo{}, fmt.Errorf("%w: %q", ErrDType, t.DType)
	}
	// Offsets and sizes are compared as uint64 before narrowing, so an
	// absurd value is reported instead of wrapping.
	elems := uint64(1)
	for _, d := range shape {
		hi, lo := bits.Mul64(elems, d)
		if hi != 0 || d > math.MaxInt {
			return TensorInfo{}, fmt.Errorf("%w: shape %v overflows", ErrLayout, shape)
		}
		elems = lo
	}
	hi, nbits := bits.Mul64(elems, bitsPer)
	if hi != 0 || nbits%8 != 0 {
		return TensorInfo{}, fmt.Errorf("%w: shape %v of %s is not a whole number of bytes", ErrLayout, shape, t.DType)
	}
	b, e := offsets[0], offsets[1]
	if e < b || e > math.MaxInt64 {
		return TensorInfo{}, fmt.Errorf("%w: data_offsets [%d, %d]", ErrLayout, b, e)
	}
	if e-b != nbits/8 {
		return TensorInfo{}, fmt.Errorf("%w: %s %v needs %d bytes, data_offsets [%d, %d] hold %d",
			ErrLayout, t.DType, shape, nbits/8, b, e, e-b)
	}
	t.Begin, t.End = int64(b), int64(e)
	t.Shape = make([]int, len(shape))
	for i, d := range shape {
		t.Shape[i] = int(d)
	}
	return t, nil
}

// decodeNotNull unmarshals raw into v, rejecting JSON null, which would
// otherwise leave v silently at its zero value.
func decodeNotNull(raw json.RawMessage, v any) error {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return errors.New("null")
	}
	return json.Unmarshal(raw, v)
}

// checkLayout requires the tensors, in offset order, to tile [0, size)
// exactly.
func (f *File) checkLayout(size int64) error {
	order := make([]int, len(f.Tensors))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := f.Tensors[order[i]], f.Tensors[order[j]]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.End < b.End
	})
	var at int64
	for _, i := range order {
		t := f.Tensors[i]
		if t.Begin != at {
			what := "gap before"
			if t.Begin < at {
				what = "overlap at"
			}
			return fmt.Errorf("%w: tensor %q: %s offset %d (previous data ends at %d)", ErrLayout, t.Name, what, t.Begin, at)
		}
		at = t.End
	}
	if at > size {
		return fmt.Errorf("%w: data ends at %d, file holds %d bytes of data", ErrTruncated, at, size)
	}
	if at != size {
		return fmt.Errorf("%w: %d bytes after the last tensor", ErrLayout, size-at)
	}
	return nil
}

package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Tensor is one tensor to Write.
type Tensor struct {
	Name, DType string
	Shape       []int
	Data        []byte
}

// Write writes tensors and metadata in canonical form: an 8-byte
// little-endian header length; a compact JSON header with "__metadata__"
// first (when metadata is non-empty) and tensors sorted by name, padded
// with spaces to a multiple of 8 bytes; then the tensors' data in the same
// order. The output depends only on the set of tensors, not their order.
//
// Every tensor must have a unique name other than "__metadata__", a known
// dtype, non-negative dims, and exactly the bytes its dtype and shape call
// for.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	sorted := make([]Tensor, len(tensors))
	copy(sorted, tensors)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })

	var h bytes.Buffer
	h.WriteByte('{')
	first := true
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		writeString(&h, metadataKey)
		h.WriteString(":{")
		for i, k := range keys {
			if !utf8.ValidString(k) || !utf8.ValidString(metadata[k]) {
				return fmt.Errorf("%w: metadata %q is not valid UTF-8", ErrHeader, k)
			}
			if i > 0 {
				h.WriteByte(',')
			}
			writeString(&h, k)
			h.WriteByte(':')
			writeString(&h, metadata[k])
		}
		h.WriteByte('}')
		first = false
	}
	var offset uint64
	for i, t := range sorted {
		if err := checkTensor(t); err != nil {
			return err
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return fmt.Errorf("%w: duplicate tensor name %q", ErrHeader, t.Name)
		}
		if !first {
			h.WriteByte(',')
		}
		first = false
		writeString(&h, t.Name)
		h.WriteString(`:{"dtype":`)
		writeString(&h, t.DType)
		h.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				h.WriteByte(',')
			}
			h.WriteString(strconv.Itoa(d))
		}
		end := offset + uint64(len(t.Data))
		fmt.Fprintf(&h, `],"data_offsets":[%d,%d]}`, offset, end)
		offset = end
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	if h.Len() > maxHeader {
		return fmt.Errorf("%w: header of %d bytes exceeds %d", ErrHeader, h.Len(), maxHeader)
	}

	bw := bufio.NewWriter(w)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(h.Len()))
	bw.Write(n[:])
	bw.Write(h.Bytes())
	for _, t := range sorted {
		bw.Write(t.Data)
	}
	// bufio.Writer keeps the first error, so one check covers every write.
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	return nil
}

// checkTensor validates a tensor before it is written, so Write never emits
// a file that Parse would reject.
func checkTensor(t Tensor) error {
	if t.Name == metadataKey {
		return fmt.Errorf("%w: tensor name %q is reserved", ErrHeader, t.Name)
	}
	// JSON encoding would silently replace invalid bytes.
	if !utf8.ValidString(t.Name) {
		return fmt.Errorf("%w: tensor name %q is not valid UTF-8", ErrHeader, t.Name)
	}
	bitsPer, ok := dtypeBits[t.DType]
	if !ok {
		return fmt.Errorf("tensor %q: %w: %q", t.Name, ErrDType, t.DType)
	}
	elems := uint64(1)
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("%w: tensor %q: negative dim in shape %v", ErrLayout, t.Name, t.Shape)
		}
		hi, lo := bits.Mul64(elems, uint64(d))
		if hi != 0 {
			return fmt.Errorf("%w: tensor %q: shape %v overflows", ErrLayout, t.Name, t.Shape)
		}
		elems = lo
	}
	hi, nbits := bits.Mul64(elems, bitsPer)
	if hi != 0 || nbits%8 != 0 || nbits/8 != uint64(len(t.Data)) {
		return fmt.Errorf("%w: tensor %q: %s %v needs %d bits, have %d bytes", ErrLayout, t.Name, t.DType, t.Shape, nbits, len(t.Data))
	}
	return nil
}

// writeString writes s as a JSON string. HTML escaping is off because
// names and metadata (chat templates, for one) are not HTML, and the
// reference writer leaves '<', '>' and '&' as they are.
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode appends a newline
}

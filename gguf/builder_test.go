package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
)

// builder writes GGUF bytes for tests and remembers where named fields
// start, so mutation tests can corrupt exactly one field.
type builder struct {
	buf   bytes.Buffer
	marks map[string]int
}

func newBuilder() *builder { return &builder{marks: map[string]int{}} }

func (b *builder) mark(name string) { b.marks[name] = b.buf.Len() }
func (b *builder) u8(v uint8)       { b.buf.WriteByte(v) }
func (b *builder) u32(v uint32)     { _ = binary.Write(&b.buf, binary.LittleEndian, v) }
func (b *builder) u64(v uint64)     { _ = binary.Write(&b.buf, binary.LittleEndian, v) }
func (b *builder) str(s string)     { b.u64(uint64(len(s))); b.buf.WriteString(s) }
func (b *builder) pad(align int) {
	for b.buf.Len()%align != 0 {
		b.buf.WriteByte(0)
	}
}

func (b *builder) header(version uint32, tensors, kvs uint64) {
	b.mark("magic")
	b.u32(magic)
	b.mark("version")
	b.u32(version)
	b.mark("tensor count")
	b.u64(tensors)
	b.mark("kv count")
	b.u64(kvs)
}

func (b *builder) kvString(key, val string) {
	b.mark("key " + key)
	b.str(key)
	b.mark("type " + key)
	b.u32(uint32(TypeString))
	b.mark("value " + key)
	b.str(val)
}

func (b *builder) kvU32(key string, v uint32) {
	b.mark("key " + key)
	b.str(key)
	b.mark("type " + key)
	b.u32(uint32(TypeUint32))
	b.mark("value " + key)
	b.u32(v)
}

func (b *builder) tensor(name string, dims []uint64, typ TensorType, off uint64) {
	b.mark("tensor " + name)
	b.str(name)
	b.mark("ndims " + name)
	b.u32(uint32(len(dims)))
	for i, d := range dims {
		if i == 0 {
			b.mark("dim0 " + name)
		}
		b.u64(d)
	}
	b.mark("ttype " + name)
	b.u32(uint32(typ))
	b.mark("offset " + name)
	b.u64(off)
}

// sampleFile is a small valid GGUF v3 file with every metadata value type,
// nested arrays, and two tensors (F32 [4,2] and Q8_0 [32,2]).
func sampleFile() ([]byte, map[string]int) {
	b := newBuilder()
	b.header(3, 2, 17)
	b.kvString("general.architecture", "llama")
	b.kvU32("llama.block_count", 5)
	scalar := func(key string, t ValueType, write func()) {
		b.mark("key " + key)
		b.str(key)
		b.u32(uint32(t))
		b.mark("value " + key)
		write()
	}
	scalar("u8", TypeUint8, func() { b.u8(200) })
	scalar("i8", TypeInt8, func() { b.u8(0xff) })
	scalar("u16", TypeUint16, func() { _ = binary.Write(&b.buf, binary.LittleEndian, uint16(65535)) })
	scalar("i16", TypeInt16, func() { _ = binary.Write(&b.buf, binary.LittleEndian, int16(-300)) })
	scalar("i32", TypeInt32, func() { _ = binary.Write(&b.buf, binary.LittleEndian, int32(-7)) })
	scalar("f32", TypeFloat32, func() { b.u32(math.Float32bits(1e-5)) })
	scalar("bool", TypeBool, func() { b.u8(1) })
	scalar("u64", TypeUint64, func() { b.u64(math.MaxUint64) })
	scalar("i64", TypeInt64, func() { _ = binary.Write(&b.buf, binary.LittleEndian, int64(-1)) })
	scalar("f64", TypeFloat64, func() { b.u64(math.Float64bits(0.25)) })
	array := func(key string, et ValueType, n uint64, write func()) {
		scalar(key, TypeArray, func() {
			b.u32(uint32(et))
			b.mark("count " + key)
			b.u64(n)
			write()
		})
	}
	array("tokens", TypeString, 3, func() { b.str("a"); b.str(""); b.str("<s>") })
	array("scores", TypeFloat32, 2, func() { b.u32(math.Float32bits(-1.5)); b.u32(math.Float32bits(2)) })
	array("types", TypeInt32, 3, func() {
		for _, v := range []int32{1, -2, 3} {
			_ = binary.Write(&b.buf, binary.LittleEndian, v)
		}
	})
	array("big", TypeUint64, 1, func() { b.u64(1 << 40) })
	array("nested", TypeArray, 2, func() {
		b.u32(uint32(TypeUint8))
		b.u64(2)
		b.u8(1)
		b.u8(2)
		b.u32(uint32(TypeBool))
		b.u64(1)
		b.u8(0)
	})
	b.tensor("a", []uint64{4, 2}, F32, 0)
	b.tensor("q", []uint64{32, 2}, Q8_0, 32)
	b.mark("end of header")
	b.pad(32)
	b.mark("data")
	for i := 0; i < 8; i++ {
		b.u32(math.Float32bits(float32(i)))
	}
	for blk := 0; blk < 2; blk++ { // d = 1, q = blk*32+j-64
		_ = binary.Write(&b.buf, binary.LittleEndian, uint16(0x3c00))
		for j := 0; j < 32; j++ {
			b.u8(uint8(int8(blk*32 + j - 64)))
		}
	}
	return b.buf.Bytes(), b.marks
}

package gguf

import (
	"encoding/binary"
	"os"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse. It must never panic, and any
// File it accepts must honour the package invariants: every tensor's data is
// in range and every accessor is safe.
func FuzzParse(f *testing.F) {
	sample, marks := sampleFile()
	f.Add(sample)
	mutations := []func([]byte){
		func(d []byte) { binary.LittleEndian.PutUint64(d[marks["count tokens"]:], 1<<40) },
		func(d []byte) { binary.LittleEndian.PutUint64(d[marks["offset q"]:], 1<<20) },
		func(d []byte) { binary.LittleEndian.PutUint32(d[marks["ttype q"]:], 99) },
		func(d []byte) { binary.LittleEndian.PutUint32(d[marks["version"]:], 2) },
	}
	for _, m := range mutations {
		d := append([]byte(nil), sample...)
		m(d)
		f.Add(d)
	}
	if stories, err := os.ReadFile(storiesPath); err == nil {
		// The header (metadata and tensor table) plus a little data; the
		// full file would make every fuzz input a megabyte.
		if g, err := Parse(stories); err == nil {
			head := stories[:g.DataOffset()+256]
			f.Add(append([]byte(nil), head...))
			cut := append([]byte(nil), head[:len(head)/2]...)
			f.Add(cut)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Parse(data)
		if err != nil {
			return
		}
		for _, kv := range g.KV {
			v, ok := g.Lookup(kv.Key)
			if !ok || v.Type != kv.Value.Type {
				t.Fatalf("lookup %q disagrees with KV", kv.Key)
			}
			_ = v.String()
			_, _ = g.Int32s(kv.Key)
			_, _ = g.Uint(kv.Key)
		}
		for _, ti := range g.Tensors {
			d, err := g.TensorData(ti)
			if err != nil {
				t.Fatalf("accepted tensor %q has unreadable data: %v", ti.Name, err)
			}
			if uint64(len(d)) != ti.Bytes() {
				t.Fatalf("tensor %q: %d bytes, want %d", ti.Name, len(d), ti.Bytes())
			}
			if ti.Elements() <= 1<<16 {
				_, _ = Dequantize(ti.Type, d, int(ti.Elements()))
			}
		}
	})
}

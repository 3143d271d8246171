package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse. It must never panic, and any
// File it accepts must honour the package invariants: every tensor's data is
// readable with the size its dtype and shape imply, and rewriting the file
// reproduces a file that parses to the same tensors.
func FuzzParse(f *testing.F) {
	var buf bytes.Buffer
	if err := Write(&buf, sampleTensors(), map[string]string{"k": "v"}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	if ref, err := os.ReadFile(filepath.Join("testdata", "numpy.safetensors")); err == nil {
		f.Add(ref)
	}
	f.Add(file(`{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, 1))
	f.Add(file(`{"__metadata__":{"a":"b"},"x":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Parse(data)
		if err != nil {
			return
		}
		tensors := make([]Tensor, 0, len(g.Tensors))
		for _, ti := range g.Tensors {
			d, err := g.Data(ti)
			if err != nil {
				t.Fatalf("accepted tensor %q unreadable: %v", ti.Name, err)
			}
			tensors = append(tensors, Tensor{Name: ti.Name, DType: ti.DType, Shape: ti.Shape, Data: d})
		}
		var out bytes.Buffer
		if err := Write(&out, tensors, g.Metadata); err != nil {
			t.Fatalf("accepted file does not rewrite: %v", err)
		}
		h, err := Parse(out.Bytes())
		if err != nil {
			t.Fatalf("rewritten file does not parse: %v", err)
		}
		if len(h.Tensors) != len(g.Tensors) || len(h.Metadata) != len(g.Metadata) {
			t.Fatalf("rewrite changed counts")
		}
	})
}

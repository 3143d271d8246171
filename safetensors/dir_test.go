package safetensors

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func writeFile(t *testing.T, path string, tensors ...Tensor) {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, tensors, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func u8(name string, v byte) Tensor {
	return Tensor{Name: name, DType: "U8", Shape: []int{1}, Data: []byte{v}}
}

func TestOpenDir(t *testing.T) {
	type layout struct {
		files map[string][]Tensor
		index string // contents of model.safetensors.index.json, if any
	}
	tests := []struct {
		name  string
		setup layout
		want  map[string]byte // tensor -> its single byte
	}{
		{
			name: "single file wins over strays",
			setup: layout{files: map[string][]Tensor{
				"model.safetensors": {u8("a", 1), u8("b", 2)},
				"other.safetensors": {u8("c", 3)},
			}},
			want: map[string]byte{"a": 1, "b": 2},
		},
		{
			name: "index of shards",
			setup: layout{
				files: map[string][]Tensor{
					"model-00001-of-00002.safetensors": {u8("a", 1), u8("b", 2)},
					"model-00002-of-00002.safetensors": {u8("c", 3)},
					"model.safetensors":                {u8("ignored", 9)},
				},
				index: `{"metadata":{"total_size":3},"weight_map":{
					"a":"model-00001-of-00002.safetensors",
					"b":"model-00001-of-00002.safetensors",
					"c":"model-00002-of-00002.safetensors"}}`,
			},
			want: map[string]byte{"a": 1, "b": 2, "c": 3},
		},
		{
			name: "all files",
			setup: layout{files: map[string][]Tensor{
				"x.safetensors": {u8("a", 1)},
				"y.safetensors": {u8("b", 2), u8("c", 3)},
			}},
			want: map[string]byte{"a": 1, "b": 2, "c": 3},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, ts := range tc.setup.files {
				writeFile(t, filepath.Join(dir, name), ts...)
			}
			if tc.setup.index != "" {
				os.WriteFile(filepath.Join(dir, indexFile), []byte(tc.setup.index), 0o644)
			}
			d, err := OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			got := d.Names()
			if len(got) != len(tc.want) {
				t.Fatalf("names %v, want keys of %v", got, tc.want)
			}
			for i := 1; i < len(got); i++ {
				if got[i-1] >= got[i] {
					t.Errorf("names not sorted: %v", got)
				}
			}
			for name, v := range tc.want {
				f, ti, ok := d.Lookup(name)
				if !ok {
					t.Fatalf("missing %q", name)
				}
				data, err := f.Data(ti)
				if err != nil || !reflect.DeepEqual(data, []byte{v}) {
					t.Errorf("%q = %v (%v), want %d", name, data, err, v)
				}
			}
			if _, _, ok := d.Lookup("ignored"); ok {
				t.Error("index mode exposed a tensor outside the weight map")
			}
		})
	}
}

func TestOpenDirErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string][]Tensor
		raw   map[string]string
		want  error
	}{
		{"empty directory", nil, nil, ErrNotFound},
		{"duplicate across files", map[string][]Tensor{
			"x.safetensors": {u8("a", 1)},
			"y.safetensors": {u8("a", 2)},
		}, nil, ErrHeader},
		{"index names a missing tensor", map[string][]Tensor{"s.safetensors": {u8("a", 1)}},
			map[string]string{indexFile: `{"weight_map":{"a":"s.safetensors","zz":"s.safetensors"}}`}, ErrNotFound},
		{"index names a missing shard", nil,
			map[string]string{indexFile: `{"weight_map":{"a":"gone.safetensors"}}`}, os.ErrNotExist},
		{"index escapes the directory", nil,
			map[string]string{indexFile: `{"weight_map":{"a":"../x.safetensors"}}`}, ErrHeader},
		{"index with absolute shard", nil,
			map[string]string{indexFile: `{"weight_map":{"a":"/etc/x.safetensors"}}`}, ErrHeader},
		{"index in a subdirectory", nil,
			map[string]string{indexFile: `{"weight_map":{"a":"sub/x.safetensors"}}`}, ErrHeader},
		{"index not json", nil, map[string]string{indexFile: `{`}, ErrHeader},
		{"index without weights", nil, map[string]string{indexFile: `{"weight_map":{}}`}, ErrNotFound},
		{"corrupt file", nil, map[string]string{"model.safetensors": "garbage!"}, ErrHeader},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, ts := range tc.files {
				writeFile(t, filepath.Join(dir, name), ts...)
			}
			for name, body := range tc.raw {
				os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
			}
			d, err := OpenDir(dir)
			if !errors.Is(err, tc.want) {
				if d != nil {
					d.Close()
				}
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

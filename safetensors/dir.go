package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// ErrNotFound means a directory holds no safetensors weights, or an index
// names a tensor its shard does not contain.
var ErrNotFound = errors.New("safetensors: not found")

const (
	singleFile = "model.safetensors"
	indexFile  = "model.safetensors.index.json"
)

// Dir is the union of a model directory's safetensors files. Every tensor
// name resolves to exactly one file.
type Dir struct {
	Files []*File

	owner map[string]int // tensor name -> index into Files
	names []string       // sorted
}

// OpenDir opens the weights of a model directory, choosing in order:
// model.safetensors.index.json (its "weight_map" names the shard holding
// each tensor), model.safetensors, or every *.safetensors file.
func OpenDir(dir string) (*Dir, error) {
	d := &Dir{owner: map[string]int{}}
	var err error
	switch {
	case exists(filepath.Join(dir, indexFile)):
		err = d.openIndex(dir)
	case exists(filepath.Join(dir, singleFile)):
		err = d.openFiles(dir, []string{singleFile})
	default:
		var matches []string
		matches, err = filepath.Glob(filepath.Join(dir, "*.safetensors"))
		if err == nil && len(matches) == 0 {
			err = fmt.Errorf("%w: no *.safetensors in %s", ErrNotFound, dir)
		}
		for i, m := range matches {
			matches[i] = filepath.Base(m)
		}
		if err == nil {
			err = d.openFiles(dir, matches) // Glob sorts, so file order is stable
		}
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	for name := range d.owner {
		d.names = append(d.names, name)
	}
	sort.Strings(d.names)
	return d, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// openFiles opens each file and claims all its tensors, rejecting a name
// that two files both hold.
func (d *Dir) openFiles(dir string, files []string) error {
	for _, name := range files {
		f, err := Open(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		d.Files = append(d.Files, f)
		for _, t := range f.Tensors {
			if prev, dup := d.owner[t.Name]; dup {
				return fmt.Errorf("%w: tensor %q is in both %s and %s", ErrHeader, t.Name, files[prev], name)
			}
			d.owner[t.Name] = len(d.Files) - 1
		}
	}
	return nil
}

// openIndex opens the shards an index names. Only tensors in the weight map
// are exposed, each from the shard the map assigns it.
func (d *Dir) openIndex(dir string) error {
	path := filepath.Join(dir, indexFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrHeader, path, err)
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("%w: %s has no weight_map entries", ErrNotFound, path)
	}
	shards := map[string]int{}
	var order []string
	for _, shard := range idx.WeightMap {
		// A shard must be a file inside dir; anything else could read
		// outside the model directory.
		if !filepath.IsLocal(shard) || filepath.Base(shard) != shard {
			return fmt.Errorf("%w: %s: shard %q is not a file name in the model directory", ErrHeader, path, shard)
		}
		if _, ok := shards[shard]; !ok {
			shards[shard] = 0
			order = append(order, shard)
		}
	}
	sort.Strings(order)
	for i, shard := range order {
		f, err := Open(filepath.Join(dir, shard))
		if err != nil {
			return err
		}
		d.Files = append(d.Files, f)
		shards[shard] = i
	}
	for name, shard := range idx.WeightMap {
		i := shards[shard]
		if _, ok := d.Files[i].Tensor(name); !ok {
			return fmt.Errorf("%w: %s maps %q to %s, which does not contain it", ErrNotFound, indexFile, name, shard)
		}
		d.owner[name] = i
	}
	return nil
}

// Lookup returns the file holding the named tensor and its description.
func (d *Dir) Lookup(name string) (*File, TensorInfo, bool) {
	i, ok := d.owner[name]
	if !ok {
		return nil, TensorInfo{}, false
	}
	f := d.Files[i]
	t, _ := f.Tensor(name)
	return f, t, true
}

// Names lists every tensor name, sorted.
func (d *Dir) Names() []string { return slices.Clone(d.names) }

// Close closes every file, reporting all failures.
func (d *Dir) Close() error {
	var errs []error
	for _, f := range d.Files {
		if err := f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

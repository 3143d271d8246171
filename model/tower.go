package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/safetensors"
)

// TowerTensors uploads the tensors of a vision tower from a checkpoint's
// safetensors: each found under the first of its name prefixes the
// checkpoint has (towers are stored under different prefixes by different
// converters), refused when quantized or not of its expected shape,
// converted to a dtype and optionally transformed on the device. The
// arrays it uploads belong to it until Free. Call on the MLX thread.
type TowerTensors struct {
	dir   *safetensors.Dir
	s     mlx.Stream
	owned []*mlx.Array
}

// NewTowerTensors reads tensors from dir onto stream s.
func NewTowerTensors(dir *safetensors.Dir, s mlx.Stream) *TowerTensors {
	return &TowerTensors{dir: dir, s: s}
}

// TowerTensor names one tensor: where the upload goes, the prefixes it may
// be stored under, its name after the prefix, its dtype on the device and
// the shape it must have.
type TowerTensor struct {
	Dst      *mlx.Array
	Prefixes []string
	Name     string
	DType    mlx.Dtype
	Shape    []int
}

var towerDTypes = map[string]mlx.Dtype{"F32": mlx.Float32, "F16": mlx.Float16, "BF16": mlx.BFloat16}

// Lookup finds a tensor under the first prefix that has it, refusing a
// quantized one (ErrUnsupportedType) or none (ErrMissingTensor).
func (t *TowerTensors) Lookup(prefixes []string, name string) (*safetensors.File, safetensors.TensorInfo, error) {
	for _, p := range prefixes {
		if file, info, ok := t.dir.Lookup(p + name); ok {
			if _, _, q := t.dir.Lookup(strings.TrimSuffix(p+name, ".weight") + ".scales"); q {
				return nil, info, fmt.Errorf("%w: quantized %s", ErrUnsupportedType, p+name)
			}
			return file, info, nil
		}
	}
	return nil, safetensors.TensorInfo{}, fmt.Errorf("%w: %s%s", ErrMissingTensor, prefixes[0], name)
}

// Get uploads x, transformed by fn (nil: as it is) after the dtype
// conversion.
func (t *TowerTensors) Get(x TowerTensor, fn func(*mlx.Frame, mlx.Array) mlx.Array) error {
	file, info, err := t.Lookup(x.Prefixes, x.Name)
	if err != nil {
		return err
	}
	src, ok := towerDTypes[info.DType]
	if !ok {
		return fmt.Errorf("%w: %s is %s", ErrUnsupportedType, info.Name, info.DType)
	}
	if !slices.Equal(info.Shape, x.Shape) {
		return fmt.Errorf("%w: %s is %v, want %v", ErrBadConfig, info.Name, info.Shape, x.Shape)
	}
	data, err := file.Data(info)
	if err != nil {
		return err
	}
	a, err := mlx.FromBytes(data, src, info.Shape...)
	if err != nil {
		return err
	}
	defer a.Free()
	f := mlx.NewFrame(t.s)
	defer f.Free()
	out := f.AsType(a, x.DType)
	if fn != nil {
		out = fn(f, out)
	}
	out = f.Contiguous(out)
	if err := f.Eval(out); err != nil {
		return fmt.Errorf("%s: %w", info.Name, err)
	}
	*x.Dst = f.Keep(out)
	t.owned = append(t.owned, x.Dst)
	return nil
}

// GetAll uploads every tensor as it is, stopping at the first error.
func (t *TowerTensors) GetAll(xs []TowerTensor) error {
	for _, x := range xs {
		if err := t.Get(x, nil); err != nil {
			return err
		}
	}
	return nil
}

// Free releases every array uploaded so far.
func (t *TowerTensors) Free() {
	for _, a := range t.owned {
		a.Free()
	}
	t.owned = nil
}

package model

import (
	"fmt"
	"os"
	"slices"

	"github.com/goprovider/provider/mlx"
)

// fuseGroup is a set of a layer's modules that read the same input, and
// the name of the one module their rows make.
type fuseGroup struct {
	into  string
	parts []string
}

// fuseSuffixes are the tensors of a module that join: its matrix always;
// the scales and biases of a matrix a loader keeps packed beside it
// (GPTOSSFacts.Packed) and the module's bias vector, where every part has
// them.
var fuseSuffixes = []string{".weight", ".scales", ".biases", ".bias"}

// fusedGroups are, per architecture, the groups FuseProjections joins (the
// family's code takes the fused module where the Weights hold it).
var fusedGroups = map[string][]fuseGroup{
	"llama": {
		{"self_attn.qkv_proj", []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
		{"mlp.gate_up_proj", []string{"mlp.gate_proj", "mlp.up_proj"}},
	},
	"gpt_oss": {
		{"self_attn.qkv_proj", []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
	},
}

// fuseOnUpload reports whether an upload to s fuses projections: on an
// accelerator, where one product of a wider matrix costs less than several
// (one kernel, more of the device's memory bandwidth), unless
// PROVIDER_GPU_FUSE=0. The CPU keeps the separate weights its reference
// suites were made with (joined, SmolLM2's float decode step of 1 and 8
// rows measured no faster there).
func fuseOnUpload(s mlx.Stream) bool {
	return !s.IsCPU() && os.Getenv("PROVIDER_GPU_FUSE") != "0"
}

// fuseFor fuses c's projections where an upload to s fuses them
// (fuseOnUpload): what a checkpoint's upload and a dummy's build share.
func (w *Weights) fuseFor(s mlx.Stream, c Config) error {
	if !fuseOnUpload(s) {
		return nil
	}
	_, err := w.FuseProjections(s, c.Arch, c.Layers)
	return err
}

// FuseProjections replaces, in each of the first layers layers of an
// architecture that has fused groups, each group's modules by one module
// whose rows are theirs in order, where the parts can be joined: the same
// input length, quantization and type, the same tensors (fuseSuffixes),
// and none of them sharded across ranks by its input or computed through
// a reference kernel. The joined matrix's Weight.Parts holds each part's
// rows. The parts' arrays are freed. It returns how many groups it fused.
// It must run on the MLX thread.
func (w *Weights) FuseProjections(s mlx.Stream, arch string, layers int) (int, error) {
	fused := 0
	for _, g := range fusedGroups[arch] {
		for i := range layers {
			p := fmt.Sprintf("model.layers.%d.", i)
			joins, ok := w.joinable(p, g)
			if !ok {
				continue
			}
			made := make([]*Weight, len(joins))
			var err error
			for j, jn := range joins {
				if made[j], err = fuse(s, jn.parts); err != nil {
					for _, m := range made[:j] {
						m.Free()
					}
					return fused, fmt.Errorf("model: fuse %s%s%s: %w", p, g.into, jn.suffix, err)
				}
			}
			// The joined matrix (always the first) names its parts' rows.
			for _, x := range joins[0].parts {
				made[0].Parts = append(made[0].Parts, x.W.Shape()[0])
			}
			for j, jn := range joins {
				for _, n := range g.parts {
					w.byName[p+n+jn.suffix].Free()
					delete(w.byName, p+n+jn.suffix)
				}
				w.byName[p+g.into+jn.suffix] = made[j]
			}
			fused++
		}
	}
	return fused, nil
}

// join is the tensors of a group's parts that end in suffix, in part
// order.
type join struct {
	suffix string
	parts  []*Weight
}

// joinable reports whether g's modules in layer p join, and which of
// their tensors: each suffix that every part has (the matrix at least,
// first), none that only some have, each fusable.
func (w *Weights) joinable(p string, g fuseGroup) (joins []join, ok bool) {
	for _, suffix := range fuseSuffixes {
		parts := make([]*Weight, len(g.parts))
		held := 0
		for j, n := range g.parts {
			if parts[j] = w.Get(p + n + suffix); parts[j] != nil {
				held++
			}
		}
		switch {
		case held == 0 && suffix != ".weight":
			continue
		case held < len(parts) || !fusable(parts):
			return nil, false
		}
		joins = append(joins, join{suffix, parts})
	}
	return joins, true
}

// fusable reports whether parts can be joined by their rows: matrices of
// the same columns, or vectors.
func fusable(parts []*Weight) bool {
	first := parts[0]
	for _, x := range parts {
		if x == nil || x.Ref || x.ActBlock > 0 || x.Int8 || x.Packed || x.Reduce.Valid() || x.Gather.Valid() ||
			len(x.Parts) > 0 || x.W.Ndim() != first.W.Ndim() || x.Quantized() != first.Quantized() || x.Bits != first.Bits ||
			x.GroupSize != first.GroupSize || x.Mode != first.Mode || x.W.Dtype() != first.W.Dtype() ||
			x.Biases.Valid() != first.Biases.Valid() {
			return false
		}
		switch x.W.Ndim() {
		case 1:
			if x.Quantized() {
				return false
			}
		case 2:
			if x.W.Shape()[1] != first.W.Shape()[1] {
				return false
			}
		default:
			return false
		}
		if x.Quantized() && (x.Scales.Dtype() != first.Scales.Dtype() || x.Scales.Ndim() != 2) {
			return false
		}
	}
	return true
}

// fuse concatenates parts' arrays along their rows: W, and Scales and
// Biases where the parts have them (fusable made sure all parts agree).
func fuse(s mlx.Stream, parts []*Weight) (*Weight, error) {
	f := mlx.NewFrame(s)
	defer f.Free()
	first := parts[0]
	out := &Weight{Bits: first.Bits, GroupSize: first.GroupSize, Mode: first.Mode}
	var joined []mlx.Array
	var into []*mlx.Array
	for _, field := range []func(*Weight) *mlx.Array{
		func(x *Weight) *mlx.Array { return &x.W },
		func(x *Weight) *mlx.Array { return &x.Scales },
		func(x *Weight) *mlx.Array { return &x.Biases },
	} {
		if !field(first).Valid() {
			continue
		}
		arrays := make([]mlx.Array, len(parts))
		for i, x := range parts {
			arrays[i] = *field(x)
		}
		joined = append(joined, f.Concatenate(0, arrays...))
		into = append(into, field(out))
	}
	if err := f.Eval(joined...); err != nil {
		return nil, err
	}
	for i, a := range joined {
		*into[i] = f.Keep(a)
	}
	return out, nil
}

// LinearParts is Linear of a fused weight, split along the last axis into
// its parts' outputs (views of the one product); one per Weight.Parts.
func (w *Weight) LinearParts(f *mlx.Frame, x mlx.Array) []mlx.Array {
	y := w.Linear(f, x)
	shape := y.Shape()
	last := len(shape) - 1
	out := make([]mlx.Array, len(w.Parts))
	at := 0
	for i, n := range w.Parts {
		start := make([]int, len(shape))
		stop := slices.Clone(shape)
		start[last], stop[last] = at, at+n
		out[i] = f.Slice(y, start, stop)
		at += n
	}
	return out
}

package model

import (
	"fmt"
	"os"
	"strings"

	"github.com/goprovider/provider/mlx"
)

// paddedStacks are, per architecture, the expert stacks PadExpertOutputs
// may pad (names under model.layers.N.).
var paddedStacks = map[string][]string{
	"gpt_oss": {
		"mlp.experts.down_proj.weight",
		"mlp.experts.gate_up_proj.weight",
		"mlp.experts.gate_proj.weight",
		"mlp.experts.up_proj.weight",
	},
}

// expertPadding is the multiple an upload to s pads packed expert stacks'
// outputs to, 0 for none: PROVIDER_GPU_PAD_EXPERTS (outputs, e.g. 128) on
// an accelerator, where MLX's tiled gather kernel for sorted rows takes
// only stacks whose outputs fill its tiles of 128 (gpt-oss-20b's down
// projection has 2,880); the CPU never pads.
func expertPadding(s mlx.Stream) (int, error) {
	v := os.Getenv("PROVIDER_GPU_PAD_EXPERTS")
	if s.IsCPU() || v == "" || v == "0" {
		return 0, nil
	}
	var n int
	if _, err := fmt.Sscanf(v, "%d", &n); err != nil || n < 2 || n > 1024 {
		return 0, fmt.Errorf("model: PROVIDER_GPU_PAD_EXPERTS=%q: want outputs from 2 to 1024", v)
	}
	return n, nil
}

// PadExpertOutputs gives, in each of the first layers layers of an
// architecture with expert stacks, every packed stack ([experts, out,
// packed in]) whose out is not a multiple of to zero rows up to the next
// multiple, in its weights, scales and biases (in the stack's Weight, or
// in the tensors of their own a packed checkpoint's loader keeps them in:
// NAME.scales, NAME.biases beside NAME.weight); Weight.Outputs keeps out,
// and the family slices the product back to it. Stacks split across ranks
// are left as they are. It returns how many stacks it padded; it must run
// on the MLX thread.
func (w *Weights) PadExpertOutputs(s mlx.Stream, arch string, layers, to int) (int, error) {
	if to <= 1 {
		return 0, nil
	}
	padded := 0
	for _, n := range paddedStacks[arch] {
		for i := range layers {
			name := fmt.Sprintf("model.layers.%d.%s", i, n)
			x := w.Get(name)
			if x == nil || x.Packed || x.Int8 || x.Reduce.Valid() || x.Gather.Valid() || x.Outputs > 0 ||
				x.W.Ndim() != 3 || x.W.Dim(1)%to == 0 {
				continue
			}
			arrays := []*mlx.Array{&x.W, &x.Scales, &x.Biases}
			if !x.Quantized() {
				base := strings.TrimSuffix(name, ".weight")
				sc := w.Get(base + ".scales")
				if sc == nil {
					continue // a dense stack: MLX's float gather kernels take any width
				}
				arrays = []*mlx.Array{&x.W, &sc.W}
				if bi := w.Get(base + ".biases"); bi != nil {
					arrays = append(arrays, &bi.W)
				}
			}
			out := x.W.Dim(1)
			if err := padRows(s, out+(to-out%to), arrays); err != nil {
				return padded, fmt.Errorf("model: pad %s: %w", name, err)
			}
			x.Outputs = out
			padded++
		}
	}
	return padded, nil
}

// padRows pads the valid arrays ([experts, rows, columns]) along axis 1
// with zeros to rows rows, replacing (and freeing) them.
func padRows(s mlx.Stream, rows int, arrays []*mlx.Array) error {
	f := mlx.NewFrame(s)
	defer f.Free()
	var fields []*mlx.Array
	var grown []mlx.Array
	for _, a := range arrays {
		if !a.Valid() {
			continue
		}
		sh := a.Shape()
		if len(sh) != 3 || sh[1] > rows {
			return fmt.Errorf("shape %v: want [experts, at most %d rows, columns]", sh, rows)
		}
		fields = append(fields, a)
		grown = append(grown, f.Concatenate(1, *a, f.Zeros(a.Dtype(), sh[0], rows-sh[1], sh[2])))
	}
	if err := f.Eval(grown...); err != nil {
		return err
	}
	for i, a := range fields {
		a.Free()
		*a = f.Keep(grown[i])
	}
	return nil
}

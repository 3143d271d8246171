package gemma4

import (
	"fmt"
	"math"

	"github.com/goprovider/provider/mlx"
)

// experts is the mixture-of-experts branch for the residual stream x
// ([1, N, hidden]: the step's tokens, every row's flattened), before its
// output norm.
//
// The router reads x itself (not the feed-forward norm's output): RMSNorm
// with weight scale/sqrt(hidden), projected to one score per expert. Each
// token takes the TopK highest scores, softmaxed among themselves and
// multiplied by the chosen experts' learned scales. The experts read x
// through their own pre-norm.
//
// The choices are read back to the host, and each chosen expert runs once
// over the tokens that chose it (a GELU-gated MLP sliced from the stacked
// expert weights); the outputs, produced expert by expert, are put back in
// (token, choice) order by one gather and summed with the choice weights.
// This computes what the stacked-weights formulation computes without
// materializing a weight copy per token, at the price of one host sync per
// layer.
//
// A rank of a tensor-parallel split holds a slice of every expert's width
// (model.Sharding): its down products are partial, and their combination
// is summed over the ranks once, before the branch's norm.
func (m *Model) experts(f *mlx.Frame, l *layer, x mlx.Array) mlx.Array {
	c, act := m.cfg, m.cfg.ActDType
	N, H := x.Dim(1), c.Hidden
	E, K, W := m.g.Experts, m.g.TopK, m.g.ExpertWidth
	flat := f.Reshape(x, N, H)

	norm := f.Multiply(l.routerScale.W, scalar(f, 1/math.Sqrt(float64(H)), l.routerScale.W.Dtype()))
	scores := l.router.Linear(f, f.RMSNorm(flat, norm, c.NormEps))
	choice := f.Slice(f.Argpartition(scores, E-K, -1), []int{0, E - K}, []int{N, E})
	weights := f.Softmax(f.TakeAlongAxis(scores, choice, -1), -1, true)
	weights = f.Multiply(weights, f.Take(l.expertScale.W, choice, 0))

	in := f.RMSNorm(flat, l.preFF2Norm.W, c.NormEps)
	chosen := f.ToInt32s(choice)
	if f.Err() != nil {
		return mlx.Array{}
	}
	// Bucket the N*K (token, choice) slots by expert, keeping slot order.
	byExpert := make([][]int32, E)
	for slot, e := range chosen {
		if e < 0 || int(e) >= E {
			f.Fail(fmt.Errorf("gemma4: router chose expert %d of %d", e, E))
			return mlx.Array{}
		}
		byExpert[e] = append(byExpert[e], int32(slot))
	}
	var outs []mlx.Array
	place := make([]int32, N*K) // slot -> row of the concatenated outputs
	row := int32(0)
	for e, slots := range byExpert {
		if len(slots) == 0 {
			continue
		}
		toks := make([]int32, len(slots))
		for i, s := range slots {
			toks[i] = s / int32(K)
			place[s] = row
			row++
		}
		xe := f.Take(in, f.Int32s(toks, len(toks)), 0)
		gu := f.Reshape(f.Slice(l.gateUp.W, []int{e, 0, 0}, []int{e + 1, 2 * W, H}), 2*W, H)
		h := f.MatMul(xe, f.Transpose(gu, 1, 0))
		n := len(toks)
		g := f.Multiply(gelu(f, f.Slice(h, []int{0, 0}, []int{n, W})), f.Slice(h, []int{0, W}, []int{n, 2 * W}))
		down := f.Reshape(f.Slice(l.expertDown.W, []int{e, 0, 0}, []int{e + 1, H, W}), H, W)
		outs = append(outs, f.MatMul(g, f.Transpose(down, 1, 0)))
	}
	y := outs[0]
	if len(outs) > 1 {
		y = f.Concatenate(0, outs...)
	}
	y = f.Reshape(f.Take(y, f.Int32s(place, N*K), 0), N, K, H)
	y = f.Sum(f.Multiply(y, f.ExpandDims(f.AsType(weights, act), -1)), 1, false)
	y = f.AllSum(y, l.expertDown.Reduce)
	return f.Reshape(y, 1, N, H)
}

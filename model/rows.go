package model

import (
	"fmt"

	"github.com/goprovider/provider/mlx"
)

// ForwardCaches is a family's Forward: it checks that there is one cache
// per row, each of the family's type C and, by mine, of this network, then
// runs the step with ForwardRows.
func ForwardCaches[C Cache](f *mlx.Frame, family string, vocab int, tokens [][]int32, generic []Cache, mine func(C) bool, run func(tokens [][]int32, caches []C) mlx.Array) mlx.Array {
	if len(tokens) != len(generic) || len(tokens) == 0 {
		f.Fail(fmt.Errorf("%s: %d token rows for %d caches", family, len(tokens), len(generic)))
		return mlx.Array{}
	}
	caches := make([]C, len(generic))
	for i, g := range generic {
		c, ok := g.(C)
		if !ok || (mine != nil && !mine(c)) {
			f.Fail(fmt.Errorf("%s: row %d: cache of type %T is not this model's", family, i, g))
			return mlx.Array{}
		}
		caches[i] = c
	}
	return ForwardRows(f, family, vocab, tokens, caches, run)
}

// ForwardRows runs one step over rows that add different numbers of
// tokens, for a family whose run computes rows that all add the same number
// of tokens and returns their last-position logits, [rows, vocab]. Rows
// adding one token (decode) share one batched run; each longer row
// (prefill) runs alone. The result is in the order of tokens.
func ForwardRows[C any](f *mlx.Frame, family string, vocab int, tokens [][]int32, caches []C, run func(tokens [][]int32, caches []C) mlx.Array) mlx.Array {
	var decode []int
	out := make([]mlx.Array, len(tokens))
	for i, t := range tokens {
		switch {
		case len(t) == 0:
			f.Fail(fmt.Errorf("%s: row %d has no tokens", family, i))
			return mlx.Array{}
		case len(t) == 1:
			decode = append(decode, i)
		default:
			out[i] = run([][]int32{t}, []C{caches[i]})
		}
	}
	if len(decode) > 0 {
		rows := make([][]int32, len(decode))
		cs := make([]C, len(decode))
		for j, i := range decode {
			rows[j], cs[j] = tokens[i], caches[i]
		}
		logits := run(rows, cs)
		if len(decode) == len(tokens) {
			return logits
		}
		for j, i := range decode {
			out[i] = f.Slice(logits, []int{j, 0}, []int{j + 1, vocab})
		}
	}
	if len(out) == 1 {
		return out[0]
	}
	return f.Concatenate(0, out...)
}

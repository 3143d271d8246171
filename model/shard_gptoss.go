package model

import (
	"fmt"
	"slices"
)

// planGPTOSS is gpt-oss's split (see Sharding). Packed matrices are plain
// tensors here (their scales and biases beside them, GPTOSSFacts.Packed),
// so every part names the words, scales and biases of a matrix alike.
//
//   - Attention: each rank keeps its heads' rows of the query, key and
//     value projections with their biases, and its heads' sinks; the
//     output projection keeps the matching input columns and ends in one
//     all-sum, its bias added once, after the sum (the family adds an
//     all-summed projection's bias after its Linear).
//   - Experts: each expert's width is divided as a dense MLP's would be
//     (gate and up rows, down input columns), the router replicated; the
//     family sums the expert combination of the partial down products
//     over the ranks once and then adds the chosen experts' down biases.
//     When the width does not divide into whole quantization groups of
//     the packed down projection on every rank (a width of one group), the
//     experts are divided whole instead (GPTOSSFacts.ExpertRange): a rank
//     combines only the choices of its own experts, biases included, and
//     the combinations are summed over the ranks.
func planGPTOSS(s *Sharding, c Config, tensors map[string]*Tensor, rank, size int) (*Sharding, Config, error) {
	g := c.GPTOSS
	if g == nil {
		return nil, c, fmt.Errorf("%w: gpt_oss config without its gpt-oss facts", ErrShard)
	}
	for _, k := range c.Kinds {
		if k.KVHeads != c.KVHeads || k.HeadDim != c.HeadDim || k.SharedFrom >= 0 {
			return nil, c, fmt.Errorf("%w: gpt_oss layers of different KV shapes", ErrShard)
		}
	}
	qa, qb, ka, kb, err := HeadRange(c.Heads, c.KVHeads, rank, size)
	if err != nil {
		return nil, c, err
	}
	s.Heads, s.KVHeads = [2]int{qa, qb}, [2]int{ka, kb}
	// rows keeps [lo, hi) of a matrix's (or expert stack's) output rows,
	// with its bias.
	rows := func(module string, lo, hi int) {
		for _, x := range []string{".weight", ".scales", ".biases"} {
			s.Parts[module+x] = Part{Axis: -2, Lo: lo, Hi: hi}
		}
		s.Parts[module+".bias"] = Part{Axis: -1, Lo: lo, Hi: hi}
	}
	// cols keeps [lo, hi) of a matrix's input columns (not its bias, which
	// belongs to the summed output); a packed one only in whole groups.
	cols := func(module string, lo, hi int) error {
		l, packed := g.Packed[module+".weight"]
		if !packed {
			s.Parts[module+".weight"] = Part{Axis: -1, Lo: lo, Hi: hi}
			return nil
		}
		if lo%l.GroupSize != 0 || hi%l.GroupSize != 0 || lo*l.Bits%32 != 0 || hi*l.Bits%32 != 0 {
			return fmt.Errorf("%w: %s columns [%d, %d) cut quantization groups of %d", ErrShard, module, lo, hi, l.GroupSize)
		}
		s.Parts[module+".weight"] = Part{Axis: -1, Lo: lo * l.Bits / 32, Hi: hi * l.Bits / 32}
		for _, x := range []string{".scales", ".biases"} {
			s.Parts[module+x] = Part{Axis: -1, Lo: lo / l.GroupSize, Hi: hi / l.GroupSize}
		}
		return nil
	}
	hd := c.HeadDim
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.self_attn.", i)
		rows(p+"q_proj", qa*hd, qb*hd)
		rows(p+"k_proj", ka*hd, kb*hd)
		rows(p+"v_proj", ka*hd, kb*hd)
		if err := cols(p+"o_proj", qa*hd, qb*hd); err != nil {
			return nil, c, err
		}
		s.Reduce[p+"o_proj.weight"] = true
		s.Parts[p+"sinks"] = Part{Axis: 0, Lo: qa, Hi: qb}
	}
	local := c
	facts := *g
	local.GPTOSS = &facts
	local.Heads, local.KVHeads = qb-qa, kb-ka
	local.Kinds = slices.Clone(c.Kinds)
	for i := range local.Kinds {
		local.Kinds[i].KVHeads = kb - ka
	}
	s.FFN = [2]int{0, c.Intermediate}
	has := func(n string) bool { _, ok := tensors[n]; return ok }
	if fa, fb, ok := gptossWidth(c, has, rank, size); ok {
		s.FFN = [2]int{fa, fb}
		local.Intermediate = fb - fa
		for i := range c.Layers {
			p := fmt.Sprintf("model.layers.%d.mlp.experts.", i)
			switch GPTOSSExpertLayout(has, i) {
			case gptossSplit:
				rows(p+"gate_proj", fa, fb)
				rows(p+"up_proj", fa, fb)
				_ = cols(p+"down_proj", fa, fb) // checked by gptossWidth
				s.Reduce[p+"down_proj.weight"] = true
			case gptossFused:
				rows(p+"gate_up_proj", 2*fa, 2*fb) // gate and up rows alternate
				_ = cols(p+"down_proj", fa, fb)
				s.Reduce[p+"down_proj.weight"] = true
			case gptossDense:
				// Input rows: [E, hidden, 2W] and [E, W, hidden].
				s.Parts[p+"gate_up_proj"] = Part{Axis: -1, Lo: 2 * fa, Hi: 2 * fb}
				s.Parts[p+"gate_up_proj.bias"] = Part{Axis: -1, Lo: 2 * fa, Hi: 2 * fb}
				s.Parts[p+"down_proj"] = Part{Axis: -2, Lo: fa, Hi: fb}
				s.Reduce[p+"down_proj"] = true
			}
		}
	} else {
		ea, eb, err := EvenRange(g.Experts, 1, rank, size)
		if err != nil {
			return nil, c, err
		}
		s.Experts, facts.ExpertRange = [2]int{ea, eb}, [2]int{ea, eb}
		for i := range c.Layers {
			p := fmt.Sprintf("model.layers.%d.mlp.experts.", i)
			for _, m := range []string{"gate_proj", "up_proj", "gate_up_proj", "down_proj"} {
				for _, x := range []string{"", ".weight", ".scales", ".biases", ".bias"} {
					s.Parts[p+m+x] = Part{Axis: 0, Lo: ea, Hi: eb}
				}
			}
			s.Reduce[p+"down_proj.weight"], s.Reduce[p+"down_proj"] = true, true
		}
	}
	s.splitVocab(c, "lm_head.weight", "lm_head.scales", "lm_head.biases")
	return s, local, nil
}

// gptossWidth is rank's share [lo, hi) of the experts' width when it
// divides into whole quantization groups of every layer's packed down
// projection (any width of a dense one).
func gptossWidth(c Config, has func(string) bool, rank, size int) (lo, hi int, ok bool) {
	unit := 1
	for i := range c.Layers {
		if l, packed := c.GPTOSS.Packed[fmt.Sprintf("model.layers.%d.mlp.experts.down_proj.weight", i)]; packed {
			unit = max(unit, l.GroupSize)
			if l.GroupSize*l.Bits%32 != 0 {
				return 0, 0, false
			}
		}
		if GPTOSSExpertLayout(has, i) == "" {
			return 0, 0, false
		}
	}
	lo, hi, err := EvenRange(c.Intermediate, unit, rank, size)
	return lo, hi, err == nil
}

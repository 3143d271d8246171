package model

import (
	"fmt"
	"slices"
)

// planGemma4 is Gemma 4's split (see Sharding). Its layers differ in
// shape, so each layer's heads split by its own kind: the full-attention
// layers' larger heads and fewer KV heads (a KV head replicated on the
// ranks that divide its query heads, when there are fewer than ranks)
// split apart from the sliding layers', but every layer must leave a rank
// the same query heads. A layer that shares another's KV holds the same
// KV heads as its source. Each layer's dense MLP width (double in the
// sharing layers of some checkpoints) splits on its own; the experts'
// width splits with the gate and up halves of the fused projection cut
// alike, and their down products are summed over the ranks once after
// the expert combination, apart from the dense MLP's (each branch has its
// own norm before they meet). The router and the per-layer inputs are
// replicated.
func planGemma4(s *Sharding, c Config, tensors map[string]*Tensor, rank, size int) (*Sharding, Config, error) {
	g := c.Gemma4
	if g == nil || len(g.MLPWidths) != c.Layers || len(c.Kinds) != c.Layers {
		return nil, c, fmt.Errorf("%w: gemma4 config without its Gemma 4 facts", ErrShard)
	}
	qa, qb, ka, kb, err := HeadRange(c.Heads, c.KVHeads, rank, size)
	if err != nil {
		return nil, c, err
	}
	s.Heads, s.KVHeads = [2]int{qa, qb}, [2]int{ka, kb}
	local := c
	facts := *g
	local.Gemma4 = &facts
	local.Heads, local.KVHeads = qb-qa, kb-ka
	local.Kinds = slices.Clone(c.Kinds)
	facts.MLPWidths = slices.Clone(g.MLPWidths)
	kv := make([][2]int, c.Layers)
	for i, k := range c.Kinds {
		lqa, lqb, lka, lkb, err := HeadRange(c.Heads, k.KVHeads, rank, size)
		if err != nil {
			return nil, c, err
		}
		if lqa != qa || lqb != qb {
			return nil, c, fmt.Errorf("%w: gemma4 layer %d would hold query heads [%d, %d), layer 0 [%d, %d)", ErrShard, i, lqa, lqb, qa, qb)
		}
		kv[i] = [2]int{lka, lkb}
		if src := k.SharedFrom; src >= 0 && (src >= i || kv[src] != kv[i]) {
			return nil, c, fmt.Errorf("%w: gemma4 layer %d shares the KV of layer %d, of other heads", ErrShard, i, src)
		}
		local.Kinds[i].KVHeads = lkb - lka
		p, hd := fmt.Sprintf("model.layers.%d.", i), k.HeadDim
		s.Parts[p+"self_attn.q_proj.weight"] = Part{Axis: 0, Lo: qa * hd, Hi: qb * hd}
		s.Parts[p+"self_attn.k_proj.weight"] = Part{Axis: 0, Lo: lka * hd, Hi: lkb * hd}
		s.Parts[p+"self_attn.v_proj.weight"] = Part{Axis: 0, Lo: lka * hd, Hi: lkb * hd}
		s.Parts[p+"self_attn.o_proj.weight"] = Part{Axis: -1, Lo: qa * hd, Hi: qb * hd}
		s.Reduce[p+"self_attn.o_proj.weight"] = true

		unit := 1
		if t := tensors[p+"mlp.down_proj.weight"]; t != nil && t.Quant != nil {
			unit = t.Quant.GroupSize
		}
		fa, fb, err := EvenRange(g.MLPWidths[i], unit, rank, size)
		if err != nil {
			return nil, c, err
		}
		if i == 0 {
			s.FFN, local.Intermediate = [2]int{fa, fb}, fb-fa
		}
		facts.MLPWidths[i] = fb - fa
		s.Parts[p+"mlp.gate_proj.weight"] = Part{Axis: 0, Lo: fa, Hi: fb}
		s.Parts[p+"mlp.up_proj.weight"] = Part{Axis: 0, Lo: fa, Hi: fb}
		s.Parts[p+"mlp.down_proj.weight"] = Part{Axis: -1, Lo: fa, Hi: fb}
		s.Reduce[p+"mlp.down_proj.weight"] = true
	}
	if g.Experts > 0 {
		ea, eb, err := EvenRange(g.ExpertWidth, 1, rank, size)
		if err != nil {
			return nil, c, err
		}
		facts.ExpertWidth = eb - ea
		for i := range c.Layers {
			p := fmt.Sprintf("model.layers.%d.experts.", i)
			// [E, 2W, hidden]: every gate row, then every up row.
			s.Parts[p+"gate_up_proj"] = Part{Axis: 1, Lo: ea, Hi: eb, Blocks: 2}
			s.Parts[p+"down_proj"] = Part{Axis: -1, Lo: ea, Hi: eb}
			s.Reduce[p+"down_proj"] = true
		}
	}
	s.splitVocab(c, "lm_head.weight")
	return s, local, nil
}

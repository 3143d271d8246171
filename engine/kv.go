package engine

import (
	"fmt"
	"math"
)

// LayerKV describes the key/value cache one transformer layer keeps per
// sequence.
type LayerKV struct {
	// KVHeads and HeadDim give the shape of one token's key (and, equally,
	// its value) in this layer; ElemBytes is the size of one cached element
	// (2 for bf16 and fp16).
	KVHeads, HeadDim, ElemBytes int
	// Window is the sliding-window length in tokens; 0 means full attention,
	// which retains every token.
	Window int
	// SharedFrom is -1 when the layer owns its cache, or the index of the
	// layer whose cache it reads. A sharing layer costs no bytes.
	SharedFrom int
}

// OwnsStorage reports whether the layer keeps a cache of its own.
func (l LayerKV) OwnsStorage() bool { return l.SharedFrom < 0 }

// Sliding reports whether the layer retains only its last Window tokens.
func (l LayerKV) Sliding() bool { return l.Window > 0 }

// tokenBytes is the cache size of one retained token: a key and a value.
func (l LayerKV) tokenBytes() int64 {
	return satMul(satMul(2*int64(l.KVHeads), int64(l.HeadDim)), int64(l.ElemBytes))
}

// KVLayout is the per-layer cache geometry of one model, in layer order. It
// is the only model fact the scheduler needs.
type KVLayout struct {
	Layers []LayerKV
	// Block is the allocation unit in tokens: when positive, every layer is
	// charged whole blocks, exactly as the KV pool holds them (a sliding
	// layer at most the ring of blocks its window needs); 0 charges single
	// tokens.
	Block int
}

// Validate reports the first malformed layer: a storage-owning layer with a
// non-positive dimension or a negative window, or a sharing layer that points
// at itself, outside the layout, or at a layer that shares in turn.
func (l KVLayout) Validate() error {
	for i, layer := range l.Layers {
		if !layer.OwnsStorage() {
			j := layer.SharedFrom
			if j == i || j >= len(l.Layers) || !l.Layers[j].OwnsStorage() {
				return fmt.Errorf("engine: layer %d shares the cache of layer %d, which owns none", i, j)
			}
			continue
		}
		if layer.KVHeads <= 0 || layer.HeadDim <= 0 || layer.ElemBytes <= 0 {
			return fmt.Errorf("engine: layer %d has a non-positive cache dimension", i)
		}
		if layer.Window < 0 {
			return fmt.Errorf("engine: layer %d has a negative window", i)
		}
	}
	return nil
}

// SequenceBytes is the cache size of one sequence holding tokens tokens: the
// sum over storage-owning layers of retained x 2 x KVHeads x HeadDim x
// ElemBytes, where retained is tokens for full-attention layers and
// min(tokens, Window) for sliding ones. It is non-decreasing in tokens, and
// constant in the sliding part once tokens reaches a layer's window. A
// non-positive count costs nothing; the sum saturates at math.MaxInt64.
//
// With a Block, a full-attention layer retains ceil(tokens/Block) blocks
// and a sliding one min(that, ceil((Window-1)/Block)+1) blocks: the newest
// blocks that still hold the Window-1 positions the next query sees,
// wherever the block boundaries fall. That is what the KV pool holds
// between steps, so the ledger's charge equals the pool's bytes.
func (l KVLayout) SequenceBytes(tokens int) int64 {
	if tokens <= 0 {
		return 0
	}
	var total int64
	for _, layer := range l.Layers {
		if !layer.OwnsStorage() {
			continue
		}
		retained := tokens
		switch {
		case l.Block > 0:
			blocks := (tokens + l.Block - 1) / l.Block
			if layer.Sliding() {
				blocks = min(blocks, (layer.Window-1+l.Block-1)/l.Block+1)
			}
			retained = blocks * l.Block
		case layer.Sliding() && layer.Window < retained:
			retained = layer.Window
		}
		total = satAdd(total, satMul(int64(retained), layer.tokenBytes()))
	}
	return total
}

// BytesPerToken is the rate at which a long sequence grows: the bytes one
// more token costs in the full-attention, storage-owning layers. Sliding
// layers are left out because their cost stops growing at the window. It is
// the rate grants and reports are quoted in.
func (l KVLayout) BytesPerToken() int64 {
	var rate int64
	for _, layer := range l.Layers {
		if layer.OwnsStorage() && !layer.Sliding() {
			rate = satAdd(rate, layer.tokenBytes())
		}
	}
	return rate
}

// AdoptionBound is the number of tokens that must be recomputed when a cached
// prefix is adopted by a model with sliding-window layers: windowCount x
// maxWindow, where windowCount is the number of storage-owning sliding layers
// and maxWindow the largest of their windows. It is 0 for a model with full
// attention only.
func (l KVLayout) AdoptionBound() int {
	count, widest := 0, 0
	for _, layer := range l.Layers {
		if layer.OwnsStorage() && layer.Sliding() {
			count++
			widest = max(widest, layer.Window)
		}
	}
	return count * widest
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satMul multiplies non-negative values, saturating at math.MaxInt64.
func satMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

package gemma4

import (
	"math"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// cacheStep is the KV growth granule in tokens: buffers grow by whole steps
// (a sliding layer's never past its window) so most appends write in place.
const cacheStep = 256

// Cache is one sequence's keys and values for every storage-owning layer.
type Cache struct {
	kinds []model.LayerKind
	k, v  []mlx.Array // [1, kvHeads, slots, headDim]; invalid for sharing layers
	slots []int       // allocated token slots per layer
	n     int         // tokens appended so far
}

func newCache(kinds []model.LayerKind) *Cache {
	return &Cache{
		kinds: kinds,
		k:     make([]mlx.Array, len(kinds)),
		v:     make([]mlx.Array, len(kinds)),
		slots: make([]int, len(kinds)),
	}
}

// Len is the number of tokens the sequence holds (appended so far; a
// sliding layer retains only the last Window of them).
func (c *Cache) Len() int { return c.n }

// Bytes is the device memory the cache's buffers occupy.
func (c *Cache) Bytes() int64 {
	var n int64
	for i := range c.k {
		n += c.LayerBytes(i)
	}
	return n
}

// LayerBytes is the device memory of one layer's keys and values: zero for a
// layer that reuses another layer's KV.
func (c *Cache) LayerBytes(layer int) int64 {
	if !c.k[layer].Valid() {
		return 0
	}
	return int64(c.k[layer].Nbytes() + c.v[layer].Nbytes())
}

// Free releases the cache's arrays.
func (c *Cache) Free() {
	for i := range c.k {
		c.k[i].Free()
		c.v[i].Free()
		c.slots[i] = 0
	}
	c.n = 0
}

// slotsFor is the slot count a layer needs to hold n tokens.
func slotsFor(window, n int) int {
	s := (n + cacheStep - 1) / cacheStep * cacheStep
	if window > 0 && s > window {
		s = window
	}
	return s
}

// reserve grows every storage-owning layer's buffer so that T more tokens
// fit. A sliding layer only grows before it wraps, while slot s still holds
// position s.
func (c *Cache) reserve(f *mlx.Frame, act mlx.Dtype, T int) {
	for li, kind := range c.kinds {
		if kind.SharedFrom >= 0 {
			continue
		}
		need := slotsFor(kind.Window, c.n+T)
		if f.Err() != nil || need <= c.slots[li] {
			continue
		}
		held := min(c.n, c.slots[li])
		for _, buf := range []*mlx.Array{&c.k[li], &c.v[li]} {
			grown := f.Zeros(act, 1, kind.KVHeads, need, kind.HeadDim)
			if buf.Valid() && held > 0 {
				old := f.Slice(*buf, []int{0, 0, 0, 0}, []int{1, kind.KVHeads, held, kind.HeadDim})
				grown = f.SliceUpdate(grown, old, []int{0, 0, 0, 0}, []int{1, kind.KVHeads, held, kind.HeadDim})
			}
			kept := f.Keep(grown)
			buf.Free()
			*buf = kept
		}
		c.slots[li] = need
	}
}

// attended is what one row's queries of one layer attend over in a step:
// keys, values, the mask mode and, for mode "array", an additive mask. A
// layer that shares another's KV attends over exactly what that layer did.
type attended struct {
	keys, values mlx.Array
	mode         string
	mask         mlx.Array
}

// attend stores the T new keys and values of layer li (k and v are
// [1, kvHeads, T, headDim]) and returns what the new queries attend over.
func (c *Cache) attend(f *mlx.Frame, li int, k, v mlx.Array, act mlx.Dtype) attended {
	if f.Err() != nil {
		return attended{}
	}
	T, n, w := k.Dim(2), c.n, c.kinds[li].Window
	var a attended
	if T > 1 {
		a.mode = "causal"
	}
	if w == 0 || n+T <= w {
		// Nothing has left any window yet: slot p holds position p.
		a.keys, a.values = c.write(f, li, k, v, n)
		return a
	}
	if T == 1 {
		// The new key replaces the one leaving the window; the whole ring
		// is then exactly the window of the new query.
		c.write(f, li, k, v, n%w)
		return attended{keys: c.view(f, c.k[li], w), values: c.view(f, c.v[li], w)}
	}
	// A chunk that slides: attend over the held keys followed by the new
	// ones under a window mask, then keep the chunk's last w keys.
	held := min(n, w)
	a.keys, a.values = k, v
	if held > 0 {
		a.keys = f.Concatenate(2, c.view(f, c.k[li], held), k)
		a.values = f.Concatenate(2, c.view(f, c.v[li], held), v)
	}
	a.mode, a.mask = "array", f.AsType(f.Float32s(windowMask(n, T, w), T, held+T), act)
	keep := min(T, w)
	first := n + T - keep // position of the first kept token
	src := T - keep
	for keep > 0 {
		slot := first % w
		run := min(keep, w-slot)
		c.write(f, li, f.Slice(k, []int{0, 0, src, 0}, []int{1, k.Dim(1), src + run, k.Dim(3)}),
			f.Slice(v, []int{0, 0, src, 0}, []int{1, v.Dim(1), src + run, v.Dim(3)}), slot)
		first, src, keep = first+run, src+run, keep-run
	}
	return a
}

// windowMask is the additive [T, held+T] mask of queries at positions
// n..n+T-1 over a ring of w slots holding the min(n, w) tokens before them,
// followed by the T new keys: 0 where the key is at most w-1 positions
// before or at the query, -inf elsewhere.
func windowMask(n, T, w int) []float32 {
	held := min(n, w)
	L := held + T
	pos := make([]int, L)
	for s := range held {
		// Slot s holds the latest position before n congruent to s mod w.
		pos[s] = n - 1 - ((n-1-s)%w+w)%w
	}
	for j := range T {
		pos[held+j] = n + j
	}
	mask := make([]float32, T*L)
	inf := float32(math.Inf(-1))
	for i := range T {
		p := n + i
		for j, kp := range pos {
			if kp > p || p-kp >= w {
				mask[i*L+j] = inf
			}
		}
	}
	return mask
}

// write stores the keys and values k and v ([1, kvHeads, T, headDim]) in
// slots slot..slot+T-1 of layer li and returns views of slots 0..slot+T-1.
func (c *Cache) write(f *mlx.Frame, li int, k, v mlx.Array, slot int) (mlx.Array, mlx.Array) {
	if f.Err() != nil {
		return mlx.Array{}, mlx.Array{}
	}
	kvh, T, hd := k.Dim(1), k.Dim(2), k.Dim(3)
	start := []int{0, 0, slot, 0}
	stop := []int{1, kvh, slot + T, hd}
	views := [2]mlx.Array{}
	for j, p := range []struct {
		buf *mlx.Array
		val mlx.Array
	}{{&c.k[li], k}, {&c.v[li], v}} {
		updated := f.SliceUpdate(*p.buf, f.AsType(p.val, p.buf.Dtype()), start, stop)
		kept := f.Keep(updated)
		p.buf.Free()
		*p.buf = kept
		views[j] = f.Slice(kept, []int{0, 0, 0, 0}, stop)
	}
	return views[0], views[1]
}

// view is the first n slots of a layer buffer.
func (c *Cache) view(f *mlx.Frame, a mlx.Array, n int) mlx.Array {
	if f.Err() != nil {
		return mlx.Array{}
	}
	return f.Slice(a, []int{0, 0, 0, 0}, []int{1, a.Dim(1), n, a.Dim(3)})
}

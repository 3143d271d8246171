package gptoss

import (
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// cacheStep is the KV growth granule in tokens: buffers grow by whole steps
// (a sliding layer's never past its window) so most appends write in place.
const cacheStep = 256

// Cache is one sequence's keys and values for every layer.
type Cache struct {
	layers []kv
	n      int // tokens appended so far
}

// kv is one layer's keys and values. A full-attention layer keeps every
// token, position p in slot p. A sliding layer is a ring of at most window
// slots, position p in slot p mod window.
type kv struct {
	k, v   mlx.Array // [1, kvHeads, slots, headDim]
	slots  int
	window int // 0: full attention
	heads  int
	dim    int
}

func newCache(kinds []model.LayerKind) *Cache {
	c := &Cache{layers: make([]kv, len(kinds))}
	for i, k := range kinds {
		c.layers[i] = kv{window: k.Window, heads: k.KVHeads, dim: k.HeadDim}
	}
	return c
}

// Len is the number of tokens the sequence holds (appended so far; a
// sliding layer retains only the last window of them).
func (c *Cache) Len() int { return c.n }

// Bytes is the device memory the cache's buffers occupy: once a sliding
// layer has seen its window of tokens it stays at window slots.
func (c *Cache) Bytes() int64 {
	var n int64
	for i := range c.layers {
		n += c.LayerBytes(i)
	}
	return n
}

// LayerBytes is the device memory of one layer's keys and values.
func (c *Cache) LayerBytes(layer int) int64 {
	l := &c.layers[layer]
	if !l.k.Valid() {
		return 0
	}
	return int64(l.k.Nbytes() + l.v.Nbytes())
}

// Free releases the cache's arrays.
func (c *Cache) Free() {
	for i := range c.layers {
		l := &c.layers[i]
		l.k.Free()
		l.v.Free()
		l.k, l.v, l.slots = mlx.Array{}, mlx.Array{}, 0
	}
	c.n = 0
}

// capacity is the slot count a layer needs to hold total tokens.
func capacity(window, total int) int {
	s := (total + cacheStep - 1) / cacheStep * cacheStep
	if window > 0 && s > window {
		s = window
	}
	return s
}

// reserve grows every layer's buffers so that T more tokens fit.
func (c *Cache) reserve(f *mlx.Frame, cfg model.Config, T int) {
	for i := range c.layers {
		c.layers[i].grow(f, cfg.ActDType, c.n, c.n+T)
	}
}

// grow reallocates the buffers for total tokens, copying the held ones. A
// ring only grows before it first wraps (it is allocated whole once the
// window is reached), so slot p still holds position p.
func (l *kv) grow(f *mlx.Frame, dt mlx.Dtype, held, total int) {
	need := capacity(l.window, total)
	if f.Err() != nil || need <= l.slots {
		return
	}
	held = min(held, l.slots)
	for _, buf := range []*mlx.Array{&l.k, &l.v} {
		grown := f.Zeros(dt, 1, l.heads, need, l.dim)
		if held > 0 {
			grown = f.SliceUpdate(grown, l.first(f, *buf, held), []int{0, 0, 0, 0}, []int{1, l.heads, held, l.dim})
		}
		kept := f.Keep(grown)
		buf.Free()
		*buf = kept
	}
	l.slots = need
}

// first is slots [0, n) of a buffer.
func (l *kv) first(f *mlx.Frame, buf mlx.Array, n int) mlx.Array {
	return f.Slice(buf, []int{0, 0, 0, 0}, []int{1, l.heads, n, l.dim})
}

// store writes k and v ([1, heads, T, dim]) into slots [slot, slot+T).
func (l *kv) store(f *mlx.Frame, k, v mlx.Array, slot int) {
	T := k.Dim(2)
	for _, p := range []struct {
		buf *mlx.Array
		val mlx.Array
	}{{&l.k, k}, {&l.v, v}} {
		updated := f.SliceUpdate(*p.buf, f.AsType(p.val, p.buf.Dtype()), []int{0, 0, slot, 0}, []int{1, l.heads, slot + T, l.dim})
		kept := f.Keep(updated)
		p.buf.Free()
		*p.buf = kept
	}
}

// attend stores the T new keys and values of tokens at positions n.. and
// returns what their queries attend over: keys, values, the mask mode and,
// for mode "array", a boolean mask (true: attend).
//
// A query at position p of a sliding layer sees positions p-window+1..p.
// Once the ring is full, a single new token overwrites the one position
// that leaves every later window, and then the whole ring is its window.
// A chunk that wraps attends over the ring's previous contents followed by
// its own keys under an explicit mask, then keeps its last window keys.
// Attention does not depend on the order of its keys, so the ring's
// rotation changes nothing beyond float summation order.
func (l *kv) attend(f *mlx.Frame, n int, k, v mlx.Array) (keys, values mlx.Array, mode string, mask mlx.Array) {
	if f.Err() != nil {
		return
	}
	T, w := k.Dim(2), l.window
	if T > 1 {
		mode = "causal"
	}
	switch {
	case w == 0 || n+T <= w:
		l.store(f, k, v, n)
		return l.first(f, l.k, n+T), l.first(f, l.v, n+T), mode, mlx.Array{}
	case T == 1:
		l.store(f, k, v, n%w)
		return l.k, l.v, "", mlx.Array{}
	}
	held := min(n, w)
	keys, values = k, v
	if held > 0 {
		keys = f.Concatenate(2, l.first(f, l.k, held), k)
		values = f.Concatenate(2, l.first(f, l.v, held), v)
	}
	mask = f.Greater(f.Float32s(windowMask(n, T, w), T, held+T), f.Scalar(0.5))
	// Keep the chunk's last min(T, w) keys, in as many runs as the ring
	// boundary cuts them into.
	for src := T - min(T, w); src < T; {
		slot := (n + src) % w
		run := min(T-src, w-slot)
		l.store(f, f.Slice(k, []int{0, 0, src, 0}, []int{1, l.heads, src + run, l.dim}),
			f.Slice(v, []int{0, 0, src, 0}, []int{1, l.heads, src + run, l.dim}), slot)
		src += run
	}
	return keys, values, "array", mask
}

// windowMask is the [T, held+T] mask, 1 where a query sees a key, of
// queries at positions n..n+T-1 over a ring of w slots holding the
// held = min(n, w) positions before n, followed by the T new keys.
func windowMask(n, T, w int) []float32 {
	held := min(n, w)
	pos := make([]int, 0, held+T)
	for s := range held {
		// The latest position before n that lands in slot s.
		pos = append(pos, n-1-((n-1-s)%w+w)%w)
	}
	for j := range T {
		pos = append(pos, n+j)
	}
	mask := make([]float32, T*len(pos))
	for i := range T {
		for j, kp := range pos {
			if p := n + i; kp <= p && p-kp < w {
				mask[i*len(pos)+j] = 1
			}
		}
	}
	return mask
}

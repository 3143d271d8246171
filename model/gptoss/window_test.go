package gptoss

import (
	"path/filepath"
	"testing"

	"github.com/goprovider/provider/mlx"
)

// TestCacheIsBounded checks that a sliding layer's buffers stop at its
// window however long the sequence grows, that a full-attention layer's
// grow in whole steps, and that Bytes reports exactly what both hold.
func TestCacheIsBounded(t *testing.T) {
	l := load(t, "bf16", mlx.Float32, nil)
	c := l.newCache(t)
	kinds := l.cfg.Kinds
	perToken := func(layer int) int64 { return int64(2 * kinds[layer].KVHeads * kinds[layer].HeadDim * 4) }
	chunk := make([]int32, 100)
	for i := range chunk {
		chunk[i] = int32(i % 256)
	}
	for _, n := range []int{1, 100, 100, 100} { // 1, 101, 201, 301 tokens
		l.step(t, [][]int32{chunk[:n]}, []*Cache{c})
		var sum int64
		for i, k := range kinds {
			want := int64(capacity(k.Window, c.Len())) * perToken(i)
			if got := c.LayerBytes(i); got != want {
				t.Errorf("after %d tokens: layer %d (window %d) holds %d bytes, want %d", c.Len(), i, k.Window, got, want)
			}
			sum += c.LayerBytes(i)
		}
		if c.Bytes() != sum {
			t.Errorf("Bytes %d, layers hold %d", c.Bytes(), sum)
		}
	}
	if c.Len() != 301 || c.LayerBytes(0) != 8*perToken(0) || c.LayerBytes(1) != 512*perToken(1) {
		t.Errorf("after %d tokens: sliding %d, full %d bytes", c.Len(), c.LayerBytes(0), c.LayerBytes(1))
	}
	l.th.Do(c.Free)
	if c.Bytes() != 0 || c.Len() != 0 {
		t.Errorf("freed cache holds %d bytes, %d tokens", c.Bytes(), c.Len())
	}
}

// TestWindowSizeIsObservable shows that the long prompt pins the window:
// attending over one key more or one fewer than the window mlx-lm ran
// with moves the logits far past the tolerance the right window meets.
func TestWindowSizeIsObservable(t *testing.T) {
	fx := readFixture(t)
	ref := fx.Variants["bf16"].Runs["f32"][1]
	want := readF32(t, filepath.Join(refDir, ref.Logits))
	for _, w := range []int{7, 9} {
		l := load(t, "bf16", mlx.Float32, withWindow(w))
		got := l.step(t, [][]int32{fx.Prompts[1]}, []*Cache{l.newCache(t)})
		d, _ := maxAbsDiff(got, want[:l.cfg.Vocab])
		if d < 1e-2 {
			t.Errorf("window %d: max |logit diff| %.3g from mlx-lm's window 8", w, d)
		}
		t.Logf("window %d: max |logit diff| from mlx-lm's (window 8) %.3g", w, d)
	}
}

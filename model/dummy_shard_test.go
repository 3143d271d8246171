package model_test

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// hostArrays copies every built array to the host as the Tensor a
// checkpoint would hold it in, by stored name.
func hostArrays(t *testing.T, f *mlx.Frame, d *model.Dummy, w *model.Weights) map[string]*model.Tensor {
	t.Helper()
	out := map[string]*model.Tensor{}
	for _, x := range d.Tensors {
		names := []string{x.Name}
		if x.Packed {
			base := strings.TrimSuffix(x.Name, ".weight")
			names = append(names, base+".scales", base+".biases")
		}
		for _, n := range names {
			wt := w.Get(n)
			if wt == nil {
				continue
			}
			h := &model.Tensor{Name: n, Shape: wt.W.Shape(), DType: wt.W.Dtype(), Data: f.ToBytes(wt.W)}
			if wt.Quantized() {
				// The logical shape: the packed words' last axis unpacked.
				h.Shape[len(h.Shape)-1] = h.Shape[len(h.Shape)-1] * 32 / wt.Bits
				h.Quant = &model.Quant{Bits: wt.Bits, GroupSize: wt.GroupSize, Mode: wt.Mode,
					Scales: f.ToBytes(wt.Scales), ScaleDType: wt.Scales.Dtype()}
				if wt.Biases.Valid() {
					h.Quant.Biases = f.ToBytes(wt.Biases)
				}
			}
			out[n] = h
		}
	}
	if err := f.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDummyShardCutsAsSlice: every rank of a dummy model split over two
// holds exactly what Tensor.Slice keeps of the single process's weights
// under the same plan, byte for byte, and its Bytes is what it built.
func TestDummyShardCutsAsSlice(t *testing.T) {
	cases := append(dummyCases(t), dummyCase{"gptoss mxfp4 split width", "../testdata/dummy/gptoss_wide.json", tinyTokenizer, 0})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			one := openDummy(t, tc)
			var whole map[string]*model.Tensor
			one.th.Do(func() {
				w, err := one.d.Build(one.s, 7, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Free()
				f := mlx.NewFrame(one.s)
				defer f.Free()
				whole = hostArrays(t, f, one.d, w)
			})
			for rank := range 2 {
				b := openDummy(t, tc)
				sh, err := b.d.Shard(rank, 2)
				if err != nil {
					t.Fatal(err)
				}
				cut := 0
				b.th.Do(func() {
					w, err := b.d.Build(b.s, 7, nil)
					if err != nil {
						t.Fatal(err)
					}
					defer w.Free()
					if got := w.Bytes(); got != b.d.Bytes() {
						t.Errorf("rank %d: built %d bytes, planned %d", rank, got, b.d.Bytes())
					}
					f := mlx.NewFrame(b.s)
					defer f.Free()
					mine := hostArrays(t, f, b.d, w)
					if len(mine) != len(whole) {
						t.Fatalf("rank %d: %d arrays, whole model %d", rank, len(mine), len(whole))
					}
					for n, h := range whole {
						want := h
						if p, ok := sh.Parts[n]; ok {
							if want, err = h.Slice(p); err != nil {
								t.Fatal(err)
							}
							cut++
						}
						got := mine[n]
						same := slices.Equal(got.Shape, want.Shape) && bytes.Equal(got.Data, want.Data)
						if want.Quant != nil {
							same = same && bytes.Equal(got.Quant.Scales, want.Quant.Scales) && bytes.Equal(got.Quant.Biases, want.Quant.Biases)
						}
						if !same {
							t.Errorf("rank %d: %s (shape %v) differs from the slice of the whole (shape %v)", rank, n, got.Shape, want.Shape)
						}
					}
				})
				if cut == 0 {
					t.Errorf("rank %d: nothing cut", rank)
				}
				t.Logf("%s: %d arrays cut, %d bytes of %d", sh, cut, b.d.Bytes(), one.d.Bytes())
			}
		})
	}
}

// TestDummyShardPublishedGPTOSS: the published gpt-oss configs (20b and
// 120b) plan over 2 and 4 ranks (every expert's width in whole MXFP4
// groups), each rank holding its part of the divided weights.
func TestDummyShardPublishedGPTOSS(t *testing.T) {
	for _, name := range []string{"gpt-oss-20b.json", "gpt-oss-120b.json"} {
		t.Run(name, func(t *testing.T) { dummyShardPublished(t, name) })
	}
}

func dummyShardPublished(t *testing.T, name string) {
	raw, err := os.ReadFile("../testdata/configs/" + name)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{2, 4} {
		for rank := range size {
			d, err := model.PlanDummy(raw)
			if err != nil {
				t.Fatal(err)
			}
			whole := d.Bytes()
			sh, err := d.Shard(rank, size)
			if err != nil {
				t.Fatal(err)
			}
			if sh.Experts[1] != 0 {
				t.Errorf("%s: whole experts, want every expert's width split", sh)
			}
			// The embedding, norms and routers are replicated, the rest
			// divides: the ranks together hold well under 1.5 models.
			if got := d.Bytes(); got*int64(size) > whole*3/2 {
				t.Errorf("%s: %d bytes of %d", sh, got, whole)
			}
			t.Logf("%s: %d of %d bytes", sh, d.Bytes(), whole)
		}
	}
}

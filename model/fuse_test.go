package model

import (
	"slices"
	"testing"

	"github.com/goprovider/provider/mlx"
)

// TestFuseProjectionsJoinsOnlyWhatCanJoin fuses two llama layers on the
// CPU: layer 0's q/k/v and gate/up are plain float weights and join, and
// the joined product's parts must equal each weight's own product; layer
// 1's k reads a longer input and its up is marked for 8-bit activations,
// so neither of its groups joins and its weights stay as they were.
func TestFuseProjectionsJoinsOnlyWhatCanJoin(t *testing.T) {
	th := mlx.NewThread()
	defer th.Close()
	th.Do(func() {
		s := mlx.CPU()
		defer s.Free()
		f := mlx.NewFrame(s)
		defer f.Free()
		seed := float32(0)
		matrix := func(rows, cols int) mlx.Array {
			data := make([]float32, rows*cols)
			for i := range data {
				seed++
				data[i] = float32(int(seed*7)%13) / 13
			}
			a, err := mlx.FromFloat32s(data, rows, cols)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		w := &Weights{byName: map[string]*Weight{}}
		defer w.Free()
		shapes := map[string][2]int{
			"self_attn.q_proj.weight": {8, 16}, "self_attn.k_proj.weight": {4, 16}, "self_attn.v_proj.weight": {4, 16},
			"mlp.gate_proj.weight": {12, 16}, "mlp.up_proj.weight": {12, 16},
		}
		for _, layer := range []string{"model.layers.0.", "model.layers.1."} {
			for name, sh := range shapes {
				w.byName[layer+name] = &Weight{W: matrix(sh[0], sh[1])}
			}
		}
		w.byName["model.layers.1.self_attn.k_proj.weight"].W.Free()
		w.byName["model.layers.1.self_attn.k_proj.weight"].W = matrix(4, 32)
		w.byName["model.layers.1.mlp.up_proj.weight"].Int8 = true
		x := matrix(3, 16)
		defer x.Free()
		var want [][]float32
		for _, name := range []string{"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight"} {
			want = append(want, f.ToFloat32s(w.Get("model.layers.0."+name).Linear(f, x)))
		}
		n, err := w.FuseProjections(s, "llama", 2)
		if err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Fatalf("fused %d groups, want 2 (layer 0's)", n)
		}
		for _, name := range []string{"q_proj", "k_proj", "v_proj"} {
			if w.Get("model.layers.0.self_attn."+name+".weight") != nil {
				t.Errorf("layer 0 still holds %s", name)
			}
			if w.Get("model.layers.1.self_attn."+name+".weight") == nil {
				t.Errorf("layer 1 lost %s, which could not join", name)
			}
		}
		if w.Get("model.layers.1.self_attn.qkv_proj.weight") != nil || w.Get("model.layers.1.mlp.gate_up_proj.weight") != nil {
			t.Error("layer 1 got a fused weight")
		}
		qkv, gu := w.Get("model.layers.0.self_attn.qkv_proj.weight"), w.Get("model.layers.0.mlp.gate_up_proj.weight")
		if qkv == nil || gu == nil {
			t.Fatal("layer 0 has no fused weights")
		}
		if got := qkv.Parts; len(got) != 3 || got[0] != 8 || got[1] != 4 || got[2] != 4 {
			t.Errorf("q/k/v parts %v, want [8 4 4]", got)
		}
		var got [][]float32
		for _, p := range append(qkv.LinearParts(f, x), gu.LinearParts(f, x)...) {
			got = append(got, f.ToFloat32s(p))
		}
		if err := f.Err(); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if len(got[i]) != len(want[i]) {
				t.Fatalf("part %d: %d values, want %d", i, len(got[i]), len(want[i]))
			}
			for j := range want[i] {
				if got[i][j] != want[i][j] {
					t.Fatalf("part %d value %d = %v, unfused %v", i, j, got[i][j], want[i][j])
				}
			}
		}
	})
}

// TestFuseProjectionsJoinsModulesWhole fuses gpt-oss's q/k/v in two
// layers whose modules keep their packed scales and biases and their bias
// vectors as tensors of their own: layer 0's join into one module, every
// tensor's rows in part order; layer 1's k has no bias vector, so none of
// its tensors join (a module must join whole).
func TestFuseProjectionsJoinsModulesWhole(t *testing.T) {
	th := mlx.NewThread()
	defer th.Close()
	th.Do(func() {
		s := mlx.CPU()
		defer s.Free()
		f := mlx.NewFrame(s)
		defer f.Free()
		// Each tensor holds its own number in every value, so the joined
		// rows show where they came from.
		fill := func(v float32, shape ...int) *Weight {
			n := 1
			for _, d := range shape {
				n *= d
			}
			data := make([]float32, n)
			for i := range data {
				data[i] = v
			}
			a, err := mlx.FromFloat32s(data, shape...)
			if err != nil {
				t.Fatal(err)
			}
			return &Weight{W: a}
		}
		w := &Weights{byName: map[string]*Weight{}}
		defer w.Free()
		rows := map[string]int{"q_proj": 8, "k_proj": 4, "v_proj": 4}
		for _, layer := range []string{"model.layers.0.self_attn.", "model.layers.1.self_attn."} {
			for i, m := range []string{"q_proj", "k_proj", "v_proj"} {
				base := float32(10 * (i + 1))
				w.byName[layer+m+".weight"] = fill(base+1, rows[m], 4)
				w.byName[layer+m+".scales"] = fill(base+2, rows[m], 2)
				w.byName[layer+m+".biases"] = fill(base+3, rows[m], 2)
				w.byName[layer+m+".bias"] = fill(base+4, rows[m])
			}
		}
		w.byName["model.layers.1.self_attn.k_proj.bias"].Free()
		delete(w.byName, "model.layers.1.self_attn.k_proj.bias")
		n, err := w.FuseProjections(s, "gpt_oss", 2)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("fused %d groups, want 1 (layer 0's)", n)
		}
		for _, suffix := range []string{".weight", ".scales", ".biases", ".bias"} {
			for _, m := range []string{"q_proj", "k_proj", "v_proj"} {
				if w.Get("model.layers.0.self_attn."+m+suffix) != nil {
					t.Errorf("layer 0 still holds %s%s", m, suffix)
				}
				if m != "k_proj" || suffix != ".bias" {
					if w.Get("model.layers.1.self_attn."+m+suffix) == nil {
						t.Errorf("layer 1 lost %s%s, which could not join", m, suffix)
					}
				}
			}
			if w.Get("model.layers.1.self_attn.qkv_proj"+suffix) != nil {
				t.Errorf("layer 1 got a fused %s", suffix)
			}
			j := w.Get("model.layers.0.self_attn.qkv_proj" + suffix)
			if j == nil {
				t.Fatalf("layer 0 has no fused %s", suffix)
			}
			got := f.ToFloat32s(j.W)
			cols := len(got) / 16
			if len(got) != 16*cols {
				t.Fatalf("fused %s holds %d values, want 16 rows", suffix, len(got))
			}
			for r := range 16 {
				part := 0
				if r >= 8 {
					part = 1 + (r-8)/4
				}
				want := float32(10*(part+1)) + float32(slices.Index(fuseSuffixes, suffix)+1)
				for c := range cols {
					if v := got[r*cols+c]; v != want {
						t.Fatalf("fused %s row %d = %v, want part %d's %v", suffix, r, v, part, want)
					}
				}
			}
			if wantParts := suffix == ".weight"; (len(j.Parts) == 3) != wantParts {
				t.Errorf("fused %s parts %v", suffix, j.Parts)
			}
		}
		if err := f.Err(); err != nil {
			t.Fatal(err)
		}
	})
}

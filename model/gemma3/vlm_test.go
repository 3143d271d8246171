package gemma3

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/tokenizer"
)

// vlmLogitsTol bounds |ours - reference| on the language model's logits
// with soft tokens in the prompt.
const vlmLogitsTol = 1e-4

// vlmCase is one prompt of fixture.json's cases: the expanded prompt, its
// ids, the images whose soft tokens fill its spans, and the reference
// logits at every position (HF transformers' semantics computed with
// mlx-vlm's layers; see the script).
type vlmCase struct {
	Name   string  `json:"name"`
	Prompt string  `json:"prompt"`
	IDs    []int32 `json:"ids"`
	Images []int   `json:"images"`
	Spans  [][2]int
	Logits struct {
		File  string `json:"file"`
		Shape []int  `json:"shape"`
	} `json:"logits"`
	LastArgmax int32 `json:"last_argmax"`
}

func readVLMCases(t *testing.T) []vlmCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vlmDir, "fixture.json"))
	if err != nil {
		t.Fatalf("%v (regenerate with scripts/make_tiny_gemma3_vlm.py)", err)
	}
	var fx struct {
		Cases []vlmCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) == 0 {
		t.Fatal("fixture.json has no cases")
	}
	return fx.Cases
}

// tinyVLM is the tiny checkpoint opened as a model (its tokenizer
// included), with its text network, its tower and a stepper on one MLX
// thread; released when the test ends.
type tinyVLM struct {
	m   *model.Model
	th  *mlx.Thread
	s   mlx.Stream
	w   *model.Weights
	net *Model
	v   *Vision
	st  *model.Stepper
}

func openTinyVLM(t *testing.T) *tinyVLM {
	t.Helper()
	m, err := model.Open(vlmDir)
	if err != nil {
		t.Fatal(err)
	}
	x := &tinyVLM{m: m, th: mlx.NewThread()}
	x.th.Do(func() {
		x.s = mlx.DefaultStream()
		if x.w, err = m.Upload(x.s); err != nil {
			return
		}
		if x.net, err = New(m.Config, x.w); err != nil {
			return
		}
		if x.v, err = LoadVision(vlmDir, x.s, m.Config.ActDType); err != nil {
			return
		}
		x.st, err = model.NewStepper(x.net, x.s)
	})
	t.Cleanup(func() {
		x.th.Do(func() {
			if x.st != nil {
				x.st.Close()
			}
			if x.v != nil {
				x.v.Free()
			}
			if x.w != nil {
				x.w.Free()
			}
			x.s.Free()
		})
		x.th.Close()
		m.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// soft runs our preprocessing, tower and projector on fixture image i.
func (x *tinyVLM) soft(t *testing.T, fx *vlmFixture, i int) []float32 {
	t.Helper()
	rgb, w, h := fx.image(t, i)
	px, err := x.v.Preprocess(rgb, w, h)
	if err != nil {
		t.Fatal(err)
	}
	c := x.v.Config
	var out []float32
	x.th.Do(func() {
		f := mlx.NewFrame(x.s)
		defer f.Free()
		out = f.ToFloat32s(x.v.Encode(f, f.Float32s(px, 1, c.Channels, c.ImageSize, c.ImageSize)))
		err = f.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// run feeds ids to a fresh sequence in chunks ending at cuts (the last cut
// is len(ids)) and returns the logits at each chunk's last token.
func (x *tinyVLM) run(t *testing.T, ids []int32, spans []kvpool.Span, embeds []kvpool.Embed, cuts []int) [][]float32 {
	t.Helper()
	var seq *kvpool.Seq
	x.th.Do(func() { seq = x.st.NewSeq() })
	defer x.th.Do(func() { seq.Free() })
	var out [][]float32
	from := 0
	for _, cut := range cuts {
		var logits []float32
		var err error
		x.th.Do(func() {
			f := mlx.NewFrame(x.s)
			defer f.Free()
			row := kvpool.Row{Seq: seq, Tokens: ids[from:cut], Sample: true, Spans: spans, Embeds: embeds}
			logits = f.ToFloat32s(x.st.ForwardRows(f, []kvpool.Row{row}))
			err = f.Err()
		})
		if err != nil {
			t.Fatalf("chunk [%d, %d): %v", from, cut, err)
		}
		out = append(out, logits)
		from = cut
	}
	return out
}

// TestVLMLogits checks the language model reading soft tokens against the
// reference logits, for a text-only prompt, one image and two images: the
// prompt the tokenizer makes of the expanded text equals the fixture's,
// the soft tokens come from our own preprocessing and tower, and the
// prompt is fed whole and then token by token (each image's placeholder
// run as one chunk, since chunks never split a span), so the logits of
// every position outside the images, and of each image's last, are
// compared.
func TestVLMLogits(t *testing.T) {
	fx := readVLMFixture(t)
	x := openTinyVLM(t)
	vocab := x.m.Config.Vocab
	softs := map[int][]float32{}
	for _, c := range readVLMCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			ids := x.m.Tokenizer.Encode(c.Prompt, tokenizer.EncodeOptions{ParseSpecial: true})
			if !slices.Equal(ids, c.IDs) {
				t.Fatalf("tokenizer: %v\nwant %v", ids, c.IDs)
			}
			want := readF32(t, filepath.Join(vlmDir, c.Logits.File))
			if len(want) != len(ids)*vocab || !slices.Equal(c.Logits.Shape, []int{len(ids), vocab}) {
				t.Fatalf("reference logits: %d values, shape %v, for %d tokens", len(want), c.Logits.Shape, len(ids))
			}
			var spans []kvpool.Span
			var embeds []kvpool.Embed
			if len(c.Spans) != len(c.Images) {
				t.Fatalf("%d spans for %d images", len(c.Spans), len(c.Images))
			}
			for i, sp := range c.Spans {
				img := c.Images[i]
				if softs[img] == nil {
					softs[img] = x.soft(t, fx, img)
				}
				for pos := sp[0]; pos < sp[1]; pos++ {
					if ids[pos] != x.v.Config.ImageToken {
						t.Fatalf("span %v holds token %d at %d", sp, ids[pos], pos)
					}
				}
				spans = append(spans, kvpool.Span{Start: sp[0], End: sp[1]})
				embeds = append(embeds, kvpool.Embed{Pos: sp[0], Rows: sp[1] - sp[0], Data: softs[img]})
			}

			whole := x.run(t, ids, spans, embeds, []int{len(ids)})[0]
			last := len(ids) - 1
			d, at := maxAbsDiff(whole, want[last*vocab:])
			if d > vlmLogitsTol {
				t.Errorf("whole prompt, last position: max |diff| %.3g at %d", d, at)
			}
			if got := sample.Argmax(whole); got != c.LastArgmax {
				t.Errorf("greedy token %d, reference %d", got, c.LastArgmax)
			}

			var cuts []int
			for pos := 1; pos <= len(ids); pos++ {
				inside := false
				for _, sp := range spans {
					inside = inside || (pos > sp.Start && pos < sp.End)
				}
				if !inside {
					cuts = append(cuts, pos)
				}
			}
			worst := 0.0
			for i, logits := range x.run(t, ids, spans, embeds, cuts) {
				pos := cuts[i] - 1
				d, at := maxAbsDiff(logits, want[pos*vocab:(pos+1)*vocab])
				worst = max(worst, d)
				if d > vlmLogitsTol {
					t.Errorf("position %d: max |diff| %.3g at %d", pos, d, at)
				}
			}
			t.Logf("%d tokens, %d images: whole prompt last position max |diff| %.3g; %d chunks, worst %.3g", len(ids), len(spans), d, len(cuts), worst)
		})
	}
}

// TestVLMSteering: the image changes the answer, the same image gives the
// same answer, and a causal reading of the image (no bidirectional span)
// is not what the model computes.
func TestVLMSteering(t *testing.T) {
	fx := readVLMFixture(t)
	x := openTinyVLM(t)
	var c vlmCase
	for _, cc := range readVLMCases(t) {
		if cc.Name == "one_image" {
			c = cc
		}
	}
	if len(c.Spans) != 1 {
		t.Fatal("fixture has no one_image case")
	}
	sp := kvpool.Span{Start: c.Spans[0][0], End: c.Spans[0][1]}
	spans := []kvpool.Span{sp}
	logits := func(img []float32, spans []kvpool.Span) []float32 {
		return x.run(t, c.IDs, spans, []kvpool.Embed{{Pos: sp.Start, Rows: sp.End - sp.Start, Data: img}}, []int{len(c.IDs)})[0]
	}
	a0, a1 := x.soft(t, fx, 0), x.soft(t, fx, 1)
	la, lb, la2 := logits(a0, spans), logits(a1, spans), logits(a0, spans)
	if d, _ := maxAbsDiff(la, la2); d != 0 {
		t.Errorf("the same image twice: logits differ by %.3g", d)
	}
	if d, _ := maxAbsDiff(la, lb); d < 1e-2 {
		t.Errorf("two images: logits differ by only %.3g", d)
	}
	if d, _ := maxAbsDiff(la, logits(a0, nil)); d < 1e-3 {
		t.Errorf("bidirectional and causal image attention differ by only %.3g", d)
	}
	t.Logf("greedy tokens: image0 %d, image1 %d", sample.Argmax(la), sample.Argmax(lb))

	// A text row in the same step as an image row: its logits are those it
	// gets alone, up to summation order.
	text := x.m.Tokenizer.Encode("<bos><start_of_turn>user\nHello there.<end_of_turn>\n<start_of_turn>model\n", tokenizer.EncodeOptions{ParseSpecial: true})
	alone := x.run(t, text, nil, nil, []int{len(text)})[0]
	var together []float32
	var err error
	x.th.Do(func() {
		a, b := x.st.NewSeq(), x.st.NewSeq()
		defer a.Free()
		defer b.Free()
		f := mlx.NewFrame(x.s)
		defer f.Free()
		rows := []kvpool.Row{
			{Seq: a, Tokens: c.IDs, Sample: true, Spans: spans, Embeds: []kvpool.Embed{{Pos: sp.Start, Rows: sp.End - sp.Start, Data: a0}}},
			{Seq: b, Tokens: text, Sample: true},
		}
		out := f.ToFloat32s(x.st.ForwardRows(f, rows))
		together = out[len(out)/2:]
		if err = f.Err(); err == nil {
			d, _ := maxAbsDiff(out[:len(out)/2], la)
			if d > vlmLogitsTol {
				err = fmt.Errorf("the image row beside a text row moved by %.3g", d)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	d, at := maxAbsDiff(together, alone)
	if d > vlmLogitsTol || sample.Argmax(together) != sample.Argmax(alone) {
		t.Errorf("text row beside an image row: logits differ by %.3g at %d", d, at)
	}
	t.Logf("text row beside an image row: max |diff| %.3g", d)
}

package gemma4

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
// ids, the images whose soft tokens fill its spans, whether the images'
// placeholders attend to each other (the checkpoint's "vision" setting) or
// every layer is causal, and the reference logits at every position.
type vlmCase struct {
	Name          string  `json:"name"`
	Prompt        string  `json:"prompt"`
	IDs           []int32 `json:"ids"`
	Images        []int   `json:"images"`
	Video         *int    `json:"video"`
	Spans         [][2]int
	Bidirectional bool `json:"bidirectional"`
	Logits        struct {
		File  string `json:"file"`
		Shape []int  `json:"shape"`
	} `json:"logits"`
	LastArgmax int32 `json:"last_argmax"`
}

// tinyVLM is the tiny checkpoint opened as a model (its tokenizer
// included), with its text network (and one built with every layer causal
// over images), its tower and a stepper per network on one MLX thread;
// released when the test ends.
type tinyVLM struct {
	m      *model.Model
	th     *mlx.Thread
	s      mlx.Stream
	w      *model.Weights
	v      *Vision
	st     *model.Stepper // the checkpoint's network
	causal *model.Stepper // VisionBidirectional off
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
		var net, causal *Model
		if net, err = New(m.Config, x.w); err != nil {
			return
		}
		cc := m.Config
		g := *cc.Gemma4
		g.VisionBidirectional = false
		cc.Gemma4 = &g
		if causal, err = New(cc, x.w); err != nil {
			return
		}
		if x.v, err = LoadVision(vlmDir, x.s, m.Config.ActDType); err != nil {
			return
		}
		if x.st, err = model.NewStepper(net, x.s); err != nil {
			return
		}
		x.causal, err = model.NewStepper(causal, x.s)
	})
	t.Cleanup(func() {
		x.th.Do(func() {
			for _, st := range []*model.Stepper{x.st, x.causal} {
				if st != nil {
					st.Close()
				}
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

// soft runs our preprocessing, tower and embedder on fixture image i.
func (x *tinyVLM) soft(t *testing.T, fx *vlmFixture, i int) []float32 {
	t.Helper()
	rgb, w, h := fx.image(t, i)
	return x.encode(t, x.v.Processor, rgb, w, h)
}

// frameSoft runs our frame preprocessing, tower and embedder on frame i of
// the fixture's video.
func (x *tinyVLM) frameSoft(t *testing.T, fx *vlmFixture, i int) []float32 {
	t.Helper()
	rgb, w, h := fx.frame(t, i)
	return x.encode(t, x.v.Frames, rgb, w, h)
}

// encode preprocesses an RGB image with proc and runs the tower and
// embedder on it.
func (x *tinyVLM) encode(t *testing.T, proc ImageProcessor, rgb []uint8, w, h int) []float32 {
	t.Helper()
	p, err := proc.Preprocess(rgb, w, h)
	if err != nil {
		t.Fatal(err)
	}
	var out []float32
	x.th.Do(func() {
		f := mlx.NewFrame(x.s)
		defer f.Free()
		out = f.ToFloat32s(x.v.Encode(f, p))
		err = f.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// run feeds ids to a fresh sequence of st in chunks ending at cuts (the
// last cut is len(ids)) and returns the logits at each chunk's last token.
func (x *tinyVLM) run(t *testing.T, st *model.Stepper, ids []int32, spans []kvpool.Span, embeds []kvpool.Embed, cuts []int) [][]float32 {
	t.Helper()
	var seq *kvpool.Seq
	x.th.Do(func() { seq = st.NewSeq() })
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
			logits = f.ToFloat32s(st.ForwardRows(f, []kvpool.Row{row}))
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

// chunkEnds cuts a prompt of n tokens into chunks of up to every tokens,
// never inside a span: a chunk that reaches an image's run takes all of it
// and ends with it.
func chunkEnds(n, every int, spans []kvpool.Span) []int {
	var cuts []int
	from := 0
	for pos := 1; pos <= n; pos++ {
		inside, runEnd := false, false
		for _, sp := range spans {
			inside = inside || (pos > sp.Start && pos < sp.End)
			runEnd = runEnd || pos == sp.End
		}
		if !inside && (pos-from >= every || pos == n || runEnd) {
			cuts = append(cuts, pos)
			from = pos
		}
	}
	return cuts
}

// TestVLMLogits checks the language model reading soft tokens against the
// reference logits, for a text-only prompt, one image (with the
// checkpoint's bidirectional image blocks and with every layer causal) and
// two images: the tokenizer makes the fixture's ids of the expanded
// prompt, the soft tokens come from our own preprocessing and tower, and
// the prompt is fed whole and then in chunks of a few tokens that never
// split an image's placeholder run, so the logits of every position
// outside the images, and of each image's last, are compared.
func TestVLMLogits(t *testing.T) {
	fx := readVLMFixture(t)
	x := openTinyVLM(t)
	vocab := x.m.Config.Vocab
	softs := map[int][]float32{}
	for _, c := range fx.Cases {
		t.Run(c.Name, func(t *testing.T) {
			ids := x.m.Tokenizer.Encode(c.Prompt, tokenizer.EncodeOptions{ParseSpecial: true})
			if !slices.Equal(ids, c.IDs) {
				t.Fatalf("tokenizer: %v\nwant %v", ids, c.IDs)
			}
			want := readF32(t, filepath.Join(vlmDir, c.Logits.File))
			if len(want) != len(ids)*vocab || !slices.Equal(c.Logits.Shape, []int{len(ids), vocab}) {
				t.Fatalf("reference logits: %d values, shape %v, for %d tokens", len(want), c.Logits.Shape, len(ids))
			}
			st := x.st
			if !c.Bidirectional {
				st = x.causal
			}
			var spans []kvpool.Span
			var embeds []kvpool.Embed
			if c.Video != nil {
				spans, embeds = x.videoSpans(t, fx, c, ids)
			} else if len(c.Spans) != len(c.Images) {
				t.Fatalf("%d spans for %d images", len(c.Spans), len(c.Images))
			}
			for i, sp := range c.Spans[:len(c.Images)] {
				img := c.Images[i]
				if softs[img] == nil {
					softs[img] = x.soft(t, fx, img)
				}
				if n := sp[1] - sp[0]; n != x.v.Tokens(fx.Images[img].Width, fx.Images[img].Height) || ids[sp[0]-1] != x.v.Config.StartOfImage || ids[sp[1]] != x.v.Config.EndOfImage {
					t.Fatalf("span %v is not image %d's run", sp, img)
				}
				for pos := sp[0]; pos < sp[1]; pos++ {
					if ids[pos] != x.v.Config.ImageToken {
						t.Fatalf("span %v holds token %d at %d", sp, ids[pos], pos)
					}
				}
				spans = append(spans, kvpool.Span{Start: sp[0], End: sp[1]})
				embeds = append(embeds, kvpool.Embed{Pos: sp[0], Rows: sp[1] - sp[0], Data: softs[img]})
			}

			whole := x.run(t, st, ids, spans, embeds, []int{len(ids)})[0]
			last := len(ids) - 1
			d, at := maxAbsDiff(whole, want[last*vocab:])
			if d > vlmLogitsTol {
				t.Errorf("whole prompt, last position: max |diff| %.3g at %d", d, at)
			}
			if got := sample.Argmax(whole); got != c.LastArgmax {
				t.Errorf("greedy token %d, reference %d", got, c.LastArgmax)
			}

			cuts := chunkEnds(len(ids), 5, spans)
			worst := 0.0
			for i, logits := range x.run(t, st, ids, spans, embeds, cuts) {
				pos := cuts[i] - 1
				d, at := maxAbsDiff(logits, want[pos*vocab:(pos+1)*vocab])
				worst = max(worst, d)
				if d > vlmLogitsTol {
					t.Errorf("position %d: max |diff| %.3g at %d", pos, d, at)
				}
			}
			t.Logf("%d tokens, %d media spans: whole prompt last position max |diff| %.3g; %d chunks, worst %.3g", len(ids), len(spans), d, len(cuts), worst)
		})
	}
}

// videoSpans checks the video case's spans (one run of video placeholders
// per frame, bracketed, after the frame's timestamp) and pairs them with
// the frames' soft tokens from our preprocessing and tower, which must be
// the reference's.
func (x *tinyVLM) videoSpans(t *testing.T, fx *vlmFixture, c vlmCase, ids []int32) ([]kvpool.Span, []kvpool.Embed) {
	t.Helper()
	v := fx.Videos[*c.Video]
	want, _ := fx.tensor(t, "video_soft_tokens_0")
	if len(c.Spans) != v.Frames || len(want) != v.Frames*v.TokensPerFrame*x.m.Config.Hidden {
		t.Fatalf("%d spans, %d soft values for %d frames", len(c.Spans), len(want), v.Frames)
	}
	var spans []kvpool.Span
	var embeds []kvpool.Embed
	for i, sp := range c.Spans {
		if n := sp[1] - sp[0]; n != v.TokensPerFrame || n != x.v.Frames.Tokens(v.Width, v.Height) || ids[sp[0]-1] != x.v.Config.StartOfImage || ids[sp[1]] != x.v.Config.EndOfImage {
			t.Fatalf("span %v is not frame %d's run", sp, i)
		}
		for pos := sp[0]; pos < sp[1]; pos++ {
			if ids[pos] != x.v.Config.VideoToken {
				t.Fatalf("span %v holds token %d at %d", sp, ids[pos], pos)
			}
		}
		stamp := FrameStamp(time.Duration(v.Timestamps[i] * float64(time.Second)))
		if !strings.HasSuffix(x.m.Tokenizer.Decode(ids[:sp[0]-1]), stamp+" ") {
			t.Errorf("frame %d's run does not follow %q", i, stamp+" ")
		}
		soft := x.frameSoft(t, fx, i)
		d, _ := maxAbsDiff(soft, want[i*len(soft):(i+1)*len(soft)])
		t.Logf("frame %d: soft tokens max |diff| %.3g", i, d)
		if d > visionTol {
			t.Errorf("frame %d: soft tokens differ by %.3g", i, d)
		}
		spans = append(spans, kvpool.Span{Start: sp[0], End: sp[1]})
		embeds = append(embeds, kvpool.Embed{Pos: sp[0], Rows: sp[1] - sp[0], Data: soft})
	}
	return spans, embeds
}

// TestVLMEveryPosition feeds two_images one token at a time outside the
// images (each image's run one step), comparing the logits of every
// position but those inside an image.
func TestVLMEveryPosition(t *testing.T) {
	fx := readVLMFixture(t)
	x := openTinyVLM(t)
	vocab := x.m.Config.Vocab
	var c vlmCase
	for _, cc := range fx.Cases {
		if cc.Name == "two_images" {
			c = cc
		}
	}
	if len(c.Spans) != 2 {
		t.Fatal("fixture has no two_images case")
	}
	want := readF32(t, filepath.Join(vlmDir, c.Logits.File))
	var spans []kvpool.Span
	var embeds []kvpool.Embed
	for i, sp := range c.Spans {
		spans = append(spans, kvpool.Span{Start: sp[0], End: sp[1]})
		embeds = append(embeds, kvpool.Embed{Pos: sp[0], Rows: sp[1] - sp[0], Data: x.soft(t, fx, c.Images[i])})
	}
	cuts := chunkEnds(len(c.IDs), 1, spans)
	worst := 0.0
	for i, logits := range x.run(t, x.st, c.IDs, spans, embeds, cuts) {
		pos := cuts[i] - 1
		d, _ := maxAbsDiff(logits, want[pos*vocab:(pos+1)*vocab])
		worst = max(worst, d)
		if d > vlmLogitsTol {
			t.Errorf("position %d: max |diff| %.3g", pos, d)
		}
	}
	t.Logf("%d steps, worst %.3g", len(cuts), worst)
}

// TestVLMSteering: the image changes the answer, the same image gives the
// same answer, the placeholders' per-layer inputs are the pad token's, and
// a text row stepped beside an image row keeps its logits.
func TestVLMSteering(t *testing.T) {
	fx := readVLMFixture(t)
	x := openTinyVLM(t)
	var c vlmCase
	for _, cc := range fx.Cases {
		if cc.Name == "one_image" {
			c = cc
		}
	}
	if len(c.Spans) != 1 {
		t.Fatal("fixture has no one_image case")
	}
	sp := kvpool.Span{Start: c.Spans[0][0], End: c.Spans[0][1]}
	spans := []kvpool.Span{sp}
	a0 := x.soft(t, fx, 0)
	logits := func(ids []int32, img []float32) []float32 {
		return x.run(t, x.st, ids, spans, []kvpool.Embed{{Pos: sp.Start, Rows: sp.End - sp.Start, Data: img}}, []int{len(ids)})[0]
	}
	rev := make([]float32, 0, len(a0))
	H := x.m.Config.Hidden
	for r := len(a0)/H - 1; r >= 0; r-- {
		rev = append(rev, a0[r*H:(r+1)*H]...)
	}
	la, la2, lr := logits(c.IDs, a0), logits(c.IDs, a0), logits(c.IDs, rev)
	if d, _ := maxAbsDiff(la, la2); d != 0 {
		t.Errorf("the same image twice: logits differ by %.3g", d)
	}
	if d, _ := maxAbsDiff(la, lr); d < 1e-2 {
		t.Errorf("the soft tokens reversed: logits differ by only %.3g", d)
	}
	// The placeholder is looked up as the pad token: the same prompt with
	// the pad id in the image's positions computes the same.
	padded := slices.Clone(c.IDs)
	for i := sp.Start; i < sp.End; i++ {
		padded[i] = x.m.Config.Gemma4.PadToken
	}
	if d, _ := maxAbsDiff(la, logits(padded, a0)); d != 0 {
		t.Errorf("placeholders and pad tokens under the soft tokens: logits differ by %.3g", d)
	}

	text := x.m.Tokenizer.Encode("<bos><|turn>user\nHello there.<turn|>\n<|turn>model\n", tokenizer.EncodeOptions{ParseSpecial: true})
	alone := x.run(t, x.st, text, nil, nil, []int{len(text)})[0]
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
			if d, _ := maxAbsDiff(out[:len(out)/2], la); d > vlmLogitsTol {
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

package gemma3

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/goprovider/provider/internal/reftest"
	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/tokenizer"
)

// The fixtures under testdata/ref/gemma3 come from llama.cpp
// (scripts/gen_gemma3_fixtures.py); testdata/ref/README.md gives the format.

type refStep struct {
	Step   int         `json:"step"`
	Token  int32       `json:"token"`
	Top    [][]float64 `json:"top"`
	Margin float64     `json:"margin"`
}

type refPrompt struct {
	Index        int               `json:"index"`
	Prompt       string            `json:"prompt"`
	AddSpecial   bool              `json:"add_special"`
	ParseSpecial bool              `json:"parse_special"`
	PromptTokens []int32           `json:"prompt_tokens"`
	NSWAOverride int               `json:"n_swa_override"`
	Generated    []int32           `json:"generated_tokens"`
	FullLogits   map[string]string `json:"full_logits"`
	Steps        []refStep         `json:"steps"`
}

type refFixture struct {
	Model struct {
		SHA256 string  `json:"sha256"`
		NVocab int     `json:"n_vocab"`
		NSWA   int     `json:"n_swa"`
		EOG    []int32 `json:"eog_ids"`
	} `json:"model"`
	Prompts []refPrompt `json:"prompts"`
}

func readFixture(t *testing.T, dir string) *refFixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "fixture.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx refFixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	return &fx
}

// refCase is one llama.cpp reference and the tolerance its numerics allow.
type refCase struct {
	name, dir string
	num       numerics
	// logitTol bounds |ours - llama.cpp| per logit, on the full vectors and
	// on the top-10 of every step.
	logitTol float64
	// tieMargin: a step whose llama.cpp top-1 minus top-2 logit is at most
	// this is a near-tie, where greedy may part from the reference.
	tieMargin float64
}

// refCases. f32 is llama.cpp on the same weight values stored as F32, so
// both sides multiply with float activations and the GELU runs through
// llama.cpp's binary16 table on both; what differs is float summation
// order (and RoPE angles computed another way), which Gemma's large
// residual stream amplifies: measured max |diff| 2.6e-3 to 3.5e-3 on the
// full step-0 vectors, at most 1.4e-2 on any top-10 logit over 16 steps
// (our own chunked against one-chunk prefill differ by 1e-4). Since the
// CPU runs the 5-bit matrices in its 8-bit kernel (same values, another
// summation order) one step-0 vector (prompt 3) differs by up to 2.2e-2,
// the others by 3e-3 to 5e-3.
//
// q4_k_m is the shipped file, where llama.cpp also rounds the activations
// entering every quantized matmul to 8-bit blocks (Q8_0 against Q5_0 and
// Q8_0 weights, Q8_K against Q4_K and Q6_K). Ours emulates that rounding
// (quantizedActivations), which cuts the rms logit error about fourfold
// (0.85 to 0.21 at step 0 of prompt 0), but not bit for bit, and the
// rounding is discontinuous: measured max |diff| up to 2.1, so greedy
// agrees only until the first step where llama.cpp's margin is below about
// 0.4.
var refCases = []refCase{
	{"f32", "../../testdata/ref/gemma3/f32", numerics{geluTable: true}, 0.03, 0.04},
	{"q4_k_m", "../../testdata/ref/gemma3/q4_k_m", numerics{quantizedActivations: true, geluTable: true}, 2.5, 0.5},
}

// TestMatchesLlamaCpp checks, per reference prompt: our tokenization of the
// rendered chat prompt; free-running greedy decoding (our own argmax fed
// back) against llama.cpp's tokens; the top-10 logits of every step and the
// full logit vectors the fixture holds, within the case's tolerance. Where
// greedy parts from the reference at a near-tie, the rest is checked
// teacher-forced with llama.cpp's tokens.
func TestMatchesLlamaCpp(t *testing.T) {
	for _, rc := range refCases {
		t.Run(rc.name, func(t *testing.T) {
			fx := readFixture(t, rc.dir)
			l := load(t, rc.num, nil)
			if fx.Model.NVocab != l.cfg.Vocab || fx.Model.NSWA != l.cfg.Kinds[0].Window {
				t.Fatalf("fixture vocab %d window %d, model %d %d", fx.Model.NVocab, fx.Model.NSWA, l.cfg.Vocab, l.cfg.Kinds[0].Window)
			}
			for _, id := range fx.Model.EOG {
				if id != 212 && !slices.Contains(l.cfg.EOS, id) { // 212 is <end_of_image>
					t.Errorf("llama.cpp ends generation at %d, our EOS set %v does not", id, l.cfg.EOS)
				}
			}
			for _, p := range fx.Prompts {
				t.Run(fmt.Sprint("prompt", p.Index), func(t *testing.T) {
					l := l
					if p.NSWAOverride > 0 {
						l = load(t, rc.num, withWindow(p.NSWAOverride))
					}
					checkPrompt(t, rc, l, p)
				})
			}
		})
	}
}

func checkPrompt(t *testing.T, rc refCase, l *loaded, p refPrompt) {
	ids := l.m.Tokenizer.Encode(p.Prompt, tokenizer.EncodeOptions{AddSpecial: p.AddSpecial, ParseSpecial: p.ParseSpecial})
	if !slices.Equal(ids, p.PromptTokens) {
		t.Errorf("tokenization:\n ours %v\n llama.cpp %v", ids, p.PromptTokens)
	}
	worst := 0.0
	// compare checks one step's logits against the reference's top-10 and,
	// when recorded, its full vector.
	compare := func(s int, logits []float32) {
		for _, e := range p.Steps[s].Top {
			d := math.Abs(float64(logits[int(e[0])]) - e[1])
			worst = math.Max(worst, d)
			if d > rc.logitTol {
				t.Errorf("step %d token %d: logit %.6g, llama.cpp %.6g", s, int(e[0]), logits[int(e[0])], e[1])
			}
		}
		if file, ok := p.FullLogits[fmt.Sprint(s)]; ok {
			d, at := maxAbsDiff(logits, readF32(t, filepath.Join(rc.dir, file)))
			if d > rc.logitTol {
				t.Errorf("step %d: max |logit diff| %.4g at token %d > %.3g", s, d, at, rc.logitTol)
			} else {
				t.Logf("step %d: full logits, max |diff| %.3g", s, d)
			}
		}
	}

	c := l.newSeq(t)
	next := p.PromptTokens
	firstDiff := -1
	for s := range p.Generated {
		logits := l.step(t, [][]int32{next}, []*kvpool.Seq{c})
		tok := sample.Argmax(logits)
		if firstDiff < 0 {
			compare(s, logits)
			if tok != p.Generated[s] {
				firstDiff = s
			}
		}
		next = []int32{tok}
	}
	if firstDiff < 0 {
		t.Logf("greedy: all %d tokens identical; worst top-10 logit diff %.3g", len(p.Generated), worst)
		return
	}
	if m := p.Steps[firstDiff].Margin; m > rc.tieMargin {
		t.Errorf("greedy diverges at step %d where llama.cpp's margin is %.3g", firstDiff, m)
	}
	// Teacher forcing from the divergence on.
	forced := l.newSeq(t)
	l.step(t, [][]int32{append(slices.Clone(p.PromptTokens), p.Generated[:firstDiff]...)}, []*kvpool.Seq{forced})
	checked := 0
	for s := firstDiff + 1; s < len(p.Generated); s++ {
		logits := l.step(t, [][]int32{{p.Generated[s-1]}}, []*kvpool.Seq{forced})
		compare(s, logits)
		if p.Steps[s].Margin > rc.tieMargin {
			checked++
			if got := sample.Argmax(logits); got != p.Steps[s].Token {
				t.Errorf("forced step %d: argmax %d, llama.cpp %d (margin %.3g)", s, got, p.Steps[s].Token, p.Steps[s].Margin)
			}
		}
	}
	t.Logf("greedy: identical for %d tokens, then a near-tie (llama.cpp margin %.3g) went the other way; forced: %d steps checked; worst top-10 logit diff %.3g",
		firstDiff, p.Steps[firstDiff].Margin, checked, worst)
}

// TestWindowSizeIsObservable shows that the window prompts pin the window:
// attending over one key more or one fewer than the window llama.cpp ran
// with moves the step-0 logits well past the tolerance the right window
// meets in TestMatchesLlamaCpp.
func TestWindowSizeIsObservable(t *testing.T) {
	rc := refCases[0]
	fx := readFixture(t, rc.dir)
	var p *refPrompt
	for i := range fx.Prompts {
		q := &fx.Prompts[i]
		if q.NSWAOverride > 0 && len(q.PromptTokens) > q.NSWAOverride && q.FullLogits["0"] != "" {
			p = q
			break
		}
	}
	if p == nil {
		t.Fatal("fixture has no prompt longer than its window with full logits")
	}
	ref := readF32(t, filepath.Join(rc.dir, p.FullLogits["0"]))
	for _, delta := range []int{-1, 1} {
		l := load(t, rc.num, withWindow(p.NSWAOverride+delta))
		got := l.step(t, [][]int32{p.PromptTokens}, []*kvpool.Seq{l.newSeq(t)})
		d, _ := maxAbsDiff(got, ref)
		if d < 10*rc.logitTol {
			t.Errorf("window %d: max |logit diff| %.3g is within 10x the tolerance %.3g", p.NSWAOverride+delta, d, rc.logitTol)
		}
		t.Logf("window %d: max |logit diff| vs llama.cpp (window %d) %.3g", p.NSWAOverride+delta, p.NSWAOverride, d)
	}
}

// The fixture helpers every reference suite shares.
var (
	readF32    = reftest.ReadF32
	maxAbsDiff = reftest.MaxAbsDiff
)

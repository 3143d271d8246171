package stages

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/stages/stagestest"
)

// Admit makes one generation per choice: n per prompt, in index order,
// with ids and seeds that tell them apart.
func TestAdmitChoices(t *testing.T) {
	cat := testCatalog(t)
	type choice struct {
		id     engine.RequestID
		prompt []int32
		seed   int64 // -1: none
		max    int
	}
	tests := []struct {
		name string
		body string
		want []choice
		code Code
	}{
		{
			name: "n=3 seeded",
			body: `{"model":"stories","prompt":[1,2],"n":3,"seed":10,"max_tokens":5}`,
			want: []choice{{"req", []int32{1, 2}, 10, 5}, {"req#1", []int32{1, 2}, 11, 5}, {"req#2", []int32{1, 2}, 12, 5}},
		},
		{
			name: "n=2 without a seed",
			body: `{"model":"stories","prompt":[7],"n":2,"max_tokens":5}`,
			want: []choice{{"req", []int32{7}, -1, 5}, {"req#1", []int32{7}, -1, 5}},
		},
		{
			name: "two token prompts, n=2: each prompt's bound from its length",
			body: `{"model":"stories","prompt":[[1,2,3],[4]],"n":2}`,
			want: []choice{{"req", []int32{1, 2, 3}, -1, 509}, {"req#1", []int32{1, 2, 3}, -1, 509}, {"req#2", []int32{4}, -1, 511}, {"req#3", []int32{4}, -1, 511}},
		},
		{
			name: "a later prompt past the context",
			body: `{"model":"stories","prompt":[[1],[1,2,3]],"max_tokens":510}`,
			code: CodeContextLength,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := parsed(t, cat, Completion, tc.body)
			req.Input.CallerID = "req"
			if err := (Template{}).Apply(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			err := Admit{}.Apply(context.Background(), req)
			if tc.code != "" {
				var inv *Invalid
				if !errors.As(err, &inv) || inv.Code != tc.code {
					t.Fatalf("err = %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gens := append([]*engine.Generation{req.Generation}, req.More...)
			if len(gens) != len(tc.want) || req.Params.Choices() != len(tc.want) {
				t.Fatalf("%d generations, Choices %d, want %d", len(gens), req.Params.Choices(), len(tc.want))
			}
			for i, g := range gens {
				w := tc.want[i]
				seed := int64(-1)
				if g.Sampling.Seed != nil {
					seed = int64(*g.Sampling.Seed)
				}
				if g.ID != w.id || !slices.Equal(g.Prompt, w.prompt) || seed != w.seed || g.MaxTokens != w.max {
					t.Errorf("choice %d: id %q prompt %v seed %d max %d, want %+v", i, g.ID, g.Prompt, seed, g.MaxTokens, w)
				}
			}
			if s := req.Params.Sampling.Seed; s != nil && *s != 10 {
				t.Fatal("Admit changed the request's seed")
			}
		})
	}
}

// Text prompts are tokenized one by one, the vocabulary's BOS added to
// each.
func TestTemplateTokenizesEveryPrompt(t *testing.T) {
	cat := testCatalog(t)
	req := parsed(t, cat, Completion, `{"model":"stories","prompt":["Once","Lily"]}`)
	if err := (Template{}).Apply(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	tok := cat["stories"].Tokenizer
	if len(req.MoreTokens) != 1 || req.MoreTokens[0][0] != tok.BOS() || tok.Decode(req.MoreTokens[0]) != "Lily" || tok.Decode(req.Tokens) != "Once" {
		t.Fatalf("tokens %v, more %v", req.Tokens, req.MoreTokens)
	}
}

// admitted runs a completion body through Template and Admit, and submits
// every choice to fake.
func admitted(t *testing.T, body string, fake *stagestest.Engine) (*Request, *Admitted) {
	t.Helper()
	req := parsed(t, testCatalog(t), Completion, body)
	req.Input.CallerID = "r"
	for _, s := range []Stage{Template{}, Admit{}} {
		if err := s.Apply(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	submit := func(g *engine.Generation) Admitted {
		ctx, stop := context.WithCancel(context.Background())
		t.Cleanup(stop)
		ev, err := fake.Submit(ctx, *g)
		if err != nil {
			t.Fatal(err)
		}
		return Admitted{Events: ev, Stop: stop}
	}
	adm := submit(req.Generation)
	for _, g := range req.More {
		adm.More = append(adm.More, submit(g))
	}
	return req, &adm
}

// The merged token path runs each choice's own path (its stop strings,
// its prompt) and ends with one final Delta carrying the response's usage:
// prompt tokens once per prompt, completion tokens of every choice.
func TestMergedChoices(t *testing.T) {
	fake := &stagestest.Engine{Script: func(g engine.Generation) stagestest.Play {
		ids := story
		if g.ID == "r#3" {
			ids = story[:4] // " Once upon a time"
		}
		return stagestest.Play{Events: stagestest.Tokens(g, ids, engine.FinishLength)}
	}}
	req, adm := admitted(t, `{"model":"stories","prompt":[[1,5,6],[1,7]],"n":2,"stop":["little"]}`, fake)
	var deltas []Delta
	for d := range (Detokenizer{}).Run(context.Background(), req, adm) {
		deltas = append(deltas, d)
	}
	text := make([]string, 4)
	finish := make([]string, 4)
	var remaining []int
	for i, d := range deltas {
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		text[d.Index] += d.Text
		if d.Finish != "" {
			finish[d.Index] = d.Finish
			remaining = append(remaining, d.Remaining)
		}
		if d.Final() != (i == len(deltas)-1) {
			t.Fatalf("delta %d of %d: Final %v", i, len(deltas), d.Final())
		}
	}
	cut := "Once upon a time, there was a "
	if !slices.Equal(text, []string{cut, cut, cut, "Once upon a time"}) || !slices.Equal(finish, []string{"stop", "stop", "stop", "length"}) {
		t.Fatalf("texts %q finishes %v", text, finish)
	}
	if !slices.Equal(remaining, []int{3, 2, 1, 0}) {
		t.Fatalf("remaining %v", remaining)
	}
	// Choices stopped by "little" count the tokens up to it (9 each).
	last := deltas[len(deltas)-1]
	if want := (engine.Usage{PromptTokens: 3 + 2, CompletionTokens: 9 + 9 + 9 + 4}); last.Usage != want {
		t.Fatalf("usage %+v, want %+v", last.Usage, want)
	}
}

// An error in one choice ends the response: it is the final Delta, the
// other choices' rows are cancelled and nothing follows.
func TestMergedChoicesFailTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &stagestest.Engine{Script: func(g engine.Generation) stagestest.Play {
			if g.ID == "r#1" {
				return stagestest.Play{Events: []engine.Event{{Kind: engine.EventError, Reason: engine.FinishError, Err: engine.ErrStepFailed}}}
			}
			return stagestest.Play{Events: stagestest.Tokens(g, story[:2], 0), Hold: true}
		}}
		req, adm := admitted(t, `{"model":"stories","prompt":"x","n":3}`, fake)
		var deltas []Delta
		for d := range (Detokenizer{}).Run(context.Background(), req, adm) {
			deltas = append(deltas, d)
		}
		last := deltas[len(deltas)-1]
		if !errors.Is(last.Err, engine.ErrStepFailed) || last.Index != 1 {
			t.Fatalf("last delta %+v", last)
		}
		for _, d := range deltas[:len(deltas)-1] {
			if d.Final() {
				t.Fatalf("a final delta before the last: %+v", d)
			}
		}
		for _, id := range []engine.RequestID{"r", "r#2"} {
			if !fake.Cancelled(id) {
				t.Errorf("%s not cancelled", id)
			}
		}
	})
}

// Framer and Collector give every choice its index, its role chunk and
// finish chunk, and the usage and [DONE] once, after the final Delta.
func TestFramingOfChoices(t *testing.T) {
	req := parsed(t, testCatalog(t), Chat, `{"model":"stories","messages":[{"role":"user","content":"x"}],"n":2,"stream":true,"stream_options":{"include_usage":true}}`)
	req.Generation = &engine.Generation{ID: "r"}
	deltas := []Delta{
		{Index: 1, Text: "b"},
		{Index: 0, Text: "a"},
		{Index: 1, Finish: "length", Remaining: 1, Usage: engine.Usage{PromptTokens: 5, CompletionTokens: 1}},
		{Index: 0, Text: "c"},
		{Index: 0, Finish: "stop", Usage: engine.Usage{PromptTokens: 5, CompletionTokens: 3}},
	}
	f := NewFramer(req)
	var frames []string
	for _, d := range deltas {
		for _, b := range f.Frames(d) {
			frames = append(frames, string(b))
		}
	}
	want := []string{
		`"index":1,"delta":{"role":"assistant","content":""}`,
		`"index":1,"delta":{"content":"b"}`,
		`"index":0,"delta":{"role":"assistant","content":""}`,
		`"index":0,"delta":{"content":"a"}`,
		`"index":1,"delta":{},"logprobs":null,"finish_reason":"length"`,
		`"index":0,"delta":{"content":"c"}`,
		`"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"`,
		`"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3`,
		"[DONE]",
	}
	if len(frames) != len(want) {
		t.Fatalf("%d frames, want %d:\n%s", len(frames), len(want), strings.Join(frames, ""))
	}
	for i, w := range want {
		if !strings.Contains(frames[i], w) {
			t.Fatalf("frame %d %q lacks %q", i, frames[i], w)
		}
	}
	c := NewCollector(req)
	for _, d := range deltas {
		c.Add(d)
	}
	var body struct {
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(c.JSON(), &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Choices) != 2 || body.Choices[0].Message.Content != "ac" || body.Choices[1].Message.Content != "b" ||
		body.Choices[0].FinishReason != "stop" || body.Choices[1].FinishReason != "length" || body.Choices[1].Index != 1 || body.Usage.Completion != 3 {
		t.Fatalf("collected %s", c.JSON())
	}
}

package harmony

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/harmony/harmonytest"
	"github.com/goprovider/provider/stages"
	"github.com/goprovider/provider/stages/stagestest"
	"github.com/goprovider/provider/tokenizer"
)

// parseCase is a generation as gpt-oss writes it after the prompt's
// "<|start|>assistant" (special-token text is encoded as the special
// tokens), and what the client must see of it.
type parseCase struct {
	name      string
	generated string
	content   string
	reasoning string
	// analysis lists the bodies of analysis messages: their tokens are the
	// reasoning tokens.
	analysis []string
	end      bool // the generation ends on <|return|> or <|call|>
}

var parseCases = []parseCase{
	{name: "analysis then final", generated: harmonytest.Reply, content: harmonytest.ReplyContent,
		reasoning: harmonytest.ReplyReasoning, analysis: []string{harmonytest.ReplyReasoning}, end: true},
	{name: "final only", generated: "<|channel|>final<|message|>Hello! How can I help you today?<|return|>",
		content: "Hello! How can I help you today?", end: true},
	{name: "commentary preamble is content",
		generated: "<|channel|>analysis<|message|>Need to look it up.<|end|><|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>" +
			"<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>",
		content: "Let me check.It is sunny.", reasoning: "Need to look it up.", analysis: []string{"Need to look it up."}, end: true},
	{name: "tool call is not shown",
		generated: "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
		reasoning: "Need the weather.", analysis: []string{"Need the weather."}, end: true},
	{name: "recipient in the prompt's header", generated: " to=functions.lookup<|channel|>commentary json<|message|>{\"q\":1}<|call|>", end: true},
	{name: "builtin tool call in analysis counts as reasoning", generated: "<|channel|>analysis to=python code<|message|>print(1)<|call|>",
		analysis: []string{"print(1)"}, end: true},
	{name: "cut mid analysis", generated: "<|channel|>analysis<|message|>Let me think about 日本語 carefully",
		reasoning: "Let me think about 日本語 carefully", analysis: []string{"Let me think about 日本語 carefully"}},
	{name: "cut mid final", generated: harmonytest.Reply[:strings.Index(harmonytest.Reply, "France is")],
		content: "The capital of ", reasoning: harmonytest.ReplyReasoning, analysis: []string{harmonytest.ReplyReasoning}},
	{name: "cut mid header", generated: "<|channel|>analysis<|message|>Short.<|end|><|start|>assistant<|channel|>fin",
		reasoning: "Short.", analysis: []string{"Short."}},
	{name: "no structure at all", generated: "Paris is the capital of France.", content: "Paris is the capital of France."},
	{name: "plain text that starts like a recipient", generated: "to be or not to be", content: "to be or not to be"},
	{name: "text after a message", generated: "<|channel|>final<|message|>Hi.<|end|> And more.", content: "Hi. And more."},
	{name: "unknown channel", generated: "<|channel|>notes<|message|>Some text.<|return|>", content: "Some text.", end: true},
	{name: "header that is text", generated: "<|channel|>final answer, sure: Paris<|return|>", content: "final answer, sure: Paris", end: true},
	{name: "header too long", generated: "<|channel|>" + strings.Repeat("a ", 70) + "<|message|>x<|return|>",
		content: strings.Repeat("a ", 70) + "x", end: true},
	{name: "channel without start",
		generated: "<|channel|>analysis<|message|>a b<|channel|>final<|message|>c d<|return|>",
		content:   "c d", reasoning: "a b", analysis: []string{"a b"}, end: true},
	{name: "message without header", generated: "<|channel|>final<|message|>one<|end|><|message|>two<|return|>", content: "onetwo", end: true},
	{name: "stray structure in a body", generated: "<|channel|>final<|message|>x<|constrain|>y<|message|>z<|endoftext|>!<|return|>",
		content: "xyz!", end: true},
	{name: "characters split over tokens",
		generated: "<|channel|>analysis<|message|>🦄🦄 ok<|end|><|start|>assistant<|channel|>final<|message|>𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓<|return|>",
		content:   "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓", reasoning: "🦄🦄 ok", analysis: []string{"🦄🦄 ok"}, end: true},
	{name: "nothing after the end", generated: "<|channel|>final<|message|>Done.<|return|>More.<|start|>assistant", content: "Done.", end: true},
}

func vocab(t *testing.T) (*tokenizer.Tokenizer, *Vocab) {
	t.Helper()
	tok := harmonytest.Tokenizer(t)
	v, err := NewVocab(tok)
	if err != nil {
		t.Fatal(err)
	}
	return tok, v
}

// reasoningTokens counts the tokens of the analysis bodies.
func reasoningTokens(tok *tokenizer.Tokenizer, bodies []string) int {
	n := 0
	for _, b := range bodies {
		n += len(harmonytest.Encode(tok, b))
	}
	return n
}

// specials are the texts that must never reach a client.
var specials = []string{"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>", "<|endoftext|>"}

func checkText(t *testing.T, what, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Fatalf("%s %q is not valid UTF-8", what, s)
	}
	for _, sp := range specials {
		if strings.Contains(s, sp) {
			t.Fatalf("%s %q shows %s", what, s, sp)
		}
	}
}

// The parser, fed one token at a time, splits every case as the client
// must see it and counts the analysis bodies' tokens as reasoning.
func TestParser(t *testing.T) {
	tok, v := vocab(t)
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			p := v.NewParser()
			var content, reasoning strings.Builder
			reasoned, end := 0, false
			for _, id := range harmonytest.Encode(tok, tc.generated) {
				o := p.Add(id)
				if end && (o.Content != "" || o.Reasoning != "" || o.Kind != stages.StructureToken) {
					t.Fatalf("output %+v after the end", o)
				}
				checkText(t, "content", o.Content)
				checkText(t, "reasoning", o.Reasoning)
				content.WriteString(o.Content)
				reasoning.WriteString(o.Reasoning)
				if o.Kind == stages.ReasoningToken {
					reasoned++
				}
				end = end || o.End
			}
			if !end {
				o := p.Flush()
				content.WriteString(o.Content)
				reasoning.WriteString(o.Reasoning)
			}
			if content.String() != tc.content || reasoning.String() != tc.reasoning || end != tc.end {
				t.Fatalf("content %q reasoning %q end %v\nwant %q, %q, %v", content.String(), reasoning.String(), end, tc.content, tc.reasoning, tc.end)
			}
			if want := reasoningTokens(tok, tc.analysis); reasoned != want {
				t.Fatalf("%d reasoning tokens, want %d", reasoned, want)
			}
		})
	}
}

// chunked scripts ids as engine deltas of 1 to 5 tokens (a fixed seed per
// chunking; seed 0 is one token per delta), each with its logprob, then a
// length finish as the engine reports it.
func chunked(ids []int32, seed uint64) []engine.Event {
	r := rand.New(rand.NewPCG(seed, 7))
	var evs []engine.Event
	for i := 0; i < len(ids); {
		n := 1
		if seed != 0 {
			n = 1 + r.IntN(5)
		}
		n = min(n, len(ids)-i)
		ev := engine.Event{Kind: engine.EventDelta, Tokens: ids[i : i+n]}
		for _, id := range ids[i : i+n] {
			ev.Logprobs = append(ev.Logprobs, engine.Logprob{Token: id, Logprob: -0.25})
		}
		evs = append(evs, ev)
		i += n
	}
	return append(evs, engine.Event{Kind: engine.EventFinished, Reason: engine.FinishLength,
		Usage: engine.Usage{PromptTokens: 4, CompletionTokens: len(ids)}})
}

// streamed is what a client receives of one generation.
type streamed struct {
	content, reasoning string
	finish             string
	usage              engine.Usage
	reasoningTokens    int
	logprobs           int
}

// runTokenPath runs the real token path of a chat request for a gpt-oss
// model over a scripted engine stream, as the server does.
func runTokenPath(t *testing.T, m *stages.Model, evs []engine.Event, logprobs bool) streamed {
	t.Helper()
	fake := &stagestest.Engine{Script: func(engine.Generation) stagestest.Play { return stagestest.Play{Events: evs, Hold: true} }}
	req := &stages.Request{Input: stages.Input{Endpoint: stages.Chat}, Model: m, Tokens: []int32{1, 2, 3, 4},
		Params: &stages.Params{Model: m.Name, Logprobs: logprobs}}
	rowCtx, stop := context.WithCancel(context.Background())
	events, err := fake.Submit(rowCtx, engine.Generation{ID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	var s streamed
	for d := range (stages.Detokenizer{}).Run(context.Background(), req, &stages.Admitted{Events: events, Stop: stop}) {
		if d.Err != nil && !errors.Is(d.Err, context.Canceled) {
			t.Fatalf("stream error %v", d.Err)
		}
		checkText(t, "content delta", d.Text)
		checkText(t, "reasoning delta", d.Reasoning)
		s.content += d.Text
		s.reasoning += d.Reasoning
		s.logprobs += len(d.Logprobs)
		if d.Final() {
			s.finish, s.usage, s.reasoningTokens = d.Finish, d.Usage, d.ReasoningTokens
		}
	}
	return s
}

func gptoss(tok *tokenizer.Tokenizer, v *Vocab, eos []int32) *stages.Model {
	return &stages.Model{Name: "gpt-oss", Architecture: "gpt_oss", Tokenizer: tok, EOS: eos, NewOutputParser: v.NewParser}
}

// Through the token path, every chunking of the engine's deltas gives the
// same content, reasoning, finish and usage; <|return|> and <|call|> end
// the stream with "stop" even when the engine does not stop on them.
func TestTokenPathChunkings(t *testing.T) {
	tok, v := vocab(t)
	m := gptoss(tok, v, nil)
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			ids := harmonytest.Encode(tok, tc.generated)
			want := streamed{content: tc.content, reasoning: tc.reasoning, finish: "length",
				usage: engine.Usage{PromptTokens: 4, CompletionTokens: len(ids)}, reasoningTokens: reasoningTokens(tok, tc.analysis)}
			if tc.end {
				// The stream stops at the end token, which is counted.
				n := len(ids)
				for i, id := range ids {
					if id == v.ret || id == v.call {
						n = i + 1
						break
					}
				}
				want.finish, want.usage.CompletionTokens = "stop", n
			}
			for seed := range uint64(6) {
				got := runTokenPath(t, m, chunked(ids, seed), false)
				if got != want {
					t.Fatalf("chunking %d: %+v\nwant %+v", seed, got, want)
				}
			}
		})
	}
}

// With <|return|> in the EOS set, as the engine stops on it, the stream
// ends with the engine's finish and the same split.
func TestTokenPathEngineStops(t *testing.T) {
	tok, v := vocab(t)
	m := gptoss(tok, v, tok.EOSSet())
	ids := harmonytest.Encode(tok, harmonytest.Reply)
	ids = ids[:len(ids)-1] // the engine consumes <|return|>
	evs := chunked(ids, 3)
	evs[len(evs)-1].Reason = engine.FinishStop
	got := runTokenPath(t, m, evs, true)
	if got.content != harmonytest.ReplyContent || got.reasoning != harmonytest.ReplyReasoning || got.finish != "stop" ||
		got.reasoningTokens != reasoningTokens(tok, []string{harmonytest.ReplyReasoning}) {
		t.Fatalf("%+v", got)
	}
	// Logprobs are those of the content tokens only.
	if want := len(harmonytest.Encode(tok, harmonytest.ReplyContent)); got.logprobs != want {
		t.Fatalf("%d logprob entries, want %d", got.logprobs, want)
	}
}

// Stop strings apply to the content, not to the reasoning.
func TestTokenPathStopStringInContentOnly(t *testing.T) {
	tok, v := vocab(t)
	m := gptoss(tok, v, nil)
	ids := harmonytest.Encode(tok, harmonytest.Reply)
	fake := &stagestest.Engine{Script: func(engine.Generation) stagestest.Play { return stagestest.Play{Events: chunked(ids, 2), Hold: true} }}
	req := &stages.Request{Input: stages.Input{Endpoint: stages.Chat}, Model: m, Tokens: []int32{1},
		Params: &stages.Params{Model: m.Name, Stop: []string{"Paris"}}}
	rowCtx, stop := context.WithCancel(context.Background())
	events, _ := fake.Submit(rowCtx, engine.Generation{ID: "r"})
	var content, reasoning string
	var finish string
	for d := range (stages.Detokenizer{}).Run(context.Background(), req, &stages.Admitted{Events: events, Stop: stop}) {
		content += d.Text
		reasoning += d.Reasoning
		if d.Final() {
			finish = d.Finish
		}
	}
	if reasoning != harmonytest.ReplyReasoning || content != "The capital of France is " || finish != "stop" {
		t.Fatalf("content %q reasoning %q finish %q", content, reasoning, finish)
	}
}

func TestVocab(t *testing.T) {
	_, v := vocab(t)
	if got := v.StopTokens(); len(got) != 2 || got[0] != 200002 || got[1] != 200012 {
		t.Fatalf("stop tokens %v, want <|return|> 200002 and <|call|> 200012", got)
	}
	if _, err := NewVocab(stagestest.Tokenizer(t)); !errors.Is(err, ErrNotHarmony) {
		t.Fatalf("stories260K vocabulary: %v", err)
	}
}

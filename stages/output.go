package stages

import (
	"github.com/goprovider/provider/tokenizer"
	"github.com/goprovider/provider/toolcall"
)

// TokenKind says what a generated token is part of, as an OutputParser
// sees it.
type TokenKind uint8

// Token kinds. The zero value is content, so a parser that knows of no
// channels reports every token as content.
const (
	// ContentToken produces message content; its logprob entry is
	// reported with the content it produced.
	ContentToken TokenKind = iota
	// ReasoningToken produces reasoning (shown as reasoning_content or
	// hidden) and counts as a reasoning token in usage.
	ReasoningToken
	// StructureToken is message framing or text not meant for the client
	// (harmony headers, a tool call no tool was offered for).
	StructureToken
)

// Output is what an OutputParser releases for one token (or at the end).
// Content and Reasoning are valid UTF-8; they may hold text of earlier
// tokens that the parser held back (an incomplete character, a header it
// could not yet tell from text).
type Output struct {
	Kind      TokenKind
	Content   string
	Reasoning string
	// End reports that the token ends the generation (harmony's <|return|>
	// and <|call|>): the token path finishes with "stop" and delivers
	// nothing after it. The Output carries everything the parser held.
	End bool
	// Calls are tool calls the token completed, in order, after Content
	// (their IDs are left empty). Only the parsers of generations that
	// offer tools report calls.
	Calls []toolcall.Call
}

// ToolCall is a tool call of an answer as the token path delivers it:
// its index among the answer's calls, and the call. Its ID is left empty
// for the framing to mint (ToolCallID).
type ToolCall struct {
	Index int
	toolcall.Call
}

// OutputParser turns the tokens of one generation into text for the
// client, split into content and reasoning. One parser serves one
// generation; it is fed in order and never sees the tokens of Model.EOS,
// which the engine or the token path consume first.
type OutputParser interface {
	// Add consumes the next generated token.
	Add(id int32) Output
	// Flush releases what is still held when the generation ends without
	// an End token (a length limit, an engine EOS, a cut stream).
	Flush() Output
}

// plainOutput is the parser of models whose output is all content: the
// tokenizer's stream decoder.
type plainOutput struct{ dec *tokenizer.StreamDecoder }

func (p plainOutput) Add(id int32) Output { return Output{Content: p.dec.Add(id)} }

func (p plainOutput) Flush() Output { return Output{Content: p.dec.Flush()} }

// outputParser returns the parser of one generation of req: for chat
// requests that offer tools, the model's tool parser or a toolOutput in
// its syntax; for other chat requests the model's parser when it has
// one; else plain text. Completions always get plain text: their prompt
// and output are raw, as the client wrote the format itself.
func outputParser(req *Request) OutputParser {
	m := req.Model
	if req.Input.Endpoint != Chat {
		return plainOutput{dec: m.Tokenizer.NewStreamDecoder()}
	}
	if req.Params.OffersTools() {
		if m.NewToolParser != nil {
			return m.NewToolParser()
		}
		if m.Tools.Syntax.Scans() && m.NewOutputParser == nil {
			return newToolOutput(m.Tokenizer, m.Tools.Syntax, req.Params.SerialToolCalls)
		}
	}
	if m.NewOutputParser != nil {
		return m.NewOutputParser()
	}
	return plainOutput{dec: m.Tokenizer.NewStreamDecoder()}
}

// toolOutput is the parser of a generation that offers tools to a model
// whose calls are text: the decoded text goes through a toolcall.Scanner,
// and the syntax's markers that the vocabulary holds as control tokens
// (which decode to nothing) are fed as their text. Tokens that write a
// call are structure: they have no logprob entry. With serial (one call
// at a time) the first call ends the generation.
type toolOutput struct {
	dec     *tokenizer.StreamDecoder
	scan    *toolcall.Scanner
	markers map[int32]string
	serial  bool
}

func newToolOutput(tok *tokenizer.Tokenizer, syn toolcall.Syntax, serial bool) *toolOutput {
	p := &toolOutput{dec: tok.NewStreamDecoder(), scan: toolcall.NewScanner(syn), markers: map[int32]string{}, serial: serial}
	for _, text := range syn.Markers() {
		if id, ok := tok.TokenID(text); ok && tok.IsControl(id) {
			p.markers[id] = text
		}
	}
	return p
}

func (p *toolOutput) Add(id int32) Output {
	text, marker := p.markers[id]
	if marker {
		text = p.dec.Flush() + text
	} else {
		text = p.dec.Add(id)
	}
	return p.output(p.scan.Feed(text))
}

func (p *toolOutput) Flush() Output {
	content, calls := p.scan.Feed(p.dec.Flush())
	rest, more := p.scan.Flush()
	return p.output(content+rest, append(calls, more...))
}

func (p *toolOutput) output(content string, calls []toolcall.Call) Output {
	o := Output{Content: content, Calls: calls}
	if len(calls) > 0 || p.scan.InCall() {
		o.Kind = StructureToken
	}
	if p.serial && len(calls) > 0 {
		o.Calls, o.End = calls[:1], true
	}
	return o
}

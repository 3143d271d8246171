package stages

import "github.com/goprovider/provider/tokenizer"

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

// outputParser returns the parser of one generation of req: the model's
// for chat requests when it has one, else plain text. Completions always
// get plain text: their prompt and output are raw, as the client wrote
// the format itself.
func outputParser(req *Request) OutputParser {
	m := req.Model
	if m.NewOutputParser != nil && req.Input.Endpoint == Chat {
		return m.NewOutputParser()
	}
	return plainOutput{dec: m.Tokenizer.NewStreamDecoder()}
}

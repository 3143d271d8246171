package harmony

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/goprovider/provider/stages"
	"github.com/goprovider/provider/tokenizer"
	"github.com/goprovider/provider/toolcall"
)

// ErrNotHarmony: the vocabulary lacks harmony's structure tokens.
var ErrNotHarmony = errors.New("harmony: vocabulary has no harmony structure tokens")

// maxHeader bounds a header's text in bytes: real ones ("assistant
// to=functions.get_weather", "commentary json") are far shorter, so a
// longer one is text the model wrote without structure.
const maxHeader = 128

// Vocab is the ids of harmony's structure tokens in one vocabulary.
type Vocab struct {
	tok *tokenizer.Tokenizer
	// The structure tokens; ret is <|return|>.
	start, end, message, channel, constrain, ret, call int32
}

// NewVocab finds the structure tokens of tok (o200k_harmony).
func NewVocab(tok *tokenizer.Tokenizer) (*Vocab, error) {
	v := &Vocab{tok: tok}
	for _, t := range []struct {
		text string
		id   *int32
	}{
		{"<|start|>", &v.start}, {"<|end|>", &v.end}, {"<|message|>", &v.message}, {"<|channel|>", &v.channel},
		{"<|constrain|>", &v.constrain}, {"<|return|>", &v.ret}, {"<|call|>", &v.call},
	} {
		id, ok := tok.TokenID(t.text)
		if !ok {
			return nil, fmt.Errorf("%w: no %s", ErrNotHarmony, t.text)
		}
		*t.id = id
	}
	return v, nil
}

// StopTokens are the tokens that end a harmony generation: <|return|>
// (the answer is complete) and <|call|> (a tool call awaits its result).
// They belong in the model's EOS set; the parser ends on them too, so a
// generation ends on them even where an engine does not stop.
func (v *Vocab) StopTokens() []int32 { return []int32{v.ret, v.call} }

// NewParser returns the output parser of one generation; it is the
// stages.Model.NewOutputParser of a gpt-oss model.
func (v *Vocab) NewParser() stages.OutputParser {
	p := &Parser{v: v, dec: v.tok.NewStreamDecoder()}
	p.openHeader(true, false)
	return p
}

// NewToolParser returns the output parser of a generation that offers
// tools (stages.Model.NewToolParser): it also reports the messages to
// functions.NAME as tool calls.
func (v *Vocab) NewToolParser() stages.OutputParser {
	p := &Parser{v: v, dec: v.tok.NewStreamDecoder(), tools: true}
	p.openHeader(true, false)
	return p
}

// state is where the parser is in the harmony grammar.
type state uint8

const (
	inHeader state = iota // between <|start|> (or the prompt's) and <|message|>
	inBody                // a message's text, up to <|end|>
	between               // after <|end|>, before the next <|start|>
	inRaw                 // text outside any message: content
	ended                 // after <|return|> or <|call|>
)

// sink is where body text goes.
type sink uint8

const (
	toContent sink = iota
	toReasoning
	toNothing
	toCall // the arguments of a tool call
)

// Parser splits one gpt-oss generation into content and reasoning (see
// the package comment for the rules). It implements stages.OutputParser.
type Parser struct {
	v     *Vocab
	dec   *tokenizer.StreamDecoder
	state state

	// Header: the role part (after <|start|>) and the channel part (after
	// <|channel|>), as decoded text. implicitRole is set for the header
	// the prompt opened, whose role ("assistant") is already written.
	role, channel string
	inChannel     bool
	implicitRole  bool

	// Body: where its text goes and what its tokens count as.
	sink sink
	kind stages.TokenKind

	// tools: messages to functions.NAME are calls; callName and args are
	// the open call's.
	tools          bool
	callName, args string
}

// Add implements stages.OutputParser. The Output's Kind says what the
// token itself is: body text has its message's kind, raw text (and header
// text found to be text) is content, anything else structure.
func (p *Parser) Add(id int32) stages.Output {
	out := stages.Output{Kind: stages.StructureToken}
	v := p.v
	if p.state == ended {
		return out
	}
	switch id {
	case v.ret, v.call:
		p.close(&out)
		p.endCall(&out)
		p.state = ended
		out.End = true
	case v.start:
		p.close(&out)
		p.endCall(&out)
		p.openHeader(false, false)
	case v.end:
		p.close(&out)
		p.endCall(&out)
		p.state = between
	case v.channel:
		p.close(&out)
		p.endCall(&out)
		if p.state == inHeader {
			p.inChannel = true
			p.channel += " "
		} else {
			// A channel outside a header: the model skipped the framing
			// of a new assistant message.
			p.openHeader(true, true)
		}
	case v.message:
		p.close(&out)
		switch p.state {
		case inHeader:
			p.openBody()
		case between:
			p.sink, p.kind, p.state = toContent, stages.ContentToken, inBody
		}
	case v.constrain:
		p.close(&out)
		if p.state == inHeader {
			p.appendHeader(&out, " ")
		}
	default:
		if v.tok.IsControl(id) {
			// Other control tokens render as nothing and mean nothing here.
			break
		}
		text := p.dec.Add(id)
		switch p.state {
		case inHeader:
			p.appendHeader(&out, text)
			if p.state == inRaw {
				out.Kind = stages.ContentToken
			}
		case between:
			p.state = inRaw
			fallthrough
		case inRaw:
			out.Content += text
			out.Kind = stages.ContentToken
		case inBody:
			p.write(&out, text)
			out.Kind = p.kind
		}
	}
	return out
}

// Flush implements stages.OutputParser: at the end of a stream it
// releases what is held. A header cut short that still reads as a header
// is structure and dropped.
func (p *Parser) Flush() stages.Output {
	out := stages.Output{Kind: stages.StructureToken}
	switch p.state {
	case inHeader:
		p.appendHeader(&out, p.dec.Flush())
	case inBody:
		p.write(&out, p.dec.Flush())
		p.endCall(&out)
	case inRaw:
		out.Content += p.dec.Flush()
	}
	return out
}

// endCall ends the body of a call: arguments that are a JSON object (or
// nothing, no arguments) make the call, anything else is the text the
// model wrote, as content.
func (p *Parser) endCall(out *stages.Output) {
	if p.state != inBody || p.sink != toCall {
		return
	}
	args := strings.TrimSpace(p.args)
	if args == "" {
		args = "{}"
	}
	var b bytes.Buffer
	if strings.HasPrefix(args, "{") && json.Compact(&b, []byte(args)) == nil {
		out.Calls = append(out.Calls, toolcall.Call{Name: p.callName, Arguments: b.String()})
	} else {
		out.Content += p.args
	}
	p.sink, p.callName, p.args = toNothing, "", ""
}

// openHeader starts a header; implicit says the prompt wrote its role,
// inChannel that its <|channel|> has been seen.
func (p *Parser) openHeader(implicit, inChannel bool) {
	p.state, p.role, p.channel, p.implicitRole, p.inChannel = inHeader, "", "", implicit, inChannel
}

// close ends what the state holds open before a structure token: a body's
// held bytes are released to its sink, raw text's to content, and a
// header's are checked like any header text (a header that still reads
// as one is dropped).
func (p *Parser) close(out *stages.Output) {
	rest := p.dec.Flush()
	switch p.state {
	case inBody:
		p.write(out, rest)
	case inRaw:
		out.Content += rest
	case inHeader:
		p.appendHeader(out, rest)
	}
}

// appendHeader adds text to the current part of the header; text that no
// header could hold turns the part into content and the parser raw.
func (p *Parser) appendHeader(out *stages.Output, text string) {
	part := &p.role
	if p.inChannel {
		part = &p.channel
	}
	*part += text
	if p.plausible(*part) {
		return
	}
	out.Content += strings.TrimPrefix(*part, " ")
	p.role, p.channel, p.state = "", "", inRaw
}

// plausible reports whether part can still be (a prefix of) a header
// part. The header the prompt opened has its role already: its role part
// may only add a recipient (" to=...").
func (p *Parser) plausible(part string) bool {
	if len(part) > maxHeader {
		return false
	}
	for i := 0; i < len(part); i++ {
		c := part[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(" ._-=:/@", c) >= 0) {
			return false
		}
	}
	if p.implicitRole && !p.inChannel {
		w := strings.TrimLeft(part, " ")
		return strings.HasPrefix(w, "to=") || strings.HasPrefix("to=", w)
	}
	return true
}

// openBody reads the finished header and opens the message body.
func (p *Parser) openBody() {
	var recipient bool
	var function string
	for _, f := range strings.Fields(p.role + " " + p.channel) {
		if to, ok := strings.CutPrefix(f, "to="); ok {
			recipient = true
			function, _ = strings.CutPrefix(to, "functions.")
			if function == to {
				function = ""
			}
		}
	}
	var channel string
	if f := strings.Fields(p.channel); len(f) > 0 && p.inChannel {
		channel = f[0]
	}
	switch {
	case p.tools && toolcall.ValidName(function):
		p.sink, p.kind, p.callName, p.args = toCall, stages.StructureToken, function, ""
		if channel == "analysis" {
			p.kind = stages.ReasoningToken
		}
	case channel == "analysis" && recipient:
		p.sink, p.kind = toNothing, stages.ReasoningToken
	case channel == "analysis":
		p.sink, p.kind = toReasoning, stages.ReasoningToken
	case recipient:
		p.sink, p.kind = toNothing, stages.StructureToken
	default:
		// final, commentary preambles, and channels we do not know: the
		// text is the model's to the user.
		p.sink, p.kind = toContent, stages.ContentToken
	}
	p.state = inBody
}

// write sends body text to the body's sink.
func (p *Parser) write(out *stages.Output, text string) {
	switch p.sink {
	case toContent:
		out.Content += text
	case toReasoning:
		out.Reasoning += text
	case toCall:
		p.args += text
	}
}

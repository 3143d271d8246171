package stages

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/tokenizer"
	"github.com/goprovider/provider/toolcall"
)

// TokenLogprob is a token's log-probability as a client sees it.
type TokenLogprob struct {
	// Token is the token's text, or "bytes:" and \xNN escapes when its
	// bytes are not valid UTF-8 on their own.
	Token   string
	Bytes   []byte
	Logprob float64
}

// Logprob is a sampled token's entry: its own log-probability, its offset
// in the generated text (in characters) and the top alternatives.
type Logprob struct {
	TokenLogprob
	Offset int
	Top    []TokenLogprob
}

// Delta is one step of a generation as the client sees it. Content
// deltas carry Text (message content), Reasoning and/or Logprobs; the
// final delta carries Finish ("stop" or "length"), Usage and
// ReasoningTokens, or Err.
//
// A response of several choices interleaves their Deltas, each marked
// with its choice's Index. Each choice's last Delta carries its Finish and
// the number of choices still running after it (Remaining); the one that
// leaves none is the final Delta, with the response's Usage and
// ReasoningTokens. An error ends the whole response: it is the final Delta
// and no Delta follows it.
type Delta struct {
	// Index is the choice's index (0 for the only one).
	Index int
	// Remaining is, on a Delta with Finish, how many choices have not
	// finished yet.
	Remaining int

	Text      string
	Reasoning string
	// ToolCalls are tool calls of the answer, complete, after the Text
	// they follow.
	ToolCalls []ToolCall
	Logprobs  []Logprob
	Finish    string
	Usage     engine.Usage
	// ReasoningTokens counts the completion tokens the model generated as
	// reasoning (usage.completion_tokens_details.reasoning_tokens).
	ReasoningTokens int
	Err             error `msgpack:"-"`
}

// Final reports whether d ends its stream.
func (d Delta) Final() bool { return (d.Finish != "" && d.Remaining == 0) || d.Err != nil }

// DefaultDeltaBuffer is the Delta channel capacity when Detokenizer.Buffer
// is zero.
const DefaultDeltaBuffer = 16

// Detokenizer runs the token path of one generation: engine events in,
// Deltas out on a typed channel.
type Detokenizer struct {
	// Buffer is the Delta channel's capacity (0: DefaultDeltaBuffer). A
	// reader that falls behind fills it and then holds up only its own
	// stream; the engine's stream buffer absorbs the rest.
	Buffer   int
	Recorder Recorder
}

// Run starts the token path for req, whose generation adm is. The channel
// delivers content Deltas, then one final Delta, then closes. On a stop
// string it calls adm.Stop to cancel the row and drains the engine's
// stream. When ctx ends it stops delivering (nobody is reading) but still
// drains the engine's stream before closing.
//
// With several choices (adm.More) each runs its own token path and their
// Deltas are merged as Delta describes; the first error stops every
// choice's row.
func (d Detokenizer) Run(ctx context.Context, req *Request, adm *Admitted) <-chan Delta {
	size := d.Buffer
	if size <= 0 {
		size = DefaultDeltaBuffer
	}
	out := make(chan Delta, size)
	if len(adm.More) > 0 {
		go d.merge(ctx, req, adm, out)
		return out
	}
	go func() {
		defer close(out)
		d.path(ctx, req, 0, adm, func(x Delta) bool {
			select {
			case out <- x:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return out
}

// path runs choice i's token path: emit delivers each Delta and reports
// false once nobody reads them.
func (d Detokenizer) path(ctx context.Context, req *Request, i int, adm *Admitted, emit func(Delta) bool) {
	defer adm.Stop()
	core := newChoice(req, i)
	var events []engine.Event
	var sent []Delta
	gone := false
	for ev := range adm.Events {
		if d.Recorder != nil {
			events = append(events, ev)
		}
		if core.done {
			continue
		}
		for _, x := range core.feed(ev) {
			x.Index = i
			if d.Recorder != nil {
				sent = append(sent, x)
			}
			if !gone {
				gone = !emit(x)
			}
		}
		if core.done {
			// A stop string matched or the stream ended: either way
			// the row has nothing more to say.
			adm.Stop()
		}
	}
	if !core.done {
		x := Delta{Index: i, Err: ErrStreamEnded}
		sent = append(sent, x)
		if !gone {
			emit(x)
		}
	}
	if d.Recorder != nil {
		d.Recorder.Record(tokenRecord(req, i, events, sent))
	}
}

// merge runs every choice's token path and delivers their Deltas on out,
// counting the choices down and summing their usage (choices stays
// consistent because every emit holds mu while it sends).
func (d Detokenizer) merge(ctx context.Context, req *Request, adm *Admitted, out chan<- Delta) {
	defer close(out)
	all := append([]Admitted{{Events: adm.Events, Stop: adm.Stop}}, adm.More...)
	stopAll := func() {
		for _, a := range all {
			a.Stop()
		}
	}
	var mu sync.Mutex
	tally := newTally(req, len(all))
	var wg sync.WaitGroup
	for i := range all {
		wg.Go(func() {
			d.path(ctx, req, i, &all[i], func(x Delta) bool {
				mu.Lock()
				defer mu.Unlock()
				x, ok := tally.add(x)
				if !ok {
					return true
				}
				if x.Err != nil {
					stopAll()
				}
				select {
				case out <- x:
					return true
				case <-ctx.Done():
					return false
				}
			})
		})
	}
	wg.Wait()
}

// tally counts a response's choices down and sums their usage.
type tally struct {
	perPrompt int // choices per prompt
	remaining int
	usage     engine.Usage
	reasoned  int
	failed    bool
}

func newTally(req *Request, choices int) *tally {
	return &tally{perPrompt: max(req.Params.N, 1), remaining: choices}
}

// add returns x as the merged stream delivers it, or false when it is
// dropped: everything after the first error. Prompt and cached tokens
// count once per prompt, from its first choice.
func (t *tally) add(x Delta) (Delta, bool) {
	switch {
	case t.failed:
		return x, false
	case x.Err != nil:
		t.failed = true
	case x.Finish != "":
		t.remaining--
		x.Remaining = t.remaining
		if x.Index%t.perPrompt == 0 {
			t.usage.PromptTokens += x.Usage.PromptTokens
			t.usage.CachedTokens += x.Usage.CachedTokens
		}
		t.usage.CompletionTokens += x.Usage.CompletionTokens
		t.reasoned += x.ReasoningTokens
		if t.remaining == 0 {
			x.Usage, x.ReasoningTokens = t.usage, t.reasoned
		}
	}
	return x, true
}

// newChoice is the core of choice i's token path: its prompt is the one
// it was admitted with.
func newChoice(req *Request, i int) *detok {
	d := newDetok(req)
	if q := i / max(req.Params.N, 1); q > 0 && q <= len(req.MoreTokens) {
		d.prompt = len(req.MoreTokens[q-1])
	}
	return d
}

// detok is the deterministic core of the token path. Stop strings and
// logprobs apply to content only: reasoning is released as soon as the
// parser gives it out, and tokens that produced no content have no
// logprob entry (as OpenAI reports logprobs of message content).
type detok struct {
	tok      *tokenizer.Tokenizer
	parser   OutputParser
	eos      []int32 // sorted
	stops    []string
	logprobs bool
	prompt   int

	pending   string // decoded content not yet released
	reasoning string // reasoning not yet released
	decoded   int    // content bytes decoded so far
	released  int    // content bytes released so far
	chars     int    // content characters decoded so far
	entries   []heldLogprob
	tokens    int // completion tokens seen
	reasoned  int // of which reasoning tokens
	called    int // tool calls released
	done      bool
}

// heldLogprob is a logprob entry waiting for the text it produced (which
// ends at byte end of the decoded text) to be released.
type heldLogprob struct {
	lp  Logprob
	end int
}

func newDetok(req *Request) *detok {
	m := req.Model
	var eos []int32
	if !req.Params.IgnoreEOS {
		// With ignore_eos an end-of-sequence token is one more token.
		eos = slices.Clone(m.EOS)
		slices.Sort(eos)
	}
	return &detok{
		tok:      m.Tokenizer,
		parser:   outputParser(req),
		eos:      eos,
		stops:    req.Params.Stop,
		logprobs: req.Params.Logprobs,
		prompt:   len(req.Tokens),
	}
}

// feed consumes one engine event and returns the Deltas it completes.
func (d *detok) feed(ev engine.Event) []Delta {
	switch ev.Kind {
	case engine.EventDelta:
		var out []Delta
		for i, id := range ev.Tokens {
			if _, eos := slices.BinarySearch(d.eos, id); eos {
				continue
			}
			d.tokens++
			o := d.parser.Add(id)
			if o.Kind == ReasoningToken {
				d.reasoned++
			}
			var lp *engine.Logprob
			if d.logprobs && i < len(ev.Logprobs) && o.Kind == ContentToken {
				lp = &ev.Logprobs[i]
			}
			d.add(o, lp)
			usage := engine.Usage{PromptTokens: d.prompt, CompletionTokens: d.tokens}
			if at := d.match(); at >= 0 {
				return append(out, d.stop(at, usage)...)
			}
			if len(o.Calls) > 0 {
				out = append(out, d.calls(o.Calls)...)
			}
			if o.End {
				return append(out, d.stop(len(d.pending), usage)...)
			}
		}
		return append(out, d.content(len(d.pending)-d.holdback())...)
	case engine.EventFinished:
		o := d.parser.Flush()
		d.add(o, nil)
		if at := d.match(); at >= 0 {
			return d.stop(at, ev.Usage)
		}
		out := d.calls(o.Calls)
		d.done = true
		switch ev.Reason {
		case engine.FinishStop, engine.FinishLength:
			return append(out, Delta{Finish: d.finish(ev.Reason), Usage: ev.Usage, ReasoningTokens: d.reasoned})
		}
		return append(out, Delta{Err: fmt.Errorf("%w: finish reason %v", ErrStreamEnded, ev.Reason)})
	default:
		d.done = true
		err := ev.Err
		if err == nil {
			err = ErrStreamEnded
		}
		return []Delta{{Err: err}}
	}
}

func (d *detok) add(o Output, lp *engine.Logprob) {
	d.reasoning += o.Reasoning
	text := o.Content
	if lp != nil {
		e := Logprob{TokenLogprob: d.tokenLogprob(lp.Token, lp.Logprob), Offset: d.chars}
		for _, t := range lp.Top {
			e.Top = append(e.Top, d.tokenLogprob(t.Token, t.Logprob))
		}
		d.entries = append(d.entries, heldLogprob{lp: e, end: d.decoded + len(text)})
	}
	d.pending += text
	d.decoded += len(text)
	d.chars += utf8.RuneCountInString(text)
}

func (d *detok) tokenLogprob(id int32, logprob float64) TokenLogprob {
	b := d.tok.Piece(id)
	return TokenLogprob{Token: pieceText(b), Bytes: slices.Clone(b), Logprob: logprob}
}

// pieceText shows a token's bytes as text, as OpenAI does for tokens that
// are fragments of a character.
func pieceText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var s strings.Builder
	s.WriteString("bytes:")
	for _, c := range b {
		fmt.Fprintf(&s, "\\x%02x", c)
	}
	return s.String()
}

// match returns where the earliest stop string starts in the held text,
// or -1.
func (d *detok) match() int {
	at := -1
	for _, s := range d.stops {
		if i := strings.Index(d.pending, s); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	return at
}

// holdback is the length of the longest end of the held text that could
// still grow into a stop string.
func (d *detok) holdback() int {
	hold := 0
	for _, s := range d.stops {
		for k := min(len(s)-1, len(d.pending)); k > hold; k-- {
			if strings.HasSuffix(d.pending, s[:k]) {
				hold = k
				break
			}
		}
	}
	return hold
}

// content releases the first n bytes of held text with the logprob
// entries whose text is out, and the reasoning so far; it returns nothing
// when there is nothing to say.
func (d *detok) content(n int) []Delta {
	text := d.pending[:n]
	d.pending = d.pending[n:]
	d.released += n
	var lps []Logprob
	k := 0
	for k < len(d.entries) && d.entries[k].end <= d.released {
		lps = append(lps, d.entries[k].lp)
		k++
	}
	d.entries = d.entries[k:]
	reasoning := d.reasoning
	d.reasoning = ""
	if text == "" && reasoning == "" && len(lps) == 0 {
		return nil
	}
	return []Delta{{Text: text, Reasoning: reasoning, Logprobs: lps}}
}

// stop ends the stream at byte at of the held text (where a stop string
// starts, or its end when the parser saw the end): what precedes it is
// released, the rest is never delivered.
func (d *detok) stop(at int, usage engine.Usage) []Delta {
	out := d.content(at)
	d.pending, d.entries, d.done = "", nil, true
	return append(out, Delta{Finish: d.finish(engine.FinishStop), Usage: usage, ReasoningTokens: d.reasoned})
}

// calls releases all held content, then the parser's calls with their
// indexes among the answer's (an answer's calls follow the content
// before them, and no stop string spans a call).
func (d *detok) calls(calls []toolcall.Call) []Delta {
	out := d.content(len(d.pending))
	if len(calls) == 0 {
		return out
	}
	tcs := make([]ToolCall, len(calls))
	for i, c := range calls {
		tcs[i] = ToolCall{Index: d.called, Call: c}
		d.called++
	}
	if len(out) == 0 {
		out = []Delta{{}}
	}
	out[len(out)-1].ToolCalls = tcs
	return out
}

// finish is the finish reason of a generation that ended for reason: an
// answer that stopped after making calls finishes with "tool_calls".
func (d *detok) finish(reason engine.FinishReason) string {
	if reason == engine.FinishStop && d.called > 0 {
		return "tool_calls"
	}
	return reason.String()
}

// tokenTrace is the recorded input of the token path.
type tokenTrace struct {
	Req    Request
	Events []EventRecord
	// Choice is the generation's choice index.
	Choice int `msgpack:",omitempty"`
}

// EventRecord is an engine event in recordable form: the error is kept as
// its text.
type EventRecord struct {
	Kind     engine.EventKind
	Tokens   []int32
	Logprobs []engine.Logprob
	Reason   engine.FinishReason
	Usage    engine.Usage
	Err      string
}

// RecordEvent converts an engine event for a record.
func RecordEvent(ev engine.Event) EventRecord {
	r := EventRecord{Kind: ev.Kind, Tokens: ev.Tokens, Logprobs: ev.Logprobs, Reason: ev.Reason, Usage: ev.Usage}
	if ev.Err != nil {
		r.Err = ev.Err.Error()
	}
	return r
}

// Event rebuilds the engine event; a recorded error comes back as an error
// with the same text (its identity is lost).
func (r EventRecord) Event() engine.Event {
	ev := engine.Event{Kind: r.Kind, Tokens: r.Tokens, Logprobs: r.Logprobs, Reason: r.Reason, Usage: r.Usage}
	if r.Err != "" {
		ev.Err = errors.New(r.Err)
	}
	return ev
}

type deltaRecord struct {
	Text            string
	Reasoning       string
	Logprobs        []Logprob
	Finish          string
	Usage           engine.Usage
	ReasoningTokens int
	Err             string
	ToolCalls       []ToolCall `msgpack:",omitempty"`
}

// TokenStage names the token path in records.
const TokenStage = "detokenize"

func tokenRecord(req *Request, choice int, events []engine.Event, deltas []Delta) Record {
	in := tokenTrace{Req: *req, Events: make([]EventRecord, len(events)), Choice: choice}
	for i, ev := range events {
		in.Events[i] = RecordEvent(ev)
	}
	return Record{Stage: TokenStage, In: mustEncode(&in), Out: encodeDeltas(deltas)}
}

func encodeDeltas(deltas []Delta) []byte {
	out := make([]deltaRecord, len(deltas))
	for i, x := range deltas {
		out[i] = deltaRecord{Text: x.Text, Reasoning: x.Reasoning, Logprobs: x.Logprobs, Finish: x.Finish, Usage: x.Usage, ReasoningTokens: x.ReasoningTokens, ToolCalls: x.ToolCalls}
		if x.Err != nil {
			out[i].Err = x.Err.Error()
		}
	}
	return mustEncode(out)
}

// ReplayTokens re-runs a recorded token path: it rebuilds the request and
// the engine events from r.In and returns the step as it runs now.
func ReplayTokens(r Record, models Catalog) (Record, error) {
	var in tokenTrace
	if err := msgpack.Unmarshal(r.In, &in); err != nil {
		return Record{}, fmt.Errorf("stages: replay %s: %w", TokenStage, err)
	}
	if in.Req.Params == nil {
		return Record{}, fmt.Errorf("stages: replay %s: record has no parsed request", TokenStage)
	}
	m, ok := models.Lookup(in.Req.Params.Model)
	if !ok {
		return Record{}, fmt.Errorf("stages: replay %s: %w", TokenStage, ErrUnknownModel)
	}
	in.Req.Model = m
	core := newChoice(&in.Req, in.Choice)
	var deltas []Delta
	events := make([]engine.Event, len(in.Events))
	for i, e := range in.Events {
		events[i] = e.Event()
		if !core.done {
			for _, x := range core.feed(events[i]) {
				x.Index = in.Choice
				deltas = append(deltas, x)
			}
		}
	}
	if !core.done {
		deltas = append(deltas, Delta{Index: in.Choice, Err: ErrStreamEnded})
	}
	return tokenRecord(&in.Req, in.Choice, events, deltas), nil
}

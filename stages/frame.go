package stages

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/goprovider/provider/engine"
)

// SSE frames one server-sent event carrying payload.
func SSE(payload []byte) []byte {
	b := make([]byte, 0, len(payload)+8)
	b = append(b, "data: "...)
	b = append(b, payload...)
	return append(b, "\n\n"...)
}

// Done is the event that ends an OpenAI stream.
var Done = []byte("data: [DONE]\n\n")

// ResponseID is the OpenAI response id of an admitted request.
func ResponseID(req *Request) string {
	if req.Input.Endpoint == Completion {
		return "cmpl-" + req.ID()
	}
	return "chatcmpl-" + req.ID()
}

// Framer turns one request's Deltas into OpenAI SSE events: for chat a
// first chunk with the assistant role, content chunks (with logprobs
// content entries when asked; reasoning as delta.reasoning_content, the
// field vLLM and DeepSeek use), a chunk with the finish reason, a usage
// chunk with empty choices when stream_options.include_usage is set, and
// [DONE]. A final Delta with an error yields nothing: the caller reports
// the error in its own frame. A tool call is two chunks, as OpenAI streams
// one: its index, id, type and name with empty arguments, then its
// arguments. With several choices each chunk carries its
// Delta's choice index, each choice gets its role chunk and its finish
// chunk, and the usage chunk and [DONE] follow the final Delta.
type Framer struct {
	head    head
	started []bool // by choice index
}

// head is what every chunk of a response repeats.
type head struct {
	endpoint     Endpoint
	id, model    string
	created      int64
	logprobs     bool
	includeUsage bool
}

func headOf(req *Request) head {
	return head{
		endpoint:     req.Input.Endpoint,
		id:           ResponseID(req),
		model:        req.Params.Model,
		created:      req.Received.Unix(),
		logprobs:     req.Params.Logprobs,
		includeUsage: req.Params.Stream && req.Params.IncludeUsage,
	}
}

// NewFramer returns the framer of an admitted request.
func NewFramer(req *Request) *Framer { return &Framer{head: headOf(req)} }

// Frames returns the SSE events for d.
func (f *Framer) Frames(d Delta) [][]byte {
	if d.Err != nil {
		return nil
	}
	var out [][]byte
	if !f.start(d.Index) && f.head.endpoint == Chat {
		empty := ""
		out = append(out, f.chunk(chatChunkChoice{Index: d.Index, Delta: chatDelta{Role: "assistant", Content: &empty}}, nil))
	}
	if f.head.endpoint == Chat && (d.Text != "" || d.Reasoning != "" || len(d.Logprobs) > 0) {
		var delta chatDelta
		if d.Text != "" || d.Reasoning == "" {
			text := d.Text
			delta.Content = &text
		}
		if d.Reasoning != "" {
			reasoning := d.Reasoning
			delta.ReasoningContent = &reasoning
		}
		out = append(out, f.chunk(chatChunkChoice{Index: d.Index, Delta: delta, Logprobs: f.chatLogprobs(d.Logprobs)}, nil))
	} else if f.head.endpoint == Completion && (d.Text != "" || len(d.Logprobs) > 0) {
		out = append(out, f.chunk(completionChoice{Index: d.Index, Text: d.Text, Logprobs: f.completionLogprobs(d.Logprobs)}, nil))
	}
	if f.head.endpoint == Chat {
		for _, tc := range d.ToolCalls {
			out = append(out, f.toolCallChunks(d.Index, tc)...)
		}
	}
	if d.Finish != "" {
		reason := d.Finish
		if f.head.endpoint == Chat {
			out = append(out, f.chunk(chatChunkChoice{Index: d.Index, Delta: chatDelta{}, FinishReason: &reason}, nil))
		} else {
			out = append(out, f.chunk(completionChoice{Index: d.Index, FinishReason: &reason}, nil))
		}
	}
	if d.Final() {
		if f.head.includeUsage {
			u := usageOf(d.Usage, d.ReasoningTokens)
			out = append(out, f.chunk(nil, &u))
		}
		out = append(out, Done)
	}
	return out
}

// Cut ends a stream the server stopped before its generation finished (a
// drain deadline): the choice's last chunk with finish_reason reason, the
// usage when asked (the tokens d reports), then [DONE], so a client sees
// a proper end rather than a bare close.
func (f *Framer) Cut(d Delta, reason string) [][]byte {
	var out [][]byte
	if f.head.endpoint == Chat {
		out = append(out, f.chunk(chatChunkChoice{Index: d.Index, Delta: chatDelta{}, FinishReason: &reason}, nil))
	} else {
		out = append(out, f.chunk(completionChoice{Index: d.Index, FinishReason: &reason}, nil))
	}
	if f.head.includeUsage {
		u := usageOf(d.Usage, d.ReasoningTokens)
		out = append(out, f.chunk(nil, &u))
	}
	return append(out, Done)
}

// toolCallChunks streams one complete call as OpenAI does: a first delta
// with its id, type, name and empty arguments, then its arguments.
func (f *Framer) toolCallChunks(choice int, tc ToolCall) [][]byte {
	head := toolCallJSON{Index: tc.Index, ID: toolCallID(f.head.id, choice, tc.Index), Type: "function",
		Function: toolFunctionJSON{Name: tc.Name}}
	args := toolCallJSON{Index: tc.Index, Function: toolFunctionJSON{Arguments: tc.Arguments}}
	return [][]byte{
		f.chunk(chatChunkChoice{Index: choice, Delta: chatDelta{ToolCalls: []toolCallJSON{head}}}, nil),
		f.chunk(chatChunkChoice{Index: choice, Delta: chatDelta{ToolCalls: []toolCallJSON{args}}}, nil),
	}
}

// toolCallID mints the id of call index of a response's choice: a digest
// of the three, so a replay yields the same ids and no two calls of one
// response share one.
func toolCallID(responseID string, choice, index int) string {
	sum := sha256.Sum256([]byte(responseID + "/" + strconv.Itoa(choice) + "/" + strconv.Itoa(index)))
	return "call_" + hex.EncodeToString(sum[:12])
}

// start marks choice i as started and reports whether it already was.
func (f *Framer) start(i int) bool {
	for len(f.started) <= i {
		f.started = append(f.started, false)
	}
	was := f.started[i]
	f.started[i] = true
	return was
}

// chunk encodes one streamed chunk; choice nil makes the usage chunk.
func (f *Framer) chunk(choice any, usage *usageJSON) []byte {
	c := responseJSON[any, any]{ID: f.head.id, Object: "chat.completion.chunk", Created: f.head.created, Model: f.head.model, Choices: []any{}}
	if f.head.endpoint == Completion {
		c.Object = "text_completion"
	}
	if choice != nil {
		c.Choices = []any{choice}
	}
	if f.head.includeUsage {
		c.Usage = json.RawMessage("null")
		if usage != nil {
			c.Usage = usage
		}
	}
	return SSE(mustJSON(c))
}

func (f *Framer) chatLogprobs(lps []Logprob) *chatLogprobs {
	if !f.head.logprobs {
		return nil
	}
	return chatLogprobsOf(lps)
}

func (f *Framer) completionLogprobs(lps []Logprob) *completionLogprobs {
	if !f.head.logprobs {
		return nil
	}
	return completionLogprobsOf(lps)
}

// Collector gathers a request's Deltas into one non-streamed response,
// its choices in index order.
type Collector struct {
	head     head
	choices  []*collected // by choice index
	usage    engine.Usage
	reasoned int
	err      error
}

// collected is one choice of a Collector.
type collected struct {
	text      strings.Builder
	reasoning strings.Builder
	lps       []Logprob
	calls     []ToolCall
	finish    string
}

// NewCollector returns the collector of an admitted request.
func NewCollector(req *Request) *Collector { return &Collector{head: headOf(req)} }

// Add takes the next Delta.
func (c *Collector) Add(d Delta) {
	for len(c.choices) <= d.Index {
		c.choices = append(c.choices, &collected{})
	}
	ch := c.choices[d.Index]
	ch.text.WriteString(d.Text)
	ch.reasoning.WriteString(d.Reasoning)
	ch.lps = append(ch.lps, d.Logprobs...)
	ch.calls = append(ch.calls, d.ToolCalls...)
	if d.Finish != "" {
		ch.finish = d.Finish
	}
	if d.Final() && d.Err == nil {
		c.usage, c.reasoned = d.Usage, d.ReasoningTokens
	}
	if d.Err != nil {
		c.err = d.Err
	}
}

// Err is the error the stream ended with, if any.
func (c *Collector) Err() error { return c.err }

// JSON encodes the response body.
func (c *Collector) JSON() []byte {
	u := usageOf(c.usage, c.reasoned)
	if len(c.choices) == 0 {
		c.choices = append(c.choices, &collected{})
	}
	if c.head.endpoint == Completion {
		choices := make([]completionFinal, len(c.choices))
		for i, ch := range c.choices {
			var lp *completionLogprobs
			if c.head.logprobs {
				lp = completionLogprobsOf(ch.lps)
			}
			choices[i] = completionFinal{Index: i, Text: ch.text.String(), Logprobs: lp, FinishReason: ch.finish}
		}
		return mustJSON(responseJSON[completionFinal, usageJSON]{
			ID: c.head.id, Object: "text_completion", Created: c.head.created, Model: c.head.model,
			Choices: choices,
			Usage:   u,
		})
	}
	choices := make([]chatChoice, len(c.choices))
	for i, ch := range c.choices {
		var lp *chatLogprobs
		if c.head.logprobs {
			lp = chatLogprobsOf(ch.lps)
		}
		choices[i] = chatChoice{Index: i, Message: chatMessage{Role: "assistant", Content: c.content(i, ch), ReasoningContent: ch.reasoning.String(), ToolCalls: c.toolCalls(i, ch)},
			Logprobs: lp, FinishReason: ch.finish}
	}
	return mustJSON(responseJSON[chatChoice, usageJSON]{
		ID: c.head.id, Object: "chat.completion", Created: c.head.created, Model: c.head.model,
		Choices: choices,
		Usage:   u,
	})
}

// responseJSON is a response or a streamed chunk with choices of type C
// and usage of type U (a chunk's usage is absent, null or set; a
// response's is always set).
type responseJSON[C, U any] struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []C    `json:"choices"`
	Usage   U      `json:"usage,omitempty"`
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatDelta struct {
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content,omitempty"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallJSON `json:"tool_calls,omitempty"`
}

// toolCallJSON is a call as a streamed delta carries it (index set) and
// as a message lists it (index left out).
type toolCallJSON struct {
	Index    int              `json:"index"`
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type,omitempty"`
	Function toolFunctionJSON `json:"function"`
}

type messageToolCallJSON struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function toolFunctionJSON `json:"function"`
}

type toolFunctionJSON struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      chatMessage   `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content is null for an answer that is only tool calls, as OpenAI's.
	Content *string `json:"content"`
	// ReasoningContent is absent for models that do not reason.
	ReasoningContent string                `json:"reasoning_content,omitempty"`
	ToolCalls        []messageToolCallJSON `json:"tool_calls,omitempty"`
}

// content is choice i's message content: null when it made calls and
// wrote no text.
func (c *Collector) content(i int, ch *collected) *string {
	text := ch.text.String()
	if text == "" && len(ch.calls) > 0 {
		return nil
	}
	return &text
}

// toolCalls lists choice i's calls with their minted ids.
func (c *Collector) toolCalls(i int, ch *collected) []messageToolCallJSON {
	var out []messageToolCallJSON
	for _, tc := range ch.calls {
		out = append(out, messageToolCallJSON{ID: toolCallID(c.head.id, i, tc.Index), Type: "function",
			Function: toolFunctionJSON{Name: tc.Name, Arguments: tc.Arguments}})
	}
	return out
}

type completionFinal struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason string              `json:"finish_reason"`
}

type usageJSON struct {
	PromptTokens            int               `json:"prompt_tokens"`
	CompletionTokens        int               `json:"completion_tokens"`
	TotalTokens             int               `json:"total_tokens"`
	PromptTokensDetails     promptDetails     `json:"prompt_tokens_details"`
	CompletionTokensDetails completionDetails `json:"completion_tokens_details"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// completionDetails is always present, as in OpenAI's usage; models that
// do not reason report 0.
type completionDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

func usageOf(u engine.Usage, reasoning int) usageJSON {
	return usageJSON{
		PromptTokens:            u.PromptTokens,
		CompletionTokens:        u.CompletionTokens,
		TotalTokens:             u.PromptTokens + u.CompletionTokens,
		PromptTokensDetails:     promptDetails{CachedTokens: u.CachedTokens},
		CompletionTokensDetails: completionDetails{ReasoningTokens: reasoning},
	}
}

type chatLogprobs struct {
	Content []chatLogprob `json:"content"`
}

type chatLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func chatLogprobsOf(lps []Logprob) *chatLogprobs {
	out := &chatLogprobs{Content: make([]chatLogprob, len(lps))}
	for i, lp := range lps {
		e := chatLogprob{Token: lp.Token, Logprob: finite(lp.Logprob), Bytes: ints(lp.Bytes), TopLogprobs: make([]chatTopLogprob, len(lp.Top))}
		for j, t := range lp.Top {
			e.TopLogprobs[j] = chatTopLogprob{Token: t.Token, Logprob: finite(t.Logprob), Bytes: ints(t.Bytes)}
		}
		out.Content[i] = e
	}
	return out
}

// completionLogprobs is the legacy completions format.
type completionLogprobs struct {
	Tokens        []string       `json:"tokens"`
	TokenLogprobs []float64      `json:"token_logprobs"`
	TopLogprobs   []orderedProbs `json:"top_logprobs"`
	TextOffset    []int          `json:"text_offset"`
}

func completionLogprobsOf(lps []Logprob) *completionLogprobs {
	out := &completionLogprobs{
		Tokens:        make([]string, len(lps)),
		TokenLogprobs: make([]float64, len(lps)),
		TopLogprobs:   make([]orderedProbs, len(lps)),
		TextOffset:    make([]int, len(lps)),
	}
	for i, lp := range lps {
		out.Tokens[i] = lp.Token
		out.TokenLogprobs[i] = finite(lp.Logprob)
		out.TopLogprobs[i] = orderedProbs(lp.Top)
		out.TextOffset[i] = lp.Offset
	}
	return out
}

// orderedProbs encodes alternatives as one JSON object, most likely first
// (a Go map would sort the keys).
type orderedProbs []TokenLogprob

func (o orderedProbs) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	seen := map[string]bool{}
	for _, t := range o {
		if seen[t.Token] {
			continue
		}
		seen[t.Token] = true
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, mustJSON(t.Token)...)
		b = append(b, ':')
		b = append(b, mustJSON(finite(t.Logprob))...)
	}
	return append(b, '}'), nil
}

// finite replaces what JSON cannot carry: a token with no probability
// gets -9999, as OpenAI reports it.
func finite(x float64) float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return -9999
	}
	return x
}

func ints(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Every encoded type is plain data with finite floats.
		panic("stages: encode response: " + err.Error())
	}
	return b
}

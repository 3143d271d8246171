package stages

import (
	"context"
	"github.com/goprovider/provider/cache"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/jinja"
	"github.com/goprovider/provider/media"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/tokenizer"
	"github.com/goprovider/provider/toolcall"
)

// Model is what the pipeline knows of one served model. It is immutable
// once registered.
type Model struct {
	Name string
	// Architecture is the config model_type ("llama", ...).
	Architecture string
	Tokenizer    *tokenizer.Tokenizer
	// ChatTemplate renders chat requests; nil refuses them (400
	// no_chat_template) rather than guessing a format.
	ChatTemplate *jinja.Template
	// EOS lists the tokens that end generation; they are never rendered.
	EOS []int32
	// ContextLength bounds prompt plus generated tokens; 0 means unknown.
	ContextLength int
	// NewOutputParser, when set, makes the OutputParser of each chat
	// generation: a model whose output has structure (gpt-oss's harmony
	// channels) splits it into content and reasoning. Nil: every token's
	// text is content.
	NewOutputParser func() OutputParser
	// Tools is how the model is told about tools and writes its calls
	// (DetectTools); the zero value refuses requests that offer tools or
	// send calls back.
	Tools ToolDialect
	// NewToolParser, when set, makes the OutputParser of chat generations
	// that offer tools, for a model whose calls are structure its own
	// parser reads (harmony's): it reports them as Output.Calls. Nil: the
	// calls of Tools.Syntax are found in the text.
	NewToolParser func() OutputParser
	// Vision is the model's vision tower: with one, MediaDecode decodes
	// the media of its requests, Template expands their placeholders and
	// VisionTower encodes them. Nil refuses media (400 unsupported_media).
	Vision Vision
	// Grammars compiles the grammars of response formats (package
	// grammar); nil refuses JSON response formats (400
	// unsupported_parameter).
	Grammars Grammars
}

// Vision is a model's vision side as the pipeline sees it: where images go
// in the prompt, and the tower that turns one into soft tokens.
type Vision interface {
	// ImageMarker is the text the chat template writes for an image
	// content part (Gemma 3: "<start_of_image>").
	ImageMarker() string
	// ImagePrompt is what the marker of img becomes before tokenization:
	// the placeholders its soft tokens replace (as many as Encode makes
	// of it), with what brackets them, as the model's processor writes
	// it.
	ImagePrompt(img *media.Image) string
	// Video reports whether the tower reads video frames; without it
	// video parts are refused (400 unsupported_media).
	Video() bool
	// Encode runs the tower on one decoded image: its placeholder token,
	// the number of soft tokens, the image's hash and the soft tokens'
	// embeddings. An error is the server's (503 vlm_extraction_failed),
	// unless it is an *Invalid.
	Encode(ctx context.Context, img *media.Image) (MediaItem, error)
}

// VideoVision is a Vision whose Video reports true: it also places and
// encodes the sampled frames of a video.
type VideoVision interface {
	Vision
	// VideoMarker is the text the chat template writes for a video part.
	VideoMarker() string
	// VideoPrompt is what the marker of a video of these frames becomes:
	// each frame's placeholders (as many as EncodeFrame makes of it), with
	// what brackets and precedes them, as the model's processor writes
	// them.
	VideoPrompt(frames []media.Frame) string
	// EncodeFrame is Encode for one sampled frame of a video.
	EncodeFrame(ctx context.Context, frame media.Frame) (MediaItem, error)
}

// Catalog resolves a requested model name.
type Catalog interface {
	Lookup(name string) (*Model, bool)
}

// Endpoint says which OpenAI API a request came through.
type Endpoint uint8

// Endpoints.
const (
	Chat       Endpoint = iota + 1 // POST /v1/chat/completions
	Completion                     // POST /v1/completions
)

func (e Endpoint) String() string {
	switch e {
	case Chat:
		return "chat"
	case Completion:
		return "completion"
	}
	return "unknown"
}

// Input is a request as it arrives: which API, the body, and the id the
// caller proposed (empty when none).
type Input struct {
	Endpoint Endpoint
	Body     []byte
	CallerID string
}

// Message is one chat turn after parsing: content parts are joined and
// media parts set aside in Params.Media; Parts keeps their order for
// templates that place media.
type Message struct {
	Role    string
	Content string
	Name    string
	// Parts is the content as a list, in order, when it was given as one;
	// nil when it was a string.
	Parts []Part
	// ToolCalls are the calls of an assistant turn sent back as history.
	ToolCalls []toolcall.Call
	// ToolCallID is the call a tool turn answers; Parse sets Name to that
	// call's function when the turn names none.
	ToolCallID string
}

// Part is one content part of a chat turn: Kind "text" with its Text, or
// "image" or "video" (the media itself is in Params.Media, in order).
type Part struct {
	Kind string
	Text string
}

// Media is a media part of a user turn, not yet fetched or decoded.
type Media struct {
	Kind string // "image" or "video"
	URL  string
}

// Params is a parsed and validated request body.
type Params struct {
	Model    string
	Messages []Message // chat
	Prompt   string    // completion given as text
	// PromptTokens is a completion prompt given as token ids; PromptIsTokens
	// tells it from an empty text prompt.
	PromptTokens   []int32
	PromptIsTokens bool
	// MorePrompts and MorePromptTokens are a completion's further prompts
	// when it was given a list of several, in order after the first (text,
	// or token ids when PromptIsTokens).
	MorePrompts      []string
	MorePromptTokens [][]int32
	Media            []Media
	// N is the number of choices per prompt; 0 and 1 both mean one.
	N int
	// Ignored are the names of the top-level fields Parse did not know,
	// sorted: request text, for the server's log and counters only.
	Ignored []string

	// MaxTokens is the requested generation bound; MaxTokensSet is false
	// when the request left it to the default.
	MaxTokens    int
	MaxTokensSet bool
	Sampling     sample.Params
	Stop         []string
	// Logprobs asks for the sampled tokens' log-probabilities and
	// TopLogprobs alternatives each.
	Logprobs     bool
	TopLogprobs  int
	Stream       bool
	IncludeUsage bool
	// IgnoreEOS keeps generating past the model's end-of-sequence tokens
	// until MaxTokens or a stop string (ignore_eos, as vLLM and llama.cpp
	// accept it: benchmarks use it to fix output lengths).
	IgnoreEOS bool
	// User and PromptCacheKey scope the prefix cache: prompt_cache_key
	// when present, else user, salts it (cache.SaltScope); requests with
	// different salts never share cached blocks.
	User           string
	PromptCacheKey string
	// ReasoningEffort is the chat request's reasoning_effort ("low",
	// "medium", "high"; "" when absent), passed to the chat template.
	ReasoningEffort string
	// ResponseFormat is the chat request's response_format when it asks
	// for JSON (json_object or json_schema); nil for text.
	ResponseFormat *ResponseFormat
	// Tools are the functions a chat request offers (tools), ToolChoice
	// its tool_choice, and SerialToolCalls is parallel_tool_calls: false
	// (at most one call per answer).
	Tools           []toolcall.Tool
	ToolChoice      toolcall.Choice
	SerialToolCalls bool
}

// OffersTools reports whether the model is told about tools and its calls
// are parsed: tools are given and tool_choice is not "none".
func (p *Params) OffersTools() bool {
	return len(p.Tools) > 0 && p.ToolChoice.Mode != toolcall.NoCalls
}

// Request is the request's data as the stages enrich it.
type Request struct {
	Input Input
	// Received is when the pipeline took the request in; it is the
	// "created" time of the response.
	Received time.Time
	// MintedID is the id used when the caller proposed none or an invalid
	// one; it is drawn before the pipeline so that stages stay pure.
	MintedID string

	Params *Params // set by Parse
	Model  *Model  `msgpack:"-"` // set by Parse
	// Prompt is the rendered chat prompt or the completion text (Template).
	Prompt string
	Tokens []int32 // set by Template
	// MoreTokens are the tokens of Params' further prompts, in order
	// (Template).
	MoreTokens [][]int32
	// Images and Videos are the decoded parts of Params.Media, each in the
	// order of its kind's parts; a video is its sampled frames
	// (MediaDecode).
	Images []*media.Image
	Videos [][]media.Frame
	// MediaItems are the vision tower's output per image and frame, in
	// prompt order (VisionTower); Spans are where each sits in Tokens
	// (SpanCarve).
	MediaItems []MediaItem
	Spans      []cache.Span
	Generation *engine.Generation // set by Admit
	// More are the generations of choices 1 and up when the response has
	// several, in index order (Admit): Params.N per prompt, the first
	// prompt's first.
	More []*engine.Generation
}

// Choices is the number of choices of the response: N per prompt.
func (p *Params) Choices() int {
	return max(p.N, 1) * (1 + max(len(p.MorePrompts), len(p.MorePromptTokens)))
}

// ID is the request id once Admit has run, else "".
func (r *Request) ID() string {
	if r.Generation == nil {
		return ""
	}
	return string(r.Generation.ID)
}

// Admitted is a generation the engine accepted: its events, and Stop,
// which cancels the row (the stream then ends within one step). Stop may
// be called any number of times.
type Admitted struct {
	Events <-chan engine.Event
	Stop   context.CancelFunc
	// More are the generations of Request.More, in order.
	More []Admitted
}

// Envelope carries one request through the pipeline.
type Envelope struct {
	Ctx context.Context
	// Reply receives the envelope once, from the terminal; it must have
	// room for it (a buffer of one) so the terminal never blocks.
	Reply chan<- *Envelope
	// Err is set by the first stage that fails; later stages skip.
	Err error
	Req Request
	// Admitted is set by the terminal when the engine accepted the request.
	Admitted *Admitted
}

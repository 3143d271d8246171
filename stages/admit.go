package stages

import (
	"context"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/goprovider/provider/cache"
	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/kvpool"
)

// Request id and token bounds.
const (
	// MaxIDLength bounds a caller's request id, in characters.
	MaxIDLength = 256
	// DefaultMaxTokens caps generation when the request names no bound
	// (and the context is longer).
	DefaultMaxTokens = 8192
)

// ValidID reports whether a caller's request id is acceptable: non-empty,
// valid UTF-8, at most MaxIDLength characters, no control characters.
func ValidID(id string) bool {
	if id == "" || !utf8.ValidString(id) || utf8.RuneCountInString(id) > MaxIDLength {
		return false
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// Admit builds the engine.Generation of each choice.
//
// The id is the caller's when ValidID accepts it, else the minted one.
// A prompt that fills the context is refused; an explicit max_tokens that
// would run past the context is refused (context_length_exceeded) rather
// than silently cut; the default is min(context, 8192) clamped to what the
// context leaves after the prompt.
//
// A response of several choices (n, or a completion's list of prompts)
// gets one generation per choice, in index order: the n of the first
// prompt, then the n of the next. Choice i's id is the request's with
// "#i" appended (choice 0's is the request's own), and with a seed its
// seed is seed + i, so a seeded request reproduces every choice.
type Admit struct{}

// Name implements Stage.
func (Admit) Name() string { return "admit" }

// Apply implements Stage.
func (Admit) Apply(_ context.Context, req *Request) error {
	p := req.Params
	id := req.MintedID
	if ValidID(req.Input.CallerID) {
		id = req.Input.CallerID
	}
	n := max(p.N, 1)
	prompts := append([][]int32{req.Tokens}, req.MoreTokens...)
	gens := make([]*engine.Generation, 0, n*len(prompts))
	for _, tokens := range prompts {
		g, err := admitOne(req, tokens)
		if err != nil {
			return err
		}
		for range n {
			c := *g
			if i := len(gens); i > 0 {
				c.ID = engine.RequestID(id + "#" + strconv.Itoa(i))
				if s := p.Sampling.Seed; s != nil {
					seed := *s + uint64(i)
					c.Sampling.Seed = &seed
				}
			} else {
				c.ID = engine.RequestID(id)
			}
			gens = append(gens, &c)
		}
	}
	req.Generation, req.More = gens[0], nil
	if len(gens) > 1 {
		req.More = gens[1:]
	}
	return nil
}

// admitOne builds the generation of one prompt of req, its id left empty.
func admitOne(req *Request, tokens []int32) (*engine.Generation, error) {
	p, m := req.Params, req.Model
	param := "prompt"
	if req.Input.Endpoint == Chat {
		param = "messages"
	}
	n, ctxLen := len(tokens), m.ContextLength
	if ctxLen > 0 && n >= ctxLen {
		return nil, invalid(CodeContextLength, param)
	}
	maxTokens := p.MaxTokens
	switch {
	case !p.MaxTokensSet:
		maxTokens = DefaultMaxTokens
		if ctxLen > 0 {
			maxTokens = min(maxTokens, ctxLen-n)
		}
	case ctxLen > 0 && maxTokens > ctxLen-n:
		return nil, invalid(CodeContextLength, "max_tokens")
	}
	top := -1
	if p.Logprobs {
		top = p.TopLogprobs
	}
	grammar, err := formatGrammar(req)
	if err != nil {
		return nil, err
	}
	return &engine.Generation{
		Grammar:     grammar,
		Prompt:      tokens,
		MaxTokens:   maxTokens,
		Sampling:    p.Sampling,
		TopLogprobs: top,
		IgnoreEOS:   p.IgnoreEOS,
		CacheScope:  cache.SaltScope(p.PromptCacheKey, p.User),
		Spans:       req.Spans,
		Embeds:      embeds(req.Spans, req.MediaItems),
	}, nil
}

// embeds pairs each carved span with its item's soft tokens (CarveSpans
// returns one span per item, in order); items without embeddings give none.
func embeds(spans []cache.Span, items []MediaItem) []kvpool.Embed {
	var out []kvpool.Embed
	for i, sp := range spans {
		if i < len(items) && items[i].Embeds != nil {
			out = append(out, kvpool.Embed{Pos: sp.Start, Rows: sp.End - sp.Start, Data: items[i].Embeds})
		}
	}
	return out
}

package stages

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/goprovider/provider/sample"
)

// Bounds of the request schema.
const (
	// MaxStops is the most stop strings a request may give (OpenAI's).
	MaxStops = 4
	// MaxTopLogprobs is the most alternatives per token a request may ask.
	MaxTopLogprobs = 20
	// MaxTokensLimit bounds max_tokens before the model's context length is
	// known to keep every count far from overflow.
	MaxTokensLimit = 1 << 24
	// MaxChoices bounds n.
	MaxChoices = 16
	// MaxPrompts bounds the prompts of one completion request.
	MaxPrompts = 16
	// MaxLogitBias bounds the entries of logit_bias.
	MaxLogitBias = 1024
)

// Parse decodes an OpenAI chat or completions body into validated Params
// and resolves the model through Models.
//
// Policy: a top-level field we do not know is ignored and named in
// Params.Ignored (clients send other servers' extensions; the server logs
// and counts the names); an unknown field inside a known object is refused
// (unknown_parameter, param naming the object). A known field is accepted
// only at values we honour, else it is a 400 whose param names it:
// functions empty, best_of absent, 1 or n, echo false, suffix empty, store
// false. Fields that change nothing we return (user, metadata,
// service_tier) are accepted and ignored. tools, tool_choice and
// parallel_tool_calls are read by parseTools. Sampling defaults are
// greedy: temperature 0, top_p 1, top_k 0 (-1 is accepted as "no limit",
// as vLLM clients send it).
//
// Sampling knobs (package sample applies them): logit_bias (token ids of
// the model's vocabulary, values in [-100, 100], at most MaxLogitBias),
// frequency_penalty and presence_penalty in [-2, 2], repetition_penalty in
// (0, 10], min_p in [0, 1]. n is 1 to MaxChoices; a completion's prompt may
// be a string, a list of strings, a list of token ids or a list of lists of
// token ids, each prompt of a list getting its own n choices (at most
// MaxPrompts prompts).
//
// response_format (chat only) is text, json_object or json_schema (see
// parseResponseFormat); Admit compiles a JSON format through the model's
// Grammars, and a schema that cannot be compiled is a 400
// invalid_json_schema.
//
// reasoning_effort (chat only) must be low, medium or high; it is passed
// to every chat template, which honours it when it reads it (gpt-oss's
// writes "Reasoning: high") and ignores it otherwise, as OpenAI accepts it
// for every model. An assistant turn's reasoning_content (a response
// message sent back as history) is accepted so such clients work, and
// dropped: gpt-oss's template renders no earlier turn's reasoning.
type Parse struct {
	Models Catalog
}

// Name implements Stage.
func (Parse) Name() string { return "parse" }

var commonKeys = []string{
	"model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "logprobs",
	"stream", "stream_options", "n", "user", "frequency_penalty", "presence_penalty", "logit_bias",
	"ignore_eos", "prompt_cache_key", "min_p", "repetition_penalty",
}

var (
	chatKeys = keySet(commonKeys, "messages", "max_completion_tokens", "top_logprobs",
		"response_format", "tools", "tool_choice", "parallel_tool_calls", "functions",
		"function_call", "store", "metadata", "service_tier", "modalities", "reasoning_effort")
	completionKeys = keySet(commonKeys, "prompt", "echo", "suffix", "best_of")
	messageKeys    = keySet(nil, "role", "content", "name", "tool_calls", "tool_call_id",
		"refusal", "annotations", "audio", "function_call", "reasoning_content")
)

func keySet(base []string, more ...string) map[string]bool {
	m := make(map[string]bool, len(base)+len(more))
	for _, k := range base {
		m[k] = true
	}
	for _, k := range more {
		m[k] = true
	}
	return m
}

// Apply implements Stage. It drops the body once parsed.
func (p Parse) Apply(_ context.Context, req *Request) error {
	f, err := topObject(req.Input.Body)
	if err != nil {
		return err
	}
	known := chatKeys
	if req.Input.Endpoint == Completion {
		known = completionKeys
	}
	var ignored []string
	for k := range f {
		if !known[k] {
			ignored = append(ignored, k)
		}
	}
	slices.Sort(ignored)
	var name string
	if ok, err := get(f, "model", &name); err != nil {
		return err
	} else if !ok || name == "" {
		return invalid(CodeMissing, "model")
	}
	m, ok := p.Models.Lookup(name)
	if !ok {
		return ErrUnknownModel
	}
	par := &Params{Model: name, Ignored: ignored}
	if err := parseCommon(f, par, m); err != nil {
		return err
	}
	switch req.Input.Endpoint {
	case Chat:
		err = parseChat(f, par)
	case Completion:
		err = parseCompletion(f, par, m)
	default:
		err = invalid(CodeInvalidValue, "")
	}
	if err != nil {
		return err
	}
	req.Params, req.Model = par, m
	req.Input.Body = nil
	return nil
}

type fields map[string]json.RawMessage

func topObject(body []byte) (fields, error) {
	var f fields
	if err := json.Unmarshal(body, &f); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || errors.Is(err, io.ErrUnexpectedEOF) || len(bytes.TrimSpace(body)) == 0 {
			return nil, &Invalid{Code: CodeInvalidJSON, Err: err}
		}
		return nil, &Invalid{Code: CodeInvalidType, Err: err}
	}
	if f == nil {
		return nil, invalid(CodeInvalidType, "")
	}
	return f, nil
}

// object decodes a nested JSON object; param names it in errors.
func object(raw json.RawMessage, param string) (fields, error) {
	var f fields
	if err := json.Unmarshal(raw, &f); err != nil || f == nil {
		return nil, &Invalid{Code: CodeInvalidType, Param: param, Err: err}
	}
	return f, nil
}

// onlyKeys refuses keys outside known in the object param names, without
// naming the key: the name is request text.
func onlyKeys(f fields, known map[string]bool, param string) error {
	for k := range f {
		if !known[k] {
			return invalid(CodeUnknownParameter, param)
		}
	}
	return nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// get decodes field name into dst; absent and null leave dst alone and
// report false.
func get[T any](f fields, name string, dst *T) (bool, error) {
	raw, ok := f[name]
	if !ok || isNull(raw) {
		return false, nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return false, &Invalid{Code: CodeInvalidType, Param: name, Err: err}
	}
	return true, nil
}

// getInt decodes integer field name and checks lo <= value <= hi.
func getInt(f fields, name string, lo, hi int) (int, bool, error) {
	var n int
	ok, err := get(f, name, &n)
	if err != nil || !ok {
		return 0, false, err
	}
	if n < lo || n > hi {
		return 0, false, invalid(CodeInvalidValue, name)
	}
	return n, true, nil
}

// kind is the JSON kind of a raw value by its first byte.
func kind(raw json.RawMessage) byte {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func parseCommon(f fields, p *Params, m *Model) error {
	n, ok, err := getInt(f, "max_tokens", 0, MaxTokensLimit)
	if err != nil {
		return err
	}
	p.MaxTokens, p.MaxTokensSet = n, ok

	var t float64
	if ok, err := get(f, "temperature", &t); err != nil {
		return err
	} else if ok {
		if (sample.Params{Temperature: t}).Validate() != nil {
			return invalid(CodeInvalidValue, "temperature")
		}
		p.Sampling.Temperature = t
	}
	p.Sampling.TopP = 1
	if ok, err := get(f, "top_p", &t); err != nil {
		return err
	} else if ok {
		if (sample.Params{TopP: t}).Validate() != nil {
			return invalid(CodeInvalidValue, "top_p")
		}
		p.Sampling.TopP = t
	}
	k, _, err := getInt(f, "top_k", -1, math.MaxInt)
	if err != nil {
		return err
	}
	p.Sampling.TopK = max(k, 0)
	if raw, ok := f["seed"]; ok && !isNull(raw) {
		s, err := parseSeed(raw)
		if err != nil {
			return err
		}
		p.Sampling.Seed = &s
	}
	if err := parseStop(f, p); err != nil {
		return err
	}
	if _, err := get(f, "stream", &p.Stream); err != nil {
		return err
	}
	if _, err := get(f, "ignore_eos", &p.IgnoreEOS); err != nil {
		return err
	}
	if raw, ok := f["stream_options"]; ok && !isNull(raw) {
		so, err := object(raw, "stream_options")
		if err != nil {
			return err
		}
		if err := onlyKeys(so, keySet(nil, "include_usage"), "stream_options"); err != nil {
			return err
		}
		if _, err := get(so, "include_usage", &p.IncludeUsage); err != nil {
			return &Invalid{Code: CodeInvalidType, Param: "stream_options", Err: err}
		}
	}
	if n, _, err := getInt(f, "n", 1, MaxChoices); err != nil {
		return err
	} else if n > 1 {
		p.N = n
	}
	if _, err := get(f, "user", &p.User); err != nil {
		return err
	}
	if _, err := get(f, "prompt_cache_key", &p.PromptCacheKey); err != nil {
		return err
	}
	return parseKnobs(f, &p.Sampling, m)
}

// parseKnobs reads the sampling knobs beyond temperature, top_p and top_k.
func parseKnobs(f fields, s *sample.Params, m *Model) error {
	knobs := []struct {
		name string
		dst  *float64
		ok   func(float64) bool
	}{
		{"min_p", &s.MinP, func(x float64) bool { return x >= 0 && x <= 1 }},
		{"frequency_penalty", &s.FrequencyPenalty, func(x float64) bool { return math.Abs(x) <= sample.MaxPenalty }},
		{"presence_penalty", &s.PresencePenalty, func(x float64) bool { return math.Abs(x) <= sample.MaxPenalty }},
		{"repetition_penalty", &s.RepetitionPenalty, func(x float64) bool { return x > 0 && x <= sample.MaxRepetitionPenalty }},
	}
	for _, k := range knobs {
		var x float64
		if ok, err := get(f, k.name, &x); err != nil {
			return err
		} else if ok {
			if !k.ok(x) {
				return invalid(CodeInvalidValue, k.name)
			}
			*k.dst = x
		}
	}
	var bias map[string]float64
	if _, err := get(f, "logit_bias", &bias); err != nil {
		return err
	}
	if len(bias) > MaxLogitBias {
		return invalid(CodeInvalidValue, "logit_bias")
	}
	vocab := int64(m.Tokenizer.VocabSize())
	for k, v := range bias {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 || id >= vocab || math.Abs(v) > sample.MaxBias {
			return invalid(CodeInvalidValue, "logit_bias")
		}
		s.LogitBias = append(s.LogitBias, sample.Bias{Token: int32(id), Value: v})
	}
	slices.SortFunc(s.LogitBias, func(a, b sample.Bias) int { return cmp.Compare(a.Token, b.Token) })
	for i := 1; i < len(s.LogitBias); i++ {
		if s.LogitBias[i].Token == s.LogitBias[i-1].Token {
			// "7" and "07" name one token.
			return invalid(CodeInvalidValue, "logit_bias")
		}
	}
	return nil
}

// parseSeed accepts any JSON integer in [-2^63, 2^64); a negative seed is
// used by its two's-complement bits.
func parseSeed(raw json.RawMessage) (uint64, error) {
	s := string(bytes.TrimSpace(raw))
	if k := kind(raw); k != '-' && (k < '0' || k > '9') {
		return 0, invalid(CodeInvalidType, "seed")
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return u, nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return uint64(i), nil
	}
	return 0, invalid(CodeInvalidValue, "seed")
}

func parseStop(f fields, p *Params) error {
	raw, ok := f["stop"]
	if !ok || isNull(raw) {
		return nil
	}
	var stops []string
	if kind(raw) == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return &Invalid{Code: CodeInvalidType, Param: "stop", Err: err}
		}
		stops = []string{s}
	} else if _, err := get(f, "stop", &stops); err != nil {
		return err
	}
	if len(stops) > MaxStops {
		return invalid(CodeInvalidValue, "stop")
	}
	for _, s := range stops {
		if s == "" {
			return invalid(CodeInvalidValue, "stop")
		}
	}
	p.Stop = stops
	return nil
}

func parseChat(f fields, p *Params) error {
	n, ok, err := getInt(f, "max_completion_tokens", 0, MaxTokensLimit)
	if err != nil {
		return err
	} else if ok {
		if p.MaxTokensSet && n != p.MaxTokens {
			return invalid(CodeInvalidValue, "max_completion_tokens")
		}
		p.MaxTokens, p.MaxTokensSet = n, true
	}
	if _, err := get(f, "logprobs", &p.Logprobs); err != nil {
		return err
	}
	if n, ok, err := getInt(f, "top_logprobs", 0, MaxTopLogprobs); err != nil {
		return err
	} else if ok {
		if !p.Logprobs {
			return invalid(CodeInvalidValue, "top_logprobs")
		}
		p.TopLogprobs = n
	}
	if ok, err := get(f, "reasoning_effort", &p.ReasoningEffort); err != nil {
		return err
	} else if ok {
		switch p.ReasoningEffort {
		case "low", "medium", "high":
		default:
			return invalid(CodeInvalidValue, "reasoning_effort")
		}
	}
	if p.ResponseFormat, err = parseResponseFormat(f["response_format"]); err != nil {
		return err
	}
	if err := refuseChatFeatures(f); err != nil {
		return err
	}
	if err := parseTools(f, p); err != nil {
		return err
	}
	var raws []json.RawMessage
	if ok, err := get(f, "messages", &raws); err != nil {
		return err
	} else if !ok {
		return invalid(CodeMissing, "messages")
	}
	if len(raws) == 0 {
		return invalid(CodeInvalidValue, "messages")
	}
	p.Messages = make([]Message, 0, len(raws))
	for _, raw := range raws {
		m, media, err := parseMessage(raw)
		if err != nil {
			return err
		}
		p.Messages = append(p.Messages, m)
		p.Media = append(p.Media, media...)
	}
	return linkToolResults(p.Messages)
}

// refuseChatFeatures checks the chat fields accepted only at values that
// change nothing.
func refuseChatFeatures(f fields) error {
	// The legacy functions API is refused; tools replace it.
	var list []json.RawMessage
	if ok, err := get(f, "functions", &list); err != nil {
		return err
	} else if ok && len(list) > 0 {
		return invalid(CodeUnsupported, "functions")
	}
	if raw, ok := f["function_call"]; ok && !isNull(raw) {
		var s string
		if kind(raw) != '"' || json.Unmarshal(raw, &s) != nil || (s != "none" && s != "auto") {
			return invalid(CodeUnsupported, "function_call")
		}
	}
	var b bool
	if ok, err := get(f, "store", &b); err != nil {
		return err
	} else if ok && b {
		return invalid(CodeUnsupported, "store")
	}
	var meta map[string]string
	if _, err := get(f, "metadata", &meta); err != nil {
		return err
	}
	var tier string
	if _, err := get(f, "service_tier", &tier); err != nil {
		return err
	}
	var modalities []string
	if _, err := get(f, "modalities", &modalities); err != nil {
		return err
	}
	for _, m := range modalities {
		if m != "text" {
			return invalid(CodeUnsupported, "modalities")
		}
	}
	return nil
}

// parseMessage validates one chat turn. The "developer" role is the
// system role of newer OpenAI models and is passed to templates as
// "system"; an assistant turn may carry tool_calls (its content then may
// be null or absent) and a tool turn answers one by tool_call_id;
// function turns (the legacy functions API) are refused.
func parseMessage(raw json.RawMessage) (Message, []Media, error) {
	f, err := object(raw, "messages")
	if err != nil {
		return Message{}, nil, err
	}
	if err := onlyKeys(f, messageKeys, "messages"); err != nil {
		return Message{}, nil, err
	}
	var m Message
	if ok, err := get(f, "role", &m.Role); err != nil {
		return Message{}, nil, &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
	} else if !ok {
		return Message{}, nil, invalid(CodeMissing, "messages")
	}
	switch m.Role {
	case "system", "user", "assistant":
	case "developer":
		m.Role = "system"
	case "tool":
	case "function":
		return Message{}, nil, invalid(CodeUnsupported, "messages")
	default:
		return Message{}, nil, invalid(CodeInvalidValue, "messages")
	}
	if _, err := get(f, "name", &m.Name); err != nil {
		return Message{}, nil, &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
	}
	if err := parseMessageTools(f, &m); err != nil {
		return Message{}, nil, err
	}
	var reasoning string
	if _, err := get(f, "reasoning_content", &reasoning); err != nil {
		return Message{}, nil, &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
	} else if reasoning != "" && m.Role != "assistant" {
		return Message{}, nil, invalid(CodeInvalidValue, "messages")
	}
	text, parts, media, present, err := parseContent(f["content"])
	if err != nil {
		return Message{}, nil, err
	}
	if !present && m.Role != "assistant" {
		return Message{}, nil, invalid(CodeMissing, "messages")
	}
	if len(media) > 0 && m.Role != "user" {
		return Message{}, nil, invalid(CodeInvalidValue, "messages")
	}
	m.Content, m.Parts = text, parts
	return m, media, nil
}

// parseContent reads a string or a list of content parts. Text parts are
// concatenated without a separator (as mlx-lm's server does); image and
// video parts become Media. A list also comes back as parts, in order.
func parseContent(raw json.RawMessage) (text string, parts []Part, media []Media, present bool, err error) {
	if isNull(raw) {
		return "", nil, nil, false, nil
	}
	switch kind(raw) {
	case '"':
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", nil, nil, false, &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
		}
		return text, nil, nil, true, nil
	case '[':
	default:
		return "", nil, nil, false, invalid(CodeInvalidType, "messages")
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return "", nil, nil, false, &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
	}
	parts = make([]Part, 0, len(raws))
	var buf bytes.Buffer
	for _, pr := range raws {
		pf, err := object(pr, "messages")
		if err != nil {
			return "", nil, nil, false, err
		}
		var typ string
		if _, err := get(pf, "type", &typ); err != nil {
			return "", nil, nil, false, &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
		}
		switch typ {
		case "text":
			if err := onlyKeys(pf, keySet(nil, "type", "text"), "messages"); err != nil {
				return "", nil, nil, false, err
			}
			var s string
			if ok, err := get(pf, "text", &s); err != nil || !ok {
				return "", nil, nil, false, invalid(CodeInvalidType, "messages")
			}
			buf.WriteString(s)
			parts = append(parts, Part{Kind: "text", Text: s})
		case "image_url", "video_url":
			if err := onlyKeys(pf, keySet(nil, "type", typ), "messages"); err != nil {
				return "", nil, nil, false, err
			}
			obj, err := object(pf[typ], "messages")
			if err != nil {
				return "", nil, nil, false, err
			}
			if err := onlyKeys(obj, keySet(nil, "url", "detail"), "messages"); err != nil {
				return "", nil, nil, false, err
			}
			var url string
			if ok, err := get(obj, "url", &url); err != nil || !ok || url == "" {
				return "", nil, nil, false, invalid(CodeInvalidValue, "messages")
			}
			kind := "image"
			if typ == "video_url" {
				kind = "video"
			}
			media = append(media, Media{Kind: kind, URL: url})
			parts = append(parts, Part{Kind: kind})
		case "input_audio", "file", "input_video":
			return "", nil, nil, false, invalid(CodeUnsupportedMedia, "messages")
		default:
			return "", nil, nil, false, invalid(CodeInvalidValue, "messages")
		}
	}
	return buf.String(), parts, media, true, nil
}

func parseCompletion(f fields, p *Params, m *Model) error {
	k, ok, err := getInt(f, "logprobs", 0, MaxTopLogprobs)
	if err != nil {
		return err
	}
	p.Logprobs, p.TopLogprobs = ok, k
	var b bool
	if ok, err := get(f, "echo", &b); err != nil {
		return err
	} else if ok && b {
		return invalid(CodeUnsupported, "echo")
	}
	var s string
	if ok, err := get(f, "suffix", &s); err != nil {
		return err
	} else if ok && s != "" {
		return invalid(CodeUnsupported, "suffix")
	}
	if ok, err := get(f, "best_of", &k); err != nil {
		return err
	} else if ok && k != 1 && k != max(p.N, 1) {
		// best_of > n would rank choices we do not return.
		return invalid(CodeUnsupported, "best_of")
	}
	return parsePrompt(f["prompt"], p, m)
}

// parsePrompt accepts a string, a list of strings, a list of token ids,
// or a list of lists of token ids. A list of several prompts asks for the
// choices of each (as OpenAI's legacy completions do); its items must all
// be strings or all lists.
func parsePrompt(raw json.RawMessage, p *Params, m *Model) error {
	if isNull(raw) {
		return invalid(CodeMissing, "prompt")
	}
	switch kind(raw) {
	case '"':
		if err := json.Unmarshal(raw, &p.Prompt); err != nil {
			return &Invalid{Code: CodeInvalidType, Param: "prompt", Err: err}
		}
		return nil
	case '[':
	default:
		return invalid(CodeInvalidType, "prompt")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return &Invalid{Code: CodeInvalidType, Param: "prompt", Err: err}
	}
	if len(items) == 0 {
		return invalid(CodeInvalidValue, "prompt")
	}
	first := kind(items[0])
	if first != '"' && first != '[' {
		ids, err := tokenPrompt(raw, m)
		if err != nil {
			return err
		}
		p.PromptTokens, p.PromptIsTokens = ids, true
		return nil
	}
	if len(items) > MaxPrompts {
		return invalid(CodeInvalidValue, "prompt")
	}
	for i, item := range items {
		if kind(item) != first {
			return invalid(CodeInvalidType, "prompt")
		}
		if first == '"' {
			var text string
			if err := json.Unmarshal(item, &text); err != nil {
				return &Invalid{Code: CodeInvalidType, Param: "prompt", Err: err}
			}
			if i == 0 {
				p.Prompt = text
			} else {
				p.MorePrompts = append(p.MorePrompts, text)
			}
			continue
		}
		ids, err := tokenPrompt(item, m)
		if err != nil {
			return err
		}
		if i == 0 {
			p.PromptTokens, p.PromptIsTokens = ids, true
		} else {
			p.MorePromptTokens = append(p.MorePromptTokens, ids)
		}
	}
	return nil
}

// tokenPrompt reads one prompt given as a non-empty list of token ids of
// m's vocabulary.
func tokenPrompt(raw json.RawMessage, m *Model) ([]int32, error) {
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, &Invalid{Code: CodeInvalidType, Param: "prompt", Err: err}
	}
	if len(ids) == 0 {
		return nil, invalid(CodeInvalidValue, "prompt")
	}
	vocab := int64(m.Tokenizer.VocabSize())
	out := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return nil, invalid(CodeInvalidValue, "prompt")
		}
		out[i] = int32(id)
	}
	return out, nil
}

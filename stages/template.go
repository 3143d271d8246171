package stages

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/goprovider/provider/jinja"
	"github.com/goprovider/provider/media"
	"github.com/goprovider/provider/tokenizer"
	"github.com/goprovider/provider/toolcall"
)

// Template turns a parsed request into prompt tokens.
//
// Chat requests are rendered with the model's chat template as
// transformers' apply_chat_template does (jinja.ChatOptions with
// add_generation_prompt; strftime_now reads Request.Received), then
// tokenized with special-token text parsed. The BOS rule is llama.cpp's: the
// vocabulary's own BOS/EOS are added unless the rendered text already
// starts with the BOS text, so a template that writes BOS never gets a
// second one. Completion text is tokenized raw with the vocabulary's
// special tokens added and special-token text parsed (as llama.cpp's
// server does); completion token ids are taken as given. Each further
// prompt of a completion is tokenized the same way into MoreTokens.
type Template struct{}

// Name implements Stage.
func (Template) Name() string { return "template" }

// Apply implements Stage.
func (Template) Apply(_ context.Context, req *Request) error {
	m, p := req.Model, req.Params
	tok := m.Tokenizer
	param := "prompt"
	switch req.Input.Endpoint {
	case Chat:
		param = "messages"
		if m.ChatTemplate == nil {
			return invalid(CodeNoChatTemplate, "model")
		}
		bos, eos := tokenText(tok, tok.BOS()), tokenText(tok, tok.EOS())
		vars := ChatVars{BOS: bos, EOS: eos, Now: req.Received, ReasoningEffort: p.ReasoningEffort, Parts: m.Vision != nil}
		if err := toolVars(&vars, p, m); err != nil {
			return err
		}
		text, err := RenderChat(m.ChatTemplate, p.Messages, vars)
		if err != nil {
			return err
		}
		if text, err = expandImages(m.Vision, text, req.Images); err != nil {
			return err
		}
		if text, err = expandVideos(m.Vision, text, req.Videos); err != nil {
			return err
		}
		req.Prompt = text
		addBOS := bos == "" || !strings.HasPrefix(text, bos)
		req.Tokens = tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: addBOS, ParseSpecial: true})
	case Completion:
		if p.PromptIsTokens {
			req.Tokens = append([]int32(nil), p.PromptTokens...)
		} else {
			req.Prompt = p.Prompt
			req.Tokens = tok.Encode(p.Prompt, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true})
		}
		req.MoreTokens = nil
		for _, ids := range p.MorePromptTokens {
			req.MoreTokens = append(req.MoreTokens, append([]int32(nil), ids...))
		}
		for _, text := range p.MorePrompts {
			req.MoreTokens = append(req.MoreTokens, tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true}))
		}
	}
	if len(req.Tokens) == 0 {
		return invalid(CodeEmptyPrompt, param)
	}
	for _, ids := range req.MoreTokens {
		if len(ids) == 0 {
			return invalid(CodeEmptyPrompt, param)
		}
	}
	return nil
}

// ChatVars are the template variables of a request besides its messages.
type ChatVars struct {
	// BOS and EOS are the vocabulary's token texts ("" when none).
	BOS, EOS string
	// Now is what strftime_now reads.
	Now time.Time
	// ReasoningEffort, when not "", is the reasoning_effort variable.
	ReasoningEffort string
	// Parts passes content given as a list of parts as such
	// ({"type": "text", "text": ...}, {"type": "image"}, {"type":
	// "video"}), for templates that place media; otherwise content is
	// the joined text.
	Parts bool
	// Tools are the tools offered to the model (none when tool_choice is
	// "none"), SerialToolCalls asks for one call at a time, and Dialect is
	// the model's: what its template does not render of tools, calls and
	// results is written in its syntax (ToolDialect).
	Tools           []toolcall.Tool
	SerialToolCalls bool
	Dialect         ToolDialect
}

// expandImages replaces the image markers the template wrote, in order,
// with the model's prompt for each decoded image (its placeholders), as the
// model's processor does before tokenization. The markers must match the
// images one for one: fewer means the template dropped images (the
// server's fault, a CarveError), more means the request's text holds
// markers (400).
func expandImages(v Vision, text string, images []*media.Image) (string, error) {
	if v == nil || len(images) == 0 {
		return text, nil
	}
	prompts := make([]string, len(images))
	for i, img := range images {
		prompts[i] = v.ImagePrompt(img)
	}
	return expandMarkers(text, v.ImageMarker(), prompts)
}

// expandVideos is expandImages for videos: each video marker becomes the
// prompt of its video's sampled frames. Videos for a tower that places
// none are the server's fault (MediaDecode refuses them).
func expandVideos(v Vision, text string, videos [][]media.Frame) (string, error) {
	if len(videos) == 0 {
		return text, nil
	}
	vv, ok := v.(VideoVision)
	if !ok || !v.Video() {
		return "", fmt.Errorf("%w: videos for a model without a video tower", ErrVision)
	}
	prompts := make([]string, len(videos))
	for i, frames := range videos {
		prompts[i] = vv.VideoPrompt(frames)
	}
	return expandMarkers(text, vv.VideoMarker(), prompts)
}

// expandMarkers replaces the markers in text, in order, with prompts, one
// for one.
func expandMarkers(text, marker string, prompts []string) (string, error) {
	pieces := strings.Split(text, marker)
	switch n := len(pieces) - 1; {
	case n < len(prompts):
		return "", &CarveError{Reason: CarveMissingRun, At: n}
	case n > len(prompts):
		return "", invalid(CodeInvalidValue, "messages")
	}
	var b strings.Builder
	for i, p := range prompts {
		b.WriteString(pieces[i])
		b.WriteString(p)
	}
	b.WriteString(pieces[len(prompts)])
	return b.String(), nil
}

// RenderChat renders messages with a chat template and a generation
// prompt. A template that raises (e.g. "roles must alternate") rejects the
// conversation: that is the client's to fix (*Invalid,
// template_rejected). Any other failure is the template's (ErrTemplate).
func RenderChat(t *jinja.Template, msgs []Message, v ChatVars) (string, error) {
	toolTurns := len(v.Tools) > 0 || hasToolTurns(msgs)
	if toolTurns {
		msgs = v.Dialect.withTools(msgs, v.Tools, v.SerialToolCalls)
	}
	list := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
		if v.Parts && m.Parts != nil {
			parts := make([]any, len(m.Parts))
			for j, p := range m.Parts {
				part := map[string]any{"type": p.Kind}
				if p.Kind == "text" {
					part["text"] = p.Text
				}
				parts[j] = part
			}
			list[i]["content"] = parts
		}
		if m.Name != "" {
			list[i]["name"] = m.Name
		}
		if len(m.ToolCalls) > 0 {
			list[i]["tool_calls"] = callValues(m.ToolCalls)
		}
		if m.ToolCallID != "" {
			list[i]["tool_call_id"] = m.ToolCallID
		}
	}
	if toolTurns && v.Dialect.Renders.AttachedResults {
		list = attachResults(list, msgs)
	}
	o := jinja.ChatOptions{
		AddGenerationPrompt: true,
		BOS:                 v.BOS,
		EOS:                 v.EOS,
		Now:                 func() time.Time { return v.Now },
	}
	if len(v.Tools) > 0 && v.Dialect.Renders.Tools {
		o.Tools = toolValues(v.Tools)
	}
	if v.ReasoningEffort != "" {
		// Left undefined otherwise, so the template applies its default.
		o.Extra = map[string]any{"reasoning_effort": v.ReasoningEffort}
	}
	text, err := t.RenderChat(list, o)
	switch {
	case err == nil:
		return text, nil
	case errors.Is(err, jinja.ErrRaised):
		return "", &Invalid{Code: CodeTemplateRejected, Param: "messages", Err: err}
	default:
		return "", fmt.Errorf("%w: %w", ErrTemplate, err)
	}
}

func tokenText(t *tokenizer.Tokenizer, id int32) string {
	if id < 0 {
		return ""
	}
	return t.Token(id)
}

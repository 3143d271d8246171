package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"unicode/utf8"

	"github.com/goprovider/provider/stages"
	"github.com/goprovider/provider/tokenizer"
)

// The tokenizer endpoints follow llama.cpp's server, with a model field
// since one server holds several models:
//
//	POST /tokenize       {"model", "content", "add_special", "parse_special", "with_pieces"} -> {"tokens": [...]}
//	POST /detokenize     {"model", "tokens"} -> {"content"}
//	POST /apply-template {"model", "messages", ...} -> {"prompt"}
//
// /tokenize adds the vocabulary's special tokens (BOS) only with
// add_special (default false) and reads special-token text as those tokens
// unless parse_special is false; with_pieces returns each token's piece
// beside its id (a string, or its bytes when they are not valid UTF-8).
// /detokenize renders control tokens as nothing (tokenizer.Decode).
// /apply-template takes a chat request's body and returns the prompt the
// chat endpoint would render for it, through the same Parse and Template
// stages. Errors are OpenAI-shaped, as on the generation endpoints.

type tokenizeBody struct {
	Model        string  `json:"model"`
	Content      *string `json:"content"`
	AddSpecial   bool    `json:"add_special"`
	ParseSpecial *bool   `json:"parse_special"`
	WithPieces   bool    `json:"with_pieces"`
}

type detokenizeBody struct {
	Model  string  `json:"model"`
	Tokens []int64 `json:"tokens"`
}

// piece is a token of a with_pieces answer.
type piece struct {
	ID    int32 `json:"id"`
	Piece any   `json:"piece"` // string, or []int of bytes
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	s.utility(w, r, "tokenize", func(ctx context.Context, body []byte) (any, error) {
		var b tokenizeBody
		if err := decodeStrict(body, &b); err != nil {
			return nil, err
		}
		if b.Content == nil {
			return nil, &stages.Invalid{Code: stages.CodeMissing, Param: "content"}
		}
		m, release, err := s.utilityModel(ctx, b.Model)
		if err != nil {
			return nil, err
		}
		defer release()
		ids := m.Tokenizer.Encode(*b.Content, tokenizer.EncodeOptions{AddSpecial: b.AddSpecial, ParseSpecial: b.ParseSpecial == nil || *b.ParseSpecial})
		if !b.WithPieces {
			if ids == nil {
				ids = []int32{}
			}
			return map[string][]int32{"tokens": ids}, nil
		}
		out := make([]piece, len(ids))
		for i, id := range ids {
			p := m.Tokenizer.Piece(id)
			out[i] = piece{ID: id, Piece: string(p)}
			if !utf8.Valid(p) {
				out[i].Piece = ints(p)
			}
		}
		return map[string][]piece{"tokens": out}, nil
	})
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	s.utility(w, r, "detokenize", func(ctx context.Context, body []byte) (any, error) {
		var b detokenizeBody
		if err := decodeStrict(body, &b); err != nil {
			return nil, err
		}
		if b.Tokens == nil {
			return nil, &stages.Invalid{Code: stages.CodeMissing, Param: "tokens"}
		}
		m, release, err := s.utilityModel(ctx, b.Model)
		if err != nil {
			return nil, err
		}
		defer release()
		ids := make([]int32, len(b.Tokens))
		for i, id := range b.Tokens {
			if id < 0 || id >= int64(m.Tokenizer.VocabSize()) {
				return nil, &stages.Invalid{Code: stages.CodeInvalidValue, Param: "tokens"}
			}
			ids[i] = int32(id)
		}
		return map[string]string{"content": m.Tokenizer.Decode(ids)}, nil
	})
}

func (s *Server) applyTemplate(w http.ResponseWriter, r *http.Request) {
	s.utility(w, r, "apply_template", func(ctx context.Context, body []byte) (any, error) {
		var head struct {
			Model any `json:"model"`
		}
		_ = json.Unmarshal(body, &head)
		name, _ := head.Model.(string)
		_, release, err := s.utilityModel(ctx, name)
		if err != nil {
			var inv *stages.Invalid
			if !errors.As(err, &inv) {
				return nil, err
			}
			// A missing or mistyped model is Parse's to name.
			release = func() {}
		}
		defer release()
		req := &stages.Request{Input: stages.Input{Endpoint: stages.Chat, Body: body}, Received: s.clk.Now()}
		for _, st := range []stages.Stage{stages.Parse{Models: s.graph}, stages.Template{}} {
			if err := st.Apply(ctx, req); err != nil {
				return nil, err
			}
		}
		return map[string]string{"prompt": req.Prompt}, nil
	})
}

// utility serves one tokenizer endpoint: it reads the body, runs fn and
// writes its answer as JSON, or the error OpenAI-shaped; it counts and
// logs the request as the generation endpoints do.
func (s *Server) utility(w http.ResponseWriter, r *http.Request, endpoint string, fn func(ctx context.Context, body []byte) (any, error)) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	var answer any
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			err = errTooLarge
		} else {
			err = fmt.Errorf("%w: %w", errBadBody, err)
		}
	} else {
		answer, err = fn(r.Context(), body)
	}
	status := http.StatusOK
	var o outcome
	if err != nil {
		o = classify(err)
		status = o.status
		writeError(w, o)
	} else {
		b, _ := json.Marshal(answer)
		writeJSON(w, status, b)
	}
	s.metrics.finish(endpoint, status, o.class, timing{})
	attrs := []slog.Attr{slog.String("endpoint", endpoint), slog.Int("status", status)}
	level := slog.LevelInfo
	if o.class != "" {
		attrs = append(attrs, slog.String("class", o.class), slog.String("code", o.code))
		if o.param != "" {
			attrs = append(attrs, slog.String("param", o.param))
		}
		level = slog.LevelWarn
	}
	s.log.LogAttrs(r.Context(), level, "request", attrs...)
}

// utilityModel resolves a tokenizer endpoint's model, loading it on demand
// when the server has slots; release lets the slot go.
func (s *Server) utilityModel(ctx context.Context, name string) (*stages.Model, func(), error) {
	if name == "" {
		return nil, nil, &stages.Invalid{Code: stages.CodeMissing, Param: "model"}
	}
	release := func() {}
	if s.slots != nil {
		rel, err := s.slots.Acquire(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		release = rel
	}
	m, ok := s.graph.Lookup(name)
	if !ok {
		release()
		return nil, nil, stages.ErrUnknownModel
	}
	return m, release, nil
}

// decodeStrict decodes a tokenizer endpoint's body: a JSON object whose
// known fields have their types (other fields are ignored).
func decodeStrict(body []byte, dst any) error {
	err := json.Unmarshal(body, dst)
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
		if string(body) == "null" {
			return &stages.Invalid{Code: stages.CodeInvalidType}
		}
		return nil
	case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF), len(body) == 0:
		return &stages.Invalid{Code: stages.CodeInvalidJSON, Err: err}
	case errors.As(err, &typ):
		// Field is the path of one of our struct's fields, not request
		// text; the top-level kind mismatch has none.
		return &stages.Invalid{Code: stages.CodeInvalidType, Param: knownField(typ.Field), Err: err}
	}
	return &stages.Invalid{Code: stages.CodeInvalidType, Err: err}
}

// knownField returns name when it is one of the tokenizer endpoints'
// fields, else "".
func knownField(name string) string {
	switch name {
	case "model", "content", "add_special", "parse_special", "with_pieces", "tokens":
		return name
	}
	return ""
}

func ints(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

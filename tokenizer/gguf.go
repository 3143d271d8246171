package tokenizer

import (
	"errors"
	"fmt"

	"github.com/goprovider/provider/gguf"
)

// FromGGUF builds the tokenizer described by a GGUF file's tokenizer.ggml.*
// metadata, with the defaults llama.cpp applies to missing keys.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	v, err := vocabFromGGUF(f)
	if err != nil {
		return nil, err
	}
	t, err := New(v)
	if err != nil {
		return nil, fmt.Errorf("gguf tokenizer: %w", err)
	}
	return t, nil
}

// uintKey reads an integer key, checking presence explicitly so that a
// missing key can never be mistaken for the value 0.
func uintKey(f *gguf.File, key string) (uint64, bool) {
	if _, ok := f.Lookup(key); !ok {
		return 0, false
	}
	return f.Uint(key)
}

func vocabFromGGUF(f *gguf.File) (Vocab, error) {
	var v Vocab
	model, ok := f.String("tokenizer.ggml.model")
	if !ok {
		return v, errors.New("gguf tokenizer: missing tokenizer.ggml.model")
	}
	v.Model = model
	v.Pre, _ = f.String("tokenizer.ggml.pre")
	v.Tokens, ok = f.Strings("tokenizer.ggml.tokens")
	if !ok {
		return v, errors.New("gguf tokenizer: missing tokenizer.ggml.tokens")
	}
	if s, ok := f.Float32s("tokenizer.ggml.scores"); ok {
		v.Scores = s
	} else if s, ok := f.Int32s("tokenizer.ggml.scores"); ok {
		v.Scores = make([]float32, len(s))
		for i, x := range s {
			v.Scores[i] = float32(x)
		}
	}
	v.Types, _ = f.Int32s("tokenizer.ggml.token_type")

	// Defaults per model, as llama.cpp sets them before reading the keys.
	v.EOT, v.PAD = -1, -1
	switch model {
	case "llama":
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddBOS, v.AddSpacePrefix = true, true
	case "gpt2":
		v.BOS, v.EOS, v.UNK = 11, 11, -1
		merges, ok := f.Strings("tokenizer.ggml.merges")
		if !ok {
			return v, errors.New("gguf tokenizer: missing tokenizer.ggml.merges")
		}
		v.Merges = merges
		switch v.Pre {
		case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
			"jina-v5-nano", "tekken", "chameleon":
			v.AddBOS = true
		case "chatglm-bpe", "glm4", "glm5":
			v.BOS = -1
		}
	default:
		return v, fmt.Errorf("gguf tokenizer: unsupported tokenizer model %q", model)
	}

	n := uint64(len(v.Tokens))
	for _, k := range []struct {
		key string
		id  *int32
	}{
		{"tokenizer.ggml.bos_token_id", &v.BOS},
		{"tokenizer.ggml.eos_token_id", &v.EOS},
		{"tokenizer.ggml.eot_token_id", &v.EOT},
		{"tokenizer.ggml.unknown_token_id", &v.UNK},
		{"tokenizer.ggml.padding_token_id", &v.PAD},
	} {
		if *k.id >= 0 && uint64(*k.id) >= n {
			*k.id = -1 // a default that does not exist in this vocabulary
		}
		// An id past the vocabulary (often 0xFFFFFFFF for "none") leaves
		// the default in place, as in llama.cpp.
		if id, ok := uintKey(f, k.key); ok && id < n {
			*k.id = int32(id)
		}
	}
	for _, key := range []string{
		"tokenizer.ggml.eom_token_id", "tokenizer.ggml.fim_pad_token_id",
		"tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id",
	} {
		if id, ok := uintKey(f, key); ok && id < n {
			v.extraEOG = append(v.extraEOG, int32(id))
		}
	}
	if b, ok := f.Bool("tokenizer.ggml.add_bos_token"); ok {
		v.AddBOS = b
	}
	if b, ok := f.Bool("tokenizer.ggml.add_eos_token"); ok {
		v.AddEOS = b
	}
	if b, ok := f.Bool("tokenizer.ggml.add_space_prefix"); ok {
		v.AddSpacePrefix = b
	}
	if v.AddBOS && v.BOS < 0 {
		v.AddBOS = false
	}
	if v.AddEOS && v.EOS < 0 {
		v.AddEOS = false
	}
	return v, nil
}

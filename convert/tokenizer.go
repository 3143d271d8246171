package convert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/goprovider/provider/gguf"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/tokenizer"
)

// ggufVocab is the vocabulary part of a GGUF file's tokenizer metadata.
type ggufVocab struct {
	Model  string // "gpt2" (byte-level BPE) or "llama" (SentencePiece)
	Pre    string
	Tokens []string
	Types  []int32 // tokenizer.TypeNormal...; nil is all normal
	Scores []float32
	Merges []string // "a b", rank order

	BOS, EOS, UNK, PAD int32 // -1 when absent
	// Prefix and Suffix are the ids added around encoded text.
	Prefix, Suffix []int32
	AddSpacePrefix bool
	EOG            []int32
	ChatTemplate   string
	ContextLength  int
}

// tokenizerOutput is the content of the three tokenizer files.
type tokenizerOutput struct {
	tokenizer          []byte
	config, generation any
}

func tokenizerFiles(f *gguf.File, m *model.Model) (*tokenizerOutput, error) {
	v, err := readVocab(f, m.Tokenizer)
	if err != nil {
		return nil, err
	}
	v.EOG = m.Config.EOS
	v.ChatTemplate = m.ChatTemplate
	v.ContextLength = m.Config.ContextLength
	return buildTokenizer(v)
}

// readVocab reads the vocabulary from the file and takes the ids llama.cpp
// settles on (its per-model defaults applied) from the loaded tokenizer.
func readVocab(f *gguf.File, tok *tokenizer.Tokenizer) (ggufVocab, error) {
	v := ggufVocab{BOS: tok.BOS(), EOS: tok.EOS(), PAD: tok.PAD(), UNK: -1}
	v.Model, _ = f.String("tokenizer.ggml.model")
	v.Pre, _ = f.String("tokenizer.ggml.pre")
	v.Tokens, _ = f.Strings("tokenizer.ggml.tokens")
	v.Types, _ = f.Int32s("tokenizer.ggml.token_type")
	v.Merges, _ = f.Strings("tokenizer.ggml.merges")
	if s, ok := f.Float32s("tokenizer.ggml.scores"); ok {
		v.Scores = s
	}
	if v.Model == "llama" {
		v.UNK = 0
		v.AddSpacePrefix = true
	}
	if id, ok := f.Uint("tokenizer.ggml.unknown_token_id"); ok && id < uint64(len(v.Tokens)) {
		v.UNK = int32(id)
	}
	if b, ok := f.Bool("tokenizer.ggml.add_space_prefix"); ok {
		v.AddSpacePrefix = b
	}
	// What the tokenizer adds around text, observed rather than re-derived
	// from the flags and llama.cpp's per-pre-tokenizer defaults.
	plain := tok.Encode("a", tokenizer.EncodeOptions{})
	full := tok.Encode("a", tokenizer.EncodeOptions{AddSpecial: true})
	at := -1
	for i := 0; i+len(plain) <= len(full); i++ {
		if slices.Equal(full[i:i+len(plain)], plain) {
			at = i
			break
		}
	}
	if at < 0 {
		return v, fmt.Errorf("convert: tokenizer adds tokens inside the text")
	}
	v.Prefix, v.Suffix = full[:at], full[at+len(plain):]
	return v, nil
}

// byteLevelPre maps llama.cpp's byte-level pre-tokenizer names to the HF
// pre-tokenizer that splits text the same way, and says whether words
// that are whole tokens skip merging (HF ignore_merges, llama.cpp's
// llama3 behaviour). Other names are refused: the default one has no HF
// counterpart, and the Qwen 2 family differs from HF's pattern in case
// folding.
func byteLevelPre(name string) (any, bool, error) {
	byteLevel := func(regex bool) obj {
		return obj{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", regex}}
	}
	switch name {
	case "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
		"modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion",
		"granite-docling", "exaone4":
		return byteLevel(true), false, nil
	case "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2":
		return obj{{"type", "Sequence"}, {"pretokenizers", []any{
			obj{{"type", "Digits"}, {"individual_digits", true}},
			byteLevel(true),
		}}}, false, nil
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano":
		// Contractions match case by case, as llama.cpp's scanner does.
		const pat = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
		return obj{{"type", "Sequence"}, {"pretokenizers", []any{
			obj{{"type", "Split"}, {"pattern", obj{{"Regex", pat}}}, {"behavior", "Isolated"}, {"invert", false}},
			byteLevel(false),
		}}}, true, nil
	}
	return nil, false, fmt.Errorf("convert: %w: byte-level pre-tokenizer %q has no exact tokenizer.json form here", ErrInexact, name)
}

// buildTokenizer writes the vocabulary as HF files.
func buildTokenizer(v ggufVocab) (*tokenizerOutput, error) {
	n := len(v.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("convert: %w: no vocabulary", model.ErrBadConfig)
	}
	typ := func(id int) int32 {
		if v.Types == nil {
			return tokenizer.TypeNormal
		}
		return v.Types[id]
	}
	seen := make(map[string]int, n)
	vocab := make(obj, n)
	var added []any
	for id, s := range v.Tokens {
		if s == "" {
			return nil, fmt.Errorf("convert: %w: token %d is empty", ErrInexact, id)
		}
		if prev, dup := seen[s]; dup {
			// A tokenizer.json vocabulary maps texts to ids, so one of
			// the two would be lost.
			return nil, fmt.Errorf("convert: %w: tokens %d and %d are both %q", ErrInexact, prev, id, s)
		}
		seen[s] = id
		vocab[id] = kv{s, id}
		switch t := typ(id); t {
		case tokenizer.TypeControl, tokenizer.TypeUnknown, tokenizer.TypeUserDefined:
			added = append(added, obj{{"id", id}, {"content", s}, {"single_word", false}, {"lstrip", false},
				{"rstrip", false}, {"normalized", false}, {"special", t != tokenizer.TypeUserDefined}})
		}
	}
	name := func(id int32) any {
		if id < 0 {
			return nil
		}
		return v.Tokens[id]
	}

	var pre, normalizer, decoder any
	bpe := obj{{"type", "BPE"}, {"dropout", nil}}
	switch v.Model {
	case "gpt2":
		p, ignoreMerges, err := byteLevelPre(v.Pre)
		if err != nil {
			return nil, err
		}
		if len(v.Merges) == 0 {
			return nil, fmt.Errorf("convert: %w: byte-level BPE without merges", model.ErrBadConfig)
		}
		merges := make([]any, len(v.Merges))
		for i, m := range v.Merges {
			a, b, ok := strings.Cut(m, " ")
			if !ok || strings.Contains(b, " ") {
				return nil, fmt.Errorf("convert: %w: merge %d %q is not a pair", model.ErrBadConfig, i, m)
			}
			merges[i] = []string{a, b}
		}
		pre = p
		decoder = obj{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}
		bpe = append(bpe, obj{{"unk_token", nil}, {"continuing_subword_prefix", nil}, {"end_of_word_suffix", nil},
			{"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", ignoreMerges},
			{"vocab", vocab}, {"merges", merges}}...)
	case "llama":
		if v.Scores == nil {
			return nil, fmt.Errorf("convert: %w: SentencePiece vocabulary without scores", model.ErrBadConfig)
		}
		replace := obj{{"type", "Replace"}, {"pattern", obj{{"String", " "}}}, {"content", "\u2581"}}
		decoders := []any{
			obj{{"type", "Replace"}, {"pattern", obj{{"String", "\u2581"}}}, {"content", " "}},
			obj{{"type", "ByteFallback"}},
			obj{{"type", "Fuse"}},
		}
		if v.AddSpacePrefix {
			normalizer = obj{{"type", "Sequence"}, {"normalizers", []any{
				obj{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace,
			}}}
			decoders = append(decoders, obj{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}})
		} else {
			normalizer = replace
		}
		decoder = obj{{"type", "Sequence"}, {"decoders", decoders}}
		bpe = append(bpe, obj{{"unk_token", name(v.UNK)}, {"continuing_subword_prefix", nil}, {"end_of_word_suffix", nil},
			{"fuse_unk", true}, {"byte_fallback", true}, {"ignore_merges", false},
			{"vocab", vocab}, {"merges", spmMerges(v, typ)}}...)
	default:
		return nil, fmt.Errorf("convert: %w: tokenizer model %q", ErrInexact, v.Model)
	}

	tj := obj{
		{"version", "1.0"},
		{"truncation", nil},
		{"padding", nil},
		{"added_tokens", added},
		{"normalizer", normalizer},
		{"pre_tokenizer", pre},
		{"post_processor", postProcessor(v)},
		{"decoder", decoder},
		{"model", bpe},
	}
	tokJSON, err := marshalJSON(tj)
	if err != nil {
		return nil, fmt.Errorf("convert: tokenizer.json: %w", err)
	}

	decoderTable := obj{}
	for _, a := range added {
		o := a.(obj)
		decoderTable = append(decoderTable, kv{strconv.Itoa(o[0].v.(int)), o[1:]})
	}
	cfg := obj{
		{"add_bos_token", len(v.Prefix) > 0 && v.Prefix[0] == v.BOS},
		{"add_eos_token", len(v.Suffix) > 0 && v.Suffix[len(v.Suffix)-1] == v.EOS},
		{"added_tokens_decoder", decoderTable},
		{"bos_token", name(v.BOS)},
		{"eos_token", name(v.EOS)},
		{"pad_token", name(v.PAD)},
		{"unk_token", name(v.UNK)},
		{"clean_up_tokenization_spaces", false},
		{"tokenizer_class", "PreTrainedTokenizerFast"},
	}
	if v.ContextLength > 0 {
		cfg = append(cfg, kv{"model_max_length", v.ContextLength})
	}
	if v.ChatTemplate != "" {
		cfg = append(cfg, kv{"chat_template", v.ChatTemplate})
	}
	gen := obj{}
	if v.BOS >= 0 {
		gen = append(gen, kv{"bos_token_id", v.BOS})
	}
	eog := []int32{}
	if v.EOS >= 0 {
		eog = append(eog, v.EOS)
	}
	for _, id := range v.EOG {
		if id != v.EOS {
			eog = append(eog, id)
		}
	}
	if len(eog) > 0 {
		gen = append(gen, kv{"eos_token_id", eog})
	}
	if v.PAD >= 0 {
		gen = append(gen, kv{"pad_token_id", v.PAD})
	}
	return &tokenizerOutput{tokenizer: tokJSON, config: cfg, generation: gen}, nil
}

// postProcessor adds the tokens the GGUF tokenizer puts around text.
func postProcessor(v ggufVocab) any {
	if len(v.Prefix) == 0 && len(v.Suffix) == 0 {
		if v.Model == "gpt2" {
			return obj{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}
		}
		return nil
	}
	special := obj{}
	item := func(id int32) any {
		s := v.Tokens[id]
		if !slices.ContainsFunc(special, func(e kv) bool { return e.k == s }) {
			special = append(special, kv{s, obj{{"id", s}, {"ids", []int32{id}}, {"tokens", []string{s}}}})
		}
		return obj{{"SpecialToken", obj{{"id", s}, {"type_id", 0}}}}
	}
	seq := func(id string, typeID int) any { return obj{{"Sequence", obj{{"id", id}, {"type_id", typeID}}}} }
	var single, pair []any
	for _, id := range v.Prefix {
		single = append(single, item(id))
	}
	single = append(single, seq("A", 0))
	for _, id := range v.Suffix {
		single = append(single, item(id))
	}
	pair = append(pair, single...)
	for _, id := range v.Prefix {
		pair = append(pair, item(id))
	}
	pair = append(pair, seq("B", 1))
	for _, id := range v.Suffix {
		pair = append(pair, item(id))
	}
	return obj{{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", special}}
}

// spmMerges turns SentencePiece scores into BPE merges. SentencePiece
// joins the adjacent pair whose concatenation is the best-scoring token;
// BPE joins the pair of lowest rank. Listing every split of every normal
// token into two tokens, ranked by the joined token's score (best first),
// makes BPE take the same steps; pairs that form one token tie in
// SentencePiece and are ordered by the ids of their parts.
func spmMerges(v ggufVocab, typ func(int) int32) []any {
	ids := make(map[string]int, len(v.Tokens))
	for id, s := range v.Tokens {
		switch typ(id) {
		case tokenizer.TypeNormal, tokenizer.TypeUserDefined:
			ids[s] = id
		}
	}
	type merge struct{ left, right, joined int }
	var ms []merge
	for id, s := range v.Tokens {
		if typ(id) != tokenizer.TypeNormal {
			continue
		}
		for i := range s {
			if i == 0 {
				continue
			}
			l, okl := ids[s[:i]]
			r, okr := ids[s[i:]]
			if okl && okr {
				ms = append(ms, merge{l, r, id})
			}
		}
	}
	slices.SortStableFunc(ms, func(a, b merge) int {
		sa, sb := v.Scores[a.joined], v.Scores[b.joined]
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		if a.joined != b.joined {
			return a.joined - b.joined
		}
		if a.left != b.left {
			return a.left - b.left
		}
		return a.right - b.right
	})
	out := make([]any, len(ms))
	for i, m := range ms {
		out[i] = []string{v.Tokens[m.left], v.Tokens[m.right]}
	}
	return out
}

// kv and obj write a JSON object with its keys in the order given, so the
// files read like the ones HF tools write (vocabularies in id order).
type kv struct {
	k string
	v any
}

type obj []kv

func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := marshalCompact(e.k)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		val, err := marshalCompact(e.v)
		if err != nil {
			return nil, err
		}
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func marshalCompact(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

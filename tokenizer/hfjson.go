package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// FromJSON builds a tokenizer from an HF tokenizer.json and, optionally,
// its tokenizer_config.json (which names the BOS/EOS/PAD tokens and may
// turn adding BOS/EOS on or off). It reproduces the HF tokenizers library
// for BPE models with the pre-tokenizers, normalizers, post-processors and
// decoders that byte-level (GPT-2, Llama 3, o200k) and SentencePiece-style
// (Llama 2) vocabularies use; anything else is reported as unsupported.
//
// Known simplifications: added tokens are always matched against the raw
// text (HF matches those marked "normalized" after normalization), and the
// Lowercase normalizer uses Go's case mapping, which has no final-sigma
// rule. Decoding follows the tokenizer.json decoder with special tokens
// skipped.
func FromJSON(tokenizerJSON []byte, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	var tj hfTokenizer
	if err := json.Unmarshal(tokenizerJSON, &tj); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	var cfg hfConfig
	if len(bytes.TrimSpace(tokenizerConfigJSON)) > 0 {
		if err := json.Unmarshal(tokenizerConfigJSON, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	v, o, err := tj.convert(&cfg)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t, err := build(v, o)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	return t, nil
}

type hfTokenizer struct {
	AddedTokens []struct {
		ID         int32  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		Lstrip     bool   `json:"lstrip"`
		Rstrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type                    string           `json:"type"`
		UnkToken                *string          `json:"unk_token"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
		FuseUnk                 bool             `json:"fuse_unk"`
		ByteFallback            bool             `json:"byte_fallback"`
		IgnoreMerges            bool             `json:"ignore_merges"`
		Vocab                   map[string]int32 `json:"vocab"`
		Merges                  hfMerges         `json:"merges"`
	} `json:"model"`
}

// hfMerges reads BPE merges in either of the two forms tokenizer.json
// uses: "a b" strings (older files) or ["a", "b"] pairs, which allow
// spaces inside the parts.
type hfMerges struct{ pairs [][2]string }

func (h *hfMerges) UnmarshalJSON(b []byte) error {
	var lines []string
	if err := json.Unmarshal(b, &lines); err == nil {
		h.pairs = make([][2]string, len(lines))
		for i, s := range lines {
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return fmt.Errorf("merge %d: %q is not a pair", i, s)
			}
			h.pairs[i] = [2]string{a, b}
		}
		return nil
	}
	var pairs [][]string
	if err := json.Unmarshal(b, &pairs); err != nil {
		return fmt.Errorf("merges: %w", err)
	}
	h.pairs = make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return fmt.Errorf("merge %d: %d parts, want 2", i, len(p))
		}
		h.pairs[i] = [2]string{p[0], p[1]}
	}
	return nil
}

// hfConfig is the part of tokenizer_config.json that matters here.
type hfConfig struct {
	BOSToken    hfTokenName `json:"bos_token"`
	EOSToken    hfTokenName `json:"eos_token"`
	PADToken    hfTokenName `json:"pad_token"`
	UNKToken    hfTokenName `json:"unk_token"`
	AddBOSToken *bool       `json:"add_bos_token"`
	AddEOSToken *bool       `json:"add_eos_token"`
}

// hfTokenName is a token given either as a string or as an AddedToken
// object with a "content" field.
type hfTokenName string

func (n *hfTokenName) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*n = hfTokenName(s)
		return nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
			return nil
		}
		return fmt.Errorf("token name: %w", err)
	}
	*n = hfTokenName(obj.Content)
	return nil
}

// typed reads the "type" field of a component.
func typed(raw json.RawMessage) (string, bool, error) {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return "", false, nil
	}
	var h struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return "", false, err
	}
	return h.Type, true, nil
}

func (tj *hfTokenizer) convert(cfg *hfConfig) (Vocab, buildOptions, error) {
	v := Vocab{Model: "gpt2", BOS: -1, EOS: -1, UNK: -1, PAD: -1, EOT: -1}
	o := buildOptions{hf: true}
	m := &tj.Model
	if m.Type != "BPE" && !(m.Type == "" && m.Merges.pairs != nil) {
		return v, o, fmt.Errorf("unsupported model type %q (only BPE)", m.Type)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" ||
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return v, o, errors.New("BPE subword prefixes/suffixes are not supported")
	}

	// Token table: model vocabulary plus added tokens; ids not used by
	// either become unused placeholders.
	size := int32(0)
	for _, id := range m.Vocab {
		if id < 0 {
			return v, o, fmt.Errorf("negative token id %d", id)
		}
		size = max(size, id+1)
	}
	for _, a := range tj.AddedTokens {
		if a.ID < 0 {
			return v, o, fmt.Errorf("negative added token id %d", a.ID)
		}
		size = max(size, a.ID+1)
	}
	v.Tokens = make([]string, size)
	v.Types = make([]int32, size)
	for i := range v.Types {
		v.Types[i] = TypeUnused
	}
	for s, id := range m.Vocab {
		v.Tokens[id] = s
		v.Types[id] = TypeNormal
	}
	for _, a := range tj.AddedTokens {
		v.Tokens[a.ID] = a.Content
		v.Types[a.ID] = TypeUserDefined
		if a.Special {
			v.Types[a.ID] = TypeControl
		}
		o.added = append(o.added, addedToken{id: a.ID, content: a.Content, special: a.Special,
			lstrip: a.Lstrip, rstrip: a.Rstrip, singleWord: a.SingleWord})
	}
	lookup := func(name string) int32 {
		if name == "" {
			return -1
		}
		for i := len(tj.AddedTokens) - 1; i >= 0; i-- {
			if tj.AddedTokens[i].Content == name {
				return tj.AddedTokens[i].ID
			}
		}
		if id, ok := m.Vocab[name]; ok {
			return id
		}
		return -1
	}
	if m.UnkToken != nil {
		v.UNK = lookup(*m.UnkToken)
	}
	if v.UNK < 0 {
		v.UNK = lookup(string(cfg.UNKToken))
	}
	v.BOS, v.EOS, v.PAD = lookup(string(cfg.BOSToken)), lookup(string(cfg.EOSToken)), lookup(string(cfg.PADToken))

	o.byteFallback, o.fuseUnk, o.ignoreMerges = m.ByteFallback, m.FuseUnk, m.IgnoreMerges
	o.merges = m.Merges.pairs
	if err := tj.convertNormalizer(tj.Normalizer, &o); err != nil {
		return v, o, fmt.Errorf("normalizer: %w", err)
	}
	o.pre = &preTokenizer{}
	if err := tj.convertPreTokenizer(tj.PreTokenizer, &o, true); err != nil {
		return v, o, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if err := convertPostProcessor(tj.PostProcessor, lookup, &o); err != nil {
		return v, o, fmt.Errorf("post_processor: %w", err)
	}
	dec, err := convertDecoder(tj.Decoder)
	if err != nil {
		return v, o, fmt.Errorf("decoder: %w", err)
	}
	if dec.byteLevel {
		o.byteLevel = true
	}
	o.decoder = dec
	if o.byteFallback && dec.byteFallback {
		for id, s := range v.Tokens {
			if _, ok := isByteToken(s); ok && v.Types[id] == TypeNormal {
				v.Types[id] = TypeByte
			}
		}
	}

	// tokenizer_config.json switches, as transformers applies them.
	if cfg.AddBOSToken != nil {
		o.prefix = slices.DeleteFunc(o.prefix, func(id int32) bool { return id == v.BOS })
		if *cfg.AddBOSToken && v.BOS >= 0 {
			o.prefix = append([]int32{v.BOS}, o.prefix...)
		}
	}
	if cfg.AddEOSToken != nil {
		o.suffix = slices.DeleteFunc(o.suffix, func(id int32) bool { return id == v.EOS })
		if *cfg.AddEOSToken && v.EOS >= 0 {
			o.suffix = append(o.suffix, v.EOS)
		}
	}
	if v.BOS < 0 && len(o.prefix) > 0 {
		v.BOS = o.prefix[0]
	}
	v.AddBOS = len(o.prefix) > 0 && o.prefix[0] == v.BOS
	v.AddEOS = len(o.suffix) > 0 && o.suffix[len(o.suffix)-1] == v.EOS
	return v, o, nil
}

func (tj *hfTokenizer) convertNormalizer(raw json.RawMessage, o *buildOptions) error {
	typ, ok, err := typed(raw)
	if err != nil || !ok {
		return err
	}
	switch typ {
	case "Sequence":
		var seq struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return err
		}
		for _, n := range seq.Normalizers {
			if err := tj.convertNormalizer(n, o); err != nil {
				return err
			}
		}
	case "Prepend":
		var p struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return err
		}
		o.normalize = append(o.normalize, func(s string, _ bool) string {
			if s == "" {
				return s
			}
			return p.Prepend + s
		})
	case "Replace":
		from, to, err := literalReplace(raw)
		if err != nil {
			return err
		}
		o.normalize = append(o.normalize, func(s string, _ bool) string { return strings.ReplaceAll(s, from, to) })
	case "Lowercase":
		o.normalize = append(o.normalize, func(s string, _ bool) string { return strings.ToLower(s) })
	default:
		return fmt.Errorf("unsupported normalizer %q", typ)
	}
	return nil
}

// literalReplace reads a Replace component with a String pattern.
func literalReplace(raw json.RawMessage) (string, string, error) {
	var r struct {
		Pattern struct {
			String *string `json:"String"`
			Regex  *string `json:"Regex"`
		} `json:"pattern"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", "", err
	}
	if r.Pattern.String == nil || *r.Pattern.String == "" {
		return "", "", errors.New("only Replace with a non-empty String pattern is supported")
	}
	return *r.Pattern.String, r.Content, nil
}

func (tj *hfTokenizer) convertPreTokenizer(raw json.RawMessage, o *buildOptions, first bool) error {
	typ, ok, err := typed(raw)
	if err != nil || !ok {
		return err
	}
	if typ != "Sequence" && o.byteLevel {
		// HF's ByteLevel maps the text to byte characters on the spot; a
		// later stage would see those, while here the mapping happens last.
		return fmt.Errorf("a %s pre-tokenizer after ByteLevel is not supported", typ)
	}
	switch typ {
	case "Sequence":
		var seq struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return err
		}
		for i, p := range seq.PreTokenizers {
			if err := tj.convertPreTokenizer(p, o, first && i == 0); err != nil {
				return err
			}
		}
	case "ByteLevel":
		var bl struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}
		if err := json.Unmarshal(raw, &bl); err != nil {
			return err
		}
		o.byteLevel = true
		if bl.AddPrefixSpace {
			// HF adds the space to every piece split so far; before any
			// split that is the whole fragment.
			if !first {
				return errors.New("ByteLevel add_prefix_space after another pre-tokenizer is not supported")
			}
			o.normalize = append(o.normalize, func(s string, _ bool) string {
				if strings.HasPrefix(s, " ") {
					return s
				}
				return " " + s
			})
		}
		if bl.UseRegex == nil || *bl.UseRegex {
			o.pre.stages = append(o.pre.stages, splitGPT2)
		}
	case "Split":
		var sp struct {
			Pattern struct {
				String *string `json:"String"`
				Regex  *string `json:"Regex"`
			} `json:"pattern"`
			Behavior string `json:"behavior"`
			Invert   bool   `json:"invert"`
		}
		if err := json.Unmarshal(raw, &sp); err != nil {
			return err
		}
		if sp.Behavior != "Isolated" || sp.Invert {
			return fmt.Errorf("split behavior %q (invert %v) is not supported", sp.Behavior, sp.Invert)
		}
		var st splitter
		switch {
		case sp.Pattern.Regex != nil:
			st, err = splitterForPattern(*sp.Pattern.Regex)
		case sp.Pattern.String != nil && *sp.Pattern.String != "":
			st = regexSplitter(regexp.MustCompile(regexp.QuoteMeta(*sp.Pattern.String)))
		default:
			err = errors.New("split without pattern")
		}
		if err != nil {
			return err
		}
		o.pre.stages = append(o.pre.stages, st)
	case "Digits":
		var d struct {
			IndividualDigits bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		if d.IndividualDigits {
			o.pre.stages = append(o.pre.stages, isolate(isNumberRune, 1, 1))
		} else {
			o.pre.stages = append(o.pre.stages, isolate(isNumberRune, 1, 0))
		}
	case "Metaspace":
		if !first {
			return errors.New("a Metaspace pre-tokenizer after another one is not supported")
		}
		var ms struct {
			Replacement    string  `json:"replacement"`
			PrependScheme  *string `json:"prepend_scheme"`
			AddPrefixSpace *bool   `json:"add_prefix_space"`
			Split          *bool   `json:"split"`
		}
		if err := json.Unmarshal(raw, &ms); err != nil {
			return err
		}
		rep := ms.Replacement
		if rep == "" {
			rep = "\u2581"
		}
		scheme := "always"
		if ms.PrependScheme != nil {
			scheme = *ms.PrependScheme
		} else if ms.AddPrefixSpace != nil && !*ms.AddPrefixSpace {
			scheme = "never"
		}
		o.normalize = append(o.normalize, func(s string, first bool) string {
			s = strings.ReplaceAll(s, " ", rep)
			if s != "" && !strings.HasPrefix(s, rep) && (scheme == "always" || scheme == "first" && first) {
				s = rep + s
			}
			return s
		})
		if ms.Split == nil || *ms.Split {
			o.pre.stages = append(o.pre.stages, splitBefore(rep))
		}
	default:
		return fmt.Errorf("unsupported pre-tokenizer %q", typ)
	}
	return nil
}

// splitBefore splits in front of every occurrence of sep (HF's
// MergedWithNext behaviour), as Metaspace does with its replacement.
func splitBefore(sep string) splitter {
	return func(s string, start, end int, out []span) []span {
		piece := start
		for i := start; i < end; {
			k := strings.Index(s[i:end], sep)
			if k < 0 {
				break
			}
			at := i + k
			out = addSpan(out, piece, at)
			piece = at
			i = at + len(sep)
		}
		return addSpan(out, piece, end)
	}
}

func convertPostProcessor(raw json.RawMessage, lookup func(string) int32, o *buildOptions) error {
	typ, ok, err := typed(raw)
	if err != nil || !ok {
		return err
	}
	switch typ {
	case "Sequence":
		var seq struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return err
		}
		for _, p := range seq.Processors {
			if err := convertPostProcessor(p, lookup, o); err != nil {
				return err
			}
		}
	case "ByteLevel":
		// Only adjusts offsets.
	case "TemplateProcessing":
		var tp struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				IDs []int32 `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := json.Unmarshal(raw, &tp); err != nil {
			return err
		}
		seen := false
		for _, item := range tp.Single {
			if item.Sequence != nil {
				seen = true
				continue
			}
			if item.SpecialToken == nil {
				continue
			}
			ids := tp.SpecialTokens[item.SpecialToken.ID].IDs
			if ids == nil {
				id := lookup(item.SpecialToken.ID)
				if id < 0 {
					return fmt.Errorf("unknown template token %q", item.SpecialToken.ID)
				}
				ids = []int32{id}
			}
			if seen {
				o.suffix = append(o.suffix, ids...)
			} else {
				o.prefix = append(o.prefix, ids...)
			}
		}
	case "RobertaProcessing", "BertProcessing":
		var rp struct {
			CLS []json.RawMessage `json:"cls"`
			SEP []json.RawMessage `json:"sep"`
		}
		if err := json.Unmarshal(raw, &rp); err != nil {
			return err
		}
		id := func(pair []json.RawMessage) (int32, error) {
			var n int32
			if len(pair) != 2 {
				return 0, errors.New("malformed cls/sep")
			}
			return n, json.Unmarshal(pair[1], &n)
		}
		cls, err := id(rp.CLS)
		if err != nil {
			return err
		}
		sep, err := id(rp.SEP)
		if err != nil {
			return err
		}
		o.prefix = append(o.prefix, cls)
		o.suffix = append(o.suffix, sep)
	default:
		return fmt.Errorf("unsupported post-processor %q", typ)
	}
	return nil
}

// hfDecoder is what a tokenizer.json decoder does to one token.
type hfDecoder struct {
	byteLevel    bool
	replaces     [][2]string
	byteFallback bool
	stripSpace   bool // drop one leading space of the output
}

func (d *hfDecoder) piece(text string) []byte {
	if d.byteLevel {
		return byteLevelDecode(text)
	}
	if d.byteFallback {
		if b, ok := isByteToken(text); ok {
			return []byte{b}
		}
	}
	for _, r := range d.replaces {
		text = strings.ReplaceAll(text, r[0], r[1])
	}
	return []byte(text)
}

func convertDecoder(raw json.RawMessage) (*hfDecoder, error) {
	d := &hfDecoder{}
	var walk func(raw json.RawMessage) error
	walk = func(raw json.RawMessage) error {
		typ, ok, err := typed(raw)
		if err != nil || !ok {
			return err
		}
		switch typ {
		case "Sequence":
			var seq struct {
				Decoders []json.RawMessage `json:"decoders"`
			}
			if err := json.Unmarshal(raw, &seq); err != nil {
				return err
			}
			for _, x := range seq.Decoders {
				if err := walk(x); err != nil {
					return err
				}
			}
		case "ByteLevel":
			d.byteLevel = true
		case "Replace":
			from, to, err := literalReplace(raw)
			if err != nil {
				return err
			}
			d.replaces = append(d.replaces, [2]string{from, to})
		case "ByteFallback":
			d.byteFallback = true
		case "Fuse":
		case "Strip":
			var s struct {
				Content string `json:"content"`
				Start   int    `json:"start"`
				Stop    int    `json:"stop"`
			}
			if err := json.Unmarshal(raw, &s); err != nil {
				return err
			}
			if s.Content != " " || s.Start > 1 || s.Stop != 0 {
				return fmt.Errorf("strip of %q (%d, %d) is not supported", s.Content, s.Start, s.Stop)
			}
			d.stripSpace = s.Start == 1
		case "Metaspace":
			var ms struct {
				Replacement    string  `json:"replacement"`
				PrependScheme  *string `json:"prepend_scheme"`
				AddPrefixSpace *bool   `json:"add_prefix_space"`
			}
			if err := json.Unmarshal(raw, &ms); err != nil {
				return err
			}
			rep := ms.Replacement
			if rep == "" {
				rep = "\u2581"
			}
			d.replaces = append(d.replaces, [2]string{rep, " "})
			d.stripSpace = !(ms.PrependScheme != nil && *ms.PrependScheme == "never" ||
				ms.AddPrefixSpace != nil && !*ms.AddPrefixSpace)
		default:
			return fmt.Errorf("unsupported decoder %q", typ)
		}
		return nil
	}
	return d, walk(raw)
}

package tokenizer

import (
	"fmt"
	"slices"
	"strings"
)

type modelKind uint8

const (
	modelSPM modelKind = iota // SentencePiece: merge by best token score
	modelBPE                  // BPE: merge by rank
)

// Tokenizer turns text into token ids and back. It is immutable after
// construction (apart from an internal cache) and safe for concurrent use.
type Tokenizer struct {
	kind   modelKind
	tokens []string
	attrs  []uint16
	scores []float32
	byText map[string]int32 // text -> id; with duplicate texts the highest id wins, as in llama.cpp

	bos, eos, unk, pad, eot int32
	prefix, suffix          []int32 // added around the text when EncodeOptions.AddSpecial is set

	addSpacePrefix bool     // SentencePiece: prepend " " to text fragments that start the input or follow a special token
	normalize      []normOp // HF: rewrites applied to every text fragment
	decoder        *hfDecoder
	stripSpace     bool // decoding drops one leading space, undoing an added prefix space

	specials specialMatcher
	bpe      *bpeModel

	pieces [][]byte // what each token contributes to decoded text
	eog    []int32  // sorted
}

// EncodeOptions control Encode.
type EncodeOptions struct {
	// AddSpecial adds the tokens the vocabulary asks for around the text
	// (BOS and/or EOS per its flags).
	AddSpecial bool
	// ParseSpecial matches the text of control tokens (e.g. "<|im_end|>")
	// in the input and emits their ids. User-defined tokens are matched
	// either way, as llama.cpp and HF do.
	ParseSpecial bool
}

// New builds a tokenizer that reproduces llama.cpp for the vocabulary v.
func New(v Vocab) (*Tokenizer, error) {
	return build(v, buildOptions{})
}

// buildOptions carries the parts of an HF tokenizer.json that a GGUF-style
// Vocab cannot express. The zero value means llama.cpp semantics.
type buildOptions struct {
	hf           bool          // HF semantics: leftmost-longest added tokens, HF unknown handling
	added        []addedToken  // HF added tokens (the ones matched in text)
	normalize    []normOp      // HF normalizers (and text-changing pre-tokenizers)
	pre          *preTokenizer // HF pre-tokenizer
	byteLevel    bool          // HF model is byte-level
	byteFallback bool          // HF BPE byte_fallback
	fuseUnk      bool          // HF BPE fuse_unk
	ignoreMerges bool          // HF BPE ignore_merges
	merges       [][2]string   // HF merges (pairs may contain spaces)
	prefix       []int32       // HF post-processor
	suffix       []int32
	decoder      *hfDecoder
}

// normOp rewrites a text fragment before pre-tokenization; first is set
// for the fragment that starts the input.
type normOp func(s string, first bool) string

func build(v Vocab, o buildOptions) (*Tokenizer, error) {
	if err := checkVocab(&v); err != nil {
		return nil, err
	}
	n := len(v.Tokens)
	t := &Tokenizer{
		tokens: make([]string, n),
		attrs:  make([]uint16, n),
		byText: make(map[string]int32, n),
		bos:    v.BOS, eos: v.EOS, unk: v.UNK, pad: v.PAD, eot: v.EOT,
	}
	for i, s := range v.Tokens {
		if s == "" {
			// llama.cpp gives empty tokens a placeholder text so that
			// every token stays addressable by text.
			s = fmt.Sprintf("[EMPTY_%d]", i)
		}
		t.tokens[i] = s
		t.byText[s] = int32(i)
		if v.Types == nil {
			t.attrs[i] = attrNormal
		} else {
			t.attrs[i] = attrFromType(v.Types[i])
		}
	}
	if v.Scores != nil {
		t.scores = v.Scores[:n]
	}

	switch v.Model {
	case "llama":
		t.kind = modelSPM
		t.addSpacePrefix = v.AddSpacePrefix
		t.stripSpace = v.AddSpacePrefix
		if t.scores == nil {
			t.scores = make([]float32, n)
		}
	case "gpt2":
		t.kind = modelBPE
		m, err := newBPE(t, v, o)
		if err != nil {
			return nil, err
		}
		t.bpe = m
		if o.hf {
			t.normalize = o.normalize
			t.decoder = o.decoder
			t.stripSpace = o.decoder != nil && o.decoder.stripSpace
		}
	default:
		return nil, fmt.Errorf("tokenizer: unsupported tokenizer model %q", v.Model)
	}

	t.applyNameRules(v, o.hf)

	if o.hf {
		t.prefix, t.suffix = o.prefix, o.suffix
	} else {
		if v.AddBOS {
			t.prefix = []int32{v.BOS}
		}
		if v.AddEOS {
			t.suffix = []int32{v.EOS}
		}
	}

	t.specials.init(t, o)
	t.pieces = make([][]byte, n)
	for i := range t.pieces {
		t.pieces[i] = t.renderPiece(int32(i))
	}
	return t, nil
}

// applyNameRules reproduces llama.cpp's load-time rules that recognise
// tokens by their text: the EOT token, the end-of-generation set, and the
// attribute fixes that go with them.
func (t *Tokenizer) applyNameRules(v Vocab, hf bool) {
	forceControl := func(id int32) {
		if id >= 0 && t.attrs[id]&attrControl == 0 {
			t.attrs[id] |= attrControl
		}
	}
	if t.eot < 0 {
		t.eot = findByName(t.byText, eotNames)
		forceControl(t.eot)
	}
	eog := map[int32]bool{}
	for _, names := range [][]string{eomNames, fimPreNames, fimSufNames, fimMidNames} {
		forceControl(findByName(t.byText, names))
	}
	for _, names := range [][]string{fimPadNames, fimRepNames, fimSepNames} {
		if id := findByName(t.byText, names); id >= 0 {
			forceControl(id)
			eog[id] = true
		}
	}
	for _, name := range eogNames {
		if id, ok := t.byText[name]; ok {
			eog[id] = true
			forceControl(id)
		}
	}
	if !hf {
		for _, name := range alwaysRenderedNames {
			if id, ok := t.byText[name]; ok {
				t.attrs[id] = attrUserDefined
			}
		}
	}
	for _, id := range append([]int32{t.eos, t.eot, findByName(t.byText, eomNames)}, v.extraEOG...) {
		if id >= 0 {
			eog[id] = true
		}
	}
	// gpt-oss (and solar-open) end a message with <|end|> but keep
	// generating; llama.cpp drops it from the set when the vocabulary has
	// the tokens that really end a turn.
	has := func(name string) bool {
		id, ok := t.byText[name]
		return ok && eog[id]
	}
	if endID, ok := t.byText["<|end|>"]; ok && eog[endID] &&
		((has("<|return|>") && (has("<|call|>") || has("<|calls|>"))) || ((has("<|call|>") || has("<|calls|>")) && has("<|flush|>"))) {
		delete(eog, endID)
		if !hf {
			t.attrs[endID] = attrUserDefined
		}
	}
	// Gemma 4 and PLaMo use </s> as an ordinary token.
	if sID, ok := t.byText["</s>"]; ok && eog[sID] && (has("<|tool_response>") || has("<|plamo:eos|>")) {
		delete(eog, sID)
		t.attrs[sID] = attrNormal
	}
	for id := range eog {
		t.eog = append(t.eog, id)
	}
	slices.Sort(t.eog)
}

// Encode tokenizes text.
func (t *Tokenizer) Encode(text string, o EncodeOptions) []int32 {
	out := make([]int32, 0, len(text)/3+len(t.prefix)+len(t.suffix)+1)
	if o.AddSpecial {
		out = append(out, t.prefix...)
	}
	prevSpecial := true
	for _, f := range t.specials.partition(text, o.ParseSpecial) {
		if f.id >= 0 {
			out = append(out, f.id)
			prevSpecial = true
			continue
		}
		out = t.encodeFragment(text[f.start:f.end], prevSpecial, f.start == 0, out)
		prevSpecial = false
	}
	if o.AddSpecial {
		out = append(out, t.suffix...)
	}
	return out
}

// encodeFragment tokenizes a piece of text that contains no special token.
func (t *Tokenizer) encodeFragment(s string, prevSpecial, first bool, out []int32) []int32 {
	if t.kind == modelSPM {
		if t.addSpacePrefix && prevSpecial {
			s = " " + s
		}
		return t.encodeSPM(strings.ReplaceAll(s, " ", "\u2581"), out)
	}
	// Byte-level BPE works on code points and HF on valid strings, so
	// invalid input is replaced first (llama.cpp does the same).
	s = normalizeUTF8(s)
	for _, op := range t.normalize {
		s = op(s, first)
	}
	return t.bpe.encode(t, s, out)
}

// VocabSize returns the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// BOS returns the beginning-of-sequence token id, or -1.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS returns the end-of-sequence token id, or -1.
func (t *Tokenizer) EOS() int32 { return t.eos }

// PAD returns the padding token id, or -1.
func (t *Tokenizer) PAD() int32 { return t.pad }

// EOT returns the end-of-turn token id, or -1.
func (t *Tokenizer) EOT() int32 { return t.eot }

// EOSSet returns every token that ends generation, sorted: EOS, EOT and the
// tokens llama.cpp recognises by text (e.g. <|im_end|>, <|endoftext|>).
// The slice is a copy.
func (t *Tokenizer) EOSSet() []int32 { return slices.Clone(t.eog) }

// IsEOG reports whether id ends generation.
func (t *Tokenizer) IsEOG(id int32) bool {
	_, ok := slices.BinarySearch(t.eog, id)
	return ok
}

// TokenID returns the id of the token whose text is s.
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	id, ok := t.byText[s]
	return id, ok
}

// Token returns the stored text of a token ("" when id is out of range).
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// IsControl reports whether id is a control token (BOS, EOS, chat markers
// and the like), which Decode renders as nothing.
func (t *Tokenizer) IsControl(id int32) bool {
	return id >= 0 && int(id) < len(t.attrs) && t.attrs[id]&attrControl != 0
}

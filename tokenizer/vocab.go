package tokenizer

import (
	"errors"
	"fmt"
	"strings"
)

// Token types as stored in GGUF tokenizer.ggml.token_type (llama.cpp's
// llama_token_type).
const (
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// Vocab describes a tokenizer the way GGUF metadata does. It is the input
// of New; FromGGUF and FromJSON fill one in from their sources.
type Vocab struct {
	Model  string    // "llama" (SentencePiece) or "gpt2" (byte-level BPE)
	Pre    string    // pre-tokenizer name (GGUF tokenizer.ggml.pre); "" = default for the model
	Tokens []string  // token texts, indexed by id
	Scores []float32 // merge scores, SentencePiece only; may be nil for BPE
	Types  []int32   // token types (TypeNormal...); nil = all normal
	Merges []string  // "a b" pairs in rank order, BPE only

	BOS, EOS, UNK, PAD int32 // -1 when absent
	EOT                int32 // -1 when absent (then detected from token texts)

	AddBOS, AddEOS bool
	AddSpacePrefix bool // SentencePiece: prepend a space to text that starts the input or follows a special token

	// Set by FromGGUF for ids given by dedicated metadata keys (EOM and the
	// FIM pad/repo/separator tokens), which llama.cpp also treats as end of
	// generation.
	extraEOG []int32
}

// token attributes (llama.cpp's llama_token_attr), derived from types and
// adjusted by the by-name rules llama.cpp applies at load time.
const (
	attrUndefined uint16 = 1 << iota
	attrUnknown
	attrUnused
	attrNormal
	attrControl
	attrUserDefined
	attrByte
)

func attrFromType(t int32) uint16 {
	switch t {
	case TypeNormal:
		return attrNormal
	case TypeUnknown:
		return attrUnknown
	case TypeControl:
		return attrControl
	case TypeUserDefined:
		return attrUserDefined
	case TypeUnused:
		return attrUnused
	case TypeByte:
		return attrByte
	}
	return attrUndefined
}

// Token texts that llama.cpp recognises by name at load time. The lists are
// part of its observable behaviour: they decide the EOT token, the
// end-of-generation set and which tokens are forced to be control tokens.
var (
	eotNames = []string{
		"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
		"<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
	}
	eomNames    = []string{"<|eom_id|>"}
	fimPreNames = []string{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"}
	fimSufNames = []string{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"}
	fimMidNames = []string{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"}
	fimPadNames = []string{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}
	fimRepNames = []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}
	fimSepNames = []string{"<|file_sep|>"}
	eogNames    = []string{
		"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
		"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
		"<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
		"<｜end▁of▁sentence｜>", "[e~[",
	}
	// gpt-oss channel markers must always be rendered, so llama.cpp makes
	// them user-defined.
	alwaysRenderedNames = []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}
)

// errNoTokens is returned for a vocabulary without tokens.
var errNoTokens = errors.New("tokenizer: vocabulary has no tokens")

// checkVocab validates the parts of v that New relies on.
func checkVocab(v *Vocab) error {
	n := len(v.Tokens)
	if n == 0 {
		return errNoTokens
	}
	if n > 1<<31-1 {
		return fmt.Errorf("tokenizer: %d tokens do not fit int32 ids", n)
	}
	if v.Scores != nil && len(v.Scores) < n {
		return fmt.Errorf("tokenizer: %d scores for %d tokens", len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) < n {
		return fmt.Errorf("tokenizer: %d token types for %d tokens", len(v.Types), n)
	}
	for _, id := range []struct {
		name string
		id   int32
	}{{"BOS", v.BOS}, {"EOS", v.EOS}, {"UNK", v.UNK}, {"PAD", v.PAD}, {"EOT", v.EOT}} {
		if id.id < -1 || int(id.id) >= n {
			return fmt.Errorf("tokenizer: %s id %d out of range [0,%d)", id.name, id.id, n)
		}
	}
	for _, id := range v.extraEOG {
		if id < 0 || int(id) >= n {
			return fmt.Errorf("tokenizer: end-of-generation id %d out of range [0,%d)", id, n)
		}
	}
	if v.AddBOS && v.BOS < 0 {
		return errors.New("tokenizer: AddBOS is set but there is no BOS token")
	}
	if v.AddEOS && v.EOS < 0 {
		return errors.New("tokenizer: AddEOS is set but there is no EOS token")
	}
	return nil
}

// findByName returns the lowest id whose text is one of names, or -1.
// llama.cpp walks a hash map here, so when several names are present its
// choice is unspecified; the lowest id makes ours deterministic.
func findByName(byText map[string]int32, names []string) int32 {
	best := int32(-1)
	for _, name := range names {
		if id, ok := byText[name]; ok && (best < 0 || id < best) {
			best = id
		}
	}
	return best
}

// isByteToken reports whether text has the <0xXX> form of a byte token and
// returns the byte.
func isByteToken(text string) (byte, bool) {
	if len(text) != 6 || !strings.HasPrefix(text, "<0x") || text[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(text[3])
	lo, ok2 := hexVal(text[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

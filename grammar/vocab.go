package grammar

import (
	"fmt"
	"slices"

	"github.com/goprovider/provider/tokenizer"
)

// specialMarker starts the bytes of a special token in llguidance's token
// trie: no text contains the byte 0xFF, so a grammar never matches a
// special token by its text, only by name (and end of sequence by id).
const specialMarker = 0xFF

// tokenBytes is each token's bytes as llguidance reads them:
//
//   - control tokens and the end-of-sequence tokens: specialMarker and the
//     token's text ("\xff<|im_end|>"), so that they never spell text;
//   - every other token: the bytes it adds to decoded text
//     (tokenizer.Piece), for byte-level BPE the decoded bytes of its
//     characters, for SentencePiece its text with U+2581 as a space, for
//     byte-fallback tokens their byte;
//   - tokens that decode to nothing (unknown, unused): empty, which
//     llguidance never allows.
//
// The vocabulary covers every id below max(VocabSize, largest EOS + 1).
func tokenBytes(tok *tokenizer.Tokenizer, eos []int32) [][]byte {
	n := tok.VocabSize()
	for _, id := range eos {
		n = max(n, int(id)+1)
	}
	out := make([][]byte, n)
	for i := range out {
		id := int32(i)
		if tok.IsControl(id) || slices.Contains(eos, id) {
			name := tok.Token(id)
			if name == "" {
				name = fmt.Sprintf("<[%d]>", id)
			}
			out[i] = append([]byte{specialMarker}, name...)
			continue
		}
		out[i] = tok.Piece(id)
	}
	return out
}

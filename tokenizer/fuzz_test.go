package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzEncode feeds arbitrary bytes (including invalid UTF-8) to the two
// GGUF vocabularies and to Llama 2's tokenizer.json (SentencePiece-style
// BPE). Encoding must not panic and must yield valid ids; decoding must
// yield valid UTF-8, agree with the stream decoder, and give back the
// input wherever the vocabulary can represent it exactly.
func FuzzEncode(f *testing.F) {
	for _, s := range loadCorpus(f) {
		f.Add(s)
	}
	for _, s := range []string{"\xff", "a\xe2\x96", "\xed\xa0\x80x", "\xc0\x80", "\xf7\xbf\xbf\xbf", "<|im_end|>\xff", " \u2581 \xe2"} {
		f.Add(s)
	}
	spm := ggufTokenizer(f, storiesPath)
	bpe := ggufTokenizer(f, smolPath)
	hfSPM := jsonTokenizer(f, "tokenizer-llama2")
	f.Fuzz(func(t *testing.T, s string) {
		for _, tk := range []*Tokenizer{spm, bpe, hfSPM} {
			for _, o := range []EncodeOptions{{}, {AddSpecial: true, ParseSpecial: true}} {
				ids := tk.Encode(s, o)
				for _, id := range ids {
					if id < 0 || int(id) >= tk.VocabSize() {
						t.Fatalf("id %d out of range for %q", id, s)
					}
				}
				dec := tk.Decode(ids)
				if !utf8.ValidString(dec) {
					t.Fatalf("Decode of %q is not valid UTF-8: %q", s, dec)
				}
				d := tk.NewStreamDecoder()
				var sb strings.Builder
				for _, id := range ids {
					sb.WriteString(d.Add(id))
				}
				sb.WriteString(d.Flush())
				if sb.String() != dec {
					t.Fatalf("stream %q != Decode %q for %q", sb.String(), dec, s)
				}
				if o.ParseSpecial || tk == hfSPM && !utf8.ValidString(s) {
					continue
				}
				want, exact := s, utf8.ValidString(s)
				if tk == bpe {
					// Byte-level BPE sees invalid bytes as U+FFFD, and
					// SmolLM2 has no token for some control bytes.
					want = normalizeUTF8(s)
					exact = utf8.ValidString(want)
					for i := 0; i < len(want); i++ {
						if tk.bpe.byteSym[want[i]] >= tk.bpe.nTokens {
							exact = false
						}
					}
				} else if strings.Contains(s, "\u2581") {
					exact = false // U+2581 stands for a space in SentencePiece
				}
				if exact && dec != want {
					t.Fatalf("Decode(Encode(%q)) = %q", s, dec)
				}
			}
		}
	})
}

package tokenizer

import (
	"strings"
	"testing"
)

// benchText builds a prompt-sized text (about 100k SmolLM2 tokens) from the
// corpus: prose, code, Unicode and whitespace runs in realistic proportion.
func benchText(b testing.TB) string {
	var sb strings.Builder
	corpus := loadCorpus(b)
	for sb.Len() < 400_000 {
		for _, s := range corpus {
			sb.WriteString(s)
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// BenchmarkEncode measures a long prompt on SmolLM2 with the word cache
// warm, which is the steady state of a server.
func BenchmarkEncode(b *testing.B) {
	tk := ggufTokenizer(b, smolPath)
	text := benchText(b)
	n := len(tk.Encode(text, EncodeOptions{ParseSpecial: true}))
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		tk.Encode(text, EncodeOptions{ParseSpecial: true})
	}
	b.ReportMetric(float64(n), "tokens/op")
}

// BenchmarkEncodeCold clears the word cache before every run, so every
// distinct word goes through the merge loop.
func BenchmarkEncodeCold(b *testing.B) {
	tk := ggufTokenizer(b, smolPath)
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		b.StopTimer()
		tk.bpe.cache.reset()
		b.StartTimer()
		tk.Encode(text, EncodeOptions{ParseSpecial: true})
	}
}

// BenchmarkEncodeSPM measures the SentencePiece path, which merges the
// whole text at once (no pre-tokenizer, no cache).
func BenchmarkEncodeSPM(b *testing.B) {
	tk := ggufTokenizer(b, storiesPath)
	text := benchText(b)[:100_000]
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tk.Encode(text, EncodeOptions{ParseSpecial: true})
	}
}

func BenchmarkDecode(b *testing.B) {
	tk := ggufTokenizer(b, smolPath)
	ids := tk.Encode(benchText(b), EncodeOptions{ParseSpecial: true})
	for b.Loop() {
		tk.Decode(ids)
	}
}

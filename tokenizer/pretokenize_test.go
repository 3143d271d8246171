package tokenizer

import (
	"slices"
	"testing"
)

func pieces(st splitter, s string) []string {
	p := &preTokenizer{stages: []splitter{st}}
	var out []string
	var bufs [2][]span
	for _, sp := range p.split(s, &bufs) {
		out = append(out, s[sp.start:sp.end])
	}
	return out
}

// The expected pieces are what the HF tokenizers library (Oniguruma)
// produces for the same patterns with the Isolated split behaviour.
func TestSplitters(t *testing.T) {
	gpt2 := splitGPT2
	llama3 := splitLlama3(3, true)
	qwen2 := splitLlama3(1, true)
	o200k := splitO200k(true)
	tests := []struct {
		name string
		st   splitter
		in   string
		want []string
	}{
		{"gpt2/words", gpt2, "Hello world", []string{"Hello", " world"}},
		{"gpt2/contractions", gpt2, "I'M here, it's 12345!", []string{"I", "'", "M", " here", ",", " it", "'s", " 12345", "!"}},
		{"gpt2/spaces", gpt2, "  two  spaces\n\n  x", []string{" ", " two", " ", " spaces", "\n\n ", " x"}},
		{"gpt2/tabs", gpt2, "a\t\tb\n", []string{"a", "\t", "\t", "b", "\n"}},
		{"gpt2/accents", gpt2, "ÀB àb ÀÀB CamelCase", []string{"ÀB", " àb", " ÀÀB", " CamelCase"}},
		{"gpt2/cjk", gpt2, "日本語。", []string{"日本語", "。"}},
		{"gpt2/slashes", gpt2, "x /// y\n/", []string{"x", " ///", " y", "\n", "/"}},
		{"gpt2/mark", gpt2, " \u0301e", []string{" \u0301", "e"}},
		{"gpt2/trailing", gpt2, "tail   ", []string{"tail", "   "}},
		{"gpt2/empty", gpt2, "", nil},

		{"llama3/contractions", llama3, "I'M here, it's 12345!", []string{"I", "'M", " here", ",", " it", "'s", " ", "123", "45", "!"}},
		{"llama3/spaces", llama3, "  two  spaces\n\n  x", []string{" ", " two", " ", " spaces", "\n\n", " ", " x"}},
		{"llama3/tabs", llama3, "a\t\tb\n", []string{"a", "\t", "\tb", "\n"}},
		{"llama3/slashes", llama3, "x /// y\n/", []string{"x", " ///", " y", "\n", "/"}},
		{"llama3/mark", llama3, " \u0301e", []string{" \u0301", "e"}},
		{"llama3/longs", llama3, "it'ſlong", []string{"it", "'ſ", "long"}},
		{"llama3/trailing", llama3, "tail   ", []string{"tail", "   "}},

		{"qwen2/digits", qwen2, "I'M here, it's 12345!", []string{"I", "'M", " here", ",", " it", "'s", " ", "1", "2", "3", "4", "5", "!"}},

		{"o200k/contractions", o200k, "I'M here, it's 12345!", []string{"I'M", " here", ",", " it's", " ", "123", "45", "!"}},
		{"o200k/case", o200k, "ÀB àb ÀÀB CamelCase", []string{"ÀB", " àb", " ÀÀB", " Camel", "Case"}},
		{"o200k/spaces", o200k, "  two  spaces\n\n  x", []string{" ", " two", " ", " spaces", "\n\n", " ", " x"}},
		{"o200k/cjk", o200k, "日本語。", []string{"日本語", "。"}},
		{"o200k/mark", o200k, " \u0301e", []string{" \u0301e"}},
		{"o200k/slashes", o200k, "x /// y\n/", []string{"x", " ///", " y", "\n", "/"}},

		{"digits/single", isolate(isNumberRune, 1, 1), "ab12c3", []string{"ab", "1", "2", "c", "3"}},
		{"digits/run", isolate(isNumberRune, 1, 0), "ab12c3", []string{"ab", "12", "c", "3"}},
		{"digits/triples", isolate(isASCIIDigit, 3, 3), "a12b12345c", []string{"a12b", "123", "45c"}},
		{"punct/run", isolate(punctSet(false), 1, 0), "a+=b`c", []string{"a", "+=", "b`c"}},
		{"punct/falcon", isolate(punctSet(true), 1, 0), "a+=b`c", []string{"a", "+=", "b", "`", "c"}},
		{"metaspace", splitBefore("▁"), "▁a▁bc▁", []string{"▁a", "▁bc", "▁"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pieces(tt.st, tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("split(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestSplitterForPattern(t *testing.T) {
	tests := []struct {
		pat     string
		in      string
		want    []string
		wantErr bool
	}{
		{patGPT2, "it's", []string{"it", "'s"}, false},
		{patLlama3Alt, "IT'S", []string{"IT", "'S"}, false},
		{`[0-9]+`, "a12b", []string{"a", "12", "b"}, false},
		{`\s+(?!\S)`, "", nil, true},
		{`(?<=a)b`, "", nil, true},
		{`[`, "", nil, true},
	}
	for _, tt := range tests {
		st, err := splitterForPattern(tt.pat)
		if (err != nil) != tt.wantErr {
			t.Errorf("splitterForPattern(%q) error %v, want error %v", tt.pat, err, tt.wantErr)
			continue
		}
		if err == nil {
			if got := pieces(st, tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("pattern %q on %q = %q, want %q", tt.pat, tt.in, got, tt.want)
			}
		}
	}
}

func TestGGUFPreTokenizerNames(t *testing.T) {
	for _, name := range []string{"", "default", "llama-bpe", "qwen2", "gpt-2", "smollm", "falcon", "gpt-4o", "dbrx"} {
		if _, _, err := ggufPreTokenizer(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	if _, _, err := ggufPreTokenizer("no-such-pre"); err == nil {
		t.Error("unknown pre-tokenizer accepted")
	}
}

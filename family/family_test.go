package family

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/goprovider/provider/harmony"
	"github.com/goprovider/provider/harmony/harmonytest"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/tokenizer"
	"github.com/goprovider/provider/toolcall"
)

// TestRegistry walks every Family: each hook is set, or deliberately nil
// where the table says the architecture has none.
func TestRegistry(t *testing.T) {
	want := map[string]struct {
		modelTypes   []string
		vision       bool
		output       bool
		syntax       toolcall.Syntax
		chatTemplate string
	}{
		"llama":   {modelTypes: []string{"llama"}, syntax: toolcall.Hermes},
		"gemma3":  {modelTypes: []string{"gemma3", "gemma3_text"}, vision: true, syntax: toolcall.ToolCode},
		"gemma4":  {modelTypes: []string{"gemma4", "gemma4_text"}, vision: true, syntax: toolcall.ToolCode},
		"gpt_oss": {modelTypes: []string{"gpt_oss"}, output: true, syntax: toolcall.Harmony, chatTemplate: harmony.ChatTemplate},
	}
	if len(registry) != len(want) {
		t.Fatalf("%d families registered, want %d", len(registry), len(want))
	}
	owner := map[string]string{}
	for _, f := range registry {
		t.Run(f.Arch, func(t *testing.T) {
			w, ok := want[f.Arch]
			if !ok {
				t.Fatalf("family %q is not in the test's table", f.Arch)
			}
			if !slices.Equal(f.ModelTypes, w.modelTypes) {
				t.Errorf("ModelTypes %q, want %q", f.ModelTypes, w.modelTypes)
			}
			if f.Build == nil {
				t.Error("no Build")
			}
			if (f.LoadVision != nil) != w.vision {
				t.Errorf("LoadVision set %v, want %v", f.LoadVision != nil, w.vision)
			}
			if (f.Output != nil) != w.output {
				t.Errorf("Output set %v, want %v", f.Output != nil, w.output)
			}
			if f.ToolSyntax != w.syntax {
				t.Errorf("ToolSyntax %s, want %s", f.ToolSyntax, w.syntax)
			}
			if f.ChatTemplate != w.chatTemplate {
				t.Errorf("ChatTemplate of %d bytes, want %d", len(f.ChatTemplate), len(w.chatTemplate))
			}
			if f.DummyTokenizer == "" {
				t.Error("no DummyTokenizer")
			}
			for _, name := range f.ModelTypes {
				if o, ok := owner[name]; ok {
					t.Errorf("model_type %q belongs to %s too", name, o)
				}
				owner[name] = f.Arch
				got, err := For(name)
				if err != nil || got.Arch != f.Arch {
					t.Errorf("For(%q) = %q, %v; want %q", name, got.Arch, err, f.Arch)
				}
			}
		})
	}
}

func TestSupportedIsTheRegistry(t *testing.T) {
	var archs []string
	for _, f := range registry {
		archs = append(archs, f.Arch)
	}
	if got := Supported(); !slices.Equal(got, archs) {
		t.Fatalf("Supported() = %q, registry %q", got, archs)
	}
	if got := model.Architectures(); !slices.Equal(got, archs) {
		t.Errorf("package model loads %q, registry %q", got, archs)
	}
	if !slices.IsSorted(Supported()) {
		t.Errorf("Supported() = %q is not sorted", Supported())
	}
}

func TestUnknownArchitecture(t *testing.T) {
	for _, arch := range []string{"mamba", "", "qwen3", "Llama"} {
		f, err := For(arch)
		if !errors.Is(err, model.ErrUnsupportedArch) {
			t.Errorf("For(%q) error %v, want model.ErrUnsupportedArch", arch, err)
		}
		if f.Arch != "" || f.Build != nil || f.LoadVision != nil || f.Output != nil || f.ChatTemplate != "" || f.ToolSyntax != toolcall.NoSyntax {
			t.Errorf("For(%q) = %+v, want the zero Family", arch, f)
		}
		if _, err := Build(model.Config{Arch: arch}, nil); !errors.Is(err, model.ErrUnsupportedArch) {
			t.Errorf("Build(%q) error %v, want model.ErrUnsupportedArch", arch, err)
		}
	}
}

// TestToolSyntax is each architecture's tool syntax with and without its
// template's markers, as the server detects it.
func TestToolSyntax(t *testing.T) {
	for _, tc := range []struct {
		arch, template string
		want           toolcall.Syntax
	}{
		{"gpt_oss", "", toolcall.Harmony},
		{"llama", "{{ '<|im_start|>' }}", toolcall.Hermes},
		{"llama", "{{ '<tool_call>' }}", toolcall.Hermes},
		{"llama", "<|start_header_id|>ipython<|end_header_id|>", toolcall.Llama3},
		{"gemma3", "<start_of_turn>", toolcall.ToolCode},
		{"gemma3_text", "", toolcall.ToolCode},
		{"gemma4", "{{ '<|tool_call>call:' }}", toolcall.Gemma4},
		{"gemma4", "", toolcall.ToolCode},
		{"qwen3", "", toolcall.Hermes},
	} {
		f, _ := For(tc.arch)
		if got := toolcall.Detect(f.ToolSyntax, tc.template); got != tc.want {
			t.Errorf("%s with %q: %s, want %s", tc.arch, tc.template, got, tc.want)
		}
	}
}

// TestModelTypes checks the registry against package model's config
// reader: a checkpoint's config.json is read as the architecture of the
// Family its model_type names.
func TestModelTypes(t *testing.T) {
	for _, tc := range []struct{ path, arch string }{
		{"../testdata/dummy/llama.json", "llama"},
		{"../testdata/ref/gemma3_vlm_tiny/config.json", "gemma3"},
		{"../testdata/ref/gemma4_tiny/moe/config.json", "gemma4"},
		{"../testdata/ref/gptoss_tiny/hf_bf16/config.json", "gpt_oss"},
	} {
		raw, err := os.ReadFile(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := model.ReadHFConfig(raw)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		f, err := For(cfg.Arch)
		if err != nil || f.Arch != tc.arch || cfg.Arch != tc.arch {
			t.Errorf("%s: read as %q, family %q (%v); want %q", tc.path, cfg.Arch, f.Arch, err, tc.arch)
		}
	}
}

// TestHarmonyOutput: gpt-oss's parsers come from harmony's structure
// tokens, and a vocabulary without them is refused.
func TestHarmonyOutput(t *testing.T) {
	out, err := GPTOSS.Output(harmonytest.Tokenizer(t))
	if err != nil {
		t.Fatal(err)
	}
	if out.Parser == nil || out.ToolParser == nil || out.Parser() == nil || out.ToolParser() == nil {
		t.Fatalf("Output = %+v, want both parsers", out)
	}
	raw, err := os.ReadFile("../" + Llama.DummyTokenizer)
	if err != nil {
		t.Fatalf("%v (run make setup)", err)
	}
	llama, err := tokenizer.FromJSON(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := GPTOSS.Output(llama); !errors.Is(err, harmony.ErrNotHarmony) {
		t.Fatalf("Output of a llama vocabulary: %v, want harmony.ErrNotHarmony", err)
	}
}

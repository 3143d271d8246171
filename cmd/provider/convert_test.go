package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestConvertGeneratesTheSame converts the tiny model and checks that the
// directory generates, greedily, exactly what the GGUF file does.
func TestConvertGeneratesTheSame(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stories260K")
	out, errOut, code := run(t, "convert", "--model", stories, "--out", dir)
	if code != 0 || !strings.Contains(out, "48 tensors (F32 48)") {
		t.Fatalf("convert: exit %d, %q %q", code, out, errOut)
	}
	for _, prompt := range []string{"Once upon a time", "Lily and Tom went to the park. They saw"} {
		want, errOut, code := run(t, "generate", "--model", stories, "--prompt", prompt, "--max-tokens", "48")
		if code != 0 {
			t.Fatalf("generate gguf: exit %d, %s", code, errOut)
		}
		got, errOut, code := run(t, "generate", "--model", dir, "--prompt", prompt, "--max-tokens", "48")
		if code != 0 {
			t.Fatalf("generate converted: exit %d, %s", code, errOut)
		}
		if got != want {
			t.Errorf("%q: converted generates %q, GGUF %q", prompt, got, want)
		}
	}
}

func TestConvertUsage(t *testing.T) {
	if _, errOut, code := run(t, "convert", "--model", stories); code != 2 || !strings.Contains(errOut, "--out is required") {
		t.Fatalf("no --out: exit %d, %q", code, errOut)
	}
	_, errOut, code := run(t, "convert", "--model", "../../testdata/configs/gpt-oss-20b.json", "--out", t.TempDir())
	if code != 1 || !strings.HasPrefix(errOut, "provider: ") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("not a GGUF file: exit %d, %q", code, errOut)
	}
}

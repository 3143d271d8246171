package main

import (
	"os/exec"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"2000000000", 2000000000}, {"2GiB", 2 << 30}, {"2gib", 2 << 30}, {"1.5G", 3 << 29},
		{"500MB", 500e6}, {"512MiB", 512 << 20}, {"64K", 64 << 10}, {"3KB", 3000}, {"1TiB", 1 << 40}, {"100B", 100}, {" 4 GiB ", 4 << 30},
	} {
		got, err := parseBytes(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "GiB", "-1GiB", "2XB", "lots", "1e30TiB", "NaN"} {
		if got, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", bad, got)
		}
	}
}

// TestHelpNamesEveryFlag: --help of every command exits 0 and lists every
// flag with its description.
func TestHelpNamesEveryFlag(t *testing.T) {
	for cmd, flags := range map[string][]string{
		"generate": {"model", "dummy-weights", "tokenizer", "dummy-seed", "prompt", "chat", "max-tokens", "temperature", "top-p", "top-k", "seed", "device"},
		"serve": {"model", "dummy-weights", "tokenizer", "dummy-seed", "addr", "max-concurrent", "kv-bytes", "device", "prefix-cache-bytes", "ctx-size",
			"step-tokens", "log-format", "max-connections", "models-dir", "max-slots", "idle-unload", "coordinator", "no-auth", "token-file", "config"},
		"info":    {"model", "tokens"},
		"convert": {"model", "out"},
	} {
		for _, h := range []string{"--help", "-h"} {
			stdout, stderr, code := run(t, cmd, h)
			if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: provider "+cmd) {
				t.Fatalf("%s %s: exit %d, stderr %q, stdout %q", cmd, h, code, stderr, stdout)
			}
			for _, f := range flags {
				if !strings.Contains(stdout, "\n  --"+f+" ") && !strings.Contains(stdout, "\n  --"+f+"\n") {
					t.Errorf("%s %s does not list --%s:\n%s", cmd, h, f, stdout)
				}
			}
		}
	}
	stdout, _, _ := run(t, "serve", "--help")
	for _, want := range []string{"config backend.kv_bytes", "default 127.0.0.1:8000", "PROVIDER_PREFIX_CACHE=0"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
}

func TestVersion(t *testing.T) {
	stdout, _, code := run(t, "version")
	if code != 0 || !strings.HasPrefix(stdout, "provider ") || !strings.Contains(stdout, "\nmlx 0.") || !strings.Contains(stdout, "backends: cpu") {
		t.Fatalf("exit %d, %q", code, stdout)
	}
}

// A model that does not open fails the start before the port is bound.
func TestServeBadModelFailsBeforeBind(t *testing.T) {
	_, stderr, code := run(t, "serve", "--model", "/nonexistent/model.gguf", "--addr", "127.0.0.1:0", "--log-format", "text")
	if code != 1 || strings.Contains(stderr, "msg=listening") || !strings.Contains(stderr, "/nonexistent/model.gguf") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
}

func TestServeBanner(t *testing.T) {
	lines, _ := serve(t, "--model", stories, "--addr", "127.0.0.1:0", "--device", "cpu", "--no-auth", "--kv-bytes", "2GiB", "--log-format", "text")
	var got []string
	for lines.Scan() {
		got = append(got, lines.Text())
		if strings.HasPrefix(lines.Text(), "  auth:") {
			break
		}
	}
	text := strings.Join(got, "\n")
	for _, want := range []string{"serving on http://127.0.0.1:", "  device:   cpu, ", "CPU threads", "2.0 GiB budget (--kv-bytes)",
		"  model:    stories260K (context 2048 tokens, up to 4 requests at once, KV grant 2.0 GiB)", "  dashboard: http://127.0.0.1:", "  auth:     none (--no-auth)"} {
		if !strings.Contains(text, want) {
			t.Errorf("banner lacks %q:\n%s", want, text)
		}
	}
}

// Without --prompt, generate reads its prompt from stdin.
func TestGeneratePromptFromStdin(t *testing.T) {
	cmd := exec.Command(binPath, "generate", "--model", stories, "--max-tokens", "4")
	cmd.Stdin = strings.NewReader("Once upon a time\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), "prompt tokens: 5,") {
		t.Fatalf("the piped prompt was not read:\n%s", out)
	}
}

package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// values flattens a File's settings (current listen address
// 127.0.0.1:8000) and environment switches for comparison.
func values(f *File) map[string]string {
	m := map[string]string{}
	for _, s := range f.Settings {
		m["--"+s.Flag] = s.Value("127.0.0.1:8000")
	}
	for _, e := range f.Env {
		m["$"+e.Name] = e.Value
	}
	return m
}

func TestParse(t *testing.T) {
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		src      string
		want     map[string]string
		warnings []Warning
	}{
		{name: "empty", src: "", want: map[string]string{}},
		{
			name: "every mapped key",
			src: `
[server]
no_auth = false
token_file = "~/tokens/api"

[backend]
port = 8100
model = "/m/a.gguf"
enabled_models = ["/m/b", "/m/a.gguf"]
models_dir = "/models"
idle_timeout_mins = 90
max_concurrent = 8
max_slots = 4
kv_bytes = 17179869184
device = "cpu"

[coordinator]
url = "wss://coordinator.example/ws/provider"

[cache]
prefix = true
ssd = false
ram_bytes = 1073741824
`,
			want: map[string]string{
				"--no-auth":                  "0",
				"--token-file":               filepath.Join(home, "tokens/api"),
				"--addr":                     "127.0.0.1:8100",
				"--model":                    "/m/a.gguf,/m/b",
				"--models-dir":               "/models",
				"--idle-unload":              "1h30m0s",
				"--max-concurrent":           "8",
				"--max-slots":                "4",
				"--kv-bytes":                 "17179869184",
				"--device":                   "cpu",
				"--coordinator":              "wss://coordinator.example/ws/provider",
				"$PROVIDER_PREFIX_CACHE":     "1",
				"$PROVIDER_PREFIX_CACHE_SSD": "0",
				"--prefix-cache-bytes":       "1073741824",
			},
		},
		{
			name: "server addr",
			src:  "[server]\naddr = \"0.0.0.0:9000\"\nno_auth = true\n",
			want: map[string]string{"--addr": "0.0.0.0:9000", "--no-auth": "1"},
		},
		{
			name: "idle zero",
			src:  "[backend]\nidle_timeout_mins = 0\n",
			want: map[string]string{"--idle-unload": "0s"},
		},
		{
			name: "inline table",
			src:  "backend = { max_slots = 2 }\n",
			want: map[string]string{"--max-slots": "2"},
		},
		{
			name: "reference file",
			src: `
[provider]
name = "old-provider"
memory_reserve_gb = 4
auto_update = true

[backend]
port = 8100
continuous_batching = true
idle_timeout_mins = 15

[coordinator]
url = "ws://localhost:8080/ws/provider"
heartbeat_interval_secs = 30

[schedule]
enabled = true
[[schedule.windows]]
start = "22:00"
`,
			want: map[string]string{
				"--addr":        "127.0.0.1:8100",
				"--idle-unload": "15m0s",
				"--coordinator": "ws://localhost:8080/ws/provider",
			},
			warnings: []Warning{
				{Key: "provider.name", Kind: Ignored},
				{Key: "provider.memory_reserve_gb", Kind: Ignored},
				{Key: "provider.auto_update", Kind: Ignored},
				{Key: "backend.continuous_batching", Kind: Ignored},
				{Key: "coordinator.heartbeat_interval_secs", Kind: Ignored},
				{Key: "schedule", Kind: Ignored},
			},
		},
		{
			name: "unknown keys",
			src: `
verbose = true
[backend]
max_concurent = 8
[metrics]
port = 9100
`,
			want: map[string]string{},
			warnings: []Warning{
				{Key: "verbose", Kind: Unknown},
				{Key: "backend.max_concurent", Kind: Unknown},
				{Key: "metrics", Kind: Unknown},
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("config.toml", []byte(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			got := values(f)
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			for k, v := range got {
				if _, ok := tt.want[k]; !ok {
					t.Errorf("unexpected %s = %q", k, v)
				}
			}
			var warnings []Warning
			for _, w := range f.Warnings {
				if (w.Kind == Ignored) != (w.Reason != "") {
					t.Errorf("%s: %v with reason %q", w.Key, w.Kind, w.Reason)
				}
				w.Reason = ""
				warnings = append(warnings, w)
			}
			if !slices.Equal(warnings, tt.warnings) {
				t.Errorf("warnings %v, want %v", warnings, tt.warnings)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct {
		name     string
		src      string
		line     int    // of the *Error; 0: none
		key      string // of the *Error
		contains string // in its text
		is       error
	}{
		{name: "syntax", src: "[backend]\nport = 8100\nmodel = \"unterminated\n", line: 3, contains: "config.toml:3: "},
		{name: "missing equals", src: "[backend]\n\nport 8100\n", line: 3, contains: "config.toml:3: "},
		{name: "duplicate key", src: "[backend]\nport = 1\nport = 2\n", line: 3},
		{name: "wrong type", src: "[backend]\n\nport = \"8100\"\n", key: "backend.port", contains: "line 3"},
		{name: "list of numbers", src: "[backend]\nenabled_models = [1]\n", key: "backend.enabled_models", contains: "line 2"},
		{name: "port range", src: "[backend]\nport = 70000\n", key: "backend.port", contains: "out of range"},
		{name: "negative idle", src: "[backend]\nidle_timeout_mins = -1\n", key: "backend.idle_timeout_mins", contains: "out of range"},
		{name: "section not a table", src: "backend = 3\n", key: "backend", contains: "want a table"},
		{name: "addr and port", src: "[server]\naddr = \"127.0.0.1:1\"\n[backend]\nport = 2\n", key: "backend.port", is: ErrConflict},
		{name: "comma in list item", src: "[backend]\nenabled_models = [\"a,b\"]\n", key: "backend.enabled_models", contains: "comma"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("config.toml", []byte(tt.src))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if ce.File != "config.toml" || ce.Line != tt.line || ce.Key != tt.key {
				t.Errorf("file %q line %d key %q, want config.toml %d %q", ce.File, ce.Line, ce.Key, tt.line, tt.key)
			}
			if !strings.Contains(err.Error(), tt.contains) || !strings.HasPrefix(err.Error(), "config.toml") {
				t.Errorf("%q: want config.toml... containing %q", err, tt.contains)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("%v is not %v", err, tt.is)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "none.toml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, []byte("[backend]\nmax_slots = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != path || len(f.Settings) != 1 || f.Settings[0].Value("") != "3" {
		t.Errorf("got %+v", f)
	}
}

func TestDefaultPath(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	got, err := DefaultPath()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "provider", "config.toml"); got != want {
		t.Errorf("DefaultPath() = %q, want %q", got, want)
	}
}

func TestPortKeepsHost(t *testing.T) {
	f, err := Parse("config.toml", []byte("[backend]\nport = 8100\n"))
	if err != nil {
		t.Fatal(err)
	}
	for current, want := range map[string]string{
		"127.0.0.1:8000": "127.0.0.1:8100",
		"[::1]:8000":     "[::1]:8100",
		"localhost:1":    "localhost:8100",
		"garbage":        "127.0.0.1:8100",
	} {
		if got := f.Settings[0].Value(current); got != want {
			t.Errorf("Value(%q) = %q, want %q", current, got, want)
		}
	}
}

// TestDocListsEveryKey holds the package comment's table to the key table.
func TestDocListsEveryKey(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range table {
		sec, leaf, _ := strings.Cut(e.key, ".")
		if !strings.Contains(string(doc), "["+sec+"]") || (leaf != "" && !strings.Contains(string(doc), " "+leaf+" ")) {
			t.Errorf("doc.go does not list %s", e.key)
		}
		target := "--" + e.flag
		if e.env != "" {
			target = e.env
		}
		if e.ignored != "" {
			target = "ignored"
		}
		if !strings.Contains(string(doc), target) {
			t.Errorf("doc.go does not say what %s sets (%s)", e.key, target)
		}
	}
}

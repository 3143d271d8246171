package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// configFlags is serve's flag set as far as the configuration file
// reaches, with its defaults.
func configFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addModelFlags(fs, "models")
	fs.String("addr", "127.0.0.1:8000", "")
	fs.Int("max-concurrent", 64, "")
	fs.Int64("kv-bytes", 0, "")
	fs.String("device", "auto", "")
	fs.Int64("prefix-cache-bytes", 0, "")
	fs.String("models-dir", "", "")
	fs.Int("max-slots", 1, "")
	fs.Duration("idle-unload", 0, "")
	fs.String("coordinator", "", "")
	fs.Bool("no-auth", false, "")
	fs.String("token-file", "", "")
	addConfigFlag(fs)
	return fs
}

// configEnv points the default configuration file into a fresh directory
// and clears the cache switches (restored after the test); it returns the
// default file's path.
func configEnv(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	for _, name := range []string{"PROVIDER_PREFIX_CACHE", "PROVIDER_PREFIX_CACHE_SSD"} {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
	return filepath.Join(dir, "provider", "config.toml")
}

func writeConfig(t *testing.T, path, src string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
}

// runConfig parses args and applies the configuration; it returns the
// flags' values and what was logged.
func runConfig(t *testing.T, fs *flag.FlagSet, args ...string) (map[string]string, string, error) {
	t.Helper()
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	err := applyConfig(fs, args, slog.New(slog.NewTextHandler(&logged, nil)))
	got := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { got[f.Name] = f.Value.String() })
	return got, logged.String(), err
}

const fullConfig = `
[server]
no_auth = true
token_file = "/etc/provider/token"

[backend]
port = 8100
model = "/m/a.gguf"
enabled_models = ["/m/b"]
models_dir = "/models"
idle_timeout_mins = 30
max_concurrent = 8
max_slots = 3
kv_bytes = 17179869184
device = "cpu"

[coordinator]
url = "wss://coordinator.example/ws/provider"

[cache]
prefix = true
ssd = false
ram_bytes = 1073741824
`

func TestConfigFull(t *testing.T) {
	path := configEnv(t)
	writeConfig(t, path, fullConfig)
	got, logged, err := runConfig(t, configFlags())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"addr":               "127.0.0.1:8100",
		"model":              "/m/a.gguf,/m/b",
		"models-dir":         "/models",
		"idle-unload":        (30 * time.Minute).String(),
		"max-concurrent":     "8",
		"max-slots":          "3",
		"kv-bytes":           "17179869184",
		"device":             "cpu",
		"coordinator":        "wss://coordinator.example/ws/provider",
		"no-auth":            "true",
		"token-file":         "/etc/provider/token",
		"prefix-cache-bytes": "1073741824",
	} {
		if got[name] != want {
			t.Errorf("--%s = %q, want %q", name, got[name], want)
		}
	}
	if v := os.Getenv("PROVIDER_PREFIX_CACHE_SSD"); v != "0" {
		t.Errorf("PROVIDER_PREFIX_CACHE_SSD = %q, want 0", v)
	}
	if v := os.Getenv("PROVIDER_PREFIX_CACHE"); v == "0" {
		t.Errorf("PROVIDER_PREFIX_CACHE = %q, want the cache on", v)
	}
	if !strings.Contains(logged, "file="+path) || strings.Contains(logged, "level=WARN") {
		t.Errorf("log:\n%s", logged)
	}
}

func TestConfigFlagsWin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.toml")
	configEnv(t)
	writeConfig(t, path, fullConfig)
	got, _, err := runConfig(t, configFlags(), "--config", path,
		"--addr", "127.0.0.1:9999", "--max-slots", "1", "--dummy-weights", "config.json", "--no-auth=false")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"addr":      "127.0.0.1:9999",
		"max-slots": "1",
		"no-auth":   "false",
		"model":     defaultModel, // --dummy-weights: the file's models are moot
		"device":    "cpu",        // not on the command line: the file's
	} {
		if got[name] != want {
			t.Errorf("--%s = %q, want %q", name, got[name], want)
		}
	}
}

func TestConfigWarnings(t *testing.T) {
	path := configEnv(t)
	writeConfig(t, path, `
[provider]
name = "old-provider"
memory_reserve_gb = 4

[backend]
port = 8100
continuous_batching = true
max_concurent = 8

[coordinator]
heartbeat_interval_secs = 30

[schedule]
enabled = true

[telemetry]
endpoint = "https://example.com"
`)
	got, logged, err := runConfig(t, configFlags())
	if err != nil {
		t.Fatal(err)
	}
	if got["addr"] != "127.0.0.1:8100" {
		t.Errorf("--addr = %q: the file's known keys were not applied", got["addr"])
	}
	for _, want := range []string{
		`msg="ignored key" file=` + path + ` key=provider.name`,
		`msg="ignored key" file=` + path + ` key=provider.memory_reserve_gb`,
		`msg="ignored key" file=` + path + ` key=backend.continuous_batching`,
		`msg="ignored key" file=` + path + ` key=coordinator.heartbeat_interval_secs`,
		`msg="ignored key" file=` + path + ` key=schedule`,
		`msg="unknown key" file=` + path + ` key=backend.max_concurent`,
		`msg="unknown key" file=` + path + ` key=telemetry`,
	} {
		if !strings.Contains(logged, want) {
			t.Errorf("log lacks %s:\n%s", want, logged)
		}
	}
	if n := strings.Count(logged, "level=WARN"); n != 7 {
		t.Errorf("%d warnings, want 7:\n%s", n, logged)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	malformed := filepath.Join(dir, "malformed.toml")
	writeConfig(t, malformed, "[backend]\nport = 8100\nmax_slots 3\n")
	badType := filepath.Join(dir, "type.toml")
	writeConfig(t, badType, "[backend]\nmax_slots = \"three\"\n")
	negative := filepath.Join(dir, "negative.toml")
	writeConfig(t, negative, "[backend]\nmax_slots = -1\n")
	for _, tt := range []struct {
		name  string
		fs    func() *flag.FlagSet
		args  []string
		wants []string // in the error's text
	}{
		{name: "malformed", fs: configFlags, args: []string{"--config", malformed}, wants: []string{malformed + ":3:"}},
		{name: "wrong type", fs: configFlags, args: []string{"--config", badType}, wants: []string{badType, "backend.max_slots", "line 2"}},
		{name: "missing", fs: configFlags, args: []string{"--config", filepath.Join(dir, "none.toml")}, wants: []string{"none.toml"}},
		{
			name: "no such flag",
			fs: func() *flag.FlagSet {
				fs := flag.NewFlagSet("serve", flag.ContinueOnError)
				addConfigFlag(fs)
				return fs
			},
			args:  []string{"--config", negative},
			wants: []string{"backend.max_slots", "no --max-slots flag"},
		},
		{
			name: "flag refuses the value",
			fs: func() *flag.FlagSet {
				fs := flag.NewFlagSet("serve", flag.ContinueOnError)
				fs.Uint("max-slots", 1, "")
				addConfigFlag(fs)
				return fs
			},
			args:  []string{"--config", negative},
			wants: []string{negative, "backend.max_slots", "--max-slots"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			configEnv(t)
			_, _, err := runConfig(t, tt.fs(), tt.args...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, want := range tt.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q lacks %q", err, want)
				}
			}
		})
	}
	t.Run("missing is not exist", func(t *testing.T) {
		configEnv(t)
		_, _, err := runConfig(t, configFlags(), "--config", filepath.Join(dir, "none.toml"))
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("err = %v, want os.ErrNotExist", err)
		}
	})
}

func TestConfigAbsent(t *testing.T) {
	for _, tt := range []struct {
		name  string
		noDir bool // the configuration directory does not exist either
		write bool // a default file that would fail the run
		args  []string
	}{
		{name: "no default file"},
		{name: "no default directory", noDir: true},
		{name: "--config= skips the default", write: true, args: []string{"--config="}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := configEnv(t)
			if tt.noDir {
				t.Setenv("XDG_CONFIG_HOME", filepath.Join(filepath.Dir(path), "nowhere"))
			}
			if tt.write {
				writeConfig(t, path, "[backend]\nport = \"x\"\n")
			}
			fs := configFlags()
			got, logged, err := runConfig(t, fs, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if logged != "" {
				t.Errorf("logged:\n%s", logged)
			}
			if got["addr"] != "127.0.0.1:8000" {
				t.Errorf("--addr = %q, want the default", got["addr"])
			}
		})
	}
}

func TestConfigEnvironmentWins(t *testing.T) {
	for _, tt := range []struct {
		name      string
		env       map[string]string // set before; absent: unset
		src       string
		wantCache string // PROVIDER_PREFIX_CACHE after; "unset": not set
		wantSSD   string
	}{
		{
			name:      "file turns both off",
			src:       "[cache]\nprefix = false\nssd = false\n",
			wantCache: "0", wantSSD: "0",
		},
		{
			name:      "environment keeps the cache on",
			env:       map[string]string{"PROVIDER_PREFIX_CACHE": "1"},
			src:       "[cache]\nprefix = false\n",
			wantCache: "1", wantSSD: "unset",
		},
		{
			name:      "environment turns it off",
			env:       map[string]string{"PROVIDER_PREFIX_CACHE": "0", "PROVIDER_PREFIX_CACHE_SSD": "0"},
			src:       "[cache]\nprefix = true\nssd = true\n",
			wantCache: "0", wantSSD: "0",
		},
		{
			name:      "file silent",
			src:       "[backend]\ndevice = \"cpu\"\n",
			wantCache: "unset", wantSSD: "unset",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := configEnv(t)
			for k, v := range tt.env {
				os.Setenv(k, v) // restored by configEnv's t.Setenv
			}
			writeConfig(t, path, tt.src)
			if _, _, err := runConfig(t, configFlags()); err != nil {
				t.Fatal(err)
			}
			for name, want := range map[string]string{"PROVIDER_PREFIX_CACHE": tt.wantCache, "PROVIDER_PREFIX_CACHE_SSD": tt.wantSSD} {
				got, ok := os.LookupEnv(name)
				if !ok {
					got = "unset"
				}
				if got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

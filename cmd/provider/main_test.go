package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

var binPath string

func TestMain(m *testing.M) {
	// The servers these tests start share the processors with other
	// packages' tests: their kernel threads go to sleep soon, where
	// serve's default would keep them awake (mlx.ServeCPUSpin).
	if os.Getenv("PROVIDER_CPU_SPIN_US") == "" {
		os.Setenv("PROVIDER_CPU_SPIN_US", "200")
	}
	dir, err := os.MkdirTemp("", "provider-cli")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "provider")
	if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const stories = "../../testdata/models/stories260K.gguf"

// serve starts the binary with args, returns its standard error line by
// line, and stops it with SIGTERM when the test ends.
func serve(t *testing.T, args ...string) (lines *bufio.Scanner, stderr io.Reader) {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"serve", "--log-format", "text"}, args...)...)
	// The prefix cache's SSD tier writes under the user's cache directory:
	// each test gets its own.
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir(), "XDG_CONFIG_HOME="+t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return bufio.NewScanner(stderr), stderr
}

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

func TestGenerateStreamsTextAndStats(t *testing.T) {
	out, errOut, code := run(t, "generate", "--model", stories, "--prompt", "Once upon a time", "--max-tokens", "24")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if len(strings.TrimSpace(out)) == 0 {
		t.Fatal("no text on stdout")
	}
	if !strings.Contains(errOut, "prompt tokens: 5") || !strings.Contains(errOut, "decode:") {
		t.Fatalf("stats line = %q", errOut)
	}
	// No prompt: generation starts from BOS alone.
	if _, errOut, code = run(t, "generate", "--model", stories, "--max-tokens", "8"); code != 0 || !strings.Contains(errOut, "prompt tokens: 1,") {
		t.Fatalf("empty prompt: exit %d, %q", code, errOut)
	}
	// Seeded sampling reproduces.
	a, _, _ := run(t, "generate", "--model", stories, "--prompt", "Lily", "--max-tokens", "24", "--temperature", "0.9", "--seed", "7")
	b, _, _ := run(t, "generate", "--model", stories, "--prompt", "Lily", "--max-tokens", "24", "--temperature", "0.9", "--seed", "7")
	if a != b {
		t.Fatalf("seeded runs differ:\n%q\n%q", a, b)
	}
}

// ggufWithArch is a minimal valid GGUF holding one metadata key.
func ggufWithArch(arch string) []byte {
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("GGUF")
	w(uint32(3))
	w(uint64(0)) // tensors
	w(uint64(1)) // metadata pairs
	key := "general.architecture"
	w(uint64(len(key)))
	b.WriteString(key)
	w(uint32(8)) // string
	w(uint64(len(arch)))
	b.WriteString(arch)
	return b.Bytes()
}

// withTensorType copies stories260K with one tensor's type id replaced.
func withTensorType(t *testing.T, name string, typ uint32) []byte {
	data, err := os.ReadFile(stories)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Clone(data)
	i := bytes.Index(data, []byte(name))
	if i < 0 {
		t.Fatalf("%s not in the file", name)
	}
	// name, n_dims u32, dims u64 x n_dims, type u32
	p := i + len(name)
	nd := int(binary.LittleEndian.Uint32(data[p:]))
	binary.LittleEndian.PutUint32(data[p+4+8*nd:], typ)
	return data
}

func TestGenerateFailsWithOneClearLine(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(stories)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "nope.gguf"), "no such file"},
		{"not gguf", write("bad.gguf", []byte("this is not a model file at all")), "bad magic"},
		{"truncated header", write("trunc1.gguf", good[:777]), "truncated"},
		{"truncated data", write("trunc2.gguf", good[:len(good)-1000]), "truncated"},
		{"unsupported architecture", write("mamba.gguf", ggufWithArch("mamba")), "unsupported model architecture"},
		// I32 has F32's byte size, so the file still parses.
		{"unsupported tensor type", write("i32.gguf", withTensorType(t, "blk.0.attn_q.weight", 26)), "unsupported tensor type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := run(t, "generate", "--model", tc.path, "--max-tokens", "4")
			if code == 0 {
				t.Fatalf("exit 0, stdout %q", out)
			}
			lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) || strings.Contains(errOut, "panic") {
				t.Fatalf("stderr = %q, want one line containing %q", errOut, tc.want)
			}
		})
	}
	if _, errOut, code := run(t, "generate", "--model", stories, "--max-tokens", "-3"); code != 2 || !strings.Contains(errOut, "max-tokens") {
		t.Fatalf("bad flag: exit %d %q", code, errOut)
	}
}

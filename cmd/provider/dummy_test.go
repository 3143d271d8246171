package main

import (
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/slots"
)

// tinyGPTOSS is a checkpoint's config.json with its tokenizer.json beside
// it, which a dummy model then uses.
const tinyGPTOSS = "../../testdata/ref/gptoss_tiny/hf_mxfp4/config.json"

func TestGenerateDummyWeights(t *testing.T) {
	out, errOut, code := run(t, "generate", "--dummy-weights", tinyGPTOSS, "--prompt", "hello", "--max-tokens", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"dummy model hf_mxfp4 (gpt_oss): 160472 parameters", "176560 bytes of weights", "prompt tokens: 5,"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	again, _, _ := run(t, "generate", "--dummy-weights", tinyGPTOSS, "--prompt", "hello", "--max-tokens", "4", "--dummy-seed", "0")
	if again != out {
		t.Errorf("the same seed generated %q, then %q", out, again)
	}
}

func TestDummyWeightsFailWithOneClearLine(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mamba := write("mamba.json", `{"model_type": "mamba"}`)
	// 260 tokens for an embedding of 200 rows.
	small := write("small.json", `{"model_type": "llama", "vocab_size": 200, "hidden_size": 64,
		"intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}`)
	tok := filepath.Join(filepath.Dir(tinyGPTOSS), "tokenizer.json")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing config", []string{"--dummy-weights", filepath.Join(dir, "nope.json")}, "no such file"},
		{"unsupported model_type", []string{"--dummy-weights", mamba}, `unsupported model architecture: model_type "mamba"`},
		{"with --model", []string{"--dummy-weights", tinyGPTOSS, "--model", stories}, "--model and --dummy-weights are mutually exclusive"},
		{"tokenizer alone", []string{"--model", stories, "--tokenizer", tok}, "apply to --dummy-weights only"},
		{"missing tokenizer", []string{"--dummy-weights", tinyGPTOSS, "--tokenizer", filepath.Join(dir, "nope.json")}, "no such file"},
		{"tokenizer too large", []string{"--dummy-weights", small, "--tokenizer", tok}, "tokenizer vocabulary larger than the model's: 260 tokens, vocab_size 200"},
	}
	for _, tc := range cases {
		for _, cmd := range []string{"generate", "serve"} {
			t.Run(cmd+" "+tc.name, func(t *testing.T) {
				args := append([]string{cmd, "--addr", "127.0.0.1:0"}, tc.args...)
				if cmd == "generate" {
					args = append([]string{cmd, "--max-tokens", "4"}, tc.args...)
				}
				out, errOut, code := run(t, args...)
				if code != 1 {
					t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
				}
				lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
				last := lines[len(lines)-1]
				if cmd == "generate" && len(lines) != 1 || !strings.Contains(last, tc.want) || strings.Contains(errOut, "panic") {
					t.Fatalf("stderr = %q, want one line containing %q", errOut, tc.want)
				}
			})
		}
	}
}

// A dummy model serves like a checkpoint, under its directory's name. (The
// tiny gpt-oss vocabulary lacks the harmony tokens its chat format needs to
// be served.)
func TestServeDummyWeights(t *testing.T) {
	config := "../../testdata/ref/gemma4_tiny/moe/config.json"
	lines, stderr := serve(t, "--dummy-weights", config, "--addr", "127.0.0.1:0", "--kv-bytes", "2000000000", "--no-auth")
	var addr string
	ready := false
	// Models load and pass their self-test before the port opens.
	for addr == "" && lines.Scan() {
		line := lines.Text()
		if _, a, ok := strings.Cut(line, "msg=listening addr="); ok {
			addr = a
		}
		ready = ready || strings.Contains(line, `msg="model ready" model=moe`)
		if strings.Contains(line, "dummy model") && !strings.Contains(line, "165398 parameters") {
			t.Errorf("log line %q", line)
		}
	}
	if !ready || addr == "" {
		t.Fatalf("server never became ready (addr %q): %v", addr, lines.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get("http://" + addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "moe" {
		t.Fatalf("models %+v, %v", models, err)
	}
	body := `{"model": "moe", "prompt": "hello", "max_tokens": 4}`
	resp, err = client.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var completion struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	err = json.NewDecoder(resp.Body).Decode(&completion)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || completion.Usage.CompletionTokens == 0 {
		t.Fatalf("completion: status %d, %+v, %v", resp.StatusCode, completion, err)
	}
}

// TestProbeChargesDummyWeights: the KV budget of a server running a dummy
// model is what is left beside the weights it builds, as beside a
// checkpoint's: the probe charges the bytes the built weights hold on the
// device (it charged none, and a true-size dummy's KV grant overran the
// device by the weights' size).
func TestProbeChargesDummyWeights(t *testing.T) {
	path, tok, seed := tinyGPTOSS, "", uint64(0)
	mf := &modelFlags{fs: flag.NewFlagSet("serve", flag.ContinueOnError), dummy: &path, tokenizer: &tok, seed: &seed}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ld := &serveLoader{device: "cpu", log: log, conc: 4, archs: family.Supported(), mf: mf,
		entries: map[string]catalogEntry{}, probed: map[string]slots.Info{}}
	entries, err := buildCatalog(mf, false, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		ld.entries[e.name] = e
	}
	info, err := ld.Probe(dummyName(path))
	if err != nil {
		t.Fatal(err)
	}
	m, _, src, err := mf.openDummy("test", func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var built int64
	th := mlx.NewThread()
	defer th.Close()
	th.Do(func() {
		s := mlx.DefaultStream()
		defer s.Free()
		w, err := src.upload(s)
		if err != nil {
			t.Error(err)
			return
		}
		built = w.Bytes()
		w.Free()
	})
	if built == 0 || info.WeightBytes != built {
		t.Fatalf("probe charges %d bytes of weights; the built weights hold %d", info.WeightBytes, built)
	}
	t.Logf("probe charges %d bytes, the built weights hold %d", info.WeightBytes, built)
}

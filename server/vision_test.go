package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/family"
)

// visionServer serves the tiny Gemma 3 vision-language checkpoint (random
// weights, its own tokenizer and Gemma 3's chat template) as "eyes", tower
// included, on the real engine.
func visionServer(t *testing.T, opt engine.Options) (*harness, *engine.Engine) {
	t.Helper()
	opt.Sched.MaxConcurrent = 8
	e, m, v := enginetest.StartVision(t, enginetest.Gemma3VLMTiny(), opt)
	h := newHarness(t, Options{Architectures: family.Supported()}, nil)
	err := h.Register(Model{Name: "eyes", Architecture: m.Config.Arch, Tokenizer: m.Tokenizer, ChatTemplate: m.ChatTemplate,
		EOS: m.Config.EOS, ContextLength: m.Config.ContextLength, Generator: e, Vision: v})
	if err != nil {
		t.Fatal(err)
	}
	return h, e
}

// solidPNG is a data URL of a w x h PNG of one colour.
func solidPNG(t *testing.T, c color.NRGBA, w, h int) string {
	t.Helper()
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.SetNRGBA(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, m); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}

// chatImages posts a greedy chat of one user turn (text, then each image)
// and returns the answer (its content, then the log-probabilities of its
// tokens and their top alternatives, which tell apart answers whose greedy
// text a random model makes alike) and its prompt token count, or the
// status and error code of a refusal.
func chatImages(t *testing.T, url, text string, images ...string) (content string, promptTokens int, status int, code string) {
	t.Helper()
	parts := []map[string]any{{"type": "text", "text": text}}
	for _, im := range images {
		parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": im}})
	}
	body, _ := json.Marshal(map[string]any{
		"model": "eyes", "max_tokens": 12, "temperature": 0, "ignore_eos": true, "logprobs": true, "top_logprobs": 3,
		"messages": []map[string]any{{"role": "user", "content": parts}},
	})
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		return "", 0, resp.StatusCode, e.Error.Code
	}
	var out struct {
		Choices []struct {
			Message  struct{ Content string } `json:"message"`
			Logprobs json.RawMessage          `json:"logprobs"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("answer %s: %v", raw, err)
	}
	return out.Choices[0].Message.Content + "\n" + string(out.Choices[0].Logprobs), out.Usage.PromptTokens, 200, ""
}

// TestRealVisionSteering sends images through the whole pipeline: a red
// and a blue image give different answers, the same image twice the same
// answer, each image adds its 16 soft tokens and their brackets to the
// prompt, a text answer is unchanged while image requests run beside it,
// and a corrupt image is a 400 that names no content.
func TestRealVisionSteering(t *testing.T) {
	h, e := visionServer(t, engine.Options{})
	red := solidPNG(t, color.NRGBA{255, 0, 0, 255}, 40, 30)
	blue := solidPNG(t, color.NRGBA{0, 0, 255, 255}, 40, 30)
	ask := func(images ...string) (string, int) {
		t.Helper()
		c, n, status, code := chatImages(t, h.http.URL, "Describe this.", images...)
		if status != 200 {
			t.Fatalf("status %d (%s)", status, code)
		}
		return c, n
	}
	text, textTokens := ask()
	r1, redTokens := ask(red)
	b1, _ := ask(blue)
	r2, _ := ask(red)
	both, bothTokens := ask(red, blue)
	if r1 == b1 {
		t.Errorf("red and blue images gave the same answer %q", r1)
	}
	if r1 != r2 {
		t.Errorf("the same image twice: %q, then %q", r1, r2)
	}
	if r1 == text {
		t.Errorf("the image changed nothing: %q", r1)
	}
	// An image adds "\n\n", its start, 16 soft tokens, its end and "\n\n":
	// 21 or 22 tokens by how the newlines merge with their neighbours.
	if d := redTokens - textTokens; d < 19 || d > 22 {
		t.Errorf("one image added %d prompt tokens", d)
	}
	if bothTokens-redTokens < 19 {
		t.Errorf("a second image added %d prompt tokens", bothTokens-redTokens)
	}
	first := func(a string) string { return strings.SplitN(a, "\n{", 2)[0] }
	t.Logf("greedy text: text %q, red %q, blue %q, red+blue %q", first(text), first(r1), first(b1), first(both))

	// Text and image requests together: each answer equals its answer
	// alone.
	type result struct{ got, want string }
	results := make([]result, 12)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			switch i % 3 {
			case 0:
				c, _ := ask()
				results[i] = result{c, text}
			case 1:
				c, _ := ask(red)
				results[i] = result{c, r1}
			default:
				c, _ := ask(blue)
				results[i] = result{c, b1}
			}
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.got != r.want {
			t.Errorf("request %d beside others: %q, alone %q", i, r.got, r.want)
		}
	}

	const secret = "SECRET-pixels"
	bad := "data:image/png;base64," + base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n"+secret))
	if _, _, status, code := chatImages(t, h.http.URL, "Describe this.", bad); status != 400 || code != "invalid_value" {
		t.Errorf("corrupt image: status %d code %q, want 400 invalid_value", status, code)
	}
	waitIdle(t, e)
}

// The official OpenAI Python client sends image_url content parts unchanged
// and gets answers, streamed and not.
func TestOpenAIPythonClientImages(t *testing.T) {
	deps, err := filepath.Abs("../.deps/py-openai")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(deps, "openai")); err != nil {
		t.Fatalf("the openai package is missing from %s: run `make setup`", deps)
	}
	h, _ := visionServer(t, engine.Options{})
	red := solidPNG(t, color.NRGBA{255, 0, 0, 255}, 40, 30)
	blue := solidPNG(t, color.NRGBA{0, 0, 255, 255}, 40, 30)
	cmd := exec.Command("python3", "testdata/openai_vision.py", h.http.URL+"/v1", "eyes")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+deps)
	cmd.Stdin = strings.NewReader(fmt.Sprintf("%s\n%s\n", red, blue))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openai client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestRealVisionPrefixCache: a prompt whose first block holds an image is
// cached under the image's hash: the same image and text adopt the block
// and answer as cold, another image with the same tokens adopts nothing.
func TestRealVisionPrefixCache(t *testing.T) {
	h, _ := visionServer(t, engine.Options{Prefix: engine.PrefixOptions{Budget: 16 << 20}})
	red := solidPNG(t, color.NRGBA{255, 0, 0, 255}, 40, 30)
	blue := solidPNG(t, color.NRGBA{0, 0, 255, 255}, 40, 30)
	// About 300 tokens after the image, so block 0 (256 tokens) holds it.
	long := strings.Repeat("abcdefghij", 30)
	ask := func(image string) (string, float64) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{
			"model": "eyes", "max_tokens": 6, "temperature": 0, "ignore_eos": true, "logprobs": true, "user": "u1",
			"messages": []map[string]any{{"role": "user", "content": []map[string]any{
				{"type": "image_url", "image_url": map[string]any{"url": image}},
				{"type": "text", "text": long},
			}}},
		})
		status, raw := h.post(t, "/v1/chat/completions", string(body))
		if status != 200 {
			t.Fatalf("status %d: %s", status, raw)
		}
		var r struct {
			Choices []struct {
				Message  struct{ Content string } `json:"message"`
				Logprobs json.RawMessage          `json:"logprobs"`
			} `json:"choices"`
			Usage struct {
				Prompt  int `json:"prompt_tokens"`
				Details struct {
					Cached float64 `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(raw, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("%v: %s", err, raw)
		}
		if r.Usage.Prompt <= 256 {
			t.Fatalf("prompt of %d tokens fills no block", r.Usage.Prompt)
		}
		return r.Choices[0].Message.Content + string(r.Choices[0].Logprobs), r.Usage.Details.Cached
	}
	cold, c0 := ask(red)
	warm, c1 := ask(red)
	other, c2 := ask(blue)
	if c0 != 0 || c1 != 256 || c2 != 0 {
		t.Fatalf("cached tokens: cold %v, same image %v, other image %v; want 0, 256, 0", c0, c1, c2)
	}
	if warm != cold {
		t.Errorf("answer from the cached block %q, cold %q", warm, cold)
	}
	if other == cold {
		t.Errorf("another image gave the cold answer %q", other)
	}
}

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/tokenizer"
)

// realEngine loads the real stories260K model and starts its engine.
func realEngine(t *testing.T) (*engine.Engine, *model.Model) {
	t.Helper()
	m, err := model.Open("../testdata/models/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	th := mlx.NewThread()
	var s mlx.Stream
	var w *model.Weights
	var net model.Network
	th.Do(func() {
		s = mlx.DefaultStream()
		if w, err = m.Upload(s); err != nil {
			return
		}
		net, err = family.Build(m.Config, w)
	})
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(net, th, s, engine.Options{KVCapacity: 64 << 20})
	t.Cleanup(func() {
		e.Shutdown(context.Background())
		th.Do(func() {
			net.Close()
			w.Free()
			s.Free()
		})
		th.Close()
		m.Close()
	})
	return e, m
}

// TestRealEngine serves the real stories260K engine: concurrent greedy
// completions over HTTP, streamed and not, give exactly the text of the
// engine's own greedy tokens for the same prompt.
func TestRealEngine(t *testing.T) {
	e, m := realEngine(t)
	h := newHarness(t, Options{Architectures: family.Supported()}, nil)
	err := h.Register(Model{Name: "stories", Architecture: m.Config.Arch, Tokenizer: m.Tokenizer, EOS: m.Config.EOS, ContextLength: m.Config.ContextLength, Generator: e})
	if err != nil {
		t.Fatal(err)
	}
	prompts := []string{"Once upon a time", "The little dog", "Lily and Ben", "One day, a big bird"}
	want := map[string]string{}
	for i, p := range prompts {
		ids := m.Tokenizer.Encode(p, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true})
		ch, err := e.Submit(context.Background(), engine.Generation{ID: engine.RequestID(fmt.Sprint("direct-", i)), Prompt: ids, MaxTokens: 24, TopLogprobs: -1})
		if err != nil {
			t.Fatal(err)
		}
		var out []int32
		for ev := range ch {
			out = append(out, ev.Tokens...)
		}
		want[p] = m.Tokenizer.Decode(out)
	}
	var wg sync.WaitGroup
	for i := range 16 {
		p, stream := prompts[i%len(prompts)], i%2 == 0
		wg.Go(func() {
			status, body := h.post(t, "/v1/completions", fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":24,"stream":%v}`, p, stream))
			if status != 200 {
				t.Errorf("status %d: %s", status, body)
				return
			}
			var text strings.Builder
			if stream {
				for _, ev := range sseEvents(t, body) {
					var c struct {
						Choices []struct {
							Text string `json:"text"`
						} `json:"choices"`
					}
					if ev != "[DONE]" && json.Unmarshal([]byte(ev), &c) == nil && len(c.Choices) > 0 {
						text.WriteString(c.Choices[0].Text)
					}
				}
			} else {
				var r struct {
					Choices []struct {
						Text string `json:"text"`
					} `json:"choices"`
				}
				if err := json.Unmarshal(body, &r); err != nil {
					t.Error(err)
					return
				}
				text.WriteString(r.Choices[0].Text)
			}
			if text.String() != want[p] {
				t.Errorf("prompt %q: got %q, want %q", p, text.String(), want[p])
			}
		})
	}
	wg.Wait()
}

package engine_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/internal/syncbuf"
)

// TestPoolGrowthLogged: the step that first allocates the KV pool's storage
// is logged with the new size, the old one, and MLX's memory after it; a
// later step that does not grow the pool logs nothing more.
func TestPoolGrowthLogged(t *testing.T) {
	var sink syncbuf.Buffer
	e, m := realEngine(t, engine.Options{Log: slog.New(slog.NewJSONHandler(&sink, nil))})
	ps := prompts(m)
	for _, id := range []engine.RequestID{"first", "second"} {
		ch, err := e.Submit(context.Background(), engine.Generation{ID: id, Prompt: ps[1], MaxTokens: 4, TopLogprobs: -1})
		if err != nil {
			t.Fatal(err)
		}
		if out := collect(ch); out.last.Kind != engine.EventFinished {
			t.Fatalf("%s: %+v", id, out.last)
		}
	}
	var grew []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(sink.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "kv pool grew" {
			grew = append(grew, rec)
		}
	}
	if len(grew) != 1 {
		t.Fatalf("%d growth lines after two short generations, want 1:\n%s", len(grew), sink.String())
	}
	g := grew[0]
	if b, _ := g["bytes"].(float64); b <= 0 || g["from_bytes"] != float64(0) {
		t.Fatalf("growth line %v: want bytes > 0 from 0", g)
	}
	for _, k := range []string{"mlx_active_bytes", "mlx_cache_bytes"} {
		if _, ok := g[k].(float64); !ok {
			t.Fatalf("growth line %v lacks %s", g, k)
		}
	}
}

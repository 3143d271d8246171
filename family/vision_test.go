package family

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goprovider/provider/jinja"
	"github.com/goprovider/provider/media"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/stages"
)

// gemma4VLM is the tiny Gemma 4 vision-language checkpoint and its mlx-vlm
// fixtures (scripts/make_tiny_gemma4_vlm.py).
const gemma4VLM = "../testdata/ref/gemma4_vlm_tiny"

type gemma4Fixture struct {
	Images []struct {
		File          string `json:"file"`
		Width, Height int
		Tokens        int `json:"tokens"`
	} `json:"images"`
	Tensors map[string]struct {
		File string `json:"file"`
	} `json:"tensors"`
	Cases []struct {
		Name   string  `json:"name"`
		Prompt string  `json:"prompt"`
		IDs    []int32 `json:"ids"`
	} `json:"cases"`
}

func readGemma4Fixture(t *testing.T) *gemma4Fixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(gemma4VLM, "fixture.json"))
	if err != nil {
		t.Fatalf("%v (regenerate with scripts/make_tiny_gemma4_vlm.py)", err)
	}
	var fx gemma4Fixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Images) != 2 || len(fx.Cases) == 0 {
		t.Fatalf("fixture.json has %d images, %d cases", len(fx.Images), len(fx.Cases))
	}
	return &fx
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

// TestGemma4Tower loads the tiny Gemma 4 checkpoint's tower as the
// pipeline's stages.Vision: the Template stage renders the checkpoint's
// chat template and expands each image marker to the processor's run for
// that image's size (the fixture's prompt and ids), and Encode gives the
// reference soft tokens.
func TestGemma4Tower(t *testing.T) {
	fx := readGemma4Fixture(t)
	m, err := model.Open(gemma4VLM)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	th := mlx.NewThread()
	defer th.Close()
	var s mlx.Stream
	th.Do(func() { s = mlx.DefaultStream() })
	defer th.Do(func() { s.Free() })
	v, err := Vision(m, th, s)
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		t.Fatal("no tower for a checkpoint with a vision_config")
	}
	defer v.(interface{ Close() }).Close()
	if v.ImageMarker() != "<|image|>" || v.Video() {
		t.Errorf("marker %q, video %v", v.ImageMarker(), v.Video())
	}

	images := make([]*media.Image, len(fx.Images))
	for i, im := range fx.Images {
		pix, err := os.ReadFile(filepath.Join(gemma4VLM, im.File))
		if err != nil {
			t.Fatal(err)
		}
		images[i] = &media.Image{Width: im.Width, Height: im.Height, Pix: pix, Hash: [32]byte{byte(i + 1)}}
		want := "<|image>" + strings.Repeat("<|image|>", im.Tokens) + "<image|>"
		if got := v.ImagePrompt(images[i]); got != want {
			t.Errorf("image%d: prompt of %d bytes, want %d (%d placeholders)", i, len(got), len(want), im.Tokens)
		}
	}

	tmpl, err := jinja.Parse(m.ChatTemplate)
	if err != nil {
		t.Fatal(err)
	}
	sm := &stages.Model{Name: "tiny", Architecture: m.Config.Arch, Tokenizer: m.Tokenizer, ChatTemplate: tmpl, Vision: v}
	chats := map[string][]stages.Part{
		"one_image":  {{Kind: "image"}, {Kind: "text", Text: "Describe this."}},
		"two_images": {{Kind: "text", Text: "Compare"}, {Kind: "image"}, {Kind: "text", Text: "and"}, {Kind: "image"}, {Kind: "text", Text: "please."}},
	}
	for _, c := range fx.Cases {
		parts, ok := chats[c.Name]
		if !ok {
			continue
		}
		var imgs []*media.Image
		for _, p := range parts {
			if p.Kind == "image" {
				imgs = append(imgs, images[len(imgs)])
			}
		}
		req := &stages.Request{
			Input:  stages.Input{Endpoint: stages.Chat},
			Model:  sm,
			Params: &stages.Params{Messages: []stages.Message{{Role: "user", Parts: parts}}},
			Images: imgs,
		}
		if err := (stages.Template{}).Apply(context.Background(), req); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if req.Prompt != c.Prompt || !slices.Equal(req.Tokens, c.IDs) {
			t.Errorf("%s: prompt %q\nwant %q\n(%d ids, want %d)", c.Name, req.Prompt, c.Prompt, len(req.Tokens), len(c.IDs))
		}
	}

	for i, img := range images {
		item, err := v.Encode(context.Background(), img)
		if err != nil {
			t.Fatal(err)
		}
		want := readF32(t, filepath.Join(gemma4VLM, fx.Tensors[fmt.Sprintf("soft_tokens_%d", i)].File))
		if item.Token != 262 || item.Count != fx.Images[i].Tokens || item.Hash != img.Hash || len(item.Embeds) != len(want) {
			t.Fatalf("image%d: token %d, %d soft tokens of %d values, want 262, %d of %d", i, item.Token, item.Count, len(item.Embeds), fx.Images[i].Tokens, len(want))
		}
		worst := 0.0
		for j := range want {
			worst = max(worst, math.Abs(float64(item.Embeds[j]-want[j])))
		}
		t.Logf("image%d: %d soft tokens, max |diff| %.3g", i, item.Count, worst)
		if worst > 1e-4 {
			t.Errorf("image%d: soft tokens differ by %.3g", i, worst)
		}
	}
}

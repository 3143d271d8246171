package family

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goprovider/provider/internal/reftest"
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
	Videos []struct {
		File          string `json:"file"`
		Frames        int    `json:"frames"`
		Width, Height int
		Timestamps    []float64 `json:"timestamps"`
	} `json:"videos"`
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
	if len(fx.Images) != 2 || len(fx.Videos) != 1 || len(fx.Cases) == 0 {
		t.Fatalf("fixture.json has %d images, %d videos, %d cases", len(fx.Images), len(fx.Videos), len(fx.Cases))
	}
	return &fx
}

// TestGemma4Tower loads the tiny Gemma 4 checkpoint's tower as the
// pipeline's stages.Vision: the Template stage renders the checkpoint's
// chat template and expands each image marker to the processor's run for
// that image's size, and a video's marker to its frames' timestamps and
// runs (the fixture's prompts and ids); Encode and EncodeFrame give the
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
	vv, ok := v.(stages.VideoVision)
	if v.ImageMarker() != "<|image|>" || !v.Video() || !ok || vv.VideoMarker() != "<|video|>" {
		t.Fatalf("marker %q, video %v (%T)", v.ImageMarker(), v.Video(), v)
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

	fv := fx.Videos[0]
	raw, err := os.ReadFile(filepath.Join(gemma4VLM, fv.File))
	if err != nil {
		t.Fatal(err)
	}
	frameBytes := fv.Width * fv.Height * 3
	if len(raw) != fv.Frames*frameBytes || len(fv.Timestamps) != fv.Frames {
		t.Fatalf("%s: %d bytes, %d timestamps for %d frames", fv.File, len(raw), len(fv.Timestamps), fv.Frames)
	}
	var video []media.Frame
	for i := range fv.Frames {
		img := &media.Image{Width: fv.Width, Height: fv.Height, Pix: raw[i*frameBytes : (i+1)*frameBytes], Hash: [32]byte{byte(10 + i)}}
		video = append(video, media.Frame{Image: img, At: time.Duration(fv.Timestamps[i] * float64(time.Second))})
	}

	tmpl, err := jinja.Parse(m.ChatTemplate)
	if err != nil {
		t.Fatal(err)
	}
	sm := &stages.Model{Name: "tiny", Architecture: m.Config.Arch, Tokenizer: m.Tokenizer, ChatTemplate: tmpl, Vision: v}
	chats := map[string][]stages.Part{
		"one_image":  {{Kind: "image"}, {Kind: "text", Text: "Describe this."}},
		"two_images": {{Kind: "text", Text: "Compare"}, {Kind: "image"}, {Kind: "text", Text: "and"}, {Kind: "image"}, {Kind: "text", Text: "please."}},
		"video":      {{Kind: "video"}, {Kind: "text", Text: "What happens?"}},
	}
	for _, c := range fx.Cases {
		parts, ok := chats[c.Name]
		if !ok {
			continue
		}
		var imgs []*media.Image
		var videos [][]media.Frame
		for _, p := range parts {
			switch p.Kind {
			case "image":
				imgs = append(imgs, images[len(imgs)])
			case "video":
				videos = append(videos, video)
			}
		}
		req := &stages.Request{
			Input:  stages.Input{Endpoint: stages.Chat},
			Model:  sm,
			Params: &stages.Params{Messages: []stages.Message{{Role: "user", Parts: parts}}},
			Images: imgs,
			Videos: videos,
		}
		if err := (stages.Template{}).Apply(context.Background(), req); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if req.Prompt != c.Prompt || !slices.Equal(req.Tokens, c.IDs) {
			t.Errorf("%s: prompt %q\nwant %q\n(%d ids, want %d)", c.Name, req.Prompt, c.Prompt, len(req.Tokens), len(c.IDs))
		}
	}

	check := func(name string, item stages.MediaItem, err error, token int32, hash [32]byte, want []float32) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if item.Token != token || item.Hash != hash || len(item.Embeds) != len(want) || item.Count*m.Config.Hidden != len(want) {
			t.Fatalf("%s: token %d, %d soft tokens of %d values, want %d and %d values", name, item.Token, item.Count, len(item.Embeds), token, len(want))
		}
		worst := 0.0
		for j := range want {
			worst = max(worst, math.Abs(float64(item.Embeds[j]-want[j])))
		}
		t.Logf("%s: %d soft tokens, max |diff| %.3g", name, item.Count, worst)
		if worst > 1e-4 {
			t.Errorf("%s: soft tokens differ by %.3g", name, worst)
		}
	}
	for i, img := range images {
		item, err := v.Encode(context.Background(), img)
		check(fmt.Sprintf("image%d", i), item, err, 262, img.Hash, readF32(t, filepath.Join(gemma4VLM, fx.Tensors[fmt.Sprintf("soft_tokens_%d", i)].File)))
	}
	frames := readF32(t, filepath.Join(gemma4VLM, fx.Tensors["video_soft_tokens_0"].File))
	per := len(frames) / len(video)
	for i, fr := range video {
		item, err := vv.EncodeFrame(context.Background(), fr)
		check(fmt.Sprintf("frame%d", i), item, err, 266, fr.Image.Hash, frames[i*per:(i+1)*per])
	}
}

// readF32 is the reference suites' fixture reader.
var readF32 = reftest.ReadF32

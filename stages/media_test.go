package stages

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"image"
	"image/png"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goprovider/provider/media"
	"github.com/goprovider/provider/tokenizer"
)

// pngURL is a data URL of a w x h PNG.
func pngURL(t *testing.T, w, h int) string {
	t.Helper()
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range m.Pix {
		m.Pix[i] = uint8(i)
	}
	for i := 3; i < len(m.Pix); i += 4 {
		m.Pix[i] = 0xff
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, m); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}

// partsTemplate writes "<image>" for an image part, as Gemma 3's writes
// its start-of-image marker.
const partsTemplate = `{{ bos_token }}{% for m in messages %}{{ m['role'] }}: ` +
	`{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}` +
	`{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] }}{% endif %}{% endfor %}{% endif %}
{% endfor %}`

// fakeVision is a tower over the test vocabulary: each image becomes
// "[" + three \x01 bytes + "]", whose \x01s tokenize to one byte token,
// and three soft tokens of hidden size 2 derived from the image's hash.
type fakeVision struct {
	token int32
	fail  error
}

func (fakeVision) ImageMarker() string             { return "<image>" }
func (fakeVision) ImagePrompt(*media.Image) string { return "[\x01\x01\x01]" }
func (fakeVision) Video() bool                     { return false }

func (v fakeVision) Encode(_ context.Context, img *media.Image) (MediaItem, error) {
	if v.fail != nil {
		return MediaItem{}, v.fail
	}
	e := make([]float32, 3*2)
	for i := range e {
		e[i] = float32(img.Hash[i])
	}
	return MediaItem{Token: v.token, Count: 3, Hash: img.Hash, Embeds: e}, nil
}

// visionCatalog is testCatalog plus "eyes", a model with the test
// vocabulary, partsTemplate and a fakeVision tower.
func visionCatalog(t *testing.T) catalog {
	cat := testCatalog(t)
	eyes := testModel(t, "eyes", partsTemplate, 512)
	ids := eyes.Tokenizer.Encode("\x01", tokenizer.EncodeOptions{})
	if len(ids) == 0 {
		t.Fatal("\\x01 does not tokenize")
	}
	eyes.Vision = fakeVision{token: ids[len(ids)-1]}
	cat["eyes"] = eyes
	return cat
}

// chatWith is a chat body for model with one user turn: a text part and
// then parts.
func chatWith(model string, parts ...string) string {
	parts = append([]string{`{"type":"text","text":"look"}`}, parts...)
	return `{"model":"` + model + `","messages":[{"role":"user","content":[` + strings.Join(parts, ",") + `]}]}`
}

func imagePart(url string) string { return `{"type":"image_url","image_url":{"url":"` + url + `"}}` }
func videoPart(url string) string { return `{"type":"video_url","video_url":{"url":"` + url + `"}}` }

func TestMediaDecode(t *testing.T) {
	cat := visionCatalog(t)
	img := pngURL(t, 5, 4)
	const secret = "SECRET-not-an-image"
	noFFmpeg := media.FFmpeg{Path: filepath.Join(t.TempDir(), "no-ffmpeg")}
	tests := []struct {
		name   string
		body   string
		stage  MediaDecode
		code   Code // "": decodes
		images int
	}{
		{"text only", chatWith("eyes"), MediaDecode{}, "", 0},
		{"vision model decodes", chatWith("eyes", imagePart(img), imagePart(img)), MediaDecode{}, "", 2},
		{"text model refuses", chatWith("stories", imagePart(img)), MediaDecode{}, CodeUnsupportedMedia, 0},
		{"text model refuses video", chatWith("stories", videoPart("AAAA")), MediaDecode{}, CodeUnsupportedMedia, 0},
		{"corrupt image", chatWith("eyes", imagePart("data:image/png;base64,"+base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n"+secret)))), MediaDecode{}, CodeInvalidValue, 0},
		{"bad base64", chatWith("eyes", imagePart(secret+"!")), MediaDecode{}, CodeInvalidValue, 0},
		{"unsupported format", chatWith("eyes", imagePart(base64.StdEncoding.EncodeToString([]byte(secret)))), MediaDecode{}, CodeUnsupportedMedia, 0},
		{"remote", chatWith("eyes", imagePart("https://example.com/"+secret)), MediaDecode{}, CodeUnsupportedMedia, 0},
		{"too many images", chatWith("eyes", imagePart(img), imagePart(img)), MediaDecode{Limits: media.Limits{MaxImages: 1}}, CodeInvalidValue, 0},
		{"video without ffmpeg", chatWith("eyes", videoPart("AAAA")), MediaDecode{FFmpeg: noFFmpeg}, CodeUnsupportedMedia, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := parsed(t, cat, Chat, tc.body)
			err := tc.stage.Apply(context.Background(), req)
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(req.Images) != tc.images {
					t.Fatalf("%d images, want %d", len(req.Images), tc.images)
				}
				for _, im := range req.Images {
					if im.Width != 5 || im.Height != 4 || len(im.Pix) != 5*4*3 {
						t.Fatalf("decoded %dx%d", im.Width, im.Height)
					}
				}
				return
			}
			var inv *Invalid
			if !errors.As(err, &inv) || inv.Code != tc.code || inv.Param != "messages" {
				t.Fatalf("err = %v, want %s (messages)", err, tc.code)
			}
			if strings.Contains(err.Error(), secret) || len(req.Images) != 0 {
				t.Fatalf("refusal %q echoes the media or kept images", err.Error())
			}
		})
	}
}

func TestParseVideoPart(t *testing.T) {
	req := parsed(t, visionCatalog(t), Chat, chatWith("eyes", imagePart("AAAA"), videoPart("BBBB")))
	want := []Media{{Kind: "image", URL: "AAAA"}, {Kind: "video", URL: "BBBB"}}
	if got := req.Params.Media; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("media %v, want %v", got, want)
	}
}

// Decoding is deterministic: a recorded MediaDecode step replays to the
// same bytes, decoded images included.
func TestMediaDecodeReplays(t *testing.T) {
	cat := visionCatalog(t)
	env := &Envelope{Ctx: context.Background(), Req: Request{
		Input:    Input{Endpoint: Chat, Body: []byte(chatWith("eyes", imagePart(pngURL(t, 3, 2))))},
		Received: time.Unix(1700000000, 0),
		MintedID: "m",
	}}
	var log Log
	for _, s := range []Stage{Parse{Models: cat}, MediaDecode{}} {
		Run(s, env, &log)
	}
	if env.Err != nil || len(env.Req.Images) != 1 {
		t.Fatalf("err %v, %d images", env.Err, len(env.Req.Images))
	}
	recs := log.Records()
	rec := recs[len(recs)-1]
	again, err := Replay(MediaDecode{}, rec, cat)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Equal(rec) {
		t.Fatal("media step replays differently")
	}
}

// TestVisionPipeline runs a chat with two images through every stage up to
// Admit: the template's markers become placeholder runs, the tower's soft
// tokens land at their spans, in prompt order.
func TestVisionPipeline(t *testing.T) {
	cat := visionCatalog(t)
	eyes := cat["eyes"]
	red, blue := pngURL(t, 5, 4), pngURL(t, 2, 2)
	body := chatWith("eyes", imagePart(red), `{"type":"text","text":"and"}`, imagePart(blue))
	env := &Envelope{Ctx: context.Background(), Req: Request{Input: Input{Endpoint: Chat, Body: []byte(body)}, MintedID: "m"}}
	var log Log
	for _, s := range []Stage{Parse{Models: cat}, MediaDecode{}, Template{}, VisionTower{}, SpanCarve{}, Admit{}} {
		Run(s, env, &log)
	}
	if env.Err != nil {
		t.Fatal(env.Err)
	}
	req := &env.Req
	if want := "user: look[\x01\x01\x01]and[\x01\x01\x01]"; !strings.HasSuffix(req.Prompt, want) {
		t.Fatalf("prompt %q, want it to end with %q", req.Prompt, want)
	}
	g := req.Generation
	if len(g.Spans) != 2 || len(g.Embeds) != 2 {
		t.Fatalf("%d spans and %d embeds, want 2 each", len(g.Spans), len(g.Embeds))
	}
	tok := eyes.Vision.(fakeVision).token
	for i, sp := range g.Spans {
		for pos := sp.Start; pos < sp.End; pos++ {
			if req.Tokens[pos] != tok {
				t.Fatalf("span %d covers token %d at %d", i, req.Tokens[pos], pos)
			}
		}
		e := g.Embeds[i]
		if e.Pos != sp.Start || e.Rows != 3 || sp.Hash != req.Images[i].Hash || e.Data[0] != float32(req.Images[i].Hash[0]) {
			t.Fatalf("embed %d at %d (%d rows) for span %v", i, e.Pos, e.Rows, sp)
		}
	}
	if g.Spans[0].Hash == g.Spans[1].Hash {
		t.Fatal("two different images share a hash")
	}
	// The tower's step replays to the same bytes.
	recs := log.Records()
	for _, rec := range recs {
		if rec.Stage != "vision" {
			continue
		}
		again, err := Replay(VisionTower{}, rec, cat)
		if err != nil || !again.Equal(rec) {
			t.Fatalf("vision step replays differently (%v)", err)
		}
	}
}

// TestVisionRefusals: markers and images must match one for one, and a
// failing tower is the server's fault.
func TestVisionRefusals(t *testing.T) {
	cat := visionCatalog(t)
	img := pngURL(t, 3, 3)
	run := func(t *testing.T, cat catalog, body string) error {
		t.Helper()
		env := &Envelope{Ctx: context.Background(), Req: Request{Input: Input{Endpoint: Chat, Body: []byte(body)}, MintedID: "m"}}
		for _, s := range []Stage{Parse{Models: cat}, MediaDecode{}, Template{}, VisionTower{}, SpanCarve{}, Admit{}} {
			Run(s, env, nil)
		}
		return env.Err
	}
	t.Run("marker in the text", func(t *testing.T) {
		err := run(t, cat, chatWith("eyes", `{"type":"text","text":"<image>"}`, imagePart(img)))
		var inv *Invalid
		if !errors.As(err, &inv) || inv.Code != CodeInvalidValue {
			t.Fatalf("err = %v, want invalid_value", err)
		}
	})
	t.Run("template drops images", func(t *testing.T) {
		blind := *cat["eyes"]
		blind.ChatTemplate = cat["stories"].ChatTemplate
		c := catalog{"eyes": &blind}
		err := run(t, c, chatWith("eyes", imagePart(img)))
		var ce *CarveError
		if !errors.As(err, &ce) || ce.Reason != CarveMissingRun {
			t.Fatalf("err = %v, want a missing_run CarveError", err)
		}
	})
	t.Run("tower fails", func(t *testing.T) {
		broken := *cat["eyes"]
		broken.Vision = fakeVision{fail: errors.New("device lost")}
		err := run(t, catalog{"eyes": &broken}, chatWith("eyes", imagePart(img)))
		if !errors.Is(err, ErrVision) {
			t.Fatalf("err = %v, want ErrVision", err)
		}
	})
	t.Run("video refused without a video tower", func(t *testing.T) {
		var inv *Invalid
		if err := run(t, cat, chatWith("eyes", videoPart("AAAA"))); !errors.As(err, &inv) || inv.Code != CodeUnsupportedMedia {
			t.Fatalf("err = %v, want unsupported_media", err)
		}
	})
}

// videoTemplate writes "<image>" for an image part and "<video>" for a
// video part.
const videoTemplate = `{{ bos_token }}{% for m in messages %}{{ m['role'] }}: ` +
	`{% for p in m['content'] %}{% if p['type'] == 'image' %}<image>{% elif p['type'] == 'video' %}<video>` +
	`{% else %}{{ p['text'] }}{% endif %}{% endfor %}
{% endfor %}`

// fakeVideoVision is fakeVision that also reads video: a video becomes
// "(" + "{" + two \x02 + "}" per frame + ")", each frame two soft tokens
// from its image's hash and its time.
type fakeVideoVision struct{ fakeVision }

func (fakeVideoVision) Video() bool         { return true }
func (fakeVideoVision) VideoMarker() string { return "<video>" }

func (fakeVideoVision) VideoPrompt(frames []media.Frame) string {
	return "(" + strings.Repeat("{\x02\x02}", len(frames)) + ")"
}

func (v fakeVideoVision) EncodeFrame(_ context.Context, fr media.Frame) (MediaItem, error) {
	e := []float32{float32(fr.Image.Hash[0]), float32(fr.At.Seconds()), 0, 0}
	return MediaItem{Token: v.token + 1, Count: 2, Hash: fr.Image.Hash, Embeds: e}, nil
}

// TestVideoTemplateAndTower: a video's marker becomes its frames' runs,
// and the tower's items follow the parts' order across images and videos.
func TestVideoTemplateAndTower(t *testing.T) {
	m := testModel(t, "eyes", videoTemplate, 512)
	m.Vision = fakeVideoVision{fakeVision{token: 7}}
	img := func(b byte) *media.Image {
		return &media.Image{Width: 1, Height: 1, Pix: []byte{b, b, b}, Hash: [32]byte{b}}
	}
	video := []media.Frame{{Image: img(20), At: 0}, {Image: img(21), At: 2 * time.Second}}
	req := &Request{
		Input: Input{Endpoint: Chat},
		Model: m,
		Params: &Params{
			Messages: []Message{{Role: "user", Parts: []Part{{Kind: "image"}, {Kind: "text", Text: "then"}, {Kind: "video"}, {Kind: "image"}}}},
			Media:    []Media{{Kind: "image"}, {Kind: "video"}, {Kind: "image"}},
		},
		Images: []*media.Image{img(10), img(11)},
		Videos: [][]media.Frame{video},
	}
	if err := (Template{}).Apply(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if want := "user: [\x01\x01\x01]then({\x02\x02}{\x02\x02})[\x01\x01\x01]"; !strings.HasSuffix(req.Prompt, want) {
		t.Fatalf("prompt %q, want it to end with %q", req.Prompt, want)
	}
	if err := (VisionTower{}).Apply(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var hashes []byte
	for _, it := range req.MediaItems {
		hashes = append(hashes, it.Hash[0])
	}
	if string(hashes) != "\x0a\x14\x15\x0b" || req.MediaItems[2].Token != 8 || req.MediaItems[2].Embeds[1] != 2 {
		t.Fatalf("items by hash %v, want image, frames, image", hashes)
	}

	// A tower that reads no video has its videos refused as the server's
	// fault, in the template and in the tower.
	req.Model = testModel(t, "eyes", videoTemplate, 512)
	req.Model.Vision = fakeVision{token: 7}
	if err := (Template{}).Apply(context.Background(), req); !errors.Is(err, ErrVision) {
		t.Fatalf("template: err = %v, want ErrVision", err)
	}
	if err := (VisionTower{}).Apply(context.Background(), req); !errors.Is(err, ErrVision) {
		t.Fatalf("tower: err = %v, want ErrVision", err)
	}
}

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

// visionCatalog is testCatalog plus "eyes", a copy of "stories" with a
// vision tower.
func visionCatalog(t *testing.T) catalog {
	cat := testCatalog(t)
	eyes := *cat["stories"]
	eyes.Name, eyes.Vision = "eyes", true
	cat["eyes"] = &eyes
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
	for _, s := range []Stage{Parse{Models: cat}, Template{}, MediaDecode{}} {
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

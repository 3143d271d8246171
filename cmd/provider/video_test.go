package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goprovider/provider/media"
)

const vlmTiny = "../../testdata/ref/gemma4_vlm_tiny"

// mp4 encodes a real MP4 (MPEG-4 part 2, 3 s of ffmpeg's test pattern at
// 4 frames per second) with the ffmpeg that make setup installs.
func mp4(t *testing.T) []byte {
	t.Helper()
	bin := media.LocateFFmpeg("")
	if bin == "" {
		t.Fatal("no ffmpeg: run `make setup` (scripts/setup_ffmpeg.sh)")
	}
	out := filepath.Join(t.TempDir(), "clip.mp4")
	cmd := exec.Command(bin, "-hide_banner", "-loglevel", "error", "-nostdin", "-y",
		"-f", "lavfi", "-i", "testsrc=duration=3:size=96x64:rate=4", "-c:v", "mpeg4", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestServeRealMP4: a chat request carrying a real MP4 as a video_url data
// URL goes through the HTTP server to the tiny Gemma 4 VLM: decoded by
// ffmpeg, its frames through the tower and into the batch as soft tokens,
// answered 200, streamed and not. The prompt counts the frames' tokens, and
// a broken video is the client's 400, not the server's fault.
func TestServeRealMP4(t *testing.T) {
	clip := "data:video/mp4;base64," + base64.StdEncoding.EncodeToString(mp4(t))
	_, url, log, _ := startServe(t, nil, "--model", vlmTiny, "--ctx-size", "4096")
	post := func(content string, stream bool) (int, []byte) {
		t.Helper()
		body := `{"model":"gemma4_vlm_tiny","max_tokens":4,"temperature":0,"stream":` + map[bool]string{true: "true", false: "false"}[stream] +
			`,"messages":[{"role":"user","content":` + content + `}]}`
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	usage := func(b []byte) int {
		t.Helper()
		var r struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &r); err != nil || r.Usage.PromptTokens == 0 {
			t.Fatalf("no usage in %s (%v)", b, err)
		}
		return r.Usage.PromptTokens
	}
	code, text := post(`"What happens?"`, false)
	if code != 200 {
		t.Fatalf("text only: %d %s\n%s", code, text, log())
	}
	video := `[{"type":"video_url","video_url":{"url":"` + clip + `"}},{"type":"text","text":"What happens?"}]`
	code, withVideo := post(video, false)
	if code != 200 {
		t.Fatalf("with the MP4: %d %s\n%s", code, withVideo, log())
	}
	// 12 frames of about 70 soft tokens (Gemma 4's video budget) with
	// their mm:ss stamps: at least 64 tokens a frame more than text alone.
	if got, base := usage(withVideo), usage(text); got < base+12*64 {
		t.Errorf("prompt tokens %d with the video, %d without: want 12 frames of about 70 tokens more", got, base)
	}
	code, streamed := post(video, true)
	if code != 200 || !strings.Contains(string(streamed), `"finish_reason":"length"`) || !strings.HasSuffix(strings.TrimSpace(string(streamed)), "data: [DONE]") {
		t.Errorf("streamed with the MP4: %d %s", code, streamed)
	}
	broken := `[{"type":"video_url","video_url":{"url":"data:video/mp4;base64,` + base64.StdEncoding.EncodeToString([]byte("not a video at all")) + `"}},{"type":"text","text":"x"}]`
	if code, b := post(broken, false); code != 400 {
		t.Errorf("a broken MP4: %d %s, want 400", code, b)
	}
	t.Logf("prompt tokens: %d text only, %d with a 12-frame MP4", usage(text), usage(withVideo))
}

package media

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// ffmpegBin is the ffmpeg that scripts/setup_ffmpeg.sh installs. Its
// absence fails the test: video support is part of the build.
func ffmpegBin(t *testing.T) string {
	t.Helper()
	bin := LocateFFmpeg("")
	if bin == "" {
		t.Fatal("ffmpeg not found: run `make setup` (scripts/setup_ffmpeg.sh installs .deps/ffmpeg/bin/ffmpeg)")
	}
	return bin
}

// makeVideo has ffmpeg encode a lavfi source into a file and returns its
// bytes.
func makeVideo(t *testing.T, bin, name string, args ...string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(bin, append(append([]string{"-hide_banner", "-loglevel", "error", "-nostdin", "-y"}, args...), out)...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg %v: %v\n%s", args, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testsrc is ffmpeg's moving test pattern: seconds long, 64x48, fps frames
// a second.
func testsrc(seconds, fps string) []string {
	return []string{"-f", "lavfi", "-i", "testsrc=duration=" + seconds + ":size=64x48:rate=" + fps}
}

// assertEmpty fails unless dir holds nothing: the scratch file is gone.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("%d files left in the scratch dir, first %s", len(left), left[0].Name())
	}
}

func TestDecodeVideo(t *testing.T) {
	bin := ffmpegBin(t)
	mpeg4 := []string{"-c:v", "mpeg4", "-q:v", "2"}
	tests := []struct {
		name   string
		mime   string
		video  []byte
		format Format
		frames int
		step   time.Duration
	}{
		{"mp4, 30 frames, all kept", "video/mp4", makeVideo(t, bin, "a.mp4", append(testsrc("3", "10"), mpeg4...)...), FormatMP4, 30, 100 * time.Millisecond},
		{"quicktime", "video/quicktime", makeVideo(t, bin, "a.mov", append(testsrc("3", "10"), mpeg4...)...), FormatMP4, 30, 100 * time.Millisecond},
		{"webm", "video/webm", makeVideo(t, bin, "a.webm", append(testsrc("3", "10"), "-c:v", "libvpx", "-b:v", "1M")...), FormatWebM, 30, 100 * time.Millisecond},
		{"mp4, 90 frames, 32 sampled", "video/mp4", makeVideo(t, bin, "b.mp4", append(testsrc("3", "30"), mpeg4...)...), FormatMP4, 32, 3 * time.Second / 32},
		{"untyped", "", makeVideo(t, bin, "c.mp4", append(testsrc("1", "5"), mpeg4...)...), FormatMP4, 5, 200 * time.Millisecond},
	}
	// The first frame of testsrc, losslessly: what every video's frame 0
	// must look like, give or take the codec's loss.
	first, err := DecodeImageBytes(makeVideo(t, bin, "first.png", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=10", "-frames:v", "1"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			scratch := t.TempDir()
			frames, err := DecodeVideo(context.Background(), dataURL(tc.mime, tc.video), Limits{}, FFmpeg{Path: bin, TempDir: scratch})
			if err != nil {
				t.Fatal(err)
			}
			assertEmpty(t, scratch)
			if len(frames) != tc.frames || len(frames) > DefaultMaxFrames {
				t.Fatalf("%d frames, want %d", len(frames), tc.frames)
			}
			for i, f := range frames {
				if want := tc.step * time.Duration(i); f.At != want {
					t.Fatalf("frame %d at %v, want %v", i, f.At, want)
				}
				img := f.Image
				if img.Width != 64 || img.Height != 48 || len(img.Pix) != 64*48*3 || img.Format != tc.format {
					t.Fatalf("frame %d: %dx%d %s with %d bytes", i, img.Width, img.Height, img.Format, len(img.Pix))
				}
				if img.Hash != hashRGB(img.Width, img.Height, img.Pix) {
					t.Fatalf("frame %d: hash is not its pixels'", i)
				}
			}
			if d := meanDiff(frames[0].Image.Pix, first.Pix); d > 12 {
				t.Fatalf("frame 0 differs from testsrc's first frame by %.1f on average", d)
			}
			if frames[0].Image.Hash == frames[len(frames)-1].Image.Hash {
				t.Fatal("the first and last frames of a moving pattern are the same")
			}
		})
	}
}

func meanDiff(a, b []byte) float64 {
	sum := 0
	for i := range a {
		sum += absDiff(a[i], b[i])
	}
	return float64(sum) / float64(len(a))
}

func TestDecodeVideoRefused(t *testing.T) {
	bin := ffmpegBin(t)
	mpeg4 := []string{"-c:v", "mpeg4"}
	short := makeVideo(t, bin, "short.mp4", append(testsrc("3", "10"), mpeg4...)...)
	long := makeVideo(t, bin, "long.mp4", "-f", "lavfi", "-i", "testsrc=duration=700:size=16x16:rate=1", "-c:v", "mpeg4")
	audio := makeVideo(t, bin, "audio.mp4", "-f", "lavfi", "-i", "sine=duration=1", "-c:a", "aac")
	png := encode(t, FormatPNG, gradient(16, 12, 7))
	junk := bytes.Repeat([]byte("junk, not a video. "), 40)
	tests := []struct {
		name string
		src  string
		lim  Limits
		ff   string // "": bin
		want Reason
	}{
		{"over MaxDuration", dataURL("video/mp4", short), Limits{MaxDuration: 2 * time.Second}, "", ReasonVideoTooLong},
		{"700 s under the default 600 s", dataURL("video/mp4", long), Limits{}, "", ReasonVideoTooLong},
		{"garbage", base64.StdEncoding.EncodeToString(junk), Limits{}, "", ReasonUnsupportedVideo},
		{"mp4 signature then garbage", dataURL("video/mp4", append([]byte("\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2"), junk...)), Limits{}, "", ReasonCorruptVideo},
		{"matroska signature then garbage", dataURL("video/webm", append([]byte("\x1a\x45\xdf\xa3"), junk...)), Limits{}, "", ReasonCorruptVideo},
		{"truncated mp4", dataURL("video/mp4", short[:len(short)/3]), Limits{}, "", ReasonCorruptVideo},
		{"audio only", dataURL("video/mp4", audio), Limits{}, "", ReasonUnsupportedVideo},
		{"an image", dataURL("", png), Limits{}, "", ReasonUnsupportedVideo},
		{"declared webm, bytes mp4", dataURL("video/webm", short), Limits{}, "", ReasonFormatMismatch},
		{"declared image", dataURL("image/png", short), Limits{}, "", ReasonFormatMismatch},
		{"frame over MaxPixels", dataURL("video/mp4", short), Limits{MaxPixels: 64*48 - 1}, "", ReasonTooManyPixels},
		{"frames over MaxRequestPixels", dataURL("video/mp4", short), Limits{MaxRequestPixels: 64 * 48 * 29}, "", ReasonRequestTooLarge},
		{"no ffmpeg", dataURL("video/mp4", short), Limits{}, filepath.Join(t.TempDir(), "no-ffmpeg"), ReasonVideoUnavailable},
		{"remote", "https://example.com/v.mp4", Limits{}, "", ReasonRemoteRefused},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			scratch := t.TempDir()
			ff := FFmpeg{Path: bin, TempDir: scratch}
			if tc.ff != "" {
				ff.Path = tc.ff
			}
			frames, err := DecodeVideo(context.Background(), tc.src, tc.lim, ff)
			var me *Error
			if !errors.As(err, &me) || me.Reason != tc.want {
				t.Fatalf("got %d frames, %v; want %q", len(frames), err, tc.want)
			}
			if err.Error() != "media: "+tc.want.String() {
				t.Fatalf("message %q is not the reason's fixed one", err.Error())
			}
			assertEmpty(t, scratch)
		})
	}
}

func TestDecodeVideoCancelled(t *testing.T) {
	bin := ffmpegBin(t)
	short := makeVideo(t, bin, "short.mp4", append(testsrc("1", "10"), "-c:v", "mpeg4")...)
	scratch := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := DecodeVideo(ctx, dataURL("video/mp4", short), Limits{}, FFmpeg{Path: bin, TempDir: scratch})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	var me *Error
	if errors.As(err, &me) {
		t.Fatal("a cancelled request was refused as bad media")
	}
	assertEmpty(t, scratch)
}

func TestDecodeRequestWithVideo(t *testing.T) {
	bin := ffmpegBin(t)
	video := dataURL("video/mp4", makeVideo(t, bin, "v.mp4", append(testsrc("1", "10"), "-c:v", "mpeg4")...))
	image := dataURL("image/png", encode(t, FormatPNG, gradient(16, 12, 7)))
	parts := []Part{{KindImage, image}, {KindVideo, video}, {KindImage, image}}
	d, err := Decode(context.Background(), parts, Limits{}, FFmpeg{Path: bin, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Images) != 2 || len(d.Videos) != 1 || len(d.Videos[0]) != 10 {
		t.Fatalf("%d images, %d videos", len(d.Images), len(d.Videos))
	}
	// Ten 64x48 frames and one 16x12 image fit; the second image does not.
	lim := Limits{MaxRequestPixels: 10*64*48 + 16*12}
	if _, err := Decode(context.Background(), parts, lim, FFmpeg{Path: bin, TempDir: t.TempDir()}); err == nil {
		t.Fatal("the request's pixel bound did not count the video's frames")
	}
}

package media

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// gradient is an opaque w x h image, smooth enough for JPEG to keep close;
// seed shifts its colours.
func gradient(w, h int, seed uint8) *image.NRGBA {
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.SetNRGBA(x, y, color.NRGBA{uint8(x * 255 / max(1, w-1)), uint8(y * 255 / max(1, h-1)), seed, 0xff})
		}
	}
	return m
}

// rgbOf is the reference conversion: every pixel through the colour
// model, the slow way the fast paths must agree with.
func rgbOf(m image.Image) []byte {
	r := m.Bounds()
	var out []byte
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c := color.NRGBAModel.Convert(m.At(x, y)).(color.NRGBA)
			out = append(out, c.R, c.G, c.B)
		}
	}
	return out
}

func encode(t testing.TB, f Format, m image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	var err error
	switch f {
	case FormatPNG:
		err = png.Encode(&buf, m)
	case FormatJPEG:
		err = jpeg.Encode(&buf, m, &jpeg.Options{Quality: 100})
	case FormatGIF:
		err = gif.Encode(&buf, m, nil)
	default:
		t.Fatalf("no encoder for %s", f)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("%v (regenerate with scripts/gen_media_fixtures.sh)", err)
	}
	return b
}

func dataURL(mime string, b []byte) string {
	return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(b)
}

// paletted is a GIF-able copy of m: its palette holds exactly m's colours.
func paletted(m *image.NRGBA) *image.Paletted {
	var pal color.Palette
	idx := map[color.NRGBA]uint8{}
	r := m.Bounds()
	p := image.NewPaletted(r, nil)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c := m.NRGBAAt(x, y)
			i, ok := idx[c]
			if !ok {
				i = uint8(len(pal))
				idx[c] = i
				pal = append(pal, c)
			}
			p.SetColorIndex(x, y, i)
		}
	}
	p.Palette = pal
	return p
}

// maxDiff is the largest channel difference between two RGB buffers.
func maxDiff(a, b []byte) int {
	d := 0
	for i := range a {
		d = max(d, absDiff(a[i], b[i]))
	}
	return d
}

func absDiff(a, b byte) int {
	if a > b {
		return int(a - b)
	}
	return int(b - a)
}

func TestDecodeImage(t *testing.T) {
	grad := gradient(16, 12, 40)
	translucent := gradient(16, 12, 90)
	for i := 3; i < len(translucent.Pix); i += 4 {
		translucent.Pix[i] = 0x80
	}
	gray := image.NewGray(image.Rect(0, 0, 7, 5))
	for i := range gray.Pix {
		gray.Pix[i] = uint8(i * 7)
	}
	ref, err := png.Decode(bytes.NewReader(fixture(t, "testsrc.png")))
	if err != nil {
		t.Fatal(err)
	}
	smooth, err := png.Decode(bytes.NewReader(fixture(t, "gradient.png")))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mime   string
		data   []byte
		format Format
		want   []byte // exact pixels; nil: near within tol on average
		near   []byte
		tol    float64
		w, h   int
	}{
		{"png rgb", "image/png", encode(t, FormatPNG, grad), FormatPNG, rgbOf(grad), nil, 0, 16, 12},
		{"png alpha, colours kept unpremultiplied", "image/png", encode(t, FormatPNG, translucent), FormatPNG, rgbOf(translucent), nil, 0, 16, 12},
		{"png gray", "image/png", encode(t, FormatPNG, gray), FormatPNG, rgbOf(gray), nil, 0, 7, 5},
		{"png paletted", "image/png", encode(t, FormatPNG, paletted(grad)), FormatPNG, rgbOf(grad), nil, 0, 16, 12},
		{"gif first frame", "image/gif", encode(t, FormatGIF, paletted(grad)), FormatGIF, rgbOf(grad), nil, 0, 16, 12},
		// Go's encoder subsamples chroma 4:2:0: about 6 a channel here.
		{"jpeg", "image/jpeg", encode(t, FormatJPEG, grad), FormatJPEG, nil, rgbOf(grad), 8, 16, 12},
		{"jpeg gray", "image/jpg", encode(t, FormatJPEG, gray), FormatJPEG, nil, rgbOf(gray), 1, 7, 5},
		{"webp lossless", "image/webp", fixture(t, "testsrc.lossless.webp"), FormatWebP, rgbOf(ref), nil, 0, 16, 12},
		// libwebp's own loss here is about 6 a channel (by ffmpeg's decoder);
		// a misread image would be off by tens.
		{"webp lossy", "image/webp", fixture(t, "gradient.lossy.webp"), FormatWebP, nil, rgbOf(smooth), 10, 16, 12},
		{"webp alpha", "image/webp", fixture(t, "gradient.alpha.webp"), FormatWebP, nil, rgbOf(smooth), 10, 16, 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srcs := map[string]string{
				"data URL":                           dataURL(tc.mime, tc.data),
				"untyped data URL":                   dataURL("", tc.data),
				"raw base64":                         base64.StdEncoding.EncodeToString(tc.data),
				"unpadded url-safe with line breaks": wrap(base64.RawURLEncoding.EncodeToString(tc.data), 76),
			}
			var first *Image
			for how, src := range srcs {
				img, err := DecodeImage(context.Background(), src, Limits{})
				if err != nil {
					t.Fatalf("%s: %v", how, err)
				}
				if img.Width != tc.w || img.Height != tc.h || img.Format != tc.format || len(img.Pix) != 3*tc.w*tc.h {
					t.Fatalf("%s: %dx%d %s with %d bytes, want %dx%d %s", how, img.Width, img.Height, img.Format, len(img.Pix), tc.w, tc.h, tc.format)
				}
				if tc.want != nil && !bytes.Equal(img.Pix, tc.want) {
					t.Fatalf("%s: pixels differ from the source's (max diff %d)", how, maxDiff(img.Pix, tc.want))
				}
				if tc.near != nil && meanDiff(img.Pix, tc.near) > tc.tol {
					t.Fatalf("%s: pixels differ from the source's by %.2f > %.2f on average", how, meanDiff(img.Pix, tc.near), tc.tol)
				}
				if first == nil {
					first = img
				} else if img.Hash != first.Hash {
					t.Fatalf("%s: the same image hashes differently", how)
				}
			}
			// The fast conversion agrees with the colour model's. (For
			// NYCbCrA, with its colours before alpha: the model would
			// premultiply and divide again, rounding.)
			m, _, err := image.Decode(bytes.NewReader(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			want := rgbOf(m)
			if n, ok := m.(*image.NYCbCrA); ok {
				want = rgbOf(&n.YCbCr)
			}
			if got := toRGB(m); !bytes.Equal(got, want) {
				t.Fatalf("toRGB(%T) differs from the colour model by %d", m, maxDiff(got, want))
			}
		})
	}
}

func wrap(s string, n int) string {
	var b strings.Builder
	for len(s) > n {
		b.WriteString(s[:n] + "\r\n")
		s = s[n:]
	}
	b.WriteString(s)
	return b.String()
}

func TestImageHash(t *testing.T) {
	decode := func(b []byte) *Image {
		t.Helper()
		img, err := DecodeImageBytes(b, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	a := gradient(16, 12, 1)
	pngA, gifA := decode(encode(t, FormatPNG, a)), decode(encode(t, FormatGIF, paletted(a)))
	if pngA.Hash != gifA.Hash {
		t.Fatal("the same pixels hash differently in PNG and GIF")
	}
	if again := decode(encode(t, FormatPNG, a)); again.Hash != pngA.Hash {
		t.Fatal("the same image hashes differently twice")
	}
	if b := decode(encode(t, FormatPNG, gradient(16, 12, 2))); b.Hash == pngA.Hash {
		t.Fatal("different images hash alike")
	}
	// One colour: the same RGB bytes under transposed dimensions.
	wide, tall := image.NewGray(image.Rect(0, 0, 3, 2)), image.NewGray(image.Rect(0, 0, 2, 3))
	w, h := decode(encode(t, FormatPNG, wide)), decode(encode(t, FormatPNG, tall))
	if !bytes.Equal(w.Pix, h.Pix) || w.Hash == h.Hash {
		t.Fatal("3x2 and 2x3 images of the same bytes hash alike")
	}
}

// pngHeader is a PNG signature and an IHDR chunk declaring w x h RGB,
// followed by rest.
func pngHeader(w, h uint32, rest []byte) []byte {
	ihdr := make([]byte, 17)
	copy(ihdr, "IHDR")
	binary.BigEndian.PutUint32(ihdr[4:], w)
	binary.BigEndian.PutUint32(ihdr[8:], h)
	ihdr[12], ihdr[13] = 8, 2 // 8-bit truecolour
	b := []byte("\x89PNG\r\n\x1a\n")
	b = binary.BigEndian.AppendUint32(b, 13)
	b = append(b, ihdr...)
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(ihdr))
	return append(b, rest...)
}

// webpVP8L is a lossless WebP whose bitstream header declares w x h, in
// a VP8X container declaring a canvas of cw x ch when cw > 0.
func webpVP8L(w, h, cw, ch int) []byte {
	var body []byte
	if cw > 0 {
		x := []byte{0, 0, 0, 0, byte(cw - 1), byte((cw - 1) >> 8), byte((cw - 1) >> 16), byte(ch - 1), byte((ch - 1) >> 8), byte((ch - 1) >> 16)}
		body = append(append([]byte("VP8X"), 10, 0, 0, 0), x...)
	}
	bits := uint32(w-1) | uint32(h-1)<<14
	bs := binary.LittleEndian.AppendUint32([]byte{0x2f}, bits)
	bs = append(bs, make([]byte, 16)...)
	body = append(body, "VP8L"...)
	body = binary.LittleEndian.AppendUint32(body, uint32(len(bs)))
	body = append(body, bs...)
	out := []byte("RIFF")
	out = binary.LittleEndian.AppendUint32(out, uint32(4+len(body)))
	out = append(out, "WEBP"...)
	return append(out, body...)
}

func TestDecodeImageRefused(t *testing.T) {
	goodPNG := encode(t, FormatPNG, gradient(16, 12, 7))
	goodJPEG := encode(t, FormatJPEG, gradient(16, 12, 7))
	html := []byte("<html><body><script>alert(1)</script></body></html>")
	tests := []struct {
		name string
		src  string
		lim  Limits
		want Reason
	}{
		{"empty", "", Limits{}, ReasonEmpty},
		{"empty data URL", "data:image/png;base64,", Limits{}, ReasonEmpty},
		{"bad base64", "!!!not*base64!!!", Limits{}, ReasonBadEncoding},
		{"base64 cut mid-quantum", base64.RawStdEncoding.EncodeToString(goodPNG)[:5], Limits{}, ReasonBadEncoding},
		{"percent-encoded data URL", "data:image/png,%89PNG", Limits{}, ReasonBadEncoding},
		{"data URL without a comma", "data:image/png;base64", Limits{}, ReasonBadEncoding},
		{"unknown bytes", base64.StdEncoding.EncodeToString([]byte("just some text, no image")), Limits{}, ReasonUnsupportedFormat},
		{"png signature then junk", dataURL("image/png", append([]byte("\x89PNG\r\n\x1a\n"), html...)), Limits{}, ReasonCorrupt},
		{"truncated png", dataURL("image/png", goodPNG[:len(goodPNG)/2]), Limits{}, ReasonCorrupt},
		{"truncated jpeg", dataURL("image/jpeg", goodJPEG[:len(goodJPEG)/2]), Limits{}, ReasonCorrupt},
		{"declared png, bytes jpeg", dataURL("image/png", goodJPEG), Limits{}, ReasonFormatMismatch},
		{"declared video, bytes png", dataURL("video/mp4", goodPNG), Limits{}, ReasonFormatMismatch},
		{"declared bmp", dataURL("image/bmp", goodPNG), Limits{}, ReasonUnsupportedFormat},
		{"declared html", dataURL("text/html", goodPNG), Limits{}, ReasonUnsupportedFormat},
		{"polyglot: gif header then html", dataURL("image/gif", append([]byte("GIF89a\x01\x00\x01\x00\x00\x00\x00"), html...)), Limits{}, ReasonCorrupt},
		{"polyglot: html then png", dataURL("image/png", append(html, goodPNG...)), Limits{}, ReasonUnsupportedFormat},
		{"video bytes", dataURL("", []byte("\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2")), Limits{}, ReasonUnsupportedFormat},
		{"png declaring 50000x50000", dataURL("image/png", pngHeader(50000, 50000, html)), Limits{}, ReasonTooManyPixels},
		{"png declaring 0x10", dataURL("image/png", pngHeader(0, 10, nil)), Limits{}, ReasonCorrupt},
		{"webp bitstream 16384x16384", dataURL("image/webp", webpVP8L(16384, 16384, 0, 0)), Limits{}, ReasonTooManyPixels},
		{"webp small canvas, huge bitstream", dataURL("image/webp", webpVP8L(16384, 16384, 16, 12)), Limits{}, ReasonCorrupt},
		{"over MaxPixels", dataURL("image/png", goodPNG), Limits{MaxPixels: 16*12 - 1}, ReasonTooManyPixels},
		{"over MaxBytes", dataURL("image/png", goodPNG), Limits{MaxBytes: int64(len(goodPNG)) - 1}, ReasonTooLarge},
		{"http URL", "http://example.com/cat.png", Limits{}, ReasonRemoteRefused},
		{"https URL", "https://example.com/cat.png", Limits{}, ReasonRemoteRefused},
		{"file URL", "file:///etc/passwd", Limits{}, ReasonRemoteRefused},
		{"file URL with remote allowed", "file:///etc/passwd", Limits{AllowRemote: true}, ReasonRemoteRefused},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img, err := DecodeImage(context.Background(), tc.src, tc.lim)
			var me *Error
			if !errors.As(err, &me) || me.Reason != tc.want {
				t.Fatalf("got %v, %v; want %q", img, err, tc.want)
			}
			if err.Error() != "media: "+tc.want.String() {
				t.Fatalf("message %q is not the reason's fixed one", err.Error())
			}
		})
	}
}

func TestDecodeImageAtBounds(t *testing.T) {
	b := encode(t, FormatPNG, gradient(16, 12, 7))
	if _, err := DecodeImage(context.Background(), dataURL("image/png", b), Limits{MaxPixels: 16 * 12, MaxBytes: int64(len(b))}); err != nil {
		t.Fatalf("an image exactly at the bounds: %v", err)
	}
}

// A header declaring 2.5 gigapixels is refused from the header: nothing
// near the pixel buffer's size is ever allocated.
func TestHugeHeaderRefusedWithoutAllocating(t *testing.T) {
	src := dataURL("image/png", pngHeader(50000, 50000, bytes.Repeat([]byte{0}, 1024)))
	const runs = 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		if _, err := DecodeImage(context.Background(), src, Limits{}); err == nil {
			t.Fatal("accepted")
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per >= 1<<20 {
		t.Fatalf("refusing allocated %d bytes a call", per)
	}
}

func TestDecodeRequest(t *testing.T) {
	src := dataURL("image/png", encode(t, FormatPNG, gradient(16, 12, 7)))
	parts := func(n int, src string) []Part {
		p := make([]Part, n)
		for i := range p {
			p[i] = Part{KindImage, src}
		}
		return p
	}
	tests := []struct {
		name  string
		parts []Part
		lim   Limits
		want  Reason // 0: decodes
	}{
		{"sixteen images", parts(16, src), Limits{}, 0},
		// The count is checked before anything is decoded: the garbage
		// sources are never read.
		{"seventeen images", parts(17, "garbage!"), Limits{}, ReasonTooManyImages},
		{"nine videos", []Part{{KindVideo, "a"}, {KindVideo, "a"}, {KindVideo, "a"}, {KindVideo, "a"}, {KindVideo, "a"}, {KindVideo, "a"}, {KindVideo, "a"}, {KindVideo, "a"}, {KindVideo, "a"}}, Limits{}, ReasonTooManyVideos},
		{"request pixels exactly at the bound", parts(3, src), Limits{MaxRequestPixels: 3 * 16 * 12}, 0},
		{"request pixels over the bound", parts(3, src), Limits{MaxRequestPixels: 3*16*12 - 1}, ReasonRequestTooLarge},
		{"unknown kind", []Part{{Kind: 0, Src: src}}, Limits{}, ReasonUnsupportedFormat},
		{"first refusal stops", []Part{{KindImage, src}, {KindImage, "data:image/png;base64,AAAA"}}, Limits{}, ReasonUnsupportedFormat},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decode(context.Background(), tc.parts, tc.lim, FFmpeg{})
			if tc.want == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if len(d.Images) != len(tc.parts) {
					t.Fatalf("%d images, want %d", len(d.Images), len(tc.parts))
				}
				return
			}
			var me *Error
			if !errors.As(err, &me) || me.Reason != tc.want {
				t.Fatalf("got %v; want %q", err, tc.want)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Decode(ctx, parts(1, src), Limits{}, FFmpeg{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v, want context.Canceled", err)
	}
}

func TestDecodeImageRemote(t *testing.T) {
	img := encode(t, FormatPNG, gradient(16, 12, 7))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok.png":
			w.Header().Set("Content-Type", "text/plain") // ignored: the bytes decide
			w.Write(img)
		case "/big.png":
			w.Write(bytes.Repeat(img, 4))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	remote := Limits{AllowRemote: true, MaxBytes: int64(2 * len(img))}
	tests := []struct {
		name string
		url  string
		lim  Limits
		want Reason
	}{
		{"fetched", srv.URL + "/ok.png", remote, 0},
		{"refused when off", srv.URL + "/ok.png", Limits{}, ReasonRemoteRefused},
		{"not found", srv.URL + "/missing.png", remote, ReasonFetchFailed},
		{"over MaxBytes", srv.URL + "/big.png", remote, ReasonTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeImage(context.Background(), tc.url, tc.lim)
			if tc.want == 0 {
				if err != nil || got.Width != 16 || got.Height != 12 {
					t.Fatalf("got %v, %v", got, err)
				}
				return
			}
			var me *Error
			if !errors.As(err, &me) || me.Reason != tc.want {
				t.Fatalf("got %v; want %q", err, tc.want)
			}
		})
	}
}

// FuzzDecodeImage: no input panics, every refusal is an *Error, and an
// accepted image is within the limits and consistent.
func FuzzDecodeImage(f *testing.F) {
	grad := gradient(9, 7, 3)
	for _, b := range [][]byte{
		encode(f, FormatPNG, grad),
		encode(f, FormatJPEG, grad),
		encode(f, FormatGIF, paletted(grad)),
		fixture(f, "testsrc.lossless.webp"),
		fixture(f, "gradient.lossy.webp"),
		fixture(f, "gradient.alpha.webp"),
		pngHeader(50000, 50000, nil),
		webpVP8L(300, 300, 16, 12),
	} {
		f.Add(b)
	}
	lim := Limits{MaxPixels: 1 << 16, MaxBytes: 1 << 20}
	f.Fuzz(func(t *testing.T, b []byte) {
		img, err := DecodeImageBytes(b, lim)
		if err != nil {
			var me *Error
			if !errors.As(err, &me) {
				t.Fatalf("refusal %v is not an *Error", err)
			}
			return
		}
		px := int64(img.Width) * int64(img.Height)
		if img.Width <= 0 || img.Height <= 0 || px > lim.MaxPixels {
			t.Fatalf("accepted %dx%d", img.Width, img.Height)
		}
		if int64(len(img.Pix)) != 3*px || img.Hash != hashRGB(img.Width, img.Height, img.Pix) {
			t.Fatal("pixels and hash disagree with the dimensions")
		}
	})
}

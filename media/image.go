package media

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"

	"golang.org/x/image/webp"
)

// Format is the encoding an item arrived in, as its bytes' signature says.
type Format string

// Formats.
const (
	FormatPNG  Format = "png"
	FormatJPEG Format = "jpeg"
	FormatGIF  Format = "gif"
	FormatWebP Format = "webp"
	// FormatMP4 is the ISO base media file format: MP4 and QuickTime.
	FormatMP4 Format = "mp4"
	// FormatWebM is Matroska, WebM included.
	FormatWebM Format = "webm"
)

// Image is a decoded image or video frame.
type Image struct {
	Width, Height int
	// Pix is packed RGB, 3 bytes a pixel, rows top to bottom with no
	// padding: len(Pix) == 3*Width*Height. Alpha is dropped (colours are
	// taken unpremultiplied, as PIL's convert("RGB") does).
	Pix []uint8
	// Hash is SHA-256 of the dimensions and Pix: equal pixels give equal
	// hashes whatever the source format. It keys the prefix cache.
	Hash [32]byte
	// Format is the source's format; a video frame has its container's.
	Format Format
}

// DecodeImage decodes one image from src: a base64 data URL, raw base64,
// or, with lim.AllowRemote, an http or https URL (ctx bounds the fetch).
// JPEG, PNG, GIF (first frame) and WebP are decoded; the bytes' signature
// decides the format, and a data URL that declares another image type is
// refused. Every refusal is an *Error; a done ctx is returned as is.
func DecodeImage(ctx context.Context, src string, lim Limits) (*Image, error) {
	lim = lim.withDefaults()
	b, declared, err := load(ctx, src, lim)
	if err != nil {
		return nil, err
	}
	return decodeImage(b, declared, lim, lim.MaxRequestPixels)
}

// DecodeImageBytes decodes an image's encoded bytes, as DecodeImage does
// once it has them.
func DecodeImageBytes(b []byte, lim Limits) (*Image, error) {
	lim = lim.withDefaults()
	return decodeImage(b, "", lim, lim.MaxRequestPixels)
}

// codec decodes one image format. config reads no more than the header.
type codec struct {
	config func([]byte) (image.Config, error)
	decode func(io.Reader) (image.Image, error)
}

var codecs = map[Format]codec{
	FormatPNG:  {readerConfig(png.DecodeConfig), png.Decode},
	FormatJPEG: {readerConfig(jpeg.DecodeConfig), jpeg.Decode},
	FormatGIF:  {readerConfig(gif.DecodeConfig), gif.Decode},
	FormatWebP: {webpConfig, webp.Decode},
}

func readerConfig(f func(io.Reader) (image.Config, error)) func([]byte) (image.Config, error) {
	return func(b []byte) (image.Config, error) { return f(bytes.NewReader(b)) }
}

// decodeImage decodes b, refusing it from its header when it declares
// more than lim.MaxPixels pixels, or more than maxPixels (what the
// request has left), before any pixel buffer exists. Bytes after a complete image are ignored: the signature at the
// start decides what the item is, so a file that is also something else
// further on decodes as the image it begins with.
func decodeImage(b []byte, declared string, lim Limits, maxPixels int64) (*Image, error) {
	if len(b) == 0 {
		return nil, refuse(ReasonEmpty, nil)
	}
	if int64(len(b)) > lim.MaxBytes {
		return nil, refuse(ReasonTooLarge, nil)
	}
	f := sniff(b)
	c, ok := codecs[f]
	if !ok {
		return nil, refuse(ReasonUnsupportedFormat, nil)
	}
	if err := checkDeclared(declared, f, ReasonUnsupportedFormat); err != nil {
		return nil, err
	}
	cfg, err := c.config(b)
	if err != nil {
		return nil, refuse(ReasonCorrupt, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, refuse(ReasonCorrupt, nil)
	}
	px := int64(cfg.Width) * int64(cfg.Height)
	if px > lim.MaxPixels {
		return nil, refuse(ReasonTooManyPixels, nil)
	}
	if px > maxPixels {
		return nil, refuse(ReasonRequestTooLarge, nil)
	}
	m, err := c.decode(bytes.NewReader(b))
	if err != nil {
		return nil, refuse(ReasonCorrupt, err)
	}
	// A GIF's first frame may cover part of its screen; no decoder may
	// yield more than its header declared.
	r := m.Bounds()
	if r.Dx() <= 0 || r.Dy() <= 0 || r.Dx() > cfg.Width || r.Dy() > cfg.Height {
		return nil, refuse(ReasonCorrupt, nil)
	}
	return newImage(m, f), nil
}

// newImage converts m to packed RGB and hashes it.
func newImage(m image.Image, f Format) *Image {
	r := m.Bounds()
	img := &Image{Width: r.Dx(), Height: r.Dy(), Pix: toRGB(m), Format: f}
	img.Hash = hashRGB(img.Width, img.Height, img.Pix)
	return img
}

// hashRGB hashes packed RGB pixels with their dimensions (so that a 2x3
// and a 3x2 image of the same bytes differ) under a domain tag.
func hashRGB(w, h int, pix []byte) [32]byte {
	d := sha256.New()
	var hdr [8]byte
	binary.LittleEndian.PutUint32(hdr[0:], uint32(w))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(h))
	d.Write([]byte("media/rgb8\x00"))
	d.Write(hdr[:])
	d.Write(pix)
	var sum [32]byte
	d.Sum(sum[:0])
	return sum
}

// sniff names the format b's signature announces, or "" for none known.
func sniff(b []byte) Format {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return FormatPNG
	case bytes.HasPrefix(b, []byte("\xff\xd8\xff")):
		return FormatJPEG
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return FormatGIF
	case len(b) >= 12 && string(b[0:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return FormatWebP
	case bytes.HasPrefix(b, []byte("\x1a\x45\xdf\xa3")):
		return FormatWebM
	case len(b) >= 8 && isBoxType(string(b[4:8])):
		return FormatMP4
	}
	return ""
}

// isBoxType reports whether t is a box an ISO base media file (or an old
// QuickTime file, which may lack ftyp) begins with.
func isBoxType(t string) bool {
	switch t {
	case "ftyp", "moov", "mdat", "wide", "free", "skip":
		return true
	}
	return false
}

// declaredFormats maps the media types a data URL may declare to formats.
var declaredFormats = map[string]Format{
	"image/png":        FormatPNG,
	"image/jpeg":       FormatJPEG,
	"image/jpg":        FormatJPEG,
	"image/pjpeg":      FormatJPEG,
	"image/gif":        FormatGIF,
	"image/webp":       FormatWebP,
	"video/mp4":        FormatMP4,
	"video/quicktime":  FormatMP4,
	"video/webm":       FormatWebM,
	"video/x-matroska": FormatWebM,
}

// checkDeclared accepts a declared media type that names f, or none.
func checkDeclared(declared string, f Format, unsupported Reason) error {
	if declared == "" || declared == "application/octet-stream" {
		return nil
	}
	df, ok := declaredFormats[declared]
	if !ok {
		return refuse(unsupported, nil)
	}
	if df != f {
		return refuse(ReasonFormatMismatch, nil)
	}
	return nil
}

// webpConfig reads a WebP's dimensions from its bitstream header, not only
// from the extended (VP8X) header as webp.DecodeConfig does: the decoder
// allocates by the bitstream's, which VP8X need not agree with. A VP8X
// canvas that differs from the bitstream is refused.
func webpConfig(b []byte) (image.Config, error) {
	if len(b) < 12 {
		return image.Config{}, errWebP
	}
	var canvasW, canvasH int
	for p := 12; p+8 <= len(b); {
		id := string(b[p : p+4])
		n := int64(binary.LittleEndian.Uint32(b[p+4 : p+8]))
		data := b[p+8:]
		if n < int64(len(data)) {
			data = data[:n]
		}
		switch id {
		case "VP8X":
			if len(data) < 10 {
				return image.Config{}, errWebP
			}
			canvasW = 1 + (int(data[4]) | int(data[5])<<8 | int(data[6])<<16)
			canvasH = 1 + (int(data[7]) | int(data[8])<<8 | int(data[9])<<16)
		case "VP8 ", "VP8L":
			w, h, err := webpFrameSize(id, data)
			if err != nil {
				return image.Config{}, err
			}
			if canvasW != 0 && (w != canvasW || h != canvasH) {
				return image.Config{}, errWebP
			}
			return image.Config{ColorModel: color.NRGBAModel, Width: w, Height: h}, nil
		}
		p += 8 + int(n+n&1)
	}
	return image.Config{}, errWebP
}

var errWebP = errors.New("webp: no valid bitstream header")

// webpFrameSize reads the size of a VP8 (lossy) or VP8L (lossless)
// bitstream from its first bytes.
func webpFrameSize(id string, d []byte) (w, h int, err error) {
	if id == "VP8L" {
		// Signature 0x2f, then 14 bits width-1 and 14 bits height-1.
		if len(d) < 5 || d[0] != 0x2f {
			return 0, 0, errWebP
		}
		bits := binary.LittleEndian.Uint32(d[1:5])
		return int(bits&0x3fff) + 1, int(bits>>14&0x3fff) + 1, nil
	}
	// A 3-byte frame tag (key frame: bit 0 clear), the start code
	// 9d 01 2a, then 14-bit width and height, each with 2 scale bits.
	if len(d) < 10 || d[0]&1 != 0 || d[3] != 0x9d || d[4] != 0x01 || d[5] != 0x2a {
		return 0, 0, errWebP
	}
	return int(binary.LittleEndian.Uint16(d[6:8]) & 0x3fff), int(binary.LittleEndian.Uint16(d[8:10]) & 0x3fff), nil
}

// toRGB packs m's pixels as RGB, fast for the types the decoders return.
func toRGB(m image.Image) []byte {
	r := m.Bounds()
	w, h := r.Dx(), r.Dy()
	out := make([]byte, 3*w*h)
	o := 0
	switch m := m.(type) {
	case *image.NRGBA:
		for y := r.Min.Y; y < r.Max.Y; y++ {
			row := m.Pix[m.PixOffset(r.Min.X, y):]
			for x := 0; x < w; x++ {
				copy(out[o:o+3], row[4*x:4*x+3])
				o += 3
			}
		}
	case *image.RGBA:
		for y := r.Min.Y; y < r.Max.Y; y++ {
			row := m.Pix[m.PixOffset(r.Min.X, y):]
			for x := 0; x < w; x++ {
				p := row[4*x : 4*x+4]
				if p[3] == 0xff {
					copy(out[o:o+3], p[:3])
				} else {
					n := color.NRGBAModel.Convert(color.RGBA{p[0], p[1], p[2], p[3]}).(color.NRGBA)
					out[o], out[o+1], out[o+2] = n.R, n.G, n.B
				}
				o += 3
			}
		}
	case *image.YCbCr:
		ycbcrToRGB(m, out)
	case *image.NYCbCrA:
		ycbcrToRGB(&m.YCbCr, out)
	case *image.Gray:
		for y := r.Min.Y; y < r.Max.Y; y++ {
			row := m.Pix[m.PixOffset(r.Min.X, y):]
			for x := 0; x < w; x++ {
				out[o], out[o+1], out[o+2] = row[x], row[x], row[x]
				o += 3
			}
		}
	case *image.Paletted:
		lut := make([][3]byte, 256)
		for i, c := range m.Palette[:min(len(m.Palette), len(lut))] {
			n := color.NRGBAModel.Convert(c).(color.NRGBA)
			lut[i] = [3]byte{n.R, n.G, n.B}
		}
		for y := r.Min.Y; y < r.Max.Y; y++ {
			row := m.Pix[m.PixOffset(r.Min.X, y):]
			for x := 0; x < w; x++ {
				c := lut[row[x]]
				copy(out[o:o+3], c[:])
				o += 3
			}
		}
	default:
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				n := color.NRGBAModel.Convert(m.At(x, y)).(color.NRGBA)
				out[o], out[o+1], out[o+2] = n.R, n.G, n.B
				o += 3
			}
		}
	}
	return out
}

func ycbcrToRGB(m *image.YCbCr, out []byte) {
	r := m.Rect
	o := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			yi, ci := m.YOffset(x, y), m.COffset(x, y)
			out[o], out[o+1], out[o+2] = color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
			o += 3
		}
	}
}

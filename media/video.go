package media

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Frame is one frame sampled from a video.
type Frame struct {
	Image *Image
	// At is the frame's time from the start of the video.
	At time.Duration
}

// FFmpeg is the ffmpeg binary that decodes video, and where the encoded
// video waits while it reads it.
type FFmpeg struct {
	// Path is the binary; "" looks for one with LocateFFmpeg.
	Path string
	// TempDir holds the scratch file; "" is os.TempDir(). The file is
	// removed before DecodeVideo returns, whatever happened.
	TempDir string
}

// DecodeVideo decodes a video from src (as DecodeImage reads sources) and
// samples at most lim.MaxFrames frames from it, uniformly in time: frame i
// of n shows the picture current at i x duration / n, and n is less than
// MaxFrames only when the video has fewer frames. MP4/QuickTime and
// WebM/Matroska are decoded by ffmpeg; a video whose declared duration is
// over lim.MaxDuration, or unknown, is refused before any frame is decoded.
// Every refusal is an *Error (ReasonVideoUnavailable when there is no
// ffmpeg); a done ctx is returned as is; other errors (the scratch file
// could not be written) are the server's.
func DecodeVideo(ctx context.Context, src string, lim Limits, ff FFmpeg) ([]Frame, error) {
	lim = lim.withDefaults()
	return decodeVideo(ctx, src, lim, ff, lim.MaxRequestPixels)
}

// LocateFFmpeg returns the ffmpeg binary to decode video with: explicit
// when it is not empty; else .deps/ffmpeg/bin/ffmpeg (where
// scripts/setup_ffmpeg.sh installs it) under the working directory, the
// executable's directory, or one of their parents; else ffmpeg on PATH;
// else "".
func LocateFFmpeg(explicit string) string {
	if explicit != "" {
		return explicit
	}
	var bases []string
	if wd, err := os.Getwd(); err == nil {
		bases = append(bases, wd)
	}
	if exe, err := os.Executable(); err == nil {
		bases = append(bases, filepath.Dir(exe))
	}
	for _, dir := range bases {
		for {
			p := filepath.Join(dir, ".deps", "ffmpeg", "bin", "ffmpeg")
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return p
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	if p, err := exec.LookPath("ffmpeg"); err == nil {
		return p
	}
	return ""
}

// demuxers names ffmpeg's demuxer for each container: ffmpeg is told the
// format rather than left to probe, so that bytes that passed our
// signature check are never read as a playlist or another container.
var demuxers = map[Format]string{
	FormatMP4:  "mov",
	FormatWebM: "matroska",
}

// decodeVideo decodes one video whose frames may hold at most maxPixels
// pixels together; lim has its defaults.
func decodeVideo(ctx context.Context, src string, lim Limits, ff FFmpeg, maxPixels int64) ([]Frame, error) {
	bin := ff.Path
	if bin == "" {
		bin = LocateFFmpeg("")
	}
	if bin == "" {
		return nil, refuse(ReasonVideoUnavailable, nil)
	}
	b, declared, err := load(ctx, src, lim)
	if err != nil {
		return nil, err
	}
	f := sniff(b)
	if _, ok := demuxers[f]; !ok {
		return nil, refuse(ReasonUnsupportedVideo, nil)
	}
	if err := checkDeclared(declared, f, ReasonUnsupportedVideo); err != nil {
		return nil, err
	}
	path, err := writeScratch(ff.TempDir, b)
	if err != nil {
		return nil, err
	}
	defer os.Remove(path)

	vctx, cancel := context.WithTimeout(ctx, lim.VideoTimeout)
	defer cancel()
	frames, err := sampleFrames(vctx, bin, path, f, lim, maxPixels)
	switch {
	case err == nil:
		return frames, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case vctx.Err() != nil:
		return nil, refuse(ReasonVideoTimeout, err)
	}
	return nil, err
}

// writeScratch writes b to a new file in dir and returns its path.
func writeScratch(dir string, b []byte) (string, error) {
	f, err := os.CreateTemp(dir, "media-video-*")
	if err != nil {
		return "", fmt.Errorf("media: scratch file: %w", err)
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("media: scratch file: %w", err)
	}
	return f.Name(), nil
}

// sampleFrames probes the video at path, then has ffmpeg emit the sampled
// frames as a stream of binary PPM images (self-describing: each carries
// its size, checked before its pixels are read).
func sampleFrames(ctx context.Context, bin, path string, f Format, lim Limits, maxPixels int64) ([]Frame, error) {
	input := []string{"-hide_banner", "-nostdin", "-protocol_whitelist", "file", "-f", demuxers[f], "-i", path}
	info, err := probe(ctx, bin, input)
	if err != nil {
		return nil, err
	}
	if info.duration > lim.MaxDuration {
		return nil, refuse(ReasonVideoTooLong, nil)
	}
	dur := info.duration.Milliseconds()
	if dur <= 0 {
		return nil, refuse(ReasonCorruptVideo, nil)
	}
	n := lim.MaxFrames
	if info.fps > 0 {
		n = max(1, min(n, int(math.Floor(info.duration.Seconds()*info.fps+1e-6))))
	}
	// fps=n/duration emits the picture current at each tick i/rate.
	rate := fmt.Sprintf("%d/%d", int64(n)*1000, dur)
	args := slices.Concat(input, []string{"-loglevel", "error", "-map", "0:v:0", "-an", "-sn", "-dn",
		"-vf", "fps=fps=" + rate + ":start_time=0", "-frames:v", strconv.Itoa(n),
		"-f", "image2pipe", "-c:v", "ppm", "pipe:1"})
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = &capped{limit: 16 << 10}
	cmd.WaitDelay = time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("media: ffmpeg pipe: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, refuse(ReasonVideoUnavailable, err)
	}
	frames, rerr := readFrames(bufio.NewReaderSize(stdout, 64<<10), n, f, lim.MaxPixels, maxPixels)
	if rerr != nil {
		// Stop ffmpeg before waiting on it: it may be blocked writing.
		_ = cmd.Process.Kill()
	}
	werr := cmd.Wait()
	switch {
	case rerr != nil:
		return nil, rerr
	case werr != nil:
		return nil, refuse(ReasonCorruptVideo, werr)
	case len(frames) == 0:
		return nil, refuse(ReasonCorruptVideo, nil)
	}
	d := time.Duration(dur) * time.Millisecond
	for i := range frames {
		frames[i].At = d * time.Duration(i) / time.Duration(n)
	}
	return frames, nil
}

// videoInfo is what probing tells of a video.
type videoInfo struct {
	duration time.Duration
	fps      float64 // 0 when not reported
}

// ffmpeg -i prints the container's duration and its streams on stderr.
// Lines are matched at their exact indentation: metadata values are
// printed deeper, so a title cannot pose as the duration.
var (
	durationLine = regexp.MustCompile(`(?m)^  Duration: (\d+):(\d\d):(\d\d)(?:\.(\d+))?,`)
	videoLine    = regexp.MustCompile(`(?m)^  Stream #0:\d+\S*: Video: .*$`)
	fpsField     = regexp.MustCompile(`, (\d+(?:\.\d+)?) fps\b`)
)

// probe runs ffmpeg on the input alone (it exits complaining of no output
// after describing the input) and reads the description.
func probe(ctx context.Context, bin string, input []string) (videoInfo, error) {
	cmd := exec.CommandContext(ctx, bin, input...)
	var stderr capped
	stderr.limit = 64 << 10
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		if ctx.Err() != nil {
			return videoInfo{}, ctx.Err()
		}
		return videoInfo{}, refuse(ReasonVideoUnavailable, err)
	}
	if ctx.Err() != nil {
		return videoInfo{}, ctx.Err()
	}
	out := stderr.buf.String()
	video := videoLine.FindString(out)
	if video == "" {
		if strings.Contains(out, "Input #0") {
			return videoInfo{}, refuse(ReasonUnsupportedVideo, nil) // no video stream
		}
		return videoInfo{}, refuse(ReasonCorruptVideo, nil)
	}
	m := durationLine.FindStringSubmatch(out)
	if m == nil {
		return videoInfo{}, refuse(ReasonUnsupportedVideo, nil) // duration unknown
	}
	h, _ := strconv.ParseInt(m[1], 10, 64)
	mi, _ := strconv.ParseInt(m[2], 10, 64)
	s, _ := strconv.ParseInt(m[3], 10, 64)
	if h >= 100_000 { // would overflow a Duration further on
		return videoInfo{}, refuse(ReasonVideoTooLong, nil)
	}
	d := time.Duration(h)*time.Hour + time.Duration(mi)*time.Minute + time.Duration(s)*time.Second
	if frac := m[4]; frac != "" {
		frac = (frac + "000000000")[:9]
		ns, _ := strconv.ParseInt(frac, 10, 64)
		d += time.Duration(ns)
	}
	info := videoInfo{duration: d}
	if fm := fpsField.FindStringSubmatch(video); fm != nil {
		info.fps, _ = strconv.ParseFloat(fm[1], 64)
	}
	return info, nil
}

// readFrames reads at most n binary PPM images from r until it ends. A
// frame over maxFrame pixels, or frames over maxTotal together, are
// refused from their header, before their pixels are read.
func readFrames(r *bufio.Reader, n int, f Format, maxFrame, maxTotal int64) ([]Frame, error) {
	var frames []Frame
	var total int64
	for {
		w, h, err := readPPMHeader(r)
		if errors.Is(err, io.EOF) {
			return frames, nil
		}
		if err != nil {
			return nil, refuse(ReasonCorruptVideo, err)
		}
		if len(frames) == n {
			return nil, refuse(ReasonCorruptVideo, errors.New("ffmpeg emitted more frames than asked"))
		}
		px := int64(w) * int64(h)
		if px > maxFrame {
			return nil, refuse(ReasonTooManyPixels, nil)
		}
		if total += px; total > maxTotal {
			return nil, refuse(ReasonRequestTooLarge, nil)
		}
		pix := make([]byte, 3*px)
		if _, err := io.ReadFull(r, pix); err != nil {
			return nil, refuse(ReasonCorruptVideo, err)
		}
		img := &Image{Width: w, Height: h, Pix: pix, Format: f}
		img.Hash = hashRGB(w, h, pix)
		frames = append(frames, Frame{Image: img})
	}
}

var errPPM = errors.New("malformed PPM header")

// readPPMHeader reads "P6 <width> <height> 255" and the one whitespace
// byte after it; io.EOF when r ends before a header begins.
func readPPMHeader(r *bufio.Reader) (w, h int, err error) {
	var magic [2]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, 0, io.EOF
		}
		return 0, 0, err
	}
	if magic != [2]byte{'P', '6'} {
		return 0, 0, errPPM
	}
	var v [3]int
	for i := range v {
		if v[i], err = readPPMInt(r); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, 0, err
		}
	}
	if v[0] <= 0 || v[1] <= 0 || v[2] != 255 {
		return 0, 0, errPPM
	}
	return v[0], v[1], nil
}

// readPPMInt skips whitespace, reads a decimal of at most 9 digits and
// consumes the one whitespace byte that ends it.
func readPPMInt(r *bufio.Reader) (int, error) {
	c, err := r.ReadByte()
	for err == nil && isSpace(c) {
		c, err = r.ReadByte()
	}
	v, digits := 0, 0
	for err == nil && c >= '0' && c <= '9' && digits < 9 {
		v = v*10 + int(c-'0')
		digits++
		c, err = r.ReadByte()
	}
	if err != nil {
		return 0, err
	}
	if digits == 0 || !isSpace(c) {
		return 0, errPPM
	}
	return v, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// capped keeps the first limit bytes written to it and drops the rest.
type capped struct {
	buf   bytes.Buffer
	limit int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.limit - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

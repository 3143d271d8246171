package family

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/goprovider/provider/media"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/model/gemma3"
	"github.com/goprovider/provider/model/gemma4"
	"github.com/goprovider/provider/stages"
)

// ErrNoVisionTokens: a checkpoint's vocabulary lacks the tokens its vision
// tower's prompts are written with.
var ErrNoVisionTokens = errors.New("vocabulary lacks the vision tower's tokens")

// Vision loads the vision tower of a checkpoint that has one and returns it
// as the pipeline's stages.Vision; (nil, nil) when the checkpoint is
// text-only. The tower gets its own MLX thread and a stream of its own on
// s's device, so it runs beside the engine's steps rather than between
// them (MLX evaluates the graphs of different threads concurrently when
// each thread has its own stream and no graph depends on another's
// arrays); its Close ends both. The architecture's Family loads the
// tower; one without a loader whose config describes a vision tower is
// refused rather than served text-only.
func Vision(m *model.Model, _ *mlx.Thread, s mlx.Stream) (stages.Vision, error) {
	if m.Format != "hf" {
		return nil, nil
	}
	raw, err := os.ReadFile(filepath.Join(m.Path, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("family: %w", err)
	}
	var probe struct {
		Vision json.RawMessage `json:"vision_config"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("family: %w: config.json: %w", model.ErrBadConfig, err)
	}
	if len(probe.Vision) == 0 || string(probe.Vision) == "null" {
		return nil, nil
	}
	f, err := For(m.Config.Arch)
	if err != nil || f.LoadVision == nil {
		return nil, fmt.Errorf("family: %w: a %s vision tower", model.ErrUnsupportedArch, m.Config.Arch)
	}
	return f.LoadVision(m, s)
}

// towerRun is a tower's own MLX thread and stream, and the release of
// its weights.
type towerRun struct {
	th   *mlx.Thread
	s    mlx.Stream
	free func() // releases the weights; nil until they are loaded
}

// TowerThread is the OS thread name of a vision tower's MLX thread and of
// the stream worker started from it, as ps -L and top -H show them.
const TowerThread = "provider-tower"

// towerBackground reports whether towers run at background priority:
// unless PROVIDER_TOWER_BACKGROUND=0 (for comparison), a tower's thread
// and its stream's worker yield the CPU to the decode loop whenever both
// want it (mlx.ThreadOptions.Background). Its soft tokens are the same
// either way; a step beside a tower's run gets the cores first, and the
// tower takes longer only when the engine is busy.
func towerBackground() bool { return os.Getenv("PROVIDER_TOWER_BACKGROUND") != "0" }

// newTowerRun starts a tower's MLX thread with a new stream of its own on
// the device of s, made on that thread so that its CPU worker shares the
// thread's name and priority.
func newTowerRun(s mlx.Stream) (*towerRun, error) {
	th, err := mlx.NewThreadWith(mlx.ThreadOptions{Name: TowerThread, Background: towerBackground()})
	if err != nil {
		return nil, fmt.Errorf("family: vision tower thread: %w", err)
	}
	r := &towerRun{th: th}
	r.th.Do(func() { r.s, err = mlx.NewStreamOn(s) })
	if err != nil {
		r.th.Close()
		return nil, fmt.Errorf("family: vision tower stream: %w", err)
	}
	return r, nil
}

// soft runs encode on the tower's thread and returns its output as host
// float32 values.
func (r *towerRun) soft(encode func(f *mlx.Frame) mlx.Array) ([]float32, error) {
	var out []float32
	var err error
	r.th.Do(func() {
		f := mlx.NewFrame(r.s)
		defer f.Free()
		// One primitive at a time: the tower runs at low priority, and a
		// deep queue of its tasks in MLX's scheduler would hold the decode
		// loop's evaluations back (mlx.EvalStepwise).
		x := f.AsType(encode(f), mlx.Float32)
		f.EvalStepwise(x)
		out = f.ToFloat32s(x)
		err = f.Err()
	})
	return out, err
}

// Close releases the tower's weights, stream and thread; call it once no
// request uses the tower.
func (r *towerRun) Close() {
	r.th.Do(func() {
		if r.free != nil {
			r.free()
			r.free = nil
		}
		r.s.Free()
	})
	r.th.Close()
}

// gemma3Vision loads Gemma 3's tower on a tower run of its own on s's
// device.
func gemma3Vision(m *model.Model, s mlx.Stream) (stages.Vision, error) {
	r, err := newTowerRun(s)
	if err != nil {
		return nil, err
	}
	var v *gemma3.Vision
	r.th.Do(func() { v, err = gemma3.LoadVision(m.Path, r.s, m.Config.ActDType) })
	if err != nil {
		r.Close()
		return nil, err
	}
	r.free = v.Free
	g := &gemma3Tower{towerRun: r, v: v}
	c := v.Config
	names, err := towerTokens(m, r, c.TextHidden, c.StartOfImage, c.ImageToken, c.EndOfImage)
	if err != nil {
		return nil, err
	}
	g.marker = names[0]
	// Gemma3Processor's expansion of each start-of-image marker.
	g.prompt = "\n\n" + names[0] + strings.Repeat(names[1], c.TokensPerImage) + names[2] + "\n\n"
	return g, nil
}

// towerTokens checks a loaded tower against m (its soft tokens' width is
// the text hidden size; each of ids is a token of its own in the
// vocabulary) and returns the ids' texts; on a mismatch it closes the
// tower (its thread and stream with it).
func towerTokens(m *model.Model, tower interface{ Close() }, textHidden int, ids ...int32) ([]string, error) {
	if textHidden != m.Config.Hidden {
		tower.Close()
		return nil, fmt.Errorf("family: %w: soft tokens of %d for a text hidden size of %d", model.ErrBadConfig, textHidden, m.Config.Hidden)
	}
	names := make([]string, 0, len(ids))
	for _, id := range ids {
		name, ok := tokenText(m, id)
		if !ok {
			tower.Close()
			return nil, fmt.Errorf("family: %w: id %d", ErrNoVisionTokens, id)
		}
		names = append(names, name)
	}
	return names, nil
}

// tokenText is the vocabulary's text of id when id is a token of its own
// (present, and the only id of that text).
func tokenText(m *model.Model, id int32) (string, bool) {
	name := m.Tokenizer.Token(id)
	back, ok := m.Tokenizer.TokenID(name)
	return name, name != "" && ok && back == id
}

// gemma3Tower is Gemma 3's tower as a stages.Vision.
type gemma3Tower struct {
	*towerRun
	v              *gemma3.Vision
	marker, prompt string
}

func (g *gemma3Tower) ImageMarker() string             { return g.marker }
func (g *gemma3Tower) ImagePrompt(*media.Image) string { return g.prompt }
func (g *gemma3Tower) Video() bool                     { return false }

// Encode preprocesses the image on the caller's goroutine, then runs the
// tower and projector on the MLX thread and copies the soft tokens out.
func (g *gemma3Tower) Encode(ctx context.Context, img *media.Image) (stages.MediaItem, error) {
	c := g.v.Config
	px, err := g.v.Preprocess(img.Pix, img.Width, img.Height)
	if err != nil {
		return stages.MediaItem{}, err
	}
	if err := ctx.Err(); err != nil {
		return stages.MediaItem{}, err
	}
	soft, err := g.soft(func(f *mlx.Frame) mlx.Array {
		return g.v.Encode(f, f.Float32s(px, 1, c.Channels, c.ImageSize, c.ImageSize))
	})
	if err != nil {
		return stages.MediaItem{}, err
	}
	return stages.MediaItem{Token: c.ImageToken, Count: c.TokensPerImage, Hash: img.Hash, Embeds: soft}, nil
}

// gemma4Vision loads Gemma 4's tower. The chat template writes the
// placeholder token itself for an image part; Gemma4Processor turns each
// into the start-of-image token, as many placeholders as the image's size
// gives soft tokens, and the end-of-image token. Likewise for a video's
// placeholder and its frames. It runs on a tower run of its own on s's
// device.
func gemma4Vision(m *model.Model, s mlx.Stream) (stages.Vision, error) {
	r, err := newTowerRun(s)
	if err != nil {
		return nil, err
	}
	var v *gemma4.Vision
	r.th.Do(func() { v, err = gemma4.LoadVision(m.Path, r.s, m.Config.ActDType) })
	if err != nil {
		r.Close()
		return nil, err
	}
	r.free = v.Free
	g := &gemma4Tower{towerRun: r, v: v}
	c := v.Config
	names, err := towerTokens(m, r, c.TextHidden, c.StartOfImage, c.ImageToken, c.EndOfImage)
	if err != nil {
		return nil, err
	}
	g.start, g.placeholder, g.end = names[0], names[1], names[2]
	// A vocabulary without the video placeholder serves images only.
	if name, ok := tokenText(m, c.VideoToken); ok {
		g.video = name
	}
	return g, nil
}

// gemma4Tower is Gemma 4's tower as a stages.Vision.
type gemma4Tower struct {
	*towerRun
	v                       *gemma4.Vision
	start, placeholder, end string
	// video is the video placeholder's text, "" when the vocabulary has
	// none; the template writes it for a video part too.
	video string
}

func (g *gemma4Tower) ImageMarker() string { return g.placeholder }
func (g *gemma4Tower) Video() bool         { return g.video != "" }
func (g *gemma4Tower) VideoMarker() string { return g.video }

// VideoPrompt is the video's frames as Gemma4Processor writes them: per
// frame its timestamp, a space and its run of placeholders (as many as
// its size gives soft tokens under the video budget), joined by spaces.
func (g *gemma4Tower) VideoPrompt(frames []media.Frame) string {
	var b strings.Builder
	for i, fr := range frames {
		if i > 0 {
			b.WriteByte(' ')
		}
		n := g.v.Frames.Tokens(fr.Image.Width, fr.Image.Height)
		b.WriteString(gemma4.FrameStamp(fr.At) + " " + g.start + strings.Repeat(g.video, n) + g.end)
	}
	return b.String()
}

// ImagePrompt is the image's run: as many placeholders as its size gives
// soft tokens under the processor's budget.
func (g *gemma4Tower) ImagePrompt(img *media.Image) string {
	return g.start + strings.Repeat(g.placeholder, g.v.Tokens(img.Width, img.Height)) + g.end
}

// Encode preprocesses the image on the caller's goroutine, then runs the
// tower and embedder on the MLX thread and copies the soft tokens out.
func (g *gemma4Tower) Encode(ctx context.Context, img *media.Image) (stages.MediaItem, error) {
	return g.encode(ctx, img, g.v.Processor, g.v.Config.ImageToken)
}

// EncodeFrame is Encode for a video frame: the video budget and
// placeholder.
func (g *gemma4Tower) EncodeFrame(ctx context.Context, fr media.Frame) (stages.MediaItem, error) {
	return g.encode(ctx, fr.Image, g.v.Frames, g.v.Config.VideoToken)
}

func (g *gemma4Tower) encode(ctx context.Context, img *media.Image, proc gemma4.ImageProcessor, token int32) (stages.MediaItem, error) {
	p, err := proc.Preprocess(img.Pix, img.Width, img.Height)
	if err != nil {
		return stages.MediaItem{}, err
	}
	if err := ctx.Err(); err != nil {
		return stages.MediaItem{}, err
	}
	soft, err := g.soft(func(f *mlx.Frame) mlx.Array { return g.v.Encode(f, p) })
	if err != nil {
		return stages.MediaItem{}, err
	}
	n := len(soft) / g.v.Config.TextHidden
	return stages.MediaItem{Token: token, Count: n, Hash: img.Hash, Embeds: soft}, nil
}

var _ stages.VideoVision = (*gemma4Tower)(nil)

package gemma4

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/goprovider/provider/media"
	"github.com/goprovider/provider/mlx"
)

// vlmDir holds the tiny random Gemma 4 vision-language checkpoint and what
// mlx-vlm computes for it (scripts/make_tiny_gemma4_vlm.py; its docstring
// describes the files).
const vlmDir = "../../testdata/ref/gemma4_vlm_tiny"

// visionTol bounds |ours - reference| on pixels, features, pooled vectors
// and soft tokens.
const visionTol = 1e-4

type vlmImage struct {
	File          string `json:"file"`
	Width, Height int
	ResizedWidth  int `json:"resized_width"`
	ResizedHeight int `json:"resized_height"`
	GridCols      int `json:"grid_cols"`
	GridRows      int `json:"grid_rows"`
	Tokens        int `json:"tokens"`
}

type vlmFixture struct {
	Images []vlmImage `json:"images"`
	Videos []struct {
		File           string `json:"file"`
		Frames         int    `json:"frames"`
		Width, Height  int
		Timestamps     []float64 `json:"timestamps"`
		TokensPerFrame int       `json:"tokens_per_frame"`
	} `json:"videos"`
	Tensors map[string]struct {
		File  string `json:"file"`
		Shape []int  `json:"shape"`
	} `json:"tensors"`
	Cases []vlmCase `json:"cases"`
}

// readVLMFixture reads fixture.json; a missing fixture is a failure, never
// a skip.
func readVLMFixture(t *testing.T) *vlmFixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vlmDir, "fixture.json"))
	if err != nil {
		t.Fatalf("%v (regenerate with scripts/make_tiny_gemma4_vlm.py)", err)
	}
	var fx vlmFixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Images) != 2 || len(fx.Videos) != 1 || len(fx.Cases) == 0 {
		t.Fatalf("fixture.json has %d images, %d videos and %d cases", len(fx.Images), len(fx.Videos), len(fx.Cases))
	}
	return &fx
}

// tensor reads one fixture tensor and checks its size against its shape.
func (fx *vlmFixture) tensor(t *testing.T, name string) ([]float32, []int) {
	t.Helper()
	e, ok := fx.Tensors[name]
	if !ok {
		t.Fatalf("fixture.json has no tensor %q", name)
	}
	v := readF32(t, filepath.Join(vlmDir, e.File))
	n := 1
	for _, d := range e.Shape {
		n *= d
	}
	if len(v) != n {
		t.Fatalf("%s: %d values for shape %v", e.File, len(v), e.Shape)
	}
	return v, e.Shape
}

// image reads fixture image i, raw RGB bytes.
func (fx *vlmFixture) image(t *testing.T, i int) ([]uint8, int, int) {
	t.Helper()
	im := fx.Images[i]
	rgb, err := os.ReadFile(filepath.Join(vlmDir, im.File))
	if err != nil {
		t.Fatal(err)
	}
	return rgb, im.Width, im.Height
}

// frame reads frame i of the fixture's video, raw RGB bytes.
func (fx *vlmFixture) frame(t *testing.T, i int) ([]uint8, int, int) {
	t.Helper()
	v := fx.Videos[0]
	raw, err := os.ReadFile(filepath.Join(vlmDir, v.File))
	if err != nil {
		t.Fatal(err)
	}
	n := v.Width * v.Height * 3
	if len(raw) != v.Frames*n || i >= v.Frames {
		t.Fatalf("%s: %d bytes for %d frames of %dx%d", v.File, len(raw), v.Frames, v.Width, v.Height)
	}
	return raw[i*n : (i+1)*n], v.Width, v.Height
}

func readVisionFiles(t *testing.T) (VisionConfig, ImageProcessor) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vlmDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ReadVisionConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	pre, err := os.ReadFile(filepath.Join(vlmDir, "processor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := ReadImageProcessor(pre, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, p
}

func TestVisionConfig(t *testing.T) {
	cfg, p := readVisionFiles(t)
	want := VisionConfig{
		Hidden: 32, Intermediate: 64, Layers: 2, Heads: 2, KVHeads: 2, HeadDim: 16, PatchSize: 4, Pooling: 3,
		PositionSize: 64, NormEps: 1e-6, RoPEBase: 100, Clipped: true, Standardize: true, TextHidden: 32,
		ImageToken: 262, VideoToken: 266, StartOfImage: 260, EndOfImage: 261,
	}
	if cfg != want {
		t.Errorf("config %+v, want %+v", cfg, want)
	}
	wantP := ImageProcessor{PatchSize: 4, Pooling: 3, MaxSoftTokens: 70, Resample: media.Bicubic, DoResize: true,
		DoRescale: true, Rescale: 1.0 / 255, Std: [3]float32{1, 1, 1}}
	if p != wantP {
		t.Errorf("processor %+v, want %+v", p, wantP)
	}
	// The published defaults: a config without vision keys, no processor file.
	def, err := ReadVisionConfig([]byte(`{"model_type": "gemma4", "text_config": {"hidden_size": 1536}, "vision_config": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	if def.Hidden != 768 || def.PatchSize != 16 || def.Pooling != 3 || def.PositionSize != 10240 || def.ImageToken != 258880 ||
		def.StartOfImage != 255999 || def.EndOfImage != 258882 || def.Clipped || def.Standardize {
		t.Errorf("defaults %+v", def)
	}
	dp, err := ReadImageProcessor(nil, def)
	if err != nil || dp.MaxSoftTokens != 280 || dp.Resample != media.Bicubic || dp.DoNormalize {
		t.Errorf("default processor %+v, %v", dp, err)
	}
	if vp, err := ReadVideoProcessor(nil, def); err != nil || vp.MaxSoftTokens != 70 {
		t.Errorf("default video processor %+v, %v", vp, err)
	}
	for _, bad := range []string{
		`{"model_type": "gemma4_text"}`,
		`{"model_type": "gemma4", "vision_config": {"hidden_activation": "relu"}}`,
		`{"model_type": "gemma4", "vision_config": {"head_dim": 6}}`,
	} {
		if _, err := ReadVisionConfig([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	for _, bad := range []string{`{"image_processor": {"max_soft_tokens": 100}}`, `{"patch_size": 14}`, `{"resample": 1}`} {
		if _, err := ReadImageProcessor([]byte(bad), cfg); err == nil {
			t.Errorf("processor %s accepted", bad)
		}
	}
}

func TestFrameStamp(t *testing.T) {
	for _, c := range []struct {
		at   time.Duration
		want string
	}{
		{0, "00:00"}, {time.Second / 2, "00:00"}, {59900 * time.Millisecond, "00:59"}, {70 * time.Second, "01:10"},
		{3599 * time.Second, "59:59"}, {6001 * time.Second, "100:01"},
	} {
		if got := FrameStamp(c.at); got != c.want {
			t.Errorf("FrameStamp(%v) = %q, want %q", c.at, got, c.want)
		}
	}
}

// TestVisionTokens compares Size and Tokens with transformers'
// get_aspect_ratio_preserving_size over budgets.json: every budget, the
// published patch size and the tiny one, square, wide, tall and degenerate
// images.
func TestVisionTokens(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(vlmDir, "budgets.json"))
	if err != nil {
		t.Fatalf("%v (regenerate with scripts/make_tiny_gemma4_vlm.py)", err)
	}
	var rows []struct {
		Width, Height, Patch, Pooling, Budget int
		TargetWidth                           int  `json:"target_width"`
		TargetHeight                          int  `json:"target_height"`
		Tokens                                int  `json:"tokens"`
		Error                                 bool `json:"error"`
	}
	if err := json.Unmarshal(raw, &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) < 100 {
		t.Fatalf("budgets.json has %d rows", len(rows))
	}
	for _, r := range rows {
		p := ImageProcessor{PatchSize: r.Patch, Pooling: r.Pooling, MaxSoftTokens: r.Budget, DoResize: true}
		tw, th, err := p.Size(r.Width, r.Height)
		name := fmt.Sprintf("%dx%d patch %d budget %d", r.Width, r.Height, r.Patch, r.Budget)
		switch {
		case r.Error && err == nil:
			t.Errorf("%s: resized to %dx%d, transformers refuses it", name, tw, th)
		case !r.Error && (err != nil || tw != r.TargetWidth || th != r.TargetHeight):
			t.Errorf("%s: %dx%d (%v), want %dx%d", name, tw, th, err, r.TargetWidth, r.TargetHeight)
		case p.Tokens(r.Width, r.Height) != r.Tokens:
			t.Errorf("%s: %d tokens, want %d", name, p.Tokens(r.Width, r.Height), r.Tokens)
		}
	}
}

// TestVisionPreprocess compares the patches with transformers'
// Gemma4ImageProcessorPil: an upscaled and a downscaled image.
func TestVisionPreprocess(t *testing.T) {
	fx := readVLMFixture(t)
	_, p := readVisionFiles(t)
	for i, im := range fx.Images {
		want, shape := fx.tensor(t, fmt.Sprintf("pixel_values_%d", i))
		rgb, w, h := fx.image(t, i)
		got, err := p.Preprocess(rgb, w, h)
		if err != nil {
			t.Fatal(err)
		}
		if got.Cols != im.GridCols || got.Rows != im.GridRows || !slices.Equal(shape, []int{got.Cols * got.Rows, 48}) {
			t.Fatalf("image%d: %dx%d patches, want %dx%d (%v)", i, got.Cols, got.Rows, im.GridCols, im.GridRows, shape)
		}
		if n := p.Tokens(w, h); n != im.Tokens {
			t.Errorf("image%d: Tokens %d, want %d", i, n, im.Tokens)
		}
		d, at := maxAbsDiff(got.Data, want)
		t.Logf("image%d %dx%d -> %dx%d: max |diff| %.3g", i, w, h, im.ResizedWidth, im.ResizedHeight, d)
		if d > visionTol {
			t.Errorf("image%d: max |diff| %.3g at %d: %v, want %v", i, d, at, got.Data[at], want[at])
		}
	}
	if _, err := p.Preprocess(make([]uint8, 5), 2, 1); err == nil {
		t.Error("a short pixel buffer was accepted")
	}
}

// TestVisionTower runs the tower, pooling and embedder on the reference
// patches and on ours.
func TestVisionTower(t *testing.T) {
	fx := readVLMFixture(t)
	th := mlx.NewThread()
	defer th.Close()
	var (
		v   *Vision
		s   mlx.Stream
		err error
	)
	th.Do(func() {
		s = mlx.DefaultStream()
		v, err = LoadVision(vlmDir, s, mlx.Float32)
	})
	defer th.Do(func() {
		if v != nil {
			v.Free()
		}
		s.Free()
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, im := range fx.Images {
		pixels, _ := fx.tensor(t, fmt.Sprintf("pixel_values_%d", i))
		wantFeat, _ := fx.tensor(t, fmt.Sprintf("vision_features_%d", i))
		wantPool, _ := fx.tensor(t, fmt.Sprintf("pooled_%d", i))
		wantSoft, sshape := fx.tensor(t, fmt.Sprintf("soft_tokens_%d", i))
		rgb, w, h := fx.image(t, i)
		own, err := v.Preprocess(rgb, w, h)
		if err != nil {
			t.Fatal(err)
		}
		ref := Patches{Data: pixels, Cols: im.GridCols, Rows: im.GridRows}
		var feat, pooled, soft, ours []float32
		var softShape []int
		th.Do(func() {
			f := mlx.NewFrame(s)
			defer f.Free()
			fa := v.Features(f, ref)
			pa := v.Pool(f, fa, ref.Cols, ref.Rows)
			sa := v.Embed(f, pa)
			softShape = sa.Shape()
			feat, pooled, soft = f.ToFloat32s(fa), f.ToFloat32s(pa), f.ToFloat32s(sa)
			ours = f.ToFloat32s(v.Encode(f, own))
			err = f.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(softShape, sshape) || sshape[0] != im.Tokens {
			t.Fatalf("image%d: soft tokens %v, want %v (%d tokens)", i, softShape, sshape, im.Tokens)
		}
		for _, c := range []struct {
			name      string
			got, want []float32
		}{
			{"features", feat, wantFeat},
			{"pooled", pooled, wantPool},
			{"soft tokens", soft, wantSoft},
			{"soft tokens from our preprocessing", ours, wantSoft},
		} {
			if len(c.got) != len(c.want) {
				t.Fatalf("image%d %s: %d values, want %d", i, c.name, len(c.got), len(c.want))
			}
			d, at := maxAbsDiff(c.got, c.want)
			t.Logf("image%d %s: max |diff| %.3g", i, c.name, d)
			if d > visionTol {
				t.Errorf("image%d %s: max |diff| %.3g at %d: %v, want %v", i, c.name, d, at, c.got[at], c.want[at])
			}
		}
	}
	// A grid past the position table is refused, not read out of bounds.
	th.Do(func() {
		f := mlx.NewFrame(s)
		defer f.Free()
		n := 66 * 3
		v.Features(f, Patches{Data: make([]float32, n*48), Cols: 66, Rows: 3})
		err = f.Err()
	})
	if err == nil {
		t.Error("a 66-column grid ran on a 64-position tower")
	}
}

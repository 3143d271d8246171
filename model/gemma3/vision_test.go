package gemma3

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/goprovider/provider/mlx"
)

// vlmDir holds the tiny random Gemma 3 vision-language checkpoint and what
// mlx-vlm computes for it (scripts/make_tiny_gemma3_vlm.py; its docstring
// describes the files).
const vlmDir = "../../testdata/ref/gemma3_vlm_tiny"

// visionTol bounds |ours - mlx-vlm| on pixels, features and soft tokens.
const visionTol = 1e-4

type vlmFixture struct {
	Images []struct {
		File          string `json:"file"`
		Width, Height int
	} `json:"images"`
	Tensors map[string]struct {
		File  string `json:"file"`
		Shape []int  `json:"shape"`
	} `json:"tensors"`
}

// readVLMFixture reads fixture.json; a missing fixture is a failure, never
// a skip.
func readVLMFixture(t *testing.T) *vlmFixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vlmDir, "fixture.json"))
	if err != nil {
		t.Fatalf("%v (regenerate with scripts/make_tiny_gemma3_vlm.py)", err)
	}
	var fx vlmFixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
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

func readProcessor(t *testing.T) (VisionConfig, ImageProcessor) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vlmDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ReadVisionConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	pre, err := os.ReadFile(filepath.Join(vlmDir, "preprocessor_config.json"))
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
	cfg, p := readProcessor(t)
	want := VisionConfig{
		Hidden: 32, Intermediate: 64, Layers: 2, Heads: 4, Channels: 3, ImageSize: 112, PatchSize: 14,
		NormEps: 1e-6, TokensPerImage: 16, TextHidden: 64, ImageToken: 262, StartOfImage: 260, EndOfImage: 261,
	}
	if cfg != want {
		t.Errorf("config %+v, want %+v", cfg, want)
	}
	if p.Resample != Bilinear || p.Width != 112 || p.Height != 112 || p.Rescale != 1.0/255 {
		t.Errorf("processor %+v", p)
	}
}

// TestVisionPreprocess compares the preprocessing with transformers'
// Gemma3ImageProcessor (PIL backend): an upscaled and a downscaled image
// with the checkpoint's bilinear filter, and the downscaled one bicubic.
func TestVisionPreprocess(t *testing.T) {
	fx := readVLMFixture(t)
	_, p := readProcessor(t)
	bilinear, shape := fx.tensor(t, "pixel_values")
	bicubic, bshape := fx.tensor(t, "pixel_values_bicubic")
	plane := 3 * p.Width * p.Height
	if !slices.Equal(shape, []int{len(fx.Images), 3, p.Height, p.Width}) || !slices.Equal(bshape, []int{1, 3, p.Height, p.Width}) {
		t.Fatalf("pixel shapes %v, %v", shape, bshape)
	}
	cubic := p
	cubic.Resample = Bicubic
	for _, c := range []struct {
		name  string
		proc  ImageProcessor
		image int
		want  []float32
	}{
		{"image0 bilinear (upscale)", p, 0, bilinear[:plane]},
		{"image1 bilinear (downscale)", p, 1, bilinear[plane:]},
		{"image1 bicubic (downscale)", cubic, 1, bicubic},
	} {
		rgb, w, h := fx.image(t, c.image)
		got, err := c.proc.Preprocess(rgb, w, h)
		if err != nil {
			t.Fatal(err)
		}
		d, at := maxAbsDiff(got, c.want)
		t.Logf("%s: max |diff| %.3g", c.name, d)
		if d > visionTol {
			t.Errorf("%s: max |diff| %.3g at %d: %v, want %v", c.name, d, at, got[at], c.want[at])
		}
	}
	if _, err := p.Preprocess(make([]uint8, 5), 2, 1); err == nil {
		t.Error("a short pixel buffer was accepted")
	}
}

// TestVisionTower runs the tower and projector on mlx-vlm's pixels, on
// pixels preprocessed here, and on one image alone.
func TestVisionTower(t *testing.T) {
	fx := readVLMFixture(t)
	pixels, pshape := fx.tensor(t, "pixel_values")
	wantFeat, fshape := fx.tensor(t, "vision_features")
	wantSoft, sshape := fx.tensor(t, "soft_tokens")

	type image struct {
		rgb  []uint8
		w, h int
	}
	var images []image
	for i := range fx.Images {
		rgb, w, h := fx.image(t, i)
		images = append(images, image{rgb, w, h})
	}

	th := mlx.NewThread()
	defer th.Close()
	var (
		v    *Vision
		s    mlx.Stream
		err  error
		feat []float32
		soft []float32
		own  []float32
		one  []float32
		fsh  []int
		ssh  []int
	)
	th.Do(func() {
		s = mlx.DefaultStream()
		if v, err = LoadVision(vlmDir, s, mlx.Float32); err != nil {
			return
		}
		f := mlx.NewFrame(s)
		defer f.Free()
		px := f.Float32s(pixels, pshape...)
		fa := v.Features(f, px)
		sa := v.Project(f, fa)
		fsh, ssh = fa.Shape(), sa.Shape()
		feat, soft = f.ToFloat32s(fa), f.ToFloat32s(sa)

		var mine []float32
		for _, im := range images {
			p, perr := v.Preprocess(im.rgb, im.w, im.h)
			if perr != nil {
				err = perr
				return
			}
			mine = append(mine, p...)
		}
		own = f.ToFloat32s(v.Encode(f, f.Float32s(mine, pshape...)))
		plane := len(pixels) / pshape[0]
		one = f.ToFloat32s(v.Encode(f, f.Float32s(pixels[plane:], 1, pshape[1], pshape[2], pshape[3])))
		err = f.Err()
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
	if !slices.Equal(fsh, fshape) || !slices.Equal(ssh, sshape) {
		t.Fatalf("shapes %v and %v, want %v and %v", fsh, ssh, fshape, sshape)
	}
	perImage := len(wantSoft) / sshape[0]
	for _, c := range []struct {
		name      string
		got, want []float32
	}{
		{"features", feat, wantFeat},
		{"soft tokens", soft, wantSoft},
		{"soft tokens from our preprocessing", own, wantSoft},
		{"image1 alone", one, wantSoft[perImage:]},
	} {
		if len(c.got) != len(c.want) {
			t.Fatalf("%s: %d values, want %d", c.name, len(c.got), len(c.want))
		}
		d, at := maxAbsDiff(c.got, c.want)
		t.Logf("%s: max |diff| %.3g", c.name, d)
		if d > visionTol {
			t.Errorf("%s: max |diff| %.3g at %d: %v, want %v", c.name, d, at, c.got[at], c.want[at])
		}
	}
}

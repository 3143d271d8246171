package gemma3

// The vision side of the Gemma 3 multimodal models: image preprocessing,
// the SigLIP vision tower and the multimodal projector that turns an image
// into the soft tokens the language model reads in place of its image
// placeholder tokens.
//
// Preprocessing (ImageProcessor) is Gemma3ImageProcessor's: the RGB image
// resized to the tower's square input with PIL's resampling (bilinear in
// the published checkpoints), rescaled by 1/255 and normalized with mean
// and std 0.5 per channel, channels first. The resize reproduces PIL's
// fixed-point convolution on 8-bit pixels, rounding included, so the
// result is the reference's value for value; pan-and-scan crops are not
// implemented.
//
// The tower: a non-overlapping patch embedding (a strided convolution,
// computed as one matmul over flattened patches), learned position
// embeddings, pre-norm encoder layers (LayerNorm, bidirectional multi-head
// attention with biases, a tanh-GELU MLP) and a final LayerNorm. The
// projector average-pools the patch grid to mm_tokens_per_image tokens
// (a square grid), applies Gemma's RMSNorm (multiplier 1+w) and multiplies
// by mm_input_projection_weight, [vision hidden, text hidden].
//
// What the language model does with the soft tokens is not here. For the
// record: HF transformers writes them unscaled over the embeddings of the
// image tokens (text embeddings are scaled by sqrt(hidden), the soft
// tokens are not), and, given the token_type_ids its processor returns,
// lets the image tokens of one image attend to each other
// bidirectionally. mlx-vlm divides them by the square root of the
// top-level config's hidden_size (2048 when config.json has none) before
// its language model multiplies every input embedding by sqrt(text
// hidden) rounded to bfloat16, and keeps the mask causal.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/goprovider/provider/media"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/safetensors"
)

// VisionConfig is the architecture of the vision tower and projector, from
// a multimodal config.json (vision_config and the top-level keys).
type VisionConfig struct {
	Hidden, Intermediate, Layers, Heads int
	Channels, ImageSize, PatchSize      int
	// NormEps is the LayerNorms' epsilon (every one of them, the final
	// one included, as HF transformers builds the tower) and the
	// projector RMSNorm's.
	NormEps float32
	// TokensPerImage is the number of soft tokens per image: a square
	// whose side divides the patch grid's.
	TokensPerImage int
	TextHidden     int
	// ImageToken is the placeholder each soft token replaces; StartOfImage
	// and EndOfImage bracket the run of placeholders in a prompt.
	ImageToken, StartOfImage, EndOfImage int32
}

// Grid is the number of patches along each side of the input image.
func (c VisionConfig) Grid() int { return c.ImageSize / c.PatchSize }

// hfVision is the subset of a Gemma 3 config.json the vision side reads.
// gemma3VisionDefaults fills it first: published configs leave out keys
// whose transformers default applies (layer_norm_eps, num_channels).
type hfVision struct {
	ModelType        string `json:"model_type"`
	MMTokensPerImage int    `json:"mm_tokens_per_image"`
	ImageTokenIndex  int32  `json:"image_token_index"`
	BOITokenIndex    int32  `json:"boi_token_index"`
	EOITokenIndex    int32  `json:"eoi_token_index"`
	TextConfig       struct {
		HiddenSize int `json:"hidden_size"`
	} `json:"text_config"`
	VisionConfig struct {
		ModelType         string  `json:"model_type"`
		HiddenSize        int     `json:"hidden_size"`
		IntermediateSize  int     `json:"intermediate_size"`
		NumHiddenLayers   int     `json:"num_hidden_layers"`
		NumAttentionHeads int     `json:"num_attention_heads"`
		NumChannels       int     `json:"num_channels"`
		ImageSize         int     `json:"image_size"`
		PatchSize         int     `json:"patch_size"`
		LayerNormEps      float64 `json:"layer_norm_eps"`
		HiddenAct         string  `json:"hidden_act"`
		VisionUseHead     bool    `json:"vision_use_head"`
	} `json:"vision_config"`
}

// gemma3VisionDefaults are transformers' Gemma3Config defaults (its
// default vision_config is gemma-3-4b's SigLIP).
func gemma3VisionDefaults() hfVision {
	var h hfVision
	h.MMTokensPerImage = 256
	h.ImageTokenIndex, h.BOITokenIndex, h.EOITokenIndex = 262144, 255999, 256000
	h.TextConfig.HiddenSize = 2304
	v := &h.VisionConfig
	v.HiddenSize, v.IntermediateSize, v.NumHiddenLayers, v.NumAttentionHeads = 1152, 4304, 27, 16
	v.NumChannels, v.ImageSize, v.PatchSize = 3, 896, 14
	v.LayerNormEps, v.HiddenAct = 1e-6, "gelu_pytorch_tanh"
	return h
}

// ReadVisionConfig parses the vision side of a Gemma 3 multimodal
// config.json.
func ReadVisionConfig(data []byte) (VisionConfig, error) {
	h := gemma3VisionDefaults()
	if err := json.Unmarshal(data, &h); err != nil {
		return VisionConfig{}, fmt.Errorf("gemma3 vision: %w: config.json: %w", model.ErrBadConfig, err)
	}
	vc := h.VisionConfig
	switch {
	case h.ModelType != "gemma3":
		return VisionConfig{}, fmt.Errorf("gemma3 vision: %w: model_type %q has no vision tower", model.ErrUnsupportedArch, h.ModelType)
	case vc.ModelType != "" && vc.ModelType != "siglip_vision_model":
		return VisionConfig{}, fmt.Errorf("gemma3 vision: %w: vision model_type %q", model.ErrUnsupportedArch, vc.ModelType)
	case vc.HiddenAct != "gelu_pytorch_tanh" && vc.HiddenAct != "gelu_tanh":
		return VisionConfig{}, fmt.Errorf("gemma3 vision: %w: activation %q", model.ErrUnsupportedArch, vc.HiddenAct)
	case vc.VisionUseHead:
		return VisionConfig{}, fmt.Errorf("gemma3 vision: %w: vision_use_head", model.ErrUnsupportedArch)
	}
	c := VisionConfig{
		Hidden: vc.HiddenSize, Intermediate: vc.IntermediateSize, Layers: vc.NumHiddenLayers, Heads: vc.NumAttentionHeads,
		Channels: vc.NumChannels, ImageSize: vc.ImageSize, PatchSize: vc.PatchSize, NormEps: float32(vc.LayerNormEps),
		TokensPerImage: h.MMTokensPerImage, TextHidden: h.TextConfig.HiddenSize,
		ImageToken: h.ImageTokenIndex, StartOfImage: h.BOITokenIndex, EndOfImage: h.EOITokenIndex,
	}
	return c, c.validate()
}

func (c VisionConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("gemma3 vision: %w: "+format, append([]any{model.ErrBadConfig}, args...)...)
	}
	switch {
	case c.Hidden <= 0 || c.Intermediate <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.Channels <= 0 || c.TextHidden <= 0:
		return bad("%+v", c)
	case c.Hidden%c.Heads != 0:
		return bad("hidden %d is not whole heads of %d", c.Hidden, c.Heads)
	case c.PatchSize <= 0 || c.ImageSize <= 0 || c.ImageSize%c.PatchSize != 0:
		return bad("image size %d is not whole patches of %d", c.ImageSize, c.PatchSize)
	}
	side := int(math.Round(math.Sqrt(float64(c.TokensPerImage))))
	if c.TokensPerImage <= 0 || side*side != c.TokensPerImage || c.Grid()%side != 0 {
		return bad("%d tokens per image do not pool a %dx%d patch grid", c.TokensPerImage, c.Grid(), c.Grid())
	}
	return nil
}

// Resample is one of PIL's resampling filters (media.Resample).
type Resample = media.Resample

// The filters the preprocessing reproduces.
const (
	Bilinear = media.Bilinear
	Bicubic  = media.Bicubic
)

// ImageProcessor is the preprocessing of preprocessor_config.json.
type ImageProcessor struct {
	Width, Height int
	Resample      Resample
	DoResize      bool
	DoRescale     bool
	Rescale       float64
	DoNormalize   bool
	Mean, Std     [3]float32
}

type hfPreprocessor struct {
	DoResize *bool `json:"do_resize"`
	Size     struct {
		Height int `json:"height"`
		Width  int `json:"width"`
	} `json:"size"`
	Resample      *int      `json:"resample"`
	DoRescale     *bool     `json:"do_rescale"`
	RescaleFactor *float64  `json:"rescale_factor"`
	DoNormalize   *bool     `json:"do_normalize"`
	ImageMean     []float64 `json:"image_mean"`
	ImageStd      []float64 `json:"image_std"`
	DoPanAndScan  *bool     `json:"do_pan_and_scan"`
}

// ReadImageProcessor parses preprocessor_config.json; keys it leaves out
// keep Gemma3ImageProcessor's defaults, the size the tower's input. data
// may be nil (no file): all defaults.
func ReadImageProcessor(data []byte, c VisionConfig) (ImageProcessor, error) {
	p := ImageProcessor{
		Width: c.ImageSize, Height: c.ImageSize, Resample: Bilinear,
		DoResize: true, DoRescale: true, Rescale: 1.0 / 255, DoNormalize: true,
		Mean: [3]float32{0.5, 0.5, 0.5}, Std: [3]float32{0.5, 0.5, 0.5},
	}
	var h hfPreprocessor
	if data != nil {
		if err := json.Unmarshal(data, &h); err != nil {
			return p, fmt.Errorf("gemma3 vision: %w: preprocessor_config.json: %w", model.ErrBadConfig, err)
		}
	}
	for _, b := range []struct{ dst, src *bool }{
		{&p.DoResize, h.DoResize}, {&p.DoRescale, h.DoRescale}, {&p.DoNormalize, h.DoNormalize},
	} {
		if b.src != nil {
			*b.dst = *b.src
		}
	}
	if h.Size.Height > 0 || h.Size.Width > 0 {
		p.Width, p.Height = h.Size.Width, h.Size.Height
	}
	if h.Resample != nil {
		p.Resample = Resample(*h.Resample)
	}
	if h.RescaleFactor != nil {
		p.Rescale = *h.RescaleFactor
	}
	for _, ms := range []struct {
		dst *[3]float32
		src []float64
	}{{&p.Mean, h.ImageMean}, {&p.Std, h.ImageStd}} {
		switch len(ms.src) {
		case 0:
		case 1, 3:
			for i := range ms.dst {
				ms.dst[i] = float32(ms.src[min(i, len(ms.src)-1)])
			}
		default:
			return p, fmt.Errorf("gemma3 vision: %w: %d channel statistics for 3 channels", model.ErrBadConfig, len(ms.src))
		}
	}
	switch {
	case h.DoPanAndScan != nil && *h.DoPanAndScan:
		return p, fmt.Errorf("gemma3 vision: %w: pan and scan", model.ErrUnsupportedArch)
	case !p.Resample.Valid():
		return p, fmt.Errorf("gemma3 vision: %w: resample filter %d", model.ErrUnsupportedArch, p.Resample)
	case p.Width != c.ImageSize || p.Height != c.ImageSize || !p.DoResize:
		return p, fmt.Errorf("gemma3 vision: %w: images sized %dx%d (resize %v) for a %d-pixel tower",
			model.ErrBadConfig, p.Width, p.Height, p.DoResize, c.ImageSize)
	case c.Channels != 3:
		return p, fmt.Errorf("gemma3 vision: %w: %d input channels", model.ErrUnsupportedArch, c.Channels)
	}
	return p, nil
}

// ErrImage means an image's pixels do not match its stated size.
var ErrImage = errors.New("gemma3 vision: bad image")

// Preprocess turns an 8-bit RGB image (row-major, 3 bytes per pixel, w x h)
// into the tower's input, [3, Height, Width] float32: resized with PIL's
// arithmetic (see media.Resize), then float32(float64(v)*Rescale), then
// (x-mean)/std in float32, as transformers' NumPy code computes them.
func (p ImageProcessor) Preprocess(rgb []uint8, w, h int) ([]float32, error) {
	if w <= 0 || h <= 0 || len(rgb) != w*h*3 {
		return nil, fmt.Errorf("%w: %d bytes for %dx%d RGB", ErrImage, len(rgb), w, h)
	}
	if p.DoResize && (w != p.Width || h != p.Height) {
		rgb = media.Resize(rgb, w, h, p.Width, p.Height, p.Resample)
		w, h = p.Width, p.Height
	}
	if w != p.Width || h != p.Height {
		return nil, fmt.Errorf("%w: %dx%d image, %dx%d wanted", ErrImage, w, h, p.Width, p.Height)
	}
	out := make([]float32, 3*w*h)
	plane := w * h
	for i := range plane {
		for ch := range 3 {
			x := float32(rgb[3*i+ch])
			if p.DoRescale {
				x = float32(float64(rgb[3*i+ch]) * p.Rescale)
			}
			if p.DoNormalize {
				x = (x - p.Mean[ch]) / p.Std[ch]
			}
			out[ch*plane+i] = x
		}
	}
	return out, nil
}

type visionLayer struct {
	ln1W, ln1B, ln2W, ln2B mlx.Array // float32
	q, k, v, o             linear
	fc1, fc2               linear
}

// linear is y = x @ W.T + b, W [out, in].
type linear struct{ w, b mlx.Array }

func (l linear) apply(f *mlx.Frame, x mlx.Array) mlx.Array {
	return f.Add(f.MatMul(x, f.Transpose(l.w, 1, 0)), l.b)
}

// Vision is a Gemma 3 vision tower and multimodal projector bound to
// device weights it owns.
type Vision struct {
	Config    VisionConfig
	Processor ImageProcessor

	act       mlx.Dtype
	patchW    mlx.Array // [hidden, channels*patch*patch], PyTorch's (c, kh, kw) order
	patchB    mlx.Array
	pos       mlx.Array // [patches, hidden]
	layers    []visionLayer
	postW     mlx.Array // float32
	postB     mlx.Array
	softNorm  mlx.Array // float32, Gemma's 1+w
	projW     mlx.Array // [hidden, text hidden]
	tensors   *model.TowerTensors
	attnScale float32
}

// Where checkpoints keep the vision tower and the projector: the original
// release's names, and transformers 5's (under model.).
var (
	visionPrefixes    = []string{"vision_tower.vision_model.", "model.vision_tower.vision_model."}
	projectorPrefixes = []string{"multi_modal_projector.", "model.multi_modal_projector."}
)

// LoadVision reads the vision tower and projector of the Gemma 3
// multimodal checkpoint in dir (config.json, preprocessor_config.json when
// present, the safetensors weights) and uploads them to s, matrices in act
// (float32 or a 16-bit float type), norm parameters in float32. Call on the
// MLX thread.
func LoadVision(dir string, s mlx.Stream, act mlx.Dtype) (*Vision, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("gemma3 vision: %w", err)
	}
	cfg, err := ReadVisionConfig(raw)
	if err != nil {
		return nil, err
	}
	pre, err := os.ReadFile(filepath.Join(dir, "preprocessor_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("gemma3 vision: %w", err)
	}
	proc, err := ReadImageProcessor(pre, cfg)
	if err != nil {
		return nil, err
	}
	if act != mlx.Float32 && act != mlx.Float16 && act != mlx.BFloat16 {
		return nil, fmt.Errorf("gemma3 vision: %w: activations in %v", model.ErrUnsupportedType, act)
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("gemma3 vision: %w", err)
	}
	defer st.Close()
	v := &Vision{Config: cfg, Processor: proc, act: act, attnScale: float32(1 / math.Sqrt(float64(cfg.Hidden/cfg.Heads)))}
	if err := v.upload(st, s); err != nil {
		v.Free()
		return nil, fmt.Errorf("gemma3 vision: %s: %w", dir, err)
	}
	return v, nil
}

func (v *Vision) upload(st *safetensors.Dir, s mlx.Stream) error {
	c := v.Config
	v.tensors = model.NewTowerTensors(st, s)
	t := v.tensors
	H, P, C := c.Hidden, c.PatchSize, c.Channels
	act, f32 := v.act, mlx.Float32
	vp := visionPrefixes
	// The patch embedding is [hidden, channels, kh, kw] in PyTorch's layout
	// and [hidden, kh, kw, channels] in MLX conversions.
	patch := "embeddings.patch_embedding.weight"
	_, info, err := t.Lookup(vp, patch)
	if err != nil {
		return err
	}
	flatten := func(f *mlx.Frame, a mlx.Array) mlx.Array { return f.Reshape(a, H, C*P*P) }
	if slices.Equal(info.Shape, []int{H, P, P, C}) && C != P {
		fromMLX := func(f *mlx.Frame, a mlx.Array) mlx.Array { return flatten(f, f.Transpose(a, 0, 3, 1, 2)) }
		err = t.Get(model.TowerTensor{Dst: &v.patchW, Prefixes: vp, Name: patch, DType: act, Shape: []int{H, P, P, C}}, fromMLX)
	} else {
		err = t.Get(model.TowerTensor{Dst: &v.patchW, Prefixes: vp, Name: patch, DType: act, Shape: []int{H, C, P, P}}, flatten)
	}
	if err != nil {
		return err
	}
	n := c.Grid() * c.Grid()
	specs := []model.TowerTensor{
		{Dst: &v.patchB, Prefixes: vp, Name: "embeddings.patch_embedding.bias", DType: act, Shape: []int{H}},
		{Dst: &v.pos, Prefixes: vp, Name: "embeddings.position_embedding.weight", DType: act, Shape: []int{n, H}},
		{Dst: &v.postW, Prefixes: vp, Name: "post_layernorm.weight", DType: f32, Shape: []int{H}},
		{Dst: &v.postB, Prefixes: vp, Name: "post_layernorm.bias", DType: f32, Shape: []int{H}},
		{Dst: &v.projW, Prefixes: projectorPrefixes, Name: "mm_input_projection_weight", DType: act, Shape: []int{H, c.TextHidden}},
	}
	v.layers = make([]visionLayer, c.Layers)
	for i := range v.layers {
		l := &v.layers[i]
		p := fmt.Sprintf("encoder.layers.%d.", i)
		for _, lin := range []struct {
			dst     *linear
			name    string
			in, out int
		}{
			{&l.q, "self_attn.q_proj", H, H}, {&l.k, "self_attn.k_proj", H, H}, {&l.v, "self_attn.v_proj", H, H},
			{&l.o, "self_attn.out_proj", H, H}, {&l.fc1, "mlp.fc1", H, c.Intermediate}, {&l.fc2, "mlp.fc2", c.Intermediate, H},
		} {
			specs = append(specs,
				model.TowerTensor{Dst: &lin.dst.w, Prefixes: vp, Name: p + lin.name + ".weight", DType: act, Shape: []int{lin.out, lin.in}},
				model.TowerTensor{Dst: &lin.dst.b, Prefixes: vp, Name: p + lin.name + ".bias", DType: act, Shape: []int{lin.out}})
		}
		for _, ln := range []struct {
			dst  *mlx.Array
			name string
		}{{&l.ln1W, "layer_norm1.weight"}, {&l.ln1B, "layer_norm1.bias"}, {&l.ln2W, "layer_norm2.weight"}, {&l.ln2B, "layer_norm2.bias"}} {
			specs = append(specs, model.TowerTensor{Dst: ln.dst, Prefixes: vp, Name: p + ln.name, DType: f32, Shape: []int{H}})
		}
	}
	if err := t.GetAll(specs); err != nil {
		return err
	}
	plusOne := func(f *mlx.Frame, a mlx.Array) mlx.Array { return f.Add(a, f.Scalar(1)) }
	return t.Get(model.TowerTensor{Dst: &v.softNorm, Prefixes: projectorPrefixes, Name: "mm_soft_emb_norm.weight", DType: f32, Shape: []int{H}}, plusOne)
}

// Free releases the device weights.
func (v *Vision) Free() {
	if v.tensors != nil {
		v.tensors.Free()
	}
}

// Preprocess is v.Processor.Preprocess.
func (v *Vision) Preprocess(rgb []uint8, w, h int) ([]float32, error) {
	return v.Processor.Preprocess(rgb, w, h)
}

// Encode turns preprocessed images, [n, channels, size, size] (Preprocess
// outputs stacked), into soft tokens, [n, TokensPerImage, TextHidden] in
// the activation dtype.
func (v *Vision) Encode(f *mlx.Frame, pixels mlx.Array) mlx.Array {
	return v.Project(f, v.Features(f, pixels))
}

// Features is the vision tower: [n, channels, size, size] pixels to the
// final LayerNorm's output, [n, patches, hidden], patches in row-major
// grid order.
func (v *Vision) Features(f *mlx.Frame, pixels mlx.Array) mlx.Array {
	c := v.Config
	g, P, H := c.Grid(), c.PatchSize, c.Hidden
	if f.Err() != nil || !pixels.Valid() {
		f.Fail(fmt.Errorf("%w: no pixels", ErrImage))
		return mlx.Array{}
	}
	if sh := pixels.Shape(); len(sh) != 4 || sh[1] != c.Channels || sh[2] != c.ImageSize || sh[3] != c.ImageSize {
		f.Fail(fmt.Errorf("%w: pixels %v, want [n %d %d %d]", ErrImage, sh, c.Channels, c.ImageSize, c.ImageSize))
		return mlx.Array{}
	}
	n := pixels.Dim(0)
	// Non-overlapping patches: [n, C, g, P, g, P] -> [n, g, g, C, P, P],
	// flattened to match the PyTorch kernel's (c, kh, kw) order.
	x := f.Reshape(f.AsType(pixels, v.act), n, c.Channels, g, P, g, P)
	x = f.Reshape(f.Transpose(x, 0, 2, 4, 1, 3, 5), n, g*g, c.Channels*P*P)
	x = f.Add(linear{v.patchW, v.patchB}.apply(f, x), v.pos)
	heads, hd := c.Heads, H/c.Heads
	split := func(a mlx.Array) mlx.Array { return f.Transpose(f.Reshape(a, n, g*g, heads, hd), 0, 2, 1, 3) }
	for i := range v.layers {
		l := &v.layers[i]
		h := layerNorm(f, x, l.ln1W, l.ln1B, c.NormEps)
		a := f.Attention(split(l.q.apply(f, h)), split(l.k.apply(f, h)), split(l.v.apply(f, h)), v.attnScale, "", mlx.Array{}, mlx.Array{})
		a = f.Reshape(f.Transpose(a, 0, 2, 1, 3), n, g*g, H)
		x = f.Add(x, l.o.apply(f, a))
		h = layerNorm(f, x, l.ln2W, l.ln2B, c.NormEps)
		x = f.Add(x, l.fc2.apply(f, tanhGELU(f, l.fc1.apply(f, h))))
	}
	return layerNorm(f, x, v.postW, v.postB, c.NormEps)
}

// Project is the multimodal projector: tower features [n, patches, hidden]
// average-pooled over square blocks of the patch grid to TokensPerImage
// tokens (row-major), RMS-normalized and projected to the text hidden
// size.
func (v *Vision) Project(f *mlx.Frame, features mlx.Array) mlx.Array {
	c := v.Config
	g := c.Grid()
	if f.Err() != nil || !features.Valid() {
		f.Fail(fmt.Errorf("%w: no features", ErrImage))
		return mlx.Array{}
	}
	if sh := features.Shape(); len(sh) != 3 || sh[1] != g*g || sh[2] != c.Hidden {
		f.Fail(fmt.Errorf("%w: features %v, want [n %d %d]", ErrImage, sh, g*g, c.Hidden))
		return mlx.Array{}
	}
	n := features.Dim(0)
	t := int(math.Round(math.Sqrt(float64(c.TokensPerImage))))
	k := g / t
	// Patch (row, col) = (tr*k + kr, tc*k + kc): pool over kr and kc.
	x := f.Reshape(features, n, t, k, t, k, c.Hidden)
	x = f.Mean(f.Mean(x, 4, false), 2, false)
	x = f.Reshape(x, n, t*t, c.Hidden)
	x = f.AsType(f.RMSNorm(f.AsType(x, mlx.Float32), v.softNorm, c.NormEps), v.act)
	return f.MatMul(x, v.projW)
}

// layerNorm normalizes the last axis in float32 and returns x's dtype.
func layerNorm(f *mlx.Frame, x, w, b mlx.Array, eps float32) mlx.Array {
	dt := x.Dtype()
	x = f.AsType(x, mlx.Float32)
	centred := f.Subtract(x, f.Mean(x, -1, true))
	variance := f.Mean(f.Square(centred), -1, true)
	y := f.Multiply(centred, f.Rsqrt(f.Add(variance, f.Scalar(eps))))
	return f.AsType(f.Add(f.Multiply(y, w), b), dt)
}

// tanhGELU is x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), SigLIP's
// gelu_pytorch_tanh, in x's dtype.
func tanhGELU(f *mlx.Frame, x mlx.Array) mlx.Array {
	dt := x.Dtype()
	k := func(v float32) mlx.Array { return f.AsType(f.Scalar(v), dt) }
	cube := f.Multiply(f.Multiply(x, x), x)
	inner := f.Multiply(k(geluSqrt2OnPi), f.Add(x, f.Multiply(k(geluCoefA), cube)))
	return f.Multiply(f.Multiply(k(0.5), x), f.Add(k(1), f.Tanh(inner)))
}

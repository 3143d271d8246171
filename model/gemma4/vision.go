package gemma4

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/goprovider/provider/media"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/safetensors"
)

// VisionConfig is the architecture of the vision tower and the multimodal
// embedder, from a gemma4 config.json (vision_config and the top-level
// token ids).
type VisionConfig struct {
	Hidden, Intermediate, Layers int
	Heads, KVHeads, HeadDim      int
	PatchSize, Pooling           int
	// PositionSize is the length of each axis' position table: a patch
	// column or row must be below it.
	PositionSize int
	NormEps      float32
	RoPEBase     float32
	// Clipped: every linear layer clamps its input and its output to the
	// checkpoint's bounds (use_clipped_linears).
	Clipped bool
	// Standardize: the pooled vectors become (x - std_bias) * std_scale.
	Standardize bool
	TextHidden  int
	// ImageToken is the placeholder each soft token of an image replaces,
	// VideoToken each of a video frame; StartOfImage and EndOfImage
	// bracket an image's or a frame's run of them.
	ImageToken, VideoToken, StartOfImage, EndOfImage int32
}

// hfVision is the subset of a Gemma 4 config.json the vision side reads,
// filled first with transformers' defaults.
type hfVision struct {
	ModelType    string `json:"model_type"`
	ImageTokenID int32  `json:"image_token_id"`
	VideoTokenID int32  `json:"video_token_id"`
	BOITokenID   int32  `json:"boi_token_id"`
	EOITokenID   int32  `json:"eoi_token_id"`
	TextConfig   struct {
		HiddenSize int `json:"hidden_size"`
	} `json:"text_config"`
	VisionConfig *struct {
		ModelType         string  `json:"model_type"`
		HiddenSize        int     `json:"hidden_size"`
		IntermediateSize  int     `json:"intermediate_size"`
		NumHiddenLayers   int     `json:"num_hidden_layers"`
		NumAttentionHeads int     `json:"num_attention_heads"`
		NumKeyValueHeads  int     `json:"num_key_value_heads"`
		HeadDim           int     `json:"head_dim"`
		HiddenActivation  string  `json:"hidden_activation"`
		RMSNormEps        float64 `json:"rms_norm_eps"`
		AttentionBias     bool    `json:"attention_bias"`
		RopeParameters    struct {
			RopeTheta float64 `json:"rope_theta"`
			RopeType  string  `json:"rope_type"`
		} `json:"rope_parameters"`
		PoolingKernelSize int  `json:"pooling_kernel_size"`
		PatchSize         int  `json:"patch_size"`
		PositionEmbedding int  `json:"position_embedding_size"`
		UseClippedLinears bool `json:"use_clipped_linears"`
		Standardize       bool `json:"standardize"`
	} `json:"vision_config"`
}

// ReadVisionConfig parses the vision side of a Gemma 4 multimodal
// config.json; keys it leaves out keep transformers' Gemma4VisionConfig
// and Gemma4Config defaults.
func ReadVisionConfig(data []byte) (VisionConfig, error) {
	var h hfVision
	h.ImageTokenID, h.VideoTokenID, h.BOITokenID, h.EOITokenID = 258880, 258884, 255999, 258882
	if err := json.Unmarshal(data, &h); err != nil {
		return VisionConfig{}, fmt.Errorf("gemma4 vision: %w: config.json: %w", model.ErrBadConfig, err)
	}
	if h.ModelType != "gemma4" || h.VisionConfig == nil {
		return VisionConfig{}, fmt.Errorf("gemma4 vision: %w: model_type %q has no vision tower", model.ErrUnsupportedArch, h.ModelType)
	}
	// Keys vision_config leaves out are zero here: the defaults fill them.
	vc := *h.VisionConfig
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&vc.HiddenSize, 768)
	def(&vc.IntermediateSize, 3072)
	def(&vc.NumHiddenLayers, 16)
	def(&vc.NumAttentionHeads, 12)
	def(&vc.NumKeyValueHeads, 12)
	def(&vc.HeadDim, 64)
	def(&vc.PoolingKernelSize, 3)
	def(&vc.PatchSize, 16)
	def(&vc.PositionEmbedding, 10240)
	if vc.RMSNormEps == 0 {
		vc.RMSNormEps = 1e-6
	}
	if vc.RopeParameters.RopeTheta == 0 {
		vc.RopeParameters.RopeTheta = 100
	}
	switch {
	case vc.ModelType != "" && vc.ModelType != "gemma4_vision":
		return VisionConfig{}, fmt.Errorf("gemma4 vision: %w: vision model_type %q", model.ErrUnsupportedArch, vc.ModelType)
	case vc.HiddenActivation != "" && vc.HiddenActivation != "gelu_pytorch_tanh" && vc.HiddenActivation != "gelu_tanh":
		return VisionConfig{}, fmt.Errorf("gemma4 vision: %w: activation %q", model.ErrUnsupportedArch, vc.HiddenActivation)
	case vc.AttentionBias:
		return VisionConfig{}, fmt.Errorf("gemma4 vision: %w: attention biases", model.ErrUnsupportedArch)
	case vc.RopeParameters.RopeType != "" && vc.RopeParameters.RopeType != "default" && vc.RopeParameters.RopeType != "axial":
		return VisionConfig{}, fmt.Errorf("gemma4 vision: %w: rope_type %q", model.ErrUnsupportedArch, vc.RopeParameters.RopeType)
	}
	c := VisionConfig{
		Hidden: vc.HiddenSize, Intermediate: vc.IntermediateSize, Layers: vc.NumHiddenLayers,
		Heads: vc.NumAttentionHeads, KVHeads: vc.NumKeyValueHeads, HeadDim: vc.HeadDim,
		PatchSize: vc.PatchSize, Pooling: vc.PoolingKernelSize, PositionSize: vc.PositionEmbedding,
		NormEps: float32(vc.RMSNormEps), RoPEBase: float32(vc.RopeParameters.RopeTheta),
		Clipped: vc.UseClippedLinears, Standardize: vc.Standardize, TextHidden: h.TextConfig.HiddenSize,
		ImageToken: h.ImageTokenID, VideoToken: h.VideoTokenID, StartOfImage: h.BOITokenID, EndOfImage: h.EOITokenID,
	}
	return c, c.validate()
}

func (c VisionConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("gemma4 vision: %w: "+format, append([]any{model.ErrBadConfig}, args...)...)
	}
	switch {
	case c.Hidden <= 0 || c.Intermediate <= 0 || c.Layers <= 0 || c.TextHidden <= 0 || c.PositionSize <= 0:
		return bad("%+v", c)
	case c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return bad("%d query heads over %d KV heads", c.Heads, c.KVHeads)
	case c.HeadDim <= 0 || c.HeadDim%4 != 0:
		// 2-D RoPE rotates two halves of each head, each in pairs.
		return bad("head size %d is not a multiple of 4", c.HeadDim)
	case c.PatchSize <= 0 || c.Pooling <= 0:
		return bad("patch %d, pooling %d", c.PatchSize, c.Pooling)
	}
	return nil
}

// Budgets are the soft-token budgets Gemma 4's processor accepts.
var Budgets = []int{70, 140, 280, 560, 1120}

// ImageProcessor is the preprocessing of processor_config.json's
// image_processor (or a flat preprocessor_config.json): an aspect-keeping
// resize to a soft-token budget, rescale, optional normalization, patches.
type ImageProcessor struct {
	PatchSize, Pooling int
	// MaxSoftTokens is the budget: an image becomes at most this many
	// soft tokens, MaxSoftTokens*Pooling^2 patches.
	MaxSoftTokens int
	Resample      media.Resample
	DoResize      bool
	DoRescale     bool
	Rescale       float64
	DoNormalize   bool
	Mean, Std     [3]float32
}

type hfImageProcessor struct {
	DoResize      *bool     `json:"do_resize"`
	Resample      *int      `json:"resample"`
	DoRescale     *bool     `json:"do_rescale"`
	RescaleFactor *float64  `json:"rescale_factor"`
	DoNormalize   *bool     `json:"do_normalize"`
	ImageMean     []float64 `json:"image_mean"`
	ImageStd      []float64 `json:"image_std"`
	PatchSize     int       `json:"patch_size"`
	MaxSoftTokens int       `json:"max_soft_tokens"`
	Pooling       int       `json:"pooling_kernel_size"`
}

// ReadImageProcessor parses processor_config.json (its image_processor
// object) or a flat preprocessor_config.json; keys it leaves out keep
// transformers' Gemma4ImageProcessor defaults (bicubic, 1/255, no
// normalization, a budget of 280), patch and pooling sizes the tower's.
// data may be nil (no file): all defaults.
func ReadImageProcessor(data []byte, c VisionConfig) (ImageProcessor, error) {
	return readProcessor(data, c, false)
}

// ReadVideoProcessor parses processor_config.json's video_processor
// object: each sampled frame is preprocessed as an image under its budget
// (Gemma4VideoProcessor's default 70). data may be nil (no file), or have
// no video_processor: all defaults.
func ReadVideoProcessor(data []byte, c VisionConfig) (ImageProcessor, error) {
	return readProcessor(data, c, true)
}

func readProcessor(data []byte, c VisionConfig, video bool) (ImageProcessor, error) {
	p := ImageProcessor{
		PatchSize: c.PatchSize, Pooling: c.Pooling, MaxSoftTokens: 280, Resample: media.Bicubic,
		DoResize: true, DoRescale: true, Rescale: 1.0 / 255, Std: [3]float32{1, 1, 1},
	}
	if video {
		p.MaxSoftTokens = 70
	}
	var h hfImageProcessor
	if data != nil {
		var nested struct {
			ImageProcessor *hfImageProcessor `json:"image_processor"`
			VideoProcessor *hfImageProcessor `json:"video_processor"`
		}
		if err := json.Unmarshal(data, &nested); err != nil {
			return p, fmt.Errorf("gemma4 vision: %w: processor config: %w", model.ErrBadConfig, err)
		}
		switch {
		case video && nested.VideoProcessor != nil:
			h = *nested.VideoProcessor
		case video:
		case nested.ImageProcessor != nil:
			h = *nested.ImageProcessor
		default:
			if err := json.Unmarshal(data, &h); err != nil {
				return p, fmt.Errorf("gemma4 vision: %w: processor config: %w", model.ErrBadConfig, err)
			}
		}
	}
	for _, b := range []struct{ dst, src *bool }{
		{&p.DoResize, h.DoResize}, {&p.DoRescale, h.DoRescale}, {&p.DoNormalize, h.DoNormalize},
	} {
		if b.src != nil {
			*b.dst = *b.src
		}
	}
	if h.Resample != nil {
		p.Resample = media.Resample(*h.Resample)
	}
	if h.RescaleFactor != nil {
		p.Rescale = *h.RescaleFactor
	}
	if h.PatchSize > 0 {
		p.PatchSize = h.PatchSize
	}
	if h.Pooling > 0 {
		p.Pooling = h.Pooling
	}
	if h.MaxSoftTokens > 0 {
		p.MaxSoftTokens = h.MaxSoftTokens
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
			return p, fmt.Errorf("gemma4 vision: %w: %d channel statistics for 3 channels", model.ErrBadConfig, len(ms.src))
		}
	}
	switch {
	case !p.Resample.Valid():
		return p, fmt.Errorf("gemma4 vision: %w: resample filter %d", model.ErrUnsupportedArch, p.Resample)
	case !slices.Contains(Budgets, p.MaxSoftTokens):
		return p, fmt.Errorf("gemma4 vision: %w: max_soft_tokens %d is none of %v", model.ErrBadConfig, p.MaxSoftTokens, Budgets)
	case p.PatchSize != c.PatchSize || p.Pooling != c.Pooling:
		return p, fmt.Errorf("gemma4 vision: %w: processor patches %d pooled %d for a tower of %d and %d",
			model.ErrBadConfig, p.PatchSize, p.Pooling, c.PatchSize, c.Pooling)
	}
	return p, nil
}

// ErrImage means an image cannot be preprocessed: its pixels do not match
// its size, or no resize within the budget keeps it.
var ErrImage = errors.New("gemma4 vision: bad image")

// Size is the size an image of w x h pixels is resized to, as
// transformers' get_aspect_ratio_preserving_size computes it: the largest
// multiple of Pooling*PatchSize pixels per side that scales both sides by
// one factor within the budget's patches; a side that rounds to nothing
// gets one multiple and the other floor(aspect) of them, at most the
// budget's. An error when both round to nothing or the result overflows
// the budget.
func (p ImageProcessor) Size(w, h int) (tw, th int, err error) {
	if w <= 0 || h <= 0 {
		return 0, 0, fmt.Errorf("%w: %dx%d", ErrImage, w, h)
	}
	maxPatches := p.MaxSoftTokens * p.Pooling * p.Pooling
	targetPx := maxPatches * p.PatchSize * p.PatchSize
	factor := math.Sqrt(float64(targetPx) / float64(h*w))
	side := p.Pooling * p.PatchSize
	th = int(math.Floor(factor*float64(h)/float64(side))) * side
	tw = int(math.Floor(factor*float64(w)/float64(side))) * side
	if th == 0 && tw == 0 {
		return 0, 0, fmt.Errorf("%w: %dx%d shrinks to nothing", ErrImage, w, h)
	}
	maxSide := maxPatches / (p.Pooling * p.Pooling) * side
	switch {
	case th == 0:
		th = side
		tw = min(int(math.Floor(float64(w)/float64(h)))*side, maxSide)
	case tw == 0:
		tw = side
		th = min(int(math.Floor(float64(h)/float64(w)))*side, maxSide)
	}
	if th*tw > targetPx {
		return 0, 0, fmt.Errorf("%w: %dx%d resized to %dx%d exceeds %d patches", ErrImage, w, h, tw, th, maxPatches)
	}
	return tw, th, nil
}

// Tokens is the number of soft tokens an image of w x h pixels becomes
// (what its placeholder run holds); 0 when it cannot be preprocessed.
func (p ImageProcessor) Tokens(w, h int) int {
	if !p.DoResize {
		if w%(p.PatchSize*p.Pooling) != 0 || h%(p.PatchSize*p.Pooling) != 0 {
			return 0
		}
		return (w / p.PatchSize) * (h / p.PatchSize) / (p.Pooling * p.Pooling)
	}
	tw, th, err := p.Size(w, h)
	if err != nil {
		return 0
	}
	return (tw / p.PatchSize) * (th / p.PatchSize) / (p.Pooling * p.Pooling)
}

// Patches is a preprocessed image: Cols x Rows patches, row-major, each
// PatchSize^2*3 values in (row, column, channel) order, as transformers'
// processor lays them out (padding aside).
type Patches struct {
	Data       []float32
	Cols, Rows int
}

// Preprocess turns an 8-bit RGB image (row-major, 3 bytes per pixel, w x h)
// into the tower's input: resized to Size with PIL's arithmetic
// (media.Resize), float32(float64(v)*Rescale), (x-mean)/std in float32
// when normalizing, then cut into patches.
func (p ImageProcessor) Preprocess(rgb []uint8, w, h int) (Patches, error) {
	if w <= 0 || h <= 0 || len(rgb) != w*h*3 {
		return Patches{}, fmt.Errorf("%w: %d bytes for %dx%d RGB", ErrImage, len(rgb), w, h)
	}
	if p.DoResize {
		tw, th, err := p.Size(w, h)
		if err != nil {
			return Patches{}, err
		}
		if tw != w || th != h {
			rgb = media.Resize(rgb, w, h, tw, th, p.Resample)
			w, h = tw, th
		}
	}
	side := p.PatchSize * p.Pooling
	if w%side != 0 || h%side != 0 {
		return Patches{}, fmt.Errorf("%w: %dx%d is not whole %d-pixel pooled patches", ErrImage, w, h, side)
	}
	P := p.PatchSize
	cols, rows := w/P, h/P
	out := Patches{Data: make([]float32, 0, w*h*3), Cols: cols, Rows: rows}
	for pr := range rows {
		for pc := range cols {
			for y := pr * P; y < (pr+1)*P; y++ {
				for x := pc * P; x < (pc+1)*P; x++ {
					for ch := range 3 {
						v := rgb[(y*w+x)*3+ch]
						f := float32(v)
						if p.DoRescale {
							f = float32(float64(v) * p.Rescale)
						}
						if p.DoNormalize {
							f = (f - p.Mean[ch]) / p.Std[ch]
						}
						out.Data = append(out.Data, f)
					}
				}
			}
		}
	}
	return out, nil
}

// clippedLinear is y = clamp(clamp(x, inLo, inHi) @ W.T, outLo, outHi), W
// [out, in]; the bounds are invalid when the tower does not clip.
type clippedLinear struct {
	w                        mlx.Array
	inLo, inHi, outLo, outHi mlx.Array
}

func (l clippedLinear) apply(f *mlx.Frame, x mlx.Array) mlx.Array {
	if l.inLo.Valid() {
		x = f.Clip(x, l.inLo, l.inHi)
	}
	y := f.MatMul(x, f.Transpose(l.w, 1, 0))
	if l.outLo.Valid() {
		y = f.Clip(y, l.outLo, l.outHi)
	}
	return y
}

type visionLayer struct {
	inNorm, postAttnNorm, preFFNorm, postFFNorm mlx.Array
	qNorm, kNorm                                mlx.Array
	q, k, v, o                                  clippedLinear
	gate, up, down                              clippedLinear
}

// Vision is a Gemma 4 vision tower and multimodal embedder bound to device
// weights it owns.
type Vision struct {
	Config    VisionConfig
	Processor ImageProcessor
	// Frames preprocesses a video's sampled frames.
	Frames ImageProcessor

	act              mlx.Dtype
	inputProj        mlx.Array // [hidden, patch*patch*3]
	posX, posY       mlx.Array // [PositionSize, hidden]
	layers           []visionLayer
	stdBias, stdScal mlx.Array // float32
	embedProj        mlx.Array // [text hidden, hidden]
	tensors          *model.TowerTensors
}

// Where checkpoints keep the tower and the embedder: transformers' names,
// and MLX conversions' (without model.).
var (
	towerPrefixes    = []string{"model.vision_tower.", "vision_tower."}
	embedderPrefixes = []string{"model.embed_vision.", "embed_vision."}
)

// LoadVision reads the vision tower and embedder of the Gemma 4 multimodal
// checkpoint in dir (config.json; processor_config.json, else
// preprocessor_config.json, when present; the safetensors weights) and
// uploads them to s, matrices in act (float32 or a 16-bit float type),
// standardization in float32. Call on the MLX thread.
func LoadVision(dir string, s mlx.Stream, act mlx.Dtype) (*Vision, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("gemma4 vision: %w", err)
	}
	cfg, err := ReadVisionConfig(raw)
	if err != nil {
		return nil, err
	}
	var pre []byte
	for _, name := range []string{"processor_config.json", "preprocessor_config.json"} {
		pre, err = os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("gemma4 vision: %w", err)
		}
		pre = nil
	}
	proc, err := ReadImageProcessor(pre, cfg)
	if err != nil {
		return nil, err
	}
	frames, err := ReadVideoProcessor(pre, cfg)
	if err != nil {
		return nil, err
	}
	if act != mlx.Float32 && act != mlx.Float16 && act != mlx.BFloat16 {
		return nil, fmt.Errorf("gemma4 vision: %w: activations in %v", model.ErrUnsupportedType, act)
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("gemma4 vision: %w", err)
	}
	defer st.Close()
	v := &Vision{Config: cfg, Processor: proc, Frames: frames, act: act}
	if err := v.upload(st, s); err != nil {
		v.Free()
		return nil, fmt.Errorf("gemma4 vision: %s: %w", dir, err)
	}
	return v, nil
}

func (v *Vision) upload(st *safetensors.Dir, s mlx.Stream) error {
	c := v.Config
	v.tensors = model.NewTowerTensors(st, s)
	H, act, f32 := c.Hidden, v.act, mlx.Float32
	tp := towerPrefixes
	type tensor = model.TowerTensor
	specs := []tensor{
		{Dst: &v.inputProj, Prefixes: tp, Name: "patch_embedder.input_proj.weight", DType: act, Shape: []int{H, 3 * c.PatchSize * c.PatchSize}},
		{Dst: &v.embedProj, Prefixes: embedderPrefixes, Name: "embedding_projection.weight", DType: act, Shape: []int{c.TextHidden, H}},
	}
	if c.Standardize {
		specs = append(specs,
			tensor{Dst: &v.stdBias, Prefixes: tp, Name: "std_bias", DType: f32, Shape: []int{H}},
			tensor{Dst: &v.stdScal, Prefixes: tp, Name: "std_scale", DType: f32, Shape: []int{H}})
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	v.layers = make([]visionLayer, c.Layers)
	for i := range v.layers {
		l := &v.layers[i]
		p := fmt.Sprintf("encoder.layers.%d.", i)
		for _, lin := range []struct {
			dst     *clippedLinear
			name    string
			in, out int
		}{
			{&l.q, "self_attn.q_proj", H, q}, {&l.k, "self_attn.k_proj", H, kv}, {&l.v, "self_attn.v_proj", H, kv},
			{&l.o, "self_attn.o_proj", q, H}, {&l.gate, "mlp.gate_proj", H, c.Intermediate},
			{&l.up, "mlp.up_proj", H, c.Intermediate}, {&l.down, "mlp.down_proj", c.Intermediate, H},
		} {
			specs = append(specs, tensor{Dst: &lin.dst.w, Prefixes: tp, Name: p + lin.name + ".linear.weight", DType: act, Shape: []int{lin.out, lin.in}})
			if c.Clipped {
				for _, b := range []struct {
					dst  *mlx.Array
					name string
				}{{&lin.dst.inLo, "input_min"}, {&lin.dst.inHi, "input_max"}, {&lin.dst.outLo, "output_min"}, {&lin.dst.outHi, "output_max"}} {
					specs = append(specs, tensor{Dst: b.dst, Prefixes: tp, Name: p + lin.name + "." + b.name, DType: act, Shape: []int{}})
				}
			}
		}
		for _, n := range []struct {
			dst  *mlx.Array
			name string
			dim  int
		}{
			{&l.inNorm, "input_layernorm", H}, {&l.postAttnNorm, "post_attention_layernorm", H},
			{&l.preFFNorm, "pre_feedforward_layernorm", H}, {&l.postFFNorm, "post_feedforward_layernorm", H},
			{&l.qNorm, "self_attn.q_norm", c.HeadDim}, {&l.kNorm, "self_attn.k_norm", c.HeadDim},
		} {
			specs = append(specs, tensor{Dst: n.dst, Prefixes: tp, Name: p + n.name + ".weight", DType: act, Shape: []int{n.dim}})
		}
	}
	if err := v.tensors.GetAll(specs); err != nil {
		return err
	}
	// One table of [2, positions, hidden]: row 0 embeds columns, row 1 rows.
	table := tensor{Prefixes: tp, Name: "patch_embedder.position_embedding_table", DType: act, Shape: []int{2, c.PositionSize, H}}
	for axis, dst := range []*mlx.Array{&v.posX, &v.posY} {
		row := func(f *mlx.Frame, a mlx.Array) mlx.Array {
			return f.Reshape(f.Slice(a, []int{axis, 0, 0}, []int{axis + 1, c.PositionSize, H}), c.PositionSize, H)
		}
		table.Dst = dst
		if err := v.tensors.Get(table, row); err != nil {
			return err
		}
	}
	return nil
}

// Free releases the device weights.
func (v *Vision) Free() {
	if v.tensors != nil {
		v.tensors.Free()
	}
}

// Preprocess is v.Processor.Preprocess.
func (v *Vision) Preprocess(rgb []uint8, w, h int) (Patches, error) {
	return v.Processor.Preprocess(rgb, w, h)
}

// Tokens is v.Processor.Tokens: the soft tokens of a w x h image.
func (v *Vision) Tokens(w, h int) int { return v.Processor.Tokens(w, h) }

// FrameStamp is a frame's time from the start of its video as the
// processor writes it before the frame's run: minutes and seconds, both
// truncated, at least two digits each ("01:10").
func FrameStamp(at time.Duration) string {
	secs := at.Seconds()
	return fmt.Sprintf("%02d:%02d", int(math.Floor(secs/60)), int(math.Mod(secs, 60)))
}

// Encode turns one preprocessed image into its soft tokens, [tokens, text
// hidden] in the activation dtype, tokens row-major over the pooled grid.
func (v *Vision) Encode(f *mlx.Frame, p Patches) mlx.Array {
	return v.Embed(f, v.Pool(f, v.Features(f, p), p.Cols, p.Rows))
}

// Features is the encoder: patches to its last layer's output, [patches,
// hidden].
func (v *Vision) Features(f *mlx.Frame, p Patches) mlx.Array {
	c := v.Config
	n := p.Cols * p.Rows
	dim := 3 * c.PatchSize * c.PatchSize
	switch {
	case f.Err() != nil:
		return mlx.Array{}
	case n == 0 || len(p.Data) != n*dim:
		f.Fail(fmt.Errorf("%w: %d values for %dx%d patches of %d", ErrImage, len(p.Data), p.Cols, p.Rows, dim))
		return mlx.Array{}
	case p.Cols > c.PositionSize || p.Rows > c.PositionSize:
		f.Fail(fmt.Errorf("%w: a %dx%d patch grid beyond the %d positions of the tower", ErrImage, p.Cols, p.Rows, c.PositionSize))
		return mlx.Array{}
	}
	cols, rows := make([]int32, n), make([]int32, n)
	for i := range n {
		cols[i], rows[i] = int32(i%p.Cols), int32(i/p.Cols)
	}
	colIdx, rowIdx := f.Int32s(cols, n), f.Int32s(rows, n)
	act := v.act
	// The processor's [0, 1] pixels are mapped to [-1, 1] here.
	x := f.AsType(f.Float32s(p.Data, n, dim), act)
	x = f.Multiply(f.Subtract(x, f.AsType(f.Scalar(0.5), act)), f.AsType(f.Scalar(2), act))
	x = f.MatMul(x, f.Transpose(v.inputProj, 1, 0))
	x = f.Add(x, f.Add(f.Take(v.posX, colIdx, 0), f.Take(v.posY, rowIdx, 0)))

	eps, hd := c.NormEps, c.HeadDim
	half := hd / 2
	// rope rotates the first half of each head by the patch's column and
	// the second by its row, each half in rotate-half pairs: [n, heads, hd].
	rope := func(a mlx.Array, heads int) mlx.Array {
		part := func(lo int, pos mlx.Array) mlx.Array {
			s := f.Slice(a, []int{0, 0, lo}, []int{n, heads, lo + half})
			s = f.Reshape(s, n, heads, 1, half)
			return f.Reshape(f.RoPEOffsets(s, half, false, c.RoPEBase, 1, pos, mlx.Array{}), n, heads, half)
		}
		return f.Concatenate(2, part(0, colIdx), part(half, rowIdx))
	}
	heads := func(a mlx.Array, h int, norm mlx.Array) mlx.Array {
		return f.RMSNorm(f.Reshape(a, n, h, hd), norm, eps)
	}
	attnHeads := func(a mlx.Array) mlx.Array { return f.Transpose(f.ExpandDims(a, 0), 0, 2, 1, 3) }
	for i := range v.layers {
		l := &v.layers[i]
		h := f.RMSNorm(x, l.inNorm, eps)
		q := rope(heads(l.q.apply(f, h), c.Heads, l.qNorm), c.Heads)
		k := rope(heads(l.k.apply(f, h), c.KVHeads, l.kNorm), c.KVHeads)
		val := heads(l.v.apply(f, h), c.KVHeads, mlx.Array{})
		a := f.Attention(attnHeads(q), attnHeads(k), attnHeads(val), 1, "", mlx.Array{}, mlx.Array{})
		a = f.Reshape(f.Transpose(a, 0, 2, 1, 3), n, c.Heads*hd)
		x = f.Add(x, f.RMSNorm(l.o.apply(f, a), l.postAttnNorm, eps))
		h = f.RMSNorm(x, l.preFFNorm, eps)
		mlp := l.down.apply(f, f.Multiply(gelu(f, l.gate.apply(f, h)), l.up.apply(f, h)))
		x = f.Add(x, f.RMSNorm(mlp, l.postFFNorm, eps))
	}
	return x
}

// Pool averages the features of each Pooling x Pooling block of the
// cols x rows patch grid (row-major blocks), scales them by sqrt(hidden)
// and standardizes them, in float32: [tokens, hidden].
func (v *Vision) Pool(f *mlx.Frame, features mlx.Array, cols, rows int) mlx.Array {
	c := v.Config
	k := c.Pooling
	if f.Err() != nil {
		return mlx.Array{}
	}
	if cols%k != 0 || rows%k != 0 || !slices.Equal(features.Shape(), []int{cols * rows, c.Hidden}) {
		f.Fail(fmt.Errorf("%w: features %v for a %dx%d grid pooled by %d", ErrImage, features.Shape(), cols, rows, k))
		return mlx.Array{}
	}
	x := f.Reshape(f.AsType(features, mlx.Float32), rows/k, k, cols/k, k, c.Hidden)
	x = f.Mean(f.Mean(x, 3, false), 1, false)
	x = f.Reshape(x, (rows/k)*(cols/k), c.Hidden)
	x = f.Multiply(x, f.Scalar(float32(math.Sqrt(float64(c.Hidden)))))
	if c.Standardize {
		x = f.Multiply(f.Subtract(x, v.stdBias), v.stdScal)
	}
	return x
}

// Embed is the multimodal embedder: RMSNorm without scale and the
// projection to the text hidden size, in the activation dtype.
func (v *Vision) Embed(f *mlx.Frame, pooled mlx.Array) mlx.Array {
	x := f.AsType(f.RMSNorm(f.AsType(pooled, mlx.Float32), mlx.Array{}, v.Config.NormEps), v.act)
	return f.MatMul(x, f.Transpose(v.embedProj, 1, 0))
}

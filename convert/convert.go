package convert

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/goprovider/provider/gguf"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/safetensors"
)

// ErrInexact marks what cannot be converted without changing a value or
// a tokenization; refusals of an architecture or tensor type also wrap
// model.ErrUnsupportedArch or model.ErrUnsupportedType.
var ErrInexact = errors.New("no exact conversion")

// Files a converted directory holds; nothing else is written there.
const (
	FileConfig           = "config.json"
	FileWeights          = "model.safetensors"
	FileTokenizer        = "tokenizer.json"
	FileTokenizerConfig  = "tokenizer_config.json"
	FileGenerationConfig = "generation_config.json"
)

var outputFiles = []string{FileConfig, FileWeights, FileTokenizer, FileTokenizerConfig, FileGenerationConfig}

// Summary says what a conversion wrote.
type Summary struct {
	Dir     string
	Tensors int
	// Formats counts the written tensors by their form: "affine4",
	// "affine8" (MLX affine bits) or a safetensors dtype ("F32", ...).
	Formats map[string]int
	// Sources counts the GGUF tensors by their ggml type.
	Sources map[string]int
	Bytes   int64
}

// FromGGUF converts the GGUF checkpoint at src into an HF/MLX directory at
// dir, creating it. It fails, writing nothing, on anything it cannot carry
// over exactly.
func FromGGUF(src, dir string) (*Summary, error) {
	if err := checkOutputDir(dir); err != nil {
		return nil, err
	}
	m, err := model.Open(src)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	defer m.Close()
	f, err := gguf.Open(src)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	defer f.Close()
	if m.Format != "gguf" {
		return nil, fmt.Errorf("convert: %s is not a GGUF file", src)
	}
	if m.Config.Arch != "llama" {
		return nil, fmt.Errorf("convert: %w: %w: %s (only llama converts)", ErrInexact, model.ErrUnsupportedArch, m.Config.Arch)
	}

	sum := &Summary{Dir: dir, Formats: map[string]int{}, Sources: map[string]int{}}
	tensors, quant, err := weights(m, sum)
	if err != nil {
		return nil, err
	}
	cfg, err := hfConfig(f, m, quant)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizerFiles(f, m)
	if err != nil {
		return nil, err
	}

	files := map[string]func(io.Writer) error{
		FileWeights: func(w io.Writer) error {
			return safetensors.Write(w, tensors, map[string]string{"format": "mlx"})
		},
		FileConfig:           jsonWriter(cfg),
		FileTokenizer:        func(w io.Writer) error { _, err := w.Write(tok.tokenizer); return err },
		FileTokenizerConfig:  jsonWriter(tok.config),
		FileGenerationConfig: jsonWriter(tok.generation),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	for _, name := range outputFiles {
		n, err := writeFileAtomic(filepath.Join(dir, name), files[name])
		if err != nil {
			return nil, err
		}
		sum.Bytes += n
	}
	return sum, nil
}

// checkOutputDir refuses a directory holding anything but converted files.
func checkOutputDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	for _, e := range entries {
		if !slices.Contains(outputFiles, e.Name()) {
			return fmt.Errorf("convert: %s holds %s, which conversion did not write; use an empty or new directory", dir, e.Name())
		}
	}
	return nil
}

// weights returns the tensors to write and the quantization block of
// config.json (nil when nothing is quantized).
func weights(m *model.Model, sum *Summary) ([]safetensors.Tensor, map[string]any, error) {
	names := make([]string, 0, len(m.Tensors))
	for n := range m.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	type qkey struct{ bits, group int }
	quantized := map[string]qkey{}
	var out []safetensors.Tensor
	for _, name := range names {
		t := m.Tensors[name]
		src := t.GGMLType
		if src == "" {
			src = dtypeName(t.DType)
		}
		sum.Sources[src]++
		if strings.HasSuffix(name, ".bias") {
			return nil, nil, fmt.Errorf("convert: %w: %w: %s: llama bias tensors do not convert", ErrInexact, model.ErrUnsupportedType, name)
		}
		heads := 0
		switch {
		case strings.HasSuffix(name, ".self_attn.q_proj.weight"):
			heads = m.Config.Heads
		case strings.HasSuffix(name, ".self_attn.k_proj.weight"):
			heads = m.Config.KVHeads
		}
		if q := t.Quant; q != nil {
			if q.Mode != "affine" || q.ScaleDType != mlx.Float16 || q.GroupSize != 32 || (q.Bits != 4 && q.Bits != 8) {
				return nil, nil, fmt.Errorf("convert: %w: %w: %s: %s has no exact MLX affine form with float16 group parameters", ErrInexact, model.ErrUnsupportedType, name, src)
			}
			rows, cols := t.Shape[0], t.Shape[1]
			base := strings.TrimSuffix(name, ".weight")
			parts := []struct {
				name, dtype string
				shape       []int
				data        []byte
			}{
				{name, "U32", []int{rows, cols * q.Bits / 32}, t.Data},
				{base + ".scales", "F16", []int{rows, cols / q.GroupSize}, q.Scales},
				{base + ".biases", "F16", []int{rows, cols / q.GroupSize}, q.Biases},
			}
			for _, p := range parts {
				data, err := unpermuteRows(p.data, rows, heads)
				if err != nil {
					return nil, nil, fmt.Errorf("convert: %s: %w", p.name, err)
				}
				out = append(out, safetensors.Tensor{Name: p.name, DType: p.dtype, Shape: p.shape, Data: data})
			}
			quantized[base] = qkey{q.Bits, q.GroupSize}
			sum.Formats["affine"+strconv.Itoa(q.Bits)]++
			continue
		}
		// The model loader dequantizes to float32 any ggml type it has no
		// exact affine form for; float32 cannot hold every such value
		// exactly, so those are refused here.
		if t.GGMLType != "" {
			return nil, nil, fmt.Errorf("convert: %w: %w: %s is %s, which has no exact MLX form (Q4_0, Q4_1, Q8_0 and float tensors convert)", ErrInexact, model.ErrUnsupportedType, name, t.GGMLType)
		}
		dt := dtypeName(t.DType)
		if dt == "" {
			return nil, nil, fmt.Errorf("convert: %w: %w: %s has dtype %v", ErrInexact, model.ErrUnsupportedType, name, t.DType)
		}
		rows := 1
		if len(t.Shape) > 0 {
			rows = t.Shape[0]
		}
		data, err := unpermuteRows(t.Data, rows, heads)
		if err != nil {
			return nil, nil, fmt.Errorf("convert: %s: %w", name, err)
		}
		out = append(out, safetensors.Tensor{Name: name, DType: dt, Shape: slices.Clone(t.Shape), Data: data})
		sum.Formats[dt]++
	}
	sum.Tensors = len(out)
	if len(quantized) == 0 {
		return out, nil, nil
	}
	// The defaults are the most common bits and group size (ties to the
	// fewer bits), each other module gets its own entry, as MLX reads them.
	count := map[qkey]int{}
	for _, k := range quantized {
		count[k]++
	}
	var def qkey
	for k, n := range count {
		if n > count[def] || n == count[def] && (k.bits < def.bits || k.bits == def.bits && k.group < def.group) {
			def = k
		}
	}
	block := map[string]any{"group_size": def.group, "bits": def.bits, "mode": "affine"}
	for base, k := range quantized {
		if k != def {
			block[base] = map[string]any{"group_size": k.group, "bits": k.bits, "mode": "affine"}
		}
	}
	return out, block, nil
}

func dtypeName(d mlx.Dtype) string {
	switch d {
	case mlx.Float32:
		return "F32"
	case mlx.Float16:
		return "F16"
	case mlx.BFloat16:
		return "BF16"
	}
	return ""
}

// unpermuteRows undoes llama.cpp's per-head row interleave of q_proj and
// k_proj: GGUF row h*d + 2j + s holds HF row h*d + s*d/2 + j, for head h
// of d rows, j < d/2, s in {0, 1}. Rows are moved whole, so packed
// quantized rows and their group parameters move with them unchanged.
// heads zero returns data as it is.
func unpermuteRows(data []byte, rows, heads int) ([]byte, error) {
	if heads == 0 {
		return data, nil
	}
	if rows <= 0 || rows%heads != 0 || (rows/heads)%2 != 0 || len(data)%rows != 0 {
		return nil, fmt.Errorf("%w: %d rows do not split into %d heads of even size", model.ErrBadConfig, rows, heads)
	}
	rowBytes := len(data) / rows
	d := rows / heads
	half := d / 2
	out := make([]byte, len(data))
	for r := range rows {
		h, i := r/d, r%d
		src := h*d + 2*(i%half) + i/half
		copy(out[r*rowBytes:(r+1)*rowBytes], data[src*rowBytes:(src+1)*rowBytes])
	}
	return out, nil
}

// hfConfig builds config.json from the GGUF hyperparameters.
func hfConfig(f *gguf.File, m *model.Model, quant map[string]any) (map[string]any, error) {
	c := m.Config
	if c.RoPE.Dims != c.HeadDim {
		return nil, fmt.Errorf("convert: %w: %w: RoPE over %d of %d head dims (HF llama rotates whole heads)", ErrInexact, model.ErrUnsupportedArch, c.RoPE.Dims, c.HeadDim)
	}
	if c.RoPE.Freqs != nil {
		return nil, fmt.Errorf("convert: %w: %w: per-frequency RoPE factors (rope_freqs) have no exact HF llama form", ErrInexact, model.ErrUnsupportedArch)
	}
	var scaling any
	if kind, ok := f.String("llama.rope.scaling.type"); ok && kind != "none" {
		factor, _ := f.Float("llama.rope.scaling.factor")
		if kind != "linear" || factor <= 0 {
			return nil, fmt.Errorf("convert: %w: %w: rope scaling %q factor %g", ErrInexact, model.ErrUnsupportedArch, kind, factor)
		}
		scaling = map[string]any{"type": "linear", "rope_type": "linear", "factor": factor}
	}
	cfg := map[string]any{
		"architectures":           []string{"LlamaForCausalLM"},
		"model_type":              "llama",
		"vocab_size":              c.Vocab,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim,
		"hidden_act":              "silu",
		"max_position_embeddings": c.ContextLength,
		"rms_norm_eps":            float32JSON(c.NormEps),
		"rope_theta":              float32JSON(c.RoPE.Base),
		"rope_scaling":            scaling,
		"tie_word_embeddings":     c.TiedEmbedding,
		"attention_bias":          false,
		"mlp_bias":                false,
		"eos_token_id":            eosJSON(m),
	}
	// HF's dtype of the unquantized parameters; quantized ones carry
	// their own.
	if n, err := m.Tensor("model.norm.weight"); err == nil {
		cfg["torch_dtype"] = map[mlx.Dtype]string{mlx.Float32: "float32", mlx.Float16: "float16", mlx.BFloat16: "bfloat16"}[n.DType]
	}
	if c.BOS >= 0 {
		cfg["bos_token_id"] = c.BOS
	}
	if c.ContextLength == 0 {
		delete(cfg, "max_position_embeddings")
	}
	if quant != nil {
		cfg["quantization"] = quant
		cfg["quantization_config"] = quant
	}
	return cfg, nil
}

// float32JSON writes a float32 hyperparameter with the fewest digits that
// read back as the same float32 (1e-05, not 9.999999747378752e-06).
func float32JSON(v float32) json.Number {
	return json.Number(strconv.FormatFloat(float64(v), 'g', -1, 32))
}

// eosJSON is the end-of-generation set with the tokenizer's EOS first, so
// readers that take one id take that one, and readers that take the list
// stop where the provider stops.
func eosJSON(m *model.Model) any {
	eos := m.Tokenizer.EOS()
	ids := []int32{}
	if eos >= 0 {
		ids = append(ids, eos)
	}
	for _, id := range m.Config.EOS {
		if id != eos {
			ids = append(ids, id)
		}
	}
	if len(ids) == 1 {
		return ids[0]
	}
	return ids
}

func jsonWriter(v any) func(io.Writer) error {
	return func(w io.Writer) error {
		b, err := marshalJSON(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
}

// marshalJSON indents and keeps '<', '>' and '&' as they are: chat
// templates and token texts are not HTML.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// writeFileAtomic writes through a temporary file renamed into place, so
// an interrupted conversion never leaves a truncated file under the
// final name.
func writeFileAtomic(path string, write func(io.Writer) error) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return 0, fmt.Errorf("convert: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("convert: %s: %w", filepath.Base(path), err)
	}
	// CreateTemp makes the file private; a checkpoint is for any reader.
	err = tmp.Chmod(0o644)
	st, serr := tmp.Stat()
	if cerr := tmp.Close(); err == nil {
		err = cmp.Or(serr, cerr)
	}
	if err != nil {
		return 0, fmt.Errorf("convert: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, fmt.Errorf("convert: %w", err)
	}
	return st.Size(), nil
}

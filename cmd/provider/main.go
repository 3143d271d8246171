// Command provider loads LLMs and serves or runs them.
//
//	provider generate --model PATH|--dummy-weights CONFIG.json [--prompt TEXT] [--chat] [--max-tokens N] [--temperature T] [--seed S]
//	provider serve [--model PATH[,PATH...]|--dummy-weights CONFIG.json] [--addr HOST:PORT]
//	provider info --model PATH|CONFIG.json [--tokens N]
//	provider convert --model X.gguf --out DIR
package main

import (
	"errors"
	"github.com/goprovider/provider/tp"

	"fmt"
	"github.com/goprovider/provider/bench"
	"os"
)

const usage = `usage: provider <command> [flags]

commands:
  generate   stream a completion of one prompt to stdout
  serve      serve models over an OpenAI-compatible HTTP API
  bench      measure OpenAI-compatible servers (ours or a peer) over HTTP
  info       describe a model (layer kinds, KV bytes, weights) as JSON, from its config alone if need be
  convert    write a GGUF checkpoint as an HF/MLX directory, exactly
  version    print the provider's version, MLX's version and the backends

Run provider <command> --help for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	usePTXCache()
	var err error
	switch os.Args[1] {
	case "generate":
		err = runGenerate(os.Args[2:])
	case "serve":
		err = runServe(os.Args[2:])
	case "bench":
		os.Exit(bench.Main(os.Args[2:], os.Stdout, os.Stderr))
	case "info":
		err = runInfo(os.Args[2:], os.Stdout)
	case "convert":
		err = runConvert(os.Args[2:], os.Stdout)
	case "version", "--version":
		err = runVersion(os.Stdout)
	case "tp-worker":
		// A tensor-parallel rank that serve or generate --tp started; its
		// environment says which.
		if !tp.IsWorker() {
			fmt.Fprintln(os.Stderr, "provider: tp-worker runs only as a rank started by --tp")
			os.Exit(2)
		}
		err = tp.RunWorker()
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "provider: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if errors.Is(err, errHelp) {
		return
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(os.Stderr, "provider:", err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "provider:", err)
		os.Exit(1)
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

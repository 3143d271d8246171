package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/goprovider/provider/convert"
)

func runConvert(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	src := fs.String("model", defaultModel, "GGUF `file` to convert")
	out := fs.String("out", "", "`directory` to write the HF/MLX checkpoint into (new or empty)")
	cmd := command{name: "convert", synopsis: "Write a GGUF checkpoint as an HF/MLX checkpoint directory, exactly: the same tensors, tokenizer and chat template."}
	if err := cmd.parse(fs, args, stdout); err != nil {
		return err
	}
	if *out == "" {
		return usageError{"convert: --out is required"}
	}
	sum, err := convert.FromGGUF(*src, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d tensors (%s) from %s, %d bytes\n",
		sum.Dir, sum.Tensors, counts(sum.Formats), counts(sum.Sources), sum.Bytes)
	return nil
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

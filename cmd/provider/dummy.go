package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/tp"
)

// dummyProgressFrom is the size from which building a dummy model reports
// its progress: smaller ones are built in a moment.
const dummyProgressFrom = 256 << 20

// weightSource is how a model's weights reach the device: whole, or split
// over a tensor-parallel group, each rank its share. Its functions run on
// the MLX thread.
type weightSource struct {
	// upload puts the whole model on the device.
	upload func(s mlx.Stream) (*model.Weights, error)
	// shard loads this rank's share of a split over g (tp.LoadShard);
	// m.Config, settled, becomes the share's.
	shard func(m *model.Model, s mlx.Stream, g mlx.Group) (*tp.Shard, error)
	// spec names the model to the workers; Device and Config are set as
	// it loads.
	spec tp.LoadSpec
	// dummy, for a dummy model, is its plan (weightBytes).
	dummy *model.Dummy
}

// weightBytes is the device memory of rank 0's share, out of size ranks,
// of the weights the source loads: a dummy's from its plan (sharded here,
// so only for a source that loads nothing after), a checkpoint's from m's
// tensors (m already sharded as much).
func (ws weightSource) weightBytes(m *model.Model, size int) (int64, error) {
	if ws.dummy == nil {
		return m.WeightBytes(), nil
	}
	if size > 1 {
		if _, err := ws.dummy.Shard(0, size); err != nil {
			return 0, err
		}
	}
	return ws.dummy.Bytes(), nil
}

// modelFlags are the flags serve and generate share to name what to run:
// a checkpoint (--model), or a dummy model of a config.json
// (--dummy-weights): true-size, seeded random weights, for benchmarking
// without the checkpoint.
type modelFlags struct {
	fs        *flag.FlagSet
	model     *string
	dummy     *string
	tokenizer *string
	seed      *uint64
}

func addModelFlags(fs *flag.FlagSet, modelUsage string) *modelFlags {
	return &modelFlags{
		fs:        fs,
		model:     fs.String("model", defaultModel, modelUsage),
		dummy:     fs.String("dummy-weights", "", "config.json of a model to run with seeded random weights of its true size and formats"),
		tokenizer: fs.String("tokenizer", "", "tokenizer.json of a --dummy-weights model; default the one beside the config, else the family's"),
		seed:      fs.Uint64("dummy-seed", 0, "seed of the --dummy-weights values"),
	}
}

// check refuses flag combinations that name two things to run. It runs
// after parsing.
func (mf *modelFlags) check(cmd string) error {
	set := map[string]bool{}
	mf.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case set["dummy-weights"] && set["model"]:
		return fmt.Errorf("%s: --model and --dummy-weights are mutually exclusive", cmd)
	case set["dummy-weights"] && *mf.dummy == "":
		return fmt.Errorf("%s: --dummy-weights needs a config.json", cmd)
	case !set["dummy-weights"] && (set["tokenizer"] || set["dummy-seed"]):
		return fmt.Errorf("%s: --tokenizer and --dummy-seed apply to --dummy-weights only", cmd)
	}
	return nil
}

// isDummy reports whether a dummy model was asked for.
func (mf *modelFlags) isDummy() bool { return *mf.dummy != "" }

// openDummy opens the dummy model the flags name and returns it with its
// name and the source that builds its weights (in the model's settled
// configuration: its activation dtype, as a checkpoint's are converted),
// reporting the size before and the progress during the build through
// report. Split over ranks, every rank builds its share of the same
// weights.
func (mf *modelFlags) openDummy(cmd string, report func(msg string)) (*model.Model, string, weightSource, error) {
	path := *mf.dummy
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", weightSource{}, fmt.Errorf("%s: --dummy-weights: %w", cmd, err)
	}
	cfg, err := model.ReadHFConfig(raw)
	if err != nil {
		return nil, "", weightSource{}, fmt.Errorf("%s: --dummy-weights %s: %w", cmd, path, err)
	}
	tok, err := dummyTokenizer(path, cfg.Arch, *mf.tokenizer)
	if err != nil {
		return nil, "", weightSource{}, fmt.Errorf("%s: --dummy-weights %s: %w", cmd, path, err)
	}
	m, d, err := model.OpenDummy(path, tok)
	if err != nil {
		return nil, "", weightSource{}, fmt.Errorf("%s: --dummy-weights: %w", cmd, err)
	}
	name, seed := dummyName(path), *mf.seed
	report(fmt.Sprintf("dummy model %s (%s): %d parameters (%s), %d bytes of weights (%s), seed %d, tokenizer %s",
		name, cfg.Arch, d.Params(), humanCount(d.Params()), d.Bytes(), humanBytes(d.Bytes()), seed, tok))
	// progress reports a build's progress (of the rank's share, split).
	progress := func() func(done, total int64) {
		next := 10
		if d.Bytes() < dummyProgressFrom {
			next = 101
		}
		return func(done, total int64) {
			if pct := int(done * 100 / max(total, 1)); pct >= next {
				report(fmt.Sprintf("dummy model %s: built %d%% (%s of %s)", name, pct, humanBytes(done), humanBytes(total)))
				next = pct/10*10 + 10
			}
		}
	}
	src := weightSource{
		upload: func(s mlx.Stream) (*model.Weights, error) {
			d.Config = m.Config
			return d.Build(s, seed, progress())
		},
		shard: func(m *model.Model, s mlx.Stream, g mlx.Group) (*tp.Shard, error) {
			d.Config = m.Config
			sh, err := tp.LoadDummyShard(d, seed, s, g, progress())
			if err == nil {
				m.Config = d.Config
			}
			return sh, err
		},
		spec:  tp.LoadSpec{Path: path, Dummy: &tp.DummySpec{Config: path, Tokenizer: tok, Seed: seed}},
		dummy: d,
	}
	return m, name, src, nil
}

// dummyTokenizer picks a dummy model's tokenizer: the one named, else a
// tokenizer.json beside the config (a checkpoint directory's), else the
// family's (family.Family's DummyTokenizer). A dummy model needs a real
// vocabulary only so that prompts encode and outputs decode like the real
// model's.
func dummyTokenizer(configPath, arch, named string) (string, error) {
	if named != "" {
		return named, nil
	}
	beside := filepath.Join(filepath.Dir(configPath), "tokenizer.json")
	if _, err := os.Stat(beside); err == nil {
		return beside, nil
	}
	f, err := family.For(arch)
	if err != nil || f.DummyTokenizer == "" {
		return "", fmt.Errorf("%w: no default tokenizer for %q: pass --tokenizer", model.ErrUnsupportedArch, arch)
	}
	def := f.DummyTokenizer
	if _, err := os.Stat(def); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("no tokenizer: pass --tokenizer (the default, %s, is not installed: run make setup)", def)
	}
	return def, nil
}

// dummyName names a dummy model after its config: the file's stem, or its
// directory's name for a checkpoint's config.json.
func dummyName(configPath string) string {
	stem := strings.TrimSuffix(filepath.Base(configPath), filepath.Ext(configPath))
	if stem == "config" {
		if dir := filepath.Base(filepath.Dir(filepath.Clean(configPath))); dir != "." && dir != string(filepath.Separator) {
			return dir
		}
	}
	return stem
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

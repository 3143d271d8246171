package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
)

const cliUsage = `usage: provider bench --target name=url [--target name=url ...] [flags]

Sends the same streamed workload to each target and measures TTFT, TPOT,
ITL, E2E, throughput and goodput. Levels run against every target in turn.
With several targets, ratios compare the first with each other.

`

// Exit codes of Main.
const (
	ExitOK = 0
	// ExitFailed: the run or writing its results failed, or some level of
	// some target completed no request; results are still written.
	ExitFailed = 1
	ExitUsage  = 2
)

// targetFlags collects repeated --target values.
type targetFlags []Target

func (t *targetFlags) String() string {
	var s []string
	for _, x := range *t {
		s = append(s, x.Name+"="+x.URL)
	}
	return strings.Join(s, ",")
}

func (t *targetFlags) Set(v string) error {
	x, err := ParseTarget(v)
	if err != nil {
		return err
	}
	*t = append(*t, x)
	return nil
}

// Main is the bench command line; args exclude the command's name. It
// prints a progress bar on stderr, the table (and, with several targets,
// the ratios) on stdout, and with --out writes results.json, report.md
// and the plots there.
func Main(args []string, stdout, stderr io.Writer) int {
	cfg, opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	d := Driver{}
	if opts.progress {
		d.Progress = stderr
	}
	rep, runErr := d.Run(ctx, cfg)
	// A second interrupt while the results are written ends the process.
	stop()
	if rep == nil {
		fmt.Fprintln(stderr, "bench:", runErr)
		return ExitUsage
	}
	code := ExitOK
	if runErr != nil {
		fmt.Fprintln(stderr, "bench:", runErr)
		code = ExitFailed
	}
	if err := WriteTable(stdout, rep); err != nil {
		fmt.Fprintln(stderr, err)
		code = ExitFailed
	}
	if len(rep.Targets) > 1 {
		fmt.Fprintln(stdout)
		if err := writeRatios(stdout, rep); err != nil {
			fmt.Fprintln(stderr, err)
			code = ExitFailed
		}
	}
	if opts.out != "" {
		files, err := WriteOutputs(opts.out, rep, opts.records)
		for _, f := range files {
			fmt.Fprintln(stderr, "wrote", f)
		}
		if err != nil {
			fmt.Fprintln(stderr, err)
			code = ExitFailed
		}
	}
	for _, t := range rep.Targets {
		for _, l := range t.Levels {
			if l.Summary.Completed == 0 {
				fmt.Fprintf(stderr, "bench: %s %s: no request completed\n", t.Target.Name, l.Level.Label())
				code = ExitFailed
			}
		}
	}
	return code
}

// writeRatios prints the ratio tables of the markdown report.
func writeRatios(w io.Writer, r *Report) error {
	var b strings.Builder
	if err := WriteMarkdown(&b, r); err != nil {
		return err
	}
	md := b.String()
	if i := strings.Index(md, "\n## Ratios"); i >= 0 {
		md = md[i+1:]
	}
	_, err := io.WriteString(w, md)
	return err
}

// WriteOutputs writes results.json, report.md and the plots into dir,
// creating it, and returns the files written.
func WriteOutputs(dir string, r *Report, records bool) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: output dir: %w", err)
	}
	var files []string
	for _, f := range []struct {
		name  string
		write func(io.Writer) error
	}{
		{"results.json", func(w io.Writer) error { return WriteJSON(w, r, records) }},
		{"report.md", func(w io.Writer) error { return WriteMarkdown(w, r) }},
	} {
		path := filepath.Join(dir, f.name)
		if err := writeFile(path, f.write); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	plots, err := WritePlots(dir, r)
	return append(files, plots...), err
}

func writeFile(path string, write func(io.Writer) error) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("bench: %w", cerr)
		}
	}()
	return write(f)
}

// cliOptions are the flags that shape output rather than the workload.
type cliOptions struct {
	out      string
	records  bool
	progress bool
}

func parseFlags(args []string, stderr io.Writer) (Config, cliOptions, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, cliUsage)
		fs.PrintDefaults()
	}
	var (
		targets     targetFlags
		opts        cliOptions
		w           Workload
		endpoint    = fs.String("endpoint", "chat", "`route`: chat (/v1/chat/completions) or completions (/v1/completions)")
		concurrency = fs.String("concurrency", "1,2,4,8", "closed-loop `levels`: comma-separated worker counts")
		rates       = fs.String("poisson-rate", "", "open-loop `rates` in requests/s, comma-separated; replaces the concurrency sweep")
		maxInFlight = fs.Int("max-concurrency", 0, "open loop: at most `N` requests in flight (0: no cap)")
		shape       = fs.String("prompts", "random", "prompt `set`: random, fixed or shared-prefix")
		format      = fs.String("response-format", "", "send this response_format with every request: a JSON `object`, or @file to read it from a file (empty: none)")
	)
	fs.Var(&targets, "target", "server under test as `name=url` (repeatable; the first is the ratios' base)")
	fs.StringVar(&w.Model, "model", "", "model `name` sent with each request (empty: left out)")
	fs.IntVar(&w.Requests, "requests", 64, "measured requests per level (`N`)")
	fs.IntVar(&w.Warmup, "warmup", 1, "unmeasured requests per target before its first level (`N`)")
	fs.IntVar(&w.Prompts.Tokens, "prompt-tokens", 256, "prompt length in tokens, approximately (`N`)")
	fs.Float64Var(&w.Prompts.Range, "prompt-range", 0.5, "random prompts: lengths vary by ±`fraction` of --prompt-tokens (0 means 0.5; --prompts fixed for one length)")
	fs.IntVar(&w.Prompts.Prefixes, "prefixes", 4, "shared-prefix prompts: number of distinct prefixes (`N`)")
	fs.IntVar(&w.Prompts.PrefixTokens, "prefix-tokens", 0, "shared-prefix prompts: prefix length in tokens (`N`; 0: 3/4 of --prompt-tokens)")
	fs.IntVar(&w.MaxTokens, "max-tokens", 128, "max_tokens of each request (`N`)")
	fs.BoolVar(&w.IgnoreEOS, "ignore-eos", false, "send ignore_eos: true (only for servers that accept it)")
	fs.DurationVar(&w.Timeout, "timeout", DefaultTimeout, "per-request limit from send to end of stream (`duration`)")
	fs.DurationVar(&w.SLO.TTFT, "slo-ttft", 0, "goodput: TTFT bound (`duration`; 0: none)")
	fs.DurationVar(&w.SLO.TPOT, "slo-tpot", 0, "goodput: TPOT bound (`duration`; 0: none)")
	fs.DurationVar(&w.SLO.E2E, "slo-e2e", 0, "goodput: E2E bound (`duration`; 0: none)")
	fs.Uint64Var(&w.Seed, "seed", 0, "`seed` of prompts and arrival times (a run repeated against the same servers needs another, or their prompt caches answer)")
	fs.StringVar(&opts.out, "out", "", "`dir` to write results.json, report.md and plots into (empty: none)")
	fs.BoolVar(&opts.records, "records", false, "include every request in results.json")
	fs.BoolVar(&opts.progress, "progress", true, "draw a progress bar on stderr")
	if err := fs.Parse(args); err != nil {
		return Config{}, opts, err
	}
	if fs.NArg() > 0 {
		return Config{}, opts, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	w.Endpoint = Endpoint(*endpoint)
	if *format != "" {
		raw := []byte(*format)
		if name, ok := strings.CutPrefix(*format, "@"); ok {
			var err error
			if raw, err = os.ReadFile(name); err != nil {
				return Config{}, opts, fmt.Errorf("--response-format: %w", err)
			}
		}
		var c bytes.Buffer
		if err := json.Compact(&c, raw); err != nil {
			return Config{}, opts, fmt.Errorf("--response-format: %w", err)
		}
		w.ResponseFormat = c.Bytes()
	}
	w.Prompts.Shape = PromptShape(*shape)
	if w.Timeout <= 0 {
		return Config{}, opts, fmt.Errorf("--timeout %s, want > 0", w.Timeout)
	}
	if *rates != "" {
		rs, err := floats(*rates)
		if err != nil {
			return Config{}, opts, fmt.Errorf("--poisson-rate: %w", err)
		}
		for _, r := range rs {
			if r <= 0 {
				return Config{}, opts, fmt.Errorf("--poisson-rate %g, want > 0", r)
			}
			w.Levels = append(w.Levels, Level{Rate: r, Concurrency: *maxInFlight})
		}
	} else {
		cs, err := floats(*concurrency)
		if err != nil {
			return Config{}, opts, fmt.Errorf("--concurrency: %w", err)
		}
		for _, c := range cs {
			if c < 1 || c != float64(int(c)) {
				return Config{}, opts, fmt.Errorf("--concurrency %g, want whole numbers > 0", c)
			}
			w.Levels = append(w.Levels, Level{Concurrency: int(c)})
		}
	}
	cfg := Config{Targets: targets, Workload: w}
	if err := cfg.Validate(); err != nil {
		return Config{}, opts, err
	}
	return cfg, opts, nil
}

func floats(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/goprovider/provider/config"
)

// errHelp: --help was asked and the usage printed; the command exits 0.
var errHelp = errors.New("help shown")

// command describes a command for its --help.
type command struct {
	name     string
	synopsis string // one paragraph: what the command does
	// config lists, per flag, the configuration file keys that set it;
	// env, per flag, the environment variables that change it.
	config map[string][]string
	env    map[string]string
}

// parse parses args into fs. --help (or -h) prints the command's usage,
// every flag with its default, config keys and environment variables, to
// stdout and returns errHelp; a parse error is a usage error.
func (c command) parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.usage(fs, stdout)
		return errHelp
	case err != nil:
		return usageError{fmt.Sprintf("%s: %v (see provider %s --help)", c.name, err, c.name)}
	case fs.NArg() > 0:
		return usageError{fmt.Sprintf("%s: unexpected argument %q (see provider %s --help)", c.name, fs.Arg(0), c.name)}
	}
	return nil
}

// usage writes the command's help.
func (c command) usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "usage: provider %s [flags]\n\n%s\n\nflags:\n", c.name, c.synopsis)
	fs.VisitAll(func(f *flag.Flag) {
		name, text := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if name != "" {
			head += " " + name
		}
		var notes []string
		if def := f.DefValue; def != "" && def != "0" && def != "false" && def != "0s" {
			notes = append(notes, "default "+def)
		}
		if keys := c.config[f.Name]; len(keys) > 0 {
			notes = append(notes, "config "+strings.Join(keys, ", "))
		}
		if env := c.env[f.Name]; env != "" {
			notes = append(notes, "env "+env)
		}
		if len(notes) > 0 {
			text += " (" + strings.Join(notes, "; ") + ")"
		}
		fmt.Fprintf(w, "%s\n      %s\n", head, text)
	})
}

// serveConfigKeys is which configuration keys set each serve flag.
func serveConfigKeys() map[string][]string { return config.FlagKeys() }

// byteSize is a flag of bytes that accepts units: a plain number of bytes,
// or a number with B, KB, MB, GB, TB (powers of 1000) or K, KiB, M, MiB,
// G, GiB, T, TiB (powers of 1024), such as 2GiB or 1.5G.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

var byteUnits = []struct {
	suffix string
	scale  float64
}{
	// Longest first: "GiB" before "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// parseBytes reads a byte size (see byteSize).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	scale := 1.0
	for _, u := range byteUnits {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, scale = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.scale
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || v < 0 {
		return 0, fmt.Errorf("%q is not a size: want bytes, or a number with a unit such as 512MiB or 2GB", s)
	}
	if v*scale >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(v * scale), nil
}

// humanGiB renders bytes in GiB with one decimal.
func humanGiB(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// flagSet reports whether the command line (or the configuration file) set
// the named flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// interruptible returns a context that the first interrupt (Ctrl-C) or
// SIGTERM cancels; a second one exits the process at once (status 130).
func interruptible() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sig:
			cancel()
		case <-done:
			return
		}
		select {
		case <-sig:
			fmt.Fprintln(os.Stderr, "provider: interrupted again, exiting")
			os.Exit(130)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sig)
		close(done)
		cancel()
	}
}

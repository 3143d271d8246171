package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/goprovider/provider/config"
)

// addConfigFlag registers --config on a command's flags; applyConfig,
// after parsing, reads the file it names.
func addConfigFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "", "TOML configuration `file` (default provider/config.toml in the user's configuration directory, read when it exists); flags given here override it; --config= reads none")
}

// configYields lists, per flag, the command-line flags that make the
// file's value for it moot: a file's models are not loaded when
// --dummy-weights names what to run (the two are exclusive).
var configYields = map[string][]string{"model": {"dummy-weights"}}

// applyConfig gives every flag not set on the command line the value the
// configuration file has for it, and every environment switch not already
// in the environment the file's value, so both the command line and the
// environment beat the file. It runs after fs.Parse(args); what it needs of
// the command line it reads from fs (args is not read). The file is
// --config's, else the default one; a missing default file is no
// configuration, a missing --config file an error. Keys that do nothing
// are logged as warnings ("ignored key", "unknown key").
func applyConfig(fs *flag.FlagSet, _ []string, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	cf := fs.Lookup("config")
	if cf == nil {
		return errors.New("serve: --config is not defined (addConfigFlag)")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	explicit := set["config"]
	path := cf.Value.String()
	if explicit && path == "" {
		return nil
	}
	if !explicit {
		var err error
		if path, err = config.DefaultPath(); err != nil {
			// No configuration directory, so no default file.
			return nil
		}
	}
	f, err := config.Load(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return nil
	}
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	for _, w := range f.Warnings {
		attrs := []any{"file", path, "key", w.Key}
		if w.Reason != "" {
			attrs = append(attrs, "reason", w.Reason)
		}
		log.Warn(w.Kind.String(), attrs...)
	}
	var applied, overridden []string
	for _, s := range f.Settings {
		keys := strings.Join(s.Keys, ", ")
		fl := fs.Lookup(s.Flag)
		if fl == nil {
			return fmt.Errorf("serve: %s: %s: serve has no --%s flag", path, keys, s.Flag)
		}
		if set[s.Flag] || slices.ContainsFunc(configYields[s.Flag], func(name string) bool { return set[name] }) {
			overridden = append(overridden, s.Flag)
			continue
		}
		if err := fs.Set(s.Flag, s.Value(fl.Value.String())); err != nil {
			return fmt.Errorf("serve: %s: %s (--%s): %w", path, keys, s.Flag, err)
		}
		applied = append(applied, s.Flag)
	}
	for _, e := range f.Env {
		if _, ok := os.LookupEnv(e.Name); ok {
			overridden = append(overridden, e.Name)
			continue
		}
		if err := os.Setenv(e.Name, e.Value); err != nil {
			return fmt.Errorf("serve: %s: %s: %w", path, e.Key, err)
		}
		applied = append(applied, e.Name)
	}
	log.Info("config loaded", "file", path, "applied", applied, "overridden", overridden)
	return nil
}

package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// FileName is the configuration file's name inside its directory.
const FileName = "config.toml"

// DefaultPath is where the configuration file is looked for when none is
// named: provider/config.toml under the user's configuration directory
// ($XDG_CONFIG_HOME, else ~/.config, on Linux).
func DefaultPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("config: %w", err)
	}
	return filepath.Join(dir, "provider", FileName), nil
}

// kind is how a key's TOML value becomes a flag or environment value.
type kind int

const (
	kindString  kind = iota // a string, as written
	kindPath                // a string; a leading ~/ is the home directory
	kindPaths               // an array of kindPath strings
	kindInt                 // an integer
	kindBool                // a boolean
	kindMinutes             // a non-negative integer of minutes, as a duration
	kindPort                // an integer 1 to 65535 that replaces the listen address's port
)

// entry is one key of the file: where its value goes, or why it is
// ignored. Exactly one of flag, env and ignored is set.
type entry struct {
	key  string // section.name
	kind kind
	// flag is the serve flag the value sets. Several keys may set one
	// flag only when all of them are lists (kindPath or kindPaths): their
	// values join in table order.
	flag string
	// env is the environment switch a boolean sets: false is "0", true
	// is "1". The environment, when it already has the variable, wins.
	env string
	// ignored says why a key of the reference provider means nothing here.
	ignored string
	// reference marks the reference provider's keys.
	reference bool
}

// table is every key the file knows: ours, and the reference provider's
// (mapped where they mean something here, ignored with a reason where
// not). Keys go in sections; a whole section may be ignored (name without
// a dot).
var table = []entry{
	{key: "server.addr", kind: kindString, flag: "addr"},
	{key: "server.no_auth", kind: kindBool, flag: "no-auth"},
	{key: "server.token_file", kind: kindPath, flag: "token-file"},

	{key: "backend.port", kind: kindPort, flag: "addr", reference: true},
	{key: "backend.model", kind: kindPath, flag: "model", reference: true},
	{key: "backend.enabled_models", kind: kindPaths, flag: "model", reference: true},
	{key: "backend.models_dir", kind: kindPath, flag: "models-dir"},
	{key: "backend.idle_timeout_mins", kind: kindMinutes, flag: "idle-unload", reference: true},
	{key: "backend.max_concurrent", kind: kindInt, flag: "max-concurrent"},
	{key: "backend.max_slots", kind: kindInt, flag: "max-slots"},
	{key: "backend.kv_bytes", kind: kindInt, flag: "kv-bytes"},
	{key: "backend.device", kind: kindString, flag: "device"},
	{key: "backend.step_tokens", kind: kindInt, flag: "step-tokens"},
	{key: "backend.continuous_batching", ignored: "requests are always batched; backend.max_concurrent bounds them", reference: true},

	{key: "coordinator.url", kind: kindString, flag: "coordinator", reference: true},
	{key: "coordinator.heartbeat_interval_secs", ignored: "no equivalent here", reference: true},

	{key: "cache.prefix", kind: kindBool, env: "PROVIDER_PREFIX_CACHE"},
	{key: "cache.ssd", kind: kindBool, env: "PROVIDER_PREFIX_CACHE_SSD"},
	{key: "cache.ram_bytes", kind: kindInt, flag: "prefix-cache-bytes"},

	{key: "provider.name", ignored: "no equivalent here", reference: true},
	{key: "provider.memory_reserve_gb", ignored: "the KV budget is backend.kv_bytes, else derived from the device's memory", reference: true},
	{key: "provider.auto_update", ignored: "no self-update", reference: true},

	{key: "schedule", ignored: "no availability schedule", reference: true},
}

// lookup finds a key, or an ignored section holding it.
func lookup(key toml.Key) (entry, bool) {
	name := strings.Join(key, ".")
	for _, e := range table {
		if e.key == name || (!strings.Contains(e.key, ".") && e.ignored != "" && e.key == key[0]) {
			return e, true
		}
	}
	return entry{}, false
}

// section reports whether name is a section of the table.
func section(name string) bool {
	return slices.ContainsFunc(table, func(e entry) bool { return strings.HasPrefix(e.key, name+".") })
}

// File is what a configuration file says, checked and converted: the flag
// and environment values it gives, and its keys that do nothing.
type File struct {
	// Path is the file, for messages.
	Path string
	// Settings are the flag values, one per flag, in table order.
	Settings []Setting
	// Env are the environment switches the file sets, in table order.
	Env []EnvSetting
	// Warnings are the keys that do nothing, in the file's order.
	Warnings []Warning
}

// Setting is one serve flag's value from the file.
type Setting struct {
	// Flag is the flag's name, without dashes.
	Flag string
	// Keys are the file keys that gave it.
	Keys  []string
	value string
	port  bool
}

// Value is the value to set the flag to, given its current value: a port
// alone (backend.port) keeps the host of the current listen address, or
// 127.0.0.1 when that has none it can read.
func (s Setting) Value(current string) string {
	if !s.port {
		return s.value
	}
	host, _, err := net.SplitHostPort(current)
	if err != nil {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, s.value)
}

// EnvSetting is an environment switch's value from the file.
type EnvSetting struct {
	Key   string // the file key
	Name  string // the variable
	Value string
}

// WarningKind says why a key does nothing.
type WarningKind int

const (
	// Ignored: a key of the reference provider with no meaning here.
	Ignored WarningKind = iota
	// Unknown: a key neither this provider nor the reference knows.
	Unknown
)

func (k WarningKind) String() string {
	if k == Ignored {
		return "ignored key"
	}
	return "unknown key"
}

// Warning is a key of the file that does nothing. The TOML library does
// not report a key's line, so a warning names the key alone.
type Warning struct {
	Key    string
	Kind   WarningKind
	Reason string // why an ignored key means nothing here
}

// ErrConflict: two keys of the file set the same flag.
var ErrConflict = errors.New("two keys set the same flag")

// Error is a file that cannot be used: unreadable, malformed TOML, or a
// value of the wrong type or range.
type Error struct {
	File string
	// Line is the line of a syntax error; 0 when the TOML library does not
	// give one (its type errors carry the line in their text).
	Line int
	// Key is the key at fault, when known.
	Key string
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": %s", e.Key)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Load reads and parses the file at path. A missing file is an error that
// wraps fs.ErrNotExist.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a configuration file's contents; name is the file, for
// messages.
func Parse(name string, data []byte) (*File, error) {
	var top map[string]toml.Primitive
	md, err := toml.Decode(string(data), &top)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &Error{File: name, Line: pe.Position.Line, Err: errors.New(pe.Message)}
		}
		return nil, &Error{File: name, Err: err}
	}
	f := &File{Path: name}
	for _, key := range md.Keys() {
		if len(key) == 1 && section(key[0]) {
			if t := md.Type(key...); t != "Hash" {
				return nil, &Error{File: name, Key: key[0], Err: fmt.Errorf("want a table, got %s", strings.ToLower(t))}
			}
			continue
		}
		if len(key) > 1 && !section(key[0]) {
			continue // under a section already warned about
		}
		if len(key) > 2 {
			continue // inside a value; its type check reports it
		}
		e, ok := lookup(key)
		switch {
		case !ok:
			f.Warnings = append(f.Warnings, Warning{Key: key.String(), Kind: Unknown})
		case e.ignored != "":
			f.Warnings = append(f.Warnings, Warning{Key: key.String(), Kind: Ignored, Reason: e.ignored})
		}
	}

	sections := map[string]map[string]toml.Primitive{}
	byFlag := map[string]int{} // index in f.Settings
	for _, e := range table {
		if e.ignored != "" {
			continue
		}
		sec, leaf, _ := strings.Cut(e.key, ".")
		if !md.IsDefined(sec, leaf) {
			continue
		}
		if _, ok := sections[sec]; !ok {
			var m map[string]toml.Primitive
			if err := md.PrimitiveDecode(top[sec], &m); err != nil {
				return nil, &Error{File: name, Key: sec, Err: err}
			}
			sections[sec] = m
		}
		value, err := convert(md, sections[sec][leaf], e.kind)
		if err != nil {
			return nil, &Error{File: name, Key: e.key, Err: err}
		}
		if e.env != "" {
			f.Env = append(f.Env, EnvSetting{Key: e.key, Name: e.env, Value: value})
			continue
		}
		i, seen := byFlag[e.flag]
		if !seen {
			byFlag[e.flag] = len(f.Settings)
			f.Settings = append(f.Settings, Setting{Flag: e.flag, Keys: []string{e.key}, value: value, port: e.kind == kindPort})
			continue
		}
		s := &f.Settings[i]
		if !isList(e.kind) {
			return nil, &Error{File: name, Key: e.key, Err: fmt.Errorf("%w: %s and %s both set --%s", ErrConflict, s.Keys[0], e.key, e.flag)}
		}
		s.Keys = append(s.Keys, e.key)
		s.value = joinList(s.value, value)
	}
	return f, nil
}

func isList(k kind) bool { return k == kindPath || k == kindPaths }

// joinList joins two comma-separated lists, each item once, in order.
func joinList(a, b string) string {
	var items []string
	for _, it := range strings.Split(a+","+b, ",") {
		if it != "" && !slices.Contains(items, it) {
			items = append(items, it)
		}
	}
	return strings.Join(items, ",")
}

// convert decodes a value as its kind wants and writes it as a flag's
// text.
func convert(md toml.MetaData, p toml.Primitive, k kind) (string, error) {
	switch k {
	case kindString:
		var s string
		err := md.PrimitiveDecode(p, &s)
		return s, err
	case kindPath:
		var s string
		if err := md.PrimitiveDecode(p, &s); err != nil {
			return "", err
		}
		return expandHome(s)
	case kindPaths:
		var list []string
		if err := md.PrimitiveDecode(p, &list); err != nil {
			return "", err
		}
		for i, s := range list {
			if strings.Contains(s, ",") {
				return "", fmt.Errorf("item %d contains a comma", i)
			}
			var err error
			if list[i], err = expandHome(s); err != nil {
				return "", err
			}
		}
		return strings.Join(list, ","), nil
	case kindInt:
		var n int64
		err := md.PrimitiveDecode(p, &n)
		return strconv.FormatInt(n, 10), err
	case kindBool:
		var b bool
		if err := md.PrimitiveDecode(p, &b); err != nil {
			return "", err
		}
		if b {
			return "1", nil
		}
		return "0", nil
	case kindMinutes:
		var n int64
		if err := md.PrimitiveDecode(p, &n); err != nil {
			return "", err
		}
		if n < 0 || n > math.MaxInt64/int64(time.Minute) {
			return "", fmt.Errorf("%d minutes out of range", n)
		}
		return (time.Duration(n) * time.Minute).String(), nil
	case kindPort:
		var n int64
		if err := md.PrimitiveDecode(p, &n); err != nil {
			return "", err
		}
		if n < 1 || n > 65535 {
			return "", fmt.Errorf("port %d out of range 1 to 65535", n)
		}
		return strconv.FormatInt(n, 10), nil
	}
	panic(fmt.Sprintf("config: kind %d", k))
}

// expandHome replaces a leading ~/ with the home directory: the file is
// not read by a shell.
func expandHome(s string) (string, error) {
	rest, ok := strings.CutPrefix(s, "~/")
	if !ok {
		return s, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, rest), nil
}

// FlagKeys maps each serve flag the file can set to its keys, in table
// order.
func FlagKeys() map[string][]string {
	out := map[string][]string{}
	for _, e := range table {
		if e.flag != "" {
			out[e.flag] = append(out[e.flag], e.key)
		}
	}
	return out
}

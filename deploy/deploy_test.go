package deploy

import (
	"bufio"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// installedBinary is where `make install PREFIX=/usr/local` puts provider.
const installedBinary = "/usr/local/bin/provider"

// maxExposure bounds systemd's offline security review of the unit, on its
// scale of 0 to 100 (shown as 0.0 to 10.0; the unit scores about 2.0).
const maxExposure = 30

// TestSystemdUnit runs systemd-analyze on the unit inside a scratch root,
// which needs no running systemd: verify loads the unit and its
// dependencies as the manager would, parses every setting (an unknown
// key, a misspelt section or an unparsable value is a warning, which fails
// this test), and checks that ExecStart's binary exists there and is
// executable; security scores the sandboxing. The root holds the unit, a
// stub at the installed binary's path and the host's target units (the
// unit's default dependencies and the targets it names).
func TestSystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not on PATH: run `bash scripts/setup_prometheus.sh` (apt-get install systemd)")
	}
	root := t.TempDir()
	unitDir := filepath.Join(root, "etc", "systemd", "system")
	copyFile(t, "provider.service", filepath.Join(unitDir, "provider.service"), 0o644)
	stub := filepath.Join(root, installedBinary)
	if err := os.MkdirAll(filepath.Dir(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stub, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, dir := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if targets, _ = filepath.Glob(filepath.Join(dir, "*.target")); len(targets) > 0 {
			break
		}
	}
	if len(targets) == 0 {
		t.Fatal("no systemd target units under /usr/lib/systemd/system: run `bash scripts/setup_prometheus.sh` (apt-get install systemd)")
	}
	for _, src := range targets {
		copyFile(t, src, filepath.Join(root, "usr", "lib", "systemd", "system", filepath.Base(src)), 0o644)
	}

	out, err := exec.Command(analyze, "verify", "--man=no", "--root="+root, "provider.service").CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(analyze, "security", "--offline=yes", "--root="+root,
		"--threshold="+strconv.Itoa(maxExposure), "provider.service").CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security: exposure over %d: %v\n%s", maxExposure, err, out)
	}

	if got := execStart(t); got != installedBinary+" serve" && !strings.HasPrefix(got, installedBinary+" serve ") {
		t.Errorf("ExecStart=%s, want %s serve", got, installedBinary)
	}
}

// execStart returns the unit's ExecStart value.
func execStart(t *testing.T) string {
	t.Helper()
	f, err := os.Open("provider.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ExecStart="); ok {
			return v
		}
	}
	t.Fatal("provider.service has no ExecStart")
	return ""
}

// TestLaunchdPlist checks what `plutil -lint` would: a well-formed XML
// property list whose values are of the plist types, dictionaries of
// key-value pairs with unique keys. Then what launchd needs of this one: a
// label, the installed binary's serve command, a restart on failure only,
// and absolute log paths (launchd expands no ~).
func TestLaunchdPlist(t *testing.T) {
	f, err := os.Open("com.goprovider.provider.plist")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root, err := parsePlist(f)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := root.(map[string]any)
	if !ok {
		t.Fatalf("the top-level value is %T, want a dict", root)
	}
	if d["Label"] != "com.goprovider.provider" {
		t.Errorf("Label %v", d["Label"])
	}
	args, _ := d["ProgramArguments"].([]any)
	if len(args) < 2 || args[0] != installedBinary || args[1] != "serve" {
		t.Errorf("ProgramArguments %v, want %s serve", args, installedBinary)
	}
	if keep, _ := d["KeepAlive"].(map[string]any); keep == nil || keep["SuccessfulExit"] != false {
		t.Errorf("KeepAlive %v, want {SuccessfulExit: false}", d["KeepAlive"])
	}
	for _, k := range []string{"StandardOutPath", "StandardErrorPath"} {
		if p, _ := d[k].(string); !filepath.IsAbs(p) {
			t.Errorf("%s %q is not an absolute path", k, p)
		}
	}
}

func TestPlistRejects(t *testing.T) {
	head := `<?xml version="1.0" encoding="UTF-8"?><plist version="1.0">`
	for _, tc := range []struct{ name, doc string }{
		{"unclosed", head + `<dict><key>a</key><string>b</string></plist>`},
		{"duplicate key", head + `<dict><key>a</key><true/><key>a</key><false/></dict></plist>`},
		{"key without value", head + `<dict><key>a</key></dict></plist>`},
		{"value without key", head + `<dict><string>b</string></dict></plist>`},
		{"bad integer", head + `<integer>x</integer></plist>`},
		{"unknown type", head + `<map/></plist>`},
		{"two values", head + `<true/><true/></plist>`},
		{"not a plist", `<?xml version="1.0"?><dict/>`},
		{"trailing element", head + `<true/></plist><plist/>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if v, err := parsePlist(strings.NewReader(tc.doc)); err == nil {
				t.Fatalf("accepted as %v", v)
			}
		})
	}
}

// parsePlist decodes an XML property list into Go values: map[string]any,
// []any, string, int64, float64, bool (dates and data as their text).
func parsePlist(r io.Reader) (any, error) {
	dec := xml.NewDecoder(r)
	start, err := nextElement(dec)
	if err != nil {
		return nil, err
	}
	if start.Name.Local != "plist" {
		return nil, fmt.Errorf("root element <%s>, want <plist>", start.Name.Local)
	}
	v, err := plistValue(dec)
	if err != nil {
		return nil, err
	}
	if tok, err := nextElement(dec); err == nil {
		return nil, fmt.Errorf("<plist> holds a second value <%s>", tok.Name.Local)
	} else if !errors.Is(err, errEnd) {
		return nil, err
	}
	// Nothing but comments and white space may follow </plist>.
	if tok, err := nextElement(dec); err == nil {
		return nil, fmt.Errorf("<%s> after </plist>", tok.Name.Local)
	} else if !errors.Is(err, io.EOF) {
		return nil, err
	}
	return v, nil
}

// errEnd is nextElement meeting its parent's end tag.
var errEnd = errors.New("end of element")

// nextElement returns the next start tag, skipping white space, comments,
// processing instructions and the doctype; errEnd at an end tag, io.EOF
// at the end of the document; text is an error.
func nextElement(dec *xml.Decoder) (xml.StartElement, error) {
	for {
		tok, err := dec.Token()
		if err != nil {
			return xml.StartElement{}, err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			return tok, nil
		case xml.EndElement:
			return xml.StartElement{}, errEnd
		case xml.CharData:
			if s := strings.TrimSpace(string(tok)); s != "" {
				return xml.StartElement{}, fmt.Errorf("text %q outside a value", s)
			}
		}
	}
}

// plistValue decodes the next value; errEnd when the parent ends instead.
func plistValue(dec *xml.Decoder) (any, error) {
	start, err := nextElement(dec)
	if err != nil {
		return nil, err
	}
	switch name := start.Name.Local; name {
	case "dict":
		d := map[string]any{}
		for {
			k, err := nextElement(dec)
			if errors.Is(err, errEnd) {
				return d, nil
			}
			if err != nil {
				return nil, err
			}
			if k.Name.Local != "key" {
				return nil, fmt.Errorf("<%s> where a dict wants <key>", k.Name.Local)
			}
			key, err := text(dec)
			if err != nil {
				return nil, err
			}
			if _, dup := d[key]; dup {
				return nil, fmt.Errorf("key %q twice in one dict", key)
			}
			v, err := plistValue(dec)
			if errors.Is(err, errEnd) {
				return nil, fmt.Errorf("key %q has no value", key)
			}
			if err != nil {
				return nil, err
			}
			d[key] = v
		}
	case "array":
		a := []any{}
		for {
			v, err := plistValue(dec)
			if errors.Is(err, errEnd) {
				return a, nil
			}
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
	case "true", "false":
		if s, err := text(dec); err != nil || s != "" {
			return nil, fmt.Errorf("<%s> is not empty: %q %v", name, s, err)
		}
		return name == "true", nil
	case "string", "date", "data":
		return text(dec)
	case "integer":
		s, err := text(dec)
		if err != nil {
			return nil, err
		}
		return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	case "real":
		s, err := text(dec)
		if err != nil {
			return nil, err
		}
		return strconv.ParseFloat(strings.TrimSpace(s), 64)
	default:
		return nil, fmt.Errorf("<%s> is not a property list type", name)
	}
}

// text reads an element's character data up to its end tag; a child
// element is an error.
func text(dec *xml.Decoder) (string, error) {
	var b strings.Builder
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		switch tok := tok.(type) {
		case xml.CharData:
			b.Write(tok)
		case xml.EndElement:
			return b.String(), nil
		case xml.StartElement:
			return "", fmt.Errorf("<%s> inside a text value", tok.Name.Local)
		}
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstalledTreeRunsElsewhere installs with `make install PREFIX=...`,
// moves the whole tree, and runs generate from the moved copy: the binary
// finds the MLX library of the moved tree through its relative runpath.
// (The CUDA install, MLX_WHEEL=mlx-cuda-13, is checked on a GPU machine:
// docs/install.md.)
func TestInstalledTreeRunsElsewhere(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(t.TempDir(), "installed")
	if out, err := exec.Command("make", "-C", root, "--no-print-directory", "install", "PREFIX="+prefix).CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	moved := filepath.Join(t.TempDir(), "moved")
	if err := os.Rename(prefix, moved); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(moved, "bin", "provider")
	// The installed binary's runpath names the install's library folder
	// alone, relative to the binary: nothing of the checkout it was built in.
	dyn, err := exec.Command("readelf", "-d", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("readelf: %v\n%s", err, dyn)
	}
	if want := "Library runpath: [$ORIGIN/../lib/provider/mlx/lib]"; !strings.Contains(string(dyn), want) {
		t.Fatalf("the installed binary's runpath is not %q:\n%s", want, dyn)
	}
	ldd, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("ldd: %v\n%s", err, ldd)
	}
	want := filepath.Join(moved, "lib", "provider", "mlx", "lib", "libmlx.so")
	found := false
	for _, line := range strings.Split(string(ldd), "\n") {
		if _, rest, ok := strings.Cut(line, "libmlx.so => "); ok {
			path, _, _ := strings.Cut(rest, " (")
			found = filepath.Clean(path) == want
		}
	}
	if !found {
		t.Fatalf("the moved binary does not load the moved MLX library %s:\n%s", want, ldd)
	}
	model, err := filepath.Abs(stories)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "generate", "--model", model, "--prompt", "Once upon a time", "--max-tokens", "4")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "prompt tokens:") {
		t.Fatalf("generate from the moved tree: %v\n%s", err, out)
	}
}

package link

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestKeyFilesCreatedPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	k, err := LoadKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("key directory mode %04o, want 0700", m)
	}
	for _, f := range []string{EncryptionKeyFile, SigningKeyFile} {
		if m := mode(t, filepath.Join(dir, f)); m != 0o600 {
			t.Errorf("%s mode %04o, want 0600", f, m)
		}
	}
	again, err := LoadKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.EncryptionPublicKey() != k.EncryptionPublicKey() || again.SigningPublicKey() != k.SigningPublicKey() {
		t.Error("keys changed on reload")
	}
	sig, err := again.Sign([]byte("data"))
	if err != nil {
		t.Fatal(err)
	}
	verify(t, p256Key(t, k.SigningPublicKey()), []byte("data"), sig)
}

func TestLooseKeyPermissionsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	if _, err := LoadKeys(dir); err != nil {
		t.Fatal(err)
	}
	enc := filepath.Join(dir, EncryptionKeyFile)
	if err := os.Chmod(enc, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadKeys(dir)
	if !errors.Is(err, ErrKeyPermissions) {
		t.Fatalf("LoadKeys with a 0644 key: %v, want ErrKeyPermissions", err)
	}
	t.Logf("refused: %v", err)
	// Run refuses it too, before any connection.
	err = Run(context.Background(), Options{URL: "ws://127.0.0.1:1/ws/provider", Handler: http.NotFoundHandler(), KeyDir: dir})
	if !errors.Is(err, ErrKeyPermissions) {
		t.Errorf("Run with a 0644 key: %v, want ErrKeyPermissions", err)
	}
	if m := mode(t, enc); m != 0o644 {
		t.Errorf("the refused key's mode was changed to %04o", m)
	}

	if err := os.Chmod(enc, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeys(dir); !errors.Is(err, ErrKeyPermissions) {
		t.Errorf("LoadKeys in a world-writable directory: %v, want ErrKeyPermissions", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}

	sign := filepath.Join(dir, SigningKeyFile)
	moved := filepath.Join(t.TempDir(), "elsewhere.key")
	if err := os.Rename(sign, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, sign); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeys(dir); !errors.Is(err, ErrKeyPermissions) {
		t.Errorf("LoadKeys with a symlinked key: %v, want ErrKeyPermissions", err)
	}
}

func TestCorruptKeyRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, EncryptionKeyFile), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeys(dir); err == nil {
		t.Error("LoadKeys accepted a corrupt key")
	}
	if _, err := os.Stat(filepath.Join(dir, EncryptionKeyFile)); err != nil {
		t.Error("corrupt key removed")
	}
}

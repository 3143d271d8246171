package server

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"unicode"
)

// Local authentication: a bearer token shared with local clients through a
// file only the user can read.

// ErrTokenExposed: the token file can be read or written by group or
// others.
var ErrTokenExposed = errors.New("server: token file is accessible by group or others")

// ErrTokenInvalid: the token file holds no token, or one that cannot be
// sent in a header (whitespace or control characters inside it).
var ErrTokenInvalid = errors.New("server: token file holds no usable token")

// ErrNotLoopback: serving without authentication was asked for on a
// listen address that is not loopback.
var ErrNotLoopback = errors.New("server: serving without authentication needs a loopback listen address (127.0.0.0/8, ::1 or localhost)")

// tokenBytes is the randomness of a created token (hex-encoded, 64
// characters); maxTokenFile bounds what is read of a token file.
const (
	tokenBytes   = 32
	maxTokenFile = 4096
)

// RequireToken lets through to next the requests that carry
// "Authorization: Bearer <token>", and GET or HEAD /health (probes), / and
// /dashboard/... (the dashboard's page and assets, which hold no data)
// without it. Any other request gets 401 invalid_api_key with
// WWW-Authenticate: Bearer. The comparison takes the same time whatever
// was presented; the presented value is never written back or logged, and
// next does not see the Authorization header. An empty token refuses every
// request but those.
func RequireToken(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.URL.Path == "/health" || dashboardPublic(r.URL.Path)) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			next.ServeHTTP(w, r)
			return
		}
		got, ok := bearer(r.Header.Get("Authorization"))
		// Hashing both sides first makes the comparison's time independent
		// of the presented token's length too.
		sum := sha256.Sum256([]byte(got))
		if !ok || token == "" || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeError(w, classify(errUnauthorized))
			return
		}
		r = r.Clone(r.Context())
		r.Header.Del("Authorization")
		next.ServeHTTP(w, r)
	})
}

// bearer is the credentials of an Authorization header in the Bearer
// scheme (whose name is case-insensitive).
func bearer(header string) (string, bool) {
	scheme, cred, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	cred = strings.TrimLeft(cred, " ")
	return cred, cred != ""
}

// LoadOrCreateToken reads the API token from path, trimmed of surrounding
// whitespace. When the file does not exist it creates it: its directory
// with mode 0700 where missing, the file with mode 0600 holding a new
// random token of 32 bytes, hex-encoded. A file that group or others can
// access is refused (ErrTokenExposed), as is one with no usable token
// (ErrTokenInvalid).
func LoadOrCreateToken(path string) (string, error) {
	token, err := readToken(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return token, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("server: token file: %w", err)
	}
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("server: token: %w", err)
	}
	token = hex.EncodeToString(b[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another process created it meanwhile: use theirs.
		return readToken(path)
	}
	if err != nil {
		return "", fmt.Errorf("server: token file: %w", err)
	}
	_, err = io.WriteString(f, token+"\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("server: token file: %w", err)
	}
	return token, nil
}

// readToken reads an existing token file, checking its mode on the opened
// file so the check and the read are of the same file.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("server: token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("server: token file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("server: token file %s: not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%w: %s has mode %04o; chmod 600 it", ErrTokenExposed, path, perm)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("server: token file: %w", err)
	}
	if len(data) > maxTokenFile {
		return "", fmt.Errorf("%w: %s is larger than %d bytes", ErrTokenInvalid, path, maxTokenFile)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("%w: %s is empty", ErrTokenInvalid, path)
	}
	if strings.ContainsFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return "", fmt.Errorf("%w: %s: the token contains whitespace or control characters", ErrTokenInvalid, path)
	}
	return token, nil
}

// CheckNoAuth allows serving without authentication only on a loopback
// listen address: an IP in 127.0.0.0/8, ::1, or the name localhost. Any
// other address, the unspecified ones (all interfaces) and host names
// among them, is an error wrapping ErrNotLoopback.
func CheckNoAuth(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: listen address %q: %v", ErrNotLoopback, addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w; %q is not one", ErrNotLoopback, addr)
}

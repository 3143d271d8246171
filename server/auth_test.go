package server

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestRequireToken(t *testing.T) {
	s := New(Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(s.Close)
	srv := httptest.NewServer(RequireToken(testToken, s))
	t.Cleanup(srv.Close)

	for _, tt := range []struct {
		name   string
		method string
		path   string
		auth   string // Authorization header; "" sends none
		want   int
	}{
		// /health answers probes without a token: 503 while no model is
		// registered, but not 401.
		{name: "health", method: "GET", path: "/health", want: http.StatusServiceUnavailable},
		{name: "health head", method: "HEAD", path: "/health", want: http.StatusServiceUnavailable},
		{name: "health post", method: "POST", path: "/health", want: http.StatusUnauthorized},
		{name: "below health", method: "GET", path: "/health/x", want: http.StatusUnauthorized},
		{name: "no header", method: "GET", path: "/v1/models", want: http.StatusUnauthorized},
		{name: "metrics no header", method: "GET", path: "/metrics", want: http.StatusUnauthorized},
		{name: "chat no header", method: "POST", path: "/v1/chat/completions", want: http.StatusUnauthorized},
		{name: "good", method: "GET", path: "/v1/models", auth: "Bearer " + testToken, want: http.StatusOK},
		{name: "scheme case", method: "GET", path: "/v1/models", auth: "bearer " + testToken, want: http.StatusOK},
		{name: "extra spaces", method: "GET", path: "/v1/models", auth: "Bearer   " + testToken, want: http.StatusOK},
		{name: "health with token", method: "GET", path: "/health", auth: "Bearer " + testToken, want: http.StatusServiceUnavailable},
		{name: "wrong token", method: "GET", path: "/v1/models", auth: "Bearer sk-not-the-token", want: http.StatusUnauthorized},
		{name: "prefix", method: "GET", path: "/v1/models", auth: "Bearer " + testToken[:32], want: http.StatusUnauthorized},
		{name: "longer", method: "GET", path: "/v1/models", auth: "Bearer " + testToken + "0", want: http.StatusUnauthorized},
		{name: "no scheme", method: "GET", path: "/v1/models", auth: testToken, want: http.StatusUnauthorized},
		{name: "basic", method: "GET", path: "/v1/models", auth: "Basic " + testToken, want: http.StatusUnauthorized},
		{name: "scheme only", method: "GET", path: "/v1/models", auth: "Bearer", want: http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if tt.want != http.StatusUnauthorized {
				return
			}
			if got := resp.Header.Get("WWW-Authenticate"); got != "Bearer" {
				t.Errorf("WWW-Authenticate %q, want Bearer", got)
			}
			var e errorBody
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			if e.Error.Code != "invalid_api_key" || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
				t.Errorf("error %+v", e.Error)
			}
			if cred := strings.TrimSpace(strings.TrimPrefix(tt.auth, "Bearer")); cred != "" && strings.Contains(string(body), cred) {
				t.Errorf("body %s echoes the presented credentials", body)
			}
		})
	}
}

func TestRequireTokenHidesHeader(t *testing.T) {
	var seen []string
	h := RequireToken(testToken, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Authorization"))
	}))
	req := httptest.NewRequest("GET", "/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if len(seen) != 1 || seen[0] != "" {
		t.Errorf("next saw Authorization %q", seen)
	}
	if req.Header.Get("Authorization") == "" {
		t.Error("the caller's request was modified")
	}
}

func TestRequireTokenEmptyRefusesAll(t *testing.T) {
	h := RequireToken("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer  "} {
		req := httptest.NewRequest("GET", "/v1/models", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", auth, rec.Code)
		}
	}
}

// writeTokenFile writes a token file with exactly the given mode.
func writeTokenFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestLoadToken(t *testing.T) {
	for _, tt := range []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
		err     error // nil: any error will do when want is ""
	}{
		{name: "plain", content: "secret", mode: 0o600, want: "secret"},
		{name: "trimmed", content: "  secret \r\n\n", mode: 0o600, want: "secret"},
		{name: "owner read only", content: "secret\n", mode: 0o400, want: "secret"},
		{name: "group readable", content: "secret\n", mode: 0o640, err: ErrTokenExposed},
		{name: "world readable", content: "secret\n", mode: 0o604, err: ErrTokenExposed},
		{name: "group writable", content: "secret\n", mode: 0o620, err: ErrTokenExposed},
		{name: "empty", content: "", mode: 0o600, err: ErrTokenInvalid},
		{name: "blank", content: " \n\t\n", mode: 0o600, err: ErrTokenInvalid},
		{name: "inner space", content: "sec ret\n", mode: 0o600, err: ErrTokenInvalid},
		{name: "two lines", content: "sec\nret\n", mode: 0o600, err: ErrTokenInvalid},
		{name: "too large", content: strings.Repeat("a", maxTokenFile+1), mode: 0o600, err: ErrTokenInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "token")
			writeTokenFile(t, path, tt.content, tt.mode)
			got, err := LoadOrCreateToken(path)
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Fatalf("got %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if got != "" {
				t.Errorf("token %q returned with an error", got)
			}
			if tt.content != "" && strings.TrimSpace(tt.content) != "" && strings.Contains(err.Error(), strings.TrimSpace(tt.content)) {
				t.Errorf("error %q quotes the file's content", err)
			}
		})
	}
}

func TestCreateToken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "token")
	tok, err := LoadOrCreateToken(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 2*tokenBytes || strings.Trim(tok, "0123456789abcdef") != "" {
		t.Errorf("token %q: want %d hex characters", tok, 2*tokenBytes)
	}
	for p, want := range map[string]fs.FileMode{dir: 0o700, filepath.Dir(dir): 0o700, path: 0o600} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", p, got, want)
		}
	}
	again, err := LoadOrCreateToken(path)
	if err != nil || again != tok {
		t.Errorf("second load %q, %v; want the created %q", again, err, tok)
	}
	other, err := LoadOrCreateToken(filepath.Join(dir, "other"))
	if err != nil || other == tok {
		t.Errorf("a second file's token %q, %v: want a new one", other, err)
	}
}

func TestLoadTokenNotAFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateToken(dir); err == nil {
		t.Error("a directory was accepted as a token file")
	}
}

func TestCheckNoAuth(t *testing.T) {
	for _, tt := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:8000", true},
		{"127.8.9.10:8000", true},
		{"[::1]:8000", true},
		{"localhost:8000", true},
		{"LocalHost:8000", true},
		{"[::ffff:127.0.0.1]:8000", true},
		{"0.0.0.0:8000", false},
		{"[::]:8000", false},
		{":8000", false},
		{"192.168.1.5:8000", false},
		{"128.0.0.1:8000", false},
		{"example.com:8000", false},
		{"localhost.example.com:8000", false},
		{"127.0.0.1", false},
		{"", false},
	} {
		err := CheckNoAuth(tt.addr)
		if tt.ok && err != nil {
			t.Errorf("CheckNoAuth(%q) = %v, want nil", tt.addr, err)
		}
		if !tt.ok && !errors.Is(err, ErrNotLoopback) {
			t.Errorf("CheckNoAuth(%q) = %v, want ErrNotLoopback", tt.addr, err)
		}
	}
}

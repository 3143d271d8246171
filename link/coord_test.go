package link

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/coder/websocket"
	"golang.org/x/crypto/nacl/box"
)

// guard bounds every wait on the network in these tests. It is a
// failure deadline, never a synchronisation: time in the link is the
// mock clock's, moved only by the tests.
const guard = 30 * time.Second

// coordinator is a test coordinator: it accepts provider connections
// and hands each to the test, which then speaks the protocol itself.
type coordinator struct {
	t     *testing.T
	srv   *httptest.Server
	peers chan *peer
}

func newCoordinator(t *testing.T) *coordinator {
	t.Helper()
	c := &coordinator{t: t, peers: make(chan *peer, 8)}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		conn.SetReadLimit(-1)
		c.peers <- &peer{t: t, conn: conn}
	}))
	t.Cleanup(func() {
		c.srv.Close()
		for {
			select {
			case p := <-c.peers:
				_ = p.conn.CloseNow()
			default:
				return
			}
		}
	})
	return c
}

func (c *coordinator) url() string {
	return "ws" + strings.TrimPrefix(c.srv.URL, "http") + "/ws/provider"
}

// accept returns the next provider connection.
func (c *coordinator) accept() *peer {
	c.t.Helper()
	select {
	case p := <-c.peers:
		c.t.Cleanup(func() { _ = p.conn.CloseNow() })
		return p
	case <-time.After(guard):
		c.t.Fatal("no provider connection")
		return nil
	}
}

// peer is one provider connection as the coordinator sees it.
type peer struct {
	t    *testing.T
	conn *websocket.Conn
}

// msg is one message from the provider.
type msg struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	raw       []byte
}

func (m msg) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(m.raw, v); err != nil {
		t.Fatalf("decode %s: %v", m.Type, err)
	}
}

func (p *peer) next() msg {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	_, data, err := p.conn.Read(ctx)
	if err != nil {
		p.t.Fatalf("read from provider: %v", err)
	}
	var m msg
	if err := json.Unmarshal(data, &m); err != nil {
		p.t.Fatalf("provider sent malformed JSON: %v", err)
	}
	m.raw = data
	return m
}

// expect reads the next message, which must be of type typ.
func (p *peer) expect(typ string) msg {
	p.t.Helper()
	m := p.next()
	if m.Type != typ {
		p.t.Fatalf("got %s, want %s: %s", m.Type, typ, m.raw)
	}
	return m
}

// nextSkipping is next that passes over heartbeats.
func (p *peer) nextSkipping() msg {
	p.t.Helper()
	for {
		if m := p.next(); m.Type != typeHeartbeat {
			return m
		}
	}
}

// expectSkipping is expect that passes over heartbeats.
func (p *peer) expectSkipping(typ string) msg {
	p.t.Helper()
	m := p.nextSkipping()
	if m.Type != typ {
		p.t.Fatalf("got %s, want %s: %s", m.Type, typ, m.raw)
	}
	return m
}

func (p *peer) send(v any) {
	p.t.Helper()
	b, ok := v.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			p.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if err := p.conn.Write(ctx, websocket.MessageText, b); err != nil {
		p.t.Fatalf("write to provider: %v", err)
	}
}

// greeted reads register and the first heartbeat of a fresh connection.
func (p *peer) greeted() registerMsg {
	p.t.Helper()
	var reg registerMsg
	p.expect(typeRegister).decode(p.t, &reg)
	p.expect(typeHeartbeat)
	return reg
}

// client is what a consumer does through the coordinator: it seals a
// body to the provider's key and opens the chunks sealed back.
type client struct {
	t        *testing.T
	provider [32]byte
	pub      *[32]byte
	priv     *[32]byte
}

func newClient(t *testing.T, providerKey string) *client {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(providerKey)
	if err != nil || len(raw) != 32 {
		t.Fatalf("provider public key %q: %v", providerKey, err)
	}
	pub, priv, err := box.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, pub: pub, priv: priv}
	copy(c.provider[:], raw)
	return c
}

func (c *client) seal(body []byte) *sealed {
	var nonce [24]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		c.t.Fatal(err)
	}
	ct := box.Seal(nonce[:], body, &nonce, &c.provider, c.priv)
	return &sealed{
		EphemeralPublicKey: base64.StdEncoding.EncodeToString(c.pub[:]),
		Ciphertext:         base64.StdEncoding.EncodeToString(ct),
	}
}

// request is the inference_request carrying body sealed.
func (c *client) request(id string, body string) map[string]any {
	return map[string]any{"type": typeInferenceRequest, "request_id": id, "encrypted_body": c.seal([]byte(body))}
}

// open opens one inference_response_chunk, which must be sealed by the
// provider's key to this client.
func (c *client) open(m msg) []byte {
	c.t.Helper()
	var cm struct {
		Data          string  `json:"data"`
		EncryptedData *sealed `json:"encrypted_data"`
	}
	m.decode(c.t, &cm)
	if cm.Data != "" || cm.EncryptedData == nil {
		c.t.Fatalf("chunk not sealed: %s", m.raw)
	}
	if got := cm.EncryptedData.EphemeralPublicKey; got != base64.StdEncoding.EncodeToString(c.provider[:]) {
		c.t.Fatalf("chunk sender key %s is not the provider's", got)
	}
	ct, err := base64.StdEncoding.DecodeString(cm.EncryptedData.Ciphertext)
	if err != nil || len(ct) < 24 {
		c.t.Fatalf("chunk ciphertext: %v", err)
	}
	var nonce [24]byte
	copy(nonce[:], ct)
	plain, ok := box.Open(nil, ct[24:], &nonce, &c.provider, c.priv)
	if !ok {
		c.t.Fatal("chunk does not open")
	}
	return plain
}

// harness runs Run against a test coordinator on a mock clock.
type harness struct {
	coord *coordinator
	clk   *clock.Mock
	dir   string
	logs  *logSink
}

func start(t *testing.T, h http.Handler, opt func(*Options)) *harness {
	t.Helper()
	hs := &harness{coord: newCoordinator(t), clk: clock.NewMock(), dir: t.TempDir() + "/keys", logs: &logSink{t: t}}
	o := Options{
		URL:     hs.coord.url(),
		Handler: h,
		KeyDir:  hs.dir,
		Clock:   hs.clk,
		Logger:  slog.New(slog.NewTextHandler(hs.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Version: "test",
	}
	if opt != nil {
		opt(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(guard):
			t.Error("Run did not return after its context ended")
		}
	})
	return hs
}

// logSink keeps the link's log for assertions and echoes it to the test.
type logSink struct {
	t   *testing.T
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.Logf("%s", bytes.TrimRight(p, "\n"))
	return s.buf.Write(p)
}

func (s *logSink) contains(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(s.buf.String(), sub)
}

// localAnswer is what h answers body over plain HTTP.
func localAnswer(t *testing.T, h http.Handler, path, body string) (int, []byte) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"
)

// reply scripts the fake server's answer to one request. The zero value
// streams a role chunk, a finish chunk, usage and [DONE].
type reply struct {
	// status and contentType with a non-empty body answer without
	// streaming.
	status      int
	contentType string
	body        string
	// hold blocks before the headers until the client goes away.
	hold bool
	// tokens are content chunks, each sent after its delay.
	tokens []token
	// raw lines are written as they are after the tokens.
	raw []string
	// stall blocks after the tokens until the client goes away; abort
	// drops the connection there instead.
	stall, abort bool
	noUsage      bool
	noDone       bool
}

type token struct {
	after time.Duration
	text  string
}

// tokens builds n chunks "t0".."t(n-1)", the first after ttft, the rest
// gap apart.
func tokens(n int, ttft, gap time.Duration) []token {
	out := make([]token, n)
	for i := range out {
		out[i] = token{after: gap, text: fmt.Sprintf("t%d", i)}
	}
	if n > 0 {
		out[0].after = ttft
	}
	return out
}

// fake is a scripted OpenAI-compatible server: request i gets
// script[i], the last entry repeating.
type fake struct {
	script []reply

	mu     sync.Mutex
	bodies []map[string]any
	paths  []string
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	f.mu.Lock()
	i := len(f.bodies)
	f.bodies = append(f.bodies, body)
	f.paths = append(f.paths, r.URL.Path)
	f.mu.Unlock()
	rp := f.script[min(i, len(f.script)-1)]

	if rp.hold {
		<-r.Context().Done()
		return
	}
	if rp.body != "" {
		w.Header().Set("Content-Type", rp.contentType)
		w.WriteHeader(cmpOr(rp.status, http.StatusOK))
		_, _ = io.WriteString(w, rp.body)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	emit := func(data string) {
		_, _ = fmt.Fprintf(w, "data: %s\n\n", data)
		_ = rc.Flush()
	}
	chat := r.URL.Path == "/v1/chat/completions"
	if chat {
		emit(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`)
	}
	for _, tk := range rp.tokens {
		time.Sleep(tk.after)
		text, _ := json.Marshal(tk.text)
		if chat {
			emit(fmt.Sprintf(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}`, text))
		} else {
			emit(fmt.Sprintf(`{"object":"text_completion","choices":[{"index":0,"text":%s,"finish_reason":null}]}`, text))
		}
	}
	for _, l := range rp.raw {
		_, _ = io.WriteString(w, l)
		_ = rc.Flush()
	}
	switch {
	case rp.stall:
		<-r.Context().Done()
		return
	case rp.abort:
		panic(http.ErrAbortHandler)
	}
	if chat {
		emit(`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`)
	} else {
		emit(`{"choices":[{"index":0,"text":"","finish_reason":"length"}]}`)
	}
	if !rp.noUsage {
		emit(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}}`, len(rp.tokens), 7+len(rp.tokens)))
	}
	if !rp.noDone {
		emit("[DONE]")
	}
}

func (f *fake) requests() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.bodies...)
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// loopback serves the script on a real loopback port.
func loopback(t *testing.T, script ...reply) (*fake, *httptest.Server) {
	t.Helper()
	f := &fake{script: script}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// memNet is an in-memory network of named hosts, so that synctest's
// clock governs client and servers alike: a goroutine blocked on a real
// socket would keep the bubble's time from advancing.
type memNet struct {
	mu    sync.Mutex
	hosts map[string]*memListener
}

type memListener struct {
	host   string
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr(l.host) }

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

// dial connects to a listening host; an unknown host refuses, as a
// closed port does.
func (n *memNet) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.hosts[addr]
	n.mu.Unlock()
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: memAddr(addr), Err: syscall.ECONNREFUSED}
	if l == nil {
		return nil, refused
	}
	server, client := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, refused
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (n *memNet) client() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: n.dial, DisableCompression: true}}
}

// serve starts the script as an httptest server on host; the caller
// closes it before the bubble ends.
func (n *memNet) serve(host string, script ...reply) (*fake, *httptest.Server) {
	f := &fake{script: script}
	l := &memListener{host: host, conns: make(chan net.Conn), closed: make(chan struct{})}
	n.mu.Lock()
	if n.hosts == nil {
		n.hosts = map[string]*memListener{}
	}
	n.hosts[host] = l
	n.mu.Unlock()
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: f}}
	srv.Start()
	return f, srv
}

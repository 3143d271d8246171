package bench

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// connMode is what a connServer does with a connection after its first
// answer.
type connMode int

const (
	// closeAfterAnswer closes each connection right after its streamed
	// answer, without saying so in a header, as llama.cpp's server
	// does: the client may reuse it before it sees the close.
	closeAfterAnswer connMode = iota
	// dropReused keeps the connection open after its answer, reads the
	// next request sent on it and closes it unanswered: every reused
	// keep-alive connection breaks before any response byte.
	dropReused
	// dropAll closes every connection unanswered once it has read the
	// request.
	dropAll
)

// connServer is an HTTP/1.1 server on a real loopback port, written on
// a raw listener so that it controls when each connection ends. Its
// answers are keep-alive streams (chunked, no Connection: close) of
// three completion chunks, usage and [DONE].
type connServer struct {
	mode connMode
	l    net.Listener
	wg   sync.WaitGroup

	mu       sync.Mutex
	conns    map[net.Conn]bool
	answered int
	dropped  []time.Time // when each dropped request had been read
}

func newConnServer(t *testing.T, mode connMode) *connServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &connServer{mode: mode, l: l, conns: map[net.Conn]bool{}}
	s.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = true
			s.mu.Unlock()
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		s.mu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *connServer) url() string { return "http://" + s.l.Addr().String() }

func (s *connServer) serve(c net.Conn) {
	defer func() {
		_ = c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	for n := 0; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if s.mode == dropAll || n > 0 {
			s.mu.Lock()
			s.dropped = append(s.dropped, time.Now())
			s.mu.Unlock()
			return
		}
		// Counted before the answer, so that a client that has read
		// it sees the count.
		s.mu.Lock()
		s.answered++
		s.mu.Unlock()
		fmt.Fprint(bw, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for _, data := range []string{
			`{"object":"text_completion","choices":[{"index":0,"text":"a","finish_reason":null}]}`,
			`{"object":"text_completion","choices":[{"index":0,"text":"b","finish_reason":null}]}`,
			`{"object":"text_completion","choices":[{"index":0,"text":"c","finish_reason":"length"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":3,"total_tokens":11}}`,
			`[DONE]`,
		} {
			event := "data: " + data + "\n\n"
			fmt.Fprintf(bw, "%x\r\n%s\r\n", len(event), event)
			if bw.Flush() != nil {
				return
			}
		}
		fmt.Fprint(bw, "0\r\n\r\n")
		if bw.Flush() != nil {
			return
		}
		if s.mode == closeAfterAnswer {
			return
		}
	}
}

func (s *connServer) counts() (answered int, dropped []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered, append([]time.Time(nil), s.dropped...)
}

func keepAliveClient(t *testing.T) *http.Client {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// TestRetryBrokenKeepAlive: a server that closes each connection after
// its answer, or drops each reused one, costs no request: the broken
// attempts are sent again on a fresh connection.
func TestRetryBrokenKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode connMode
		lvl  Level
	}{
		{"closes after each answer, one at a time", closeAfterAnswer, Level{Concurrency: 1}},
		{"closes after each answer, eight at once", closeAfterAnswer, Level{Concurrency: 8}},
		{"drops reused connections, one at a time", dropReused, Level{Concurrency: 1}},
		{"drops reused connections, eight at once", dropReused, Level{Concurrency: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newConnServer(t, tc.mode)
			w := testWorkload()
			w.Endpoint = EndpointCompletions
			w.Requests = 32
			w.Levels = []Level{tc.lvl}
			rep, err := (&Driver{Client: keepAliveClient(t)}).Run(t.Context(), Config{Targets: []Target{{Name: "peer", URL: srv.url()}}, Workload: w})
			if err != nil {
				t.Fatal(err)
			}
			l := rep.Targets[0].Levels[0]
			s := l.Summary
			if s.Completed != 32 || s.Failed != 0 {
				t.Fatalf("%d ok, failures %v; want 32 ok", s.Completed, s.Failures)
			}
			retries := 0
			for _, r := range l.Records {
				if r.OutputTokens != 3 || r.Chunks != 3 || r.Retries > 1 {
					t.Errorf("request %d: %d tokens, %d chunks, %d retries", r.Index, r.OutputTokens, r.Chunks, r.Retries)
				}
				retries += r.Retries
			}
			// Closing after the answer, an attempt may break before the
			// server read it (the client wrote into a closed
			// connection), so only dropReused counts what it dropped.
			answered, dropped := srv.counts()
			if answered != 32 || s.Retries != retries || (tc.mode == dropReused && len(dropped) != retries) {
				t.Errorf("server answered %d and dropped %d; records count %d retries, summary %d", answered, len(dropped), retries, s.Retries)
			}
			if tc.mode == dropReused && tc.lvl.Concurrency == 1 {
				// One worker: a fresh connection is answered and kept,
				// the next request reuses it and is dropped, its retry
				// goes on a connection of its own; and so on.
				for _, r := range l.Records {
					if want := r.Index % 2; r.Retries != want {
						t.Errorf("request %d: %d retries, want %d", r.Index, r.Retries, want)
					}
				}
			}
		})
	}
}

// TestRetryTimedFromLastAttempt: a retried request is timed from the
// send of the attempt that was answered, which follows the drop of the
// first.
func TestRetryTimedFromLastAttempt(t *testing.T) {
	srv := newConnServer(t, dropReused)
	client := keepAliveClient(t)
	w := testWorkload()
	w.Endpoint = EndpointCompletions
	url := srv.url() + w.Endpoint.path()
	if rec := send(t.Context(), client, url, &w, prompt, time.Now()); !rec.OK() || rec.Retries != 0 {
		t.Fatalf("first request: failure %v, %d retries", rec.Failure, rec.Retries)
	}
	origin := time.Now()
	rec := send(t.Context(), client, url, &w, prompt, origin)
	if !rec.OK() || rec.Retries != 1 {
		t.Fatalf("reused connection: failure %v, %d retries; want ok after one retry", rec.Failure, rec.Retries)
	}
	_, dropped := srv.counts()
	if len(dropped) != 1 {
		t.Fatalf("%d requests dropped, want 1", len(dropped))
	}
	if at := dropped[0].Sub(origin); rec.Sent <= at {
		t.Errorf("sent at %v, not after the first attempt was dropped at %v", rec.Sent, at)
	}
	if rec.TTFT > rec.E2E || rec.E2E <= 0 {
		t.Errorf("TTFT %v, E2E %v", rec.TTFT, rec.E2E)
	}
}

// TestRetriesBounded: a server that drops every request fails it after
// maxRetries retries, as a transport failure.
func TestRetriesBounded(t *testing.T) {
	srv := newConnServer(t, dropAll)
	w := testWorkload()
	rec := send(t.Context(), keepAliveClient(t), srv.url()+w.Endpoint.path(), &w, prompt, time.Now())
	if rec.OK() || rec.Failure.Kind != FailTransport || rec.Retries != maxRetries {
		t.Fatalf("failure %v after %d retries, want transport after %d", rec.Failure, rec.Retries, maxRetries)
	}
	if _, dropped := srv.counts(); len(dropped) != maxRetries+1 {
		t.Errorf("server saw %d attempts, want %d", len(dropped), maxRetries+1)
	}
}

// TestRetriesReported: retries show in the table, report.md and
// results.json, not as failures.
func TestRetriesReported(t *testing.T) {
	srv := newConnServer(t, dropReused)
	w := testWorkload()
	w.Endpoint = EndpointCompletions
	rep, err := (&Driver{Client: keepAliveClient(t)}).Run(t.Context(), Config{Targets: []Target{{Name: "peer", URL: srv.url()}}, Workload: w})
	if err != nil {
		t.Fatal(err)
	}
	// One worker, four requests: the second and fourth reuse a
	// connection that is dropped.
	var table, md, js strings.Builder
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&js, rep, true); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, text, want string }{
		{"table", table.String(), "peer c=1: 2 retries on a fresh connection"},
		{"report.md", md.String(), "- c=1: 2 retries\n"},
		{"results.json", js.String(), `"retries": 2`},
		{"results.json", js.String(), `"retries": 1`},
	} {
		if !strings.Contains(c.text, c.want) {
			t.Errorf("%s lacks %q:\n%s", c.what, c.want, c.text)
		}
	}
	if strings.Contains(md.String(), "Failures:") {
		t.Errorf("report.md lists failures:\n%s", md.String())
	}
}

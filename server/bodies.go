package server

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/goprovider/provider/graph"
)

// DefaultBodyBudget bounds the bytes of request bodies held at once.
const DefaultBodyBudget = 256 << 20

// bodyBudget is a byte budget shared by the request bodies being read and
// parsed: a request takes its body's declared size (the limit when it
// declares none) before reading it, and gives it back once the pipeline
// has admitted or refused it. Large bodies thus queue for the budget while
// small requests keep passing.
type bodyBudget struct {
	clk  clock.Clock
	wait time.Duration

	mu    sync.Mutex
	free  int64
	freed chan struct{} // closed and replaced at every release
}

func newBodyBudget(total int64, clk clock.Clock, wait time.Duration) *bodyBudget {
	return &bodyBudget{clk: clk, wait: wait, free: total, freed: make(chan struct{})}
}

// take reserves n bytes, waiting at most the budget's wait (graph.ErrBusy
// then: 429); release gives them back (once).
func (b *bodyBudget) take(ctx context.Context, n int64) (release func(), err error) {
	var t *clock.Timer
	for {
		b.mu.Lock()
		if b.free >= n {
			b.free -= n
			b.mu.Unlock()
			break
		}
		freed := b.freed
		b.mu.Unlock()
		if b.wait < 0 {
			return nil, graph.ErrBusy
		}
		if t == nil {
			t = b.clk.Timer(b.wait)
			defer t.Stop()
		}
		select {
		case <-freed:
		case <-t.C:
			return nil, graph.ErrBusy
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.free += n
			close(b.freed)
			b.freed = make(chan struct{})
			b.mu.Unlock()
		})
	}, nil
}

// bodySize is what a request's body is charged: its declared size, or the
// limit when it declares none.
func (s *Server) bodySize(r *http.Request) int64 {
	if r.ContentLength >= 0 && r.ContentLength < s.maxBody {
		return r.ContentLength
	}
	return s.maxBody
}

// readBody reads a request body of at most the limit into a buffer of its
// declared size (no doubling growth).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, s.bodySize(r)+1))
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, s.maxBody)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

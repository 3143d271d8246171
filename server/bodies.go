package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/goprovider/provider/graph"
)

// DefaultBodyBudget bounds the bytes of request bodies held at once.
const DefaultBodyBudget = 256 << 20

// largeBody is the size from which a body is large: it takes its share of
// the body budget outside the small bodies' reserve, and runs through the
// pipeline in the large lane. Parsing costs about 2 ms a MiB, so a small
// body's whole pipeline run stays within a few milliseconds.
const largeBody = 1 << 20

// bodyBudget bounds what request bodies can hold of the server, in two
// lanes so that large bodies never make a small one wait:
//
//   - Bytes: a request takes its body's declared size (the limit when it
//     declares none) before reading it, and gives it back once the
//     pipeline has admitted or refused it. Large bodies may not take the
//     last reserve bytes of the budget, which only small bodies use: a
//     crowd of large bodies waiting for their share leaves room for every
//     small one.
//   - Pipeline: at most lane large bodies are in the pipeline at once
//     (from Submit until admitted or refused). The stages run one worker
//     per core, and parsing, templating and tokenizing a 32 MiB body keeps
//     a worker for tens of milliseconds; with lane below the workers, one
//     worker of every stage is always left to small requests, and large
//     bodies' parsing cannot take every core.
//
// Invariants, at every observable point: sum of byte shares <= total;
// sum of large shares <= max(total - reserve, one large share); large
// bodies in the pipeline <= lane. A waiter gets graph.ErrBusy (429) after
// the wait.
type bodyBudget struct {
	clk  clock.Clock
	wait time.Duration

	mu      sync.Mutex
	free    int64 // bytes
	large   int64 // bytes held by large bodies
	reserve int64 // bytes only small bodies may take (but see take)
	lane    int   // large bodies that may still enter the pipeline
	freed   chan struct{}
}

func newBodyBudget(total int64, clk clock.Clock, wait time.Duration) *bodyBudget {
	return &bodyBudget{
		clk: clk, wait: wait, free: total, freed: make(chan struct{}),
		reserve: min(total/16, 16<<20),
		lane:    max(1, runtime.GOMAXPROCS(0)-1),
	}
}

// take reserves n bytes for a body, waiting at most the budget's wait;
// release gives them back (once).
func (b *bodyBudget) take(ctx context.Context, n int64) (release func(), err error) {
	if n < largeBody {
		return b.acquire(ctx,
			func() bool { return b.free >= n },
			func(sign int64) { b.free -= sign * n })
	}
	// The first large body may dip into the reserve: a budget below the
	// body limit plus the reserve still serves one at a time.
	return b.acquire(ctx,
		func() bool { return b.free >= n && (b.free-b.reserve >= n || b.large == 0) },
		func(sign int64) { b.free, b.large = b.free-sign*n, b.large+sign*n })
}

// enter waits for a place in the large lane for a body of n bytes (at
// once for a small body); leave gives it back (once).
func (b *bodyBudget) enter(ctx context.Context, n int) (leave func(), err error) {
	if n < largeBody {
		return func() {}, nil
	}
	return b.acquire(ctx,
		func() bool { return b.lane > 0 },
		func(sign int64) { b.lane -= int(sign) })
}

// acquire waits until fits holds, then applies move(+1) under the lock;
// the returned release applies move(-1) once and wakes the waiters.
func (b *bodyBudget) acquire(ctx context.Context, fits func() bool, move func(sign int64)) (release func(), err error) {
	var t *clock.Timer
	for {
		b.mu.Lock()
		if fits() {
			move(+1)
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
			move(-1)
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
// declared size (no doubling growth); a large body at the large bodies'
// shared rate (pacer).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	size := s.bodySize(r)
	buf := bytes.NewBuffer(make([]byte, 0, size+1))
	var body io.Reader = http.MaxBytesReader(w, r.Body, s.maxBody)
	if size >= largeBody && s.pace != nil {
		body = pacedReader{ctx: r.Context(), r: body, p: s.pace}
	}
	if _, err := buf.ReadFrom(body); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

package server

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
)

// DefaultLargeBodyRate bounds how fast large bodies (largeBody and up) are
// read, all together, in bytes a second.
const DefaultLargeBodyRate = 64 << 20

// largeBodyBurst is how far reading may run ahead of the rate after a quiet
// spell: a body of a few MiB (an image) is read at once.
const largeBodyBurst = 8 << 20

// pacer spreads the reading of large bodies over time at a shared rate.
// On a small machine, reading, copying and parsing a crowd of 32 MiB
// bodies at the network's speed takes every core, and a small request's
// first token waits for the scheduler; paced, the senders block in the
// kernel (TCP flow control) instead of taking CPU, and what the server
// spends on large bodies is bounded by the rate.
//
// It keeps a schedule: next is when the bytes spent so far are paid for.
// Each read books its bytes after next and waits until its booking
// starts; next never lags the clock by more than the burst.
type pacer struct {
	clk  clock.Clock
	rate float64 // bytes a second
	mu   sync.Mutex
	next time.Time
}

func newPacer(clk clock.Clock, rate int64) *pacer {
	return &pacer{clk: clk, rate: float64(rate)}
}

// spend books n bytes and waits for their turn.
func (p *pacer) spend(ctx context.Context, n int) error {
	p.mu.Lock()
	now := p.clk.Now()
	if earliest := now.Add(-p.duration(largeBodyBurst)); p.next.Before(earliest) {
		p.next = earliest
	}
	at := p.next
	p.next = p.next.Add(p.duration(n))
	p.mu.Unlock()
	d := at.Sub(now)
	if d <= 0 {
		return nil
	}
	t := p.clk.Timer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pacer) duration(n int) time.Duration {
	return time.Duration(float64(n) / p.rate * float64(time.Second))
}

// pacedReader reads r in chunks of at most pacedChunk bytes, each paid for
// to p before the next is read.
type pacedReader struct {
	ctx context.Context
	r   io.Reader
	p   *pacer
}

const pacedChunk = 256 << 10

func (pr pacedReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b[:min(len(b), pacedChunk)])
	if n > 0 {
		if perr := pr.p.spend(pr.ctx, n); perr != nil && err == nil {
			err = perr
		}
	}
	return n, err
}

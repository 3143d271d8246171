package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
)

// TestPacerRate reads large bodies through one pacer (synctest's clock): a
// lone 32 MiB body, then two of 16 MiB at once, take the time the shared
// rate gives after the burst, and a cancelled read stops waiting.
func TestPacerRate(t *testing.T) {
	const rate = 8 << 20
	// The burst, plus the chunk booked at its edge, is free; the rest is
	// paid at the rate.
	want := time.Duration(float64(32<<20-largeBodyBurst-pacedChunk) / rate * float64(time.Second))
	for _, bodies := range []int{1, 2} {
		synctest.Test(t, func(t *testing.T) {
			p := newPacer(clock.New(), rate)
			start := time.Now()
			var wg sync.WaitGroup
			for range bodies {
				wg.Go(func() {
					body := bytes.NewReader(make([]byte, 32<<20/bodies))
					n, err := io.Copy(io.Discard, pacedReader{ctx: context.Background(), r: body, p: p})
					if err != nil || n != 32<<20/int64(bodies) {
						t.Errorf("read %d bytes, %v", n, err)
					}
				})
			}
			wg.Wait()
			if got := time.Since(start); got < want-10*time.Millisecond || got > want+50*time.Millisecond {
				t.Errorf("%d bodies: 32 MiB in %v, want about %v at %d MiB/s", bodies, got, want, rate>>20)
			}
		})
	}
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(clock.New(), rate)
		if err := p.spend(context.Background(), 64<<20); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- p.spend(ctx, 1) }()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait: %v", err)
		}
	})
}

package server

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/goprovider/provider/graph"
)

// TestBodyBudgetSmallBodiesPassLargeOnes: large bodies that have taken
// all they may of the budget make the next large body wait (429 after the
// wait), while a small body still gets its share at once.
func TestBodyBudgetSmallBodiesPassLargeOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBodyBudget(DefaultBodyBudget, clock.New(), 2*time.Second)
		const large = 32<<20 - 1024
		held := 0
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			_, err := b.take(ctx, large)
			cancel()
			if err != nil {
				break
			}
			held++
		}
		if want := int((DefaultBodyBudget - b.reserve) / large); held != want {
			t.Fatalf("%d large bodies held, want %d (budget less the small bodies' reserve)", held, want)
		}
		start := time.Now()
		if _, err := b.take(context.Background(), large); !errors.Is(err, graph.ErrBusy) || time.Since(start) != 2*time.Second {
			t.Fatalf("another large body: %v after %s, want ErrBusy after the 2 s wait", err, time.Since(start))
		}
		release, err := b.take(context.Background(), 4<<10)
		if err != nil || time.Since(start) != 2*time.Second {
			t.Fatalf("a small body: %v after %s, want its share at once", err, time.Since(start)-2*time.Second)
		}
		release()
	})
}

// TestBodyBudgetBelowReserve: a budget of a single body still serves large
// bodies, one at a time.
func TestBodyBudgetBelowReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBodyBudget(32<<20, clock.New(), time.Second)
		first, err := b.take(context.Background(), 32<<20)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error)
		go func() {
			release, err := b.take(context.Background(), 2<<20)
			if err == nil {
				release()
			}
			got <- err
		}()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("a second large body got %v while the first held the whole budget", err)
		default:
		}
		first()
		if err := <-got; err != nil {
			t.Fatalf("the second large body after the first left: %v", err)
		}
	})
}

// TestBodyBudgetLane: large bodies enter the pipeline lane at most lane at
// a time, and wait for it at most the budget's wait; small bodies never
// wait for it.
func TestBodyBudgetLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBodyBudget(DefaultBodyBudget, clock.New(), time.Second)
		b.lane = 1
		leave, err := b.enter(context.Background(), largeBody)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := b.enter(context.Background(), largeBody); !errors.Is(err, graph.ErrBusy) || time.Since(start) != time.Second {
			t.Fatalf("a second large body: %v after %s, want ErrBusy after the 1 s wait", err, time.Since(start))
		}
		if _, err := b.enter(context.Background(), largeBody-1); err != nil || time.Since(start) != time.Second {
			t.Fatalf("a small body: %v after %s, want in at once", err, time.Since(start)-time.Second)
		}
		entered := make(chan struct{})
		go func() {
			if l, err := b.enter(context.Background(), largeBody); err == nil {
				l()
				close(entered)
			}
		}()
		time.Sleep(100 * time.Millisecond)
		leave()
		leave() // once
		<-entered
		if b.lane != 1 {
			t.Fatalf("lane %d after every body left, want 1", b.lane)
		}
	})
}

package mlx

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

func TestRestoreSignalsGivesTheRuntimeItsHandlerBack(t *testing.T) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR2)
	defer signal.Stop(ch)
	ignoreSignal(int(syscall.SIGUSR2))
	if n := RestoreSignals(); n < 1 {
		t.Fatalf("RestoreSignals restored %d handlers, want the replaced SIGUSR2 one", n)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-ch:
		if s != syscall.SIGUSR2 {
			t.Fatalf("got %v", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("SIGUSR2 never reached signal.Notify after RestoreSignals")
	}
	if n := RestoreSignals(); n != 0 {
		t.Fatalf("second RestoreSignals restored %d handlers, want 0", n)
	}
}

package engine

import (
	"testing"
	"time"
)

// TestSlowStep pins which steps are logged as slow: a second or more and
// over 50 ms a token.
func TestSlowStep(t *testing.T) {
	for _, tc := range []struct {
		d      time.Duration
		tokens int
		want   bool
	}{
		{999 * time.Millisecond, 1, false},
		{time.Second, 1, true},
		{37 * time.Second, 16, true},
		{5 * time.Second, 2048, false}, // a long prefill chunk on a CPU
		{2 * time.Second, 40, true},
		{2 * time.Second, 41, false},
		{time.Second, 0, true},
	} {
		if got := slowStep(tc.d, tc.tokens); got != tc.want {
			t.Errorf("%v over %d tokens: slow %v, want %v", tc.d, tc.tokens, got, tc.want)
		}
	}
}

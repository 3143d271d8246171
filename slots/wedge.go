package slots

import "time"

// Wedge thresholds of the reference system.
const (
	// WedgeAfter is how long both the oldest admission and the step
	// counter must stall before a wedge is confirmed.
	WedgeAfter = 120 * time.Second
	// WedgeCooldown: a second wedge confirmed within this long of the
	// earliest moment it could be (WedgeAfter past a rebuild) unloads the
	// slot instead of rebuilding it again.
	WedgeCooldown = 120 * time.Second
)

// Progress is what the wedge detector reads of an engine.
type Progress struct {
	// Steps is the engine's step counter.
	Steps uint64
	// OldestWait is when the longest-waiting queued request arrived; zero
	// when none waits.
	OldestWait time.Time
}

// Verdict is the wedge detector's reading.
type Verdict uint8

// Verdicts.
const (
	// Healthy: steps move, or nothing waits.
	Healthy Verdict = iota
	// Suspected: the step counter has stalled for half the threshold
	// while requests wait, but not both past the threshold yet.
	Suspected
	// Wedged: both have stalled past the threshold: rebuild the engine.
	Wedged
	// WedgedAgain: wedged within the cooldown of the last rebuild: unload
	// the slot.
	WedgedAgain
)

// Wedge detects a wedged engine from periodic observations. It is a pure
// state machine: the caller passes the time.
type Wedge struct {
	// After and Cooldown default to WedgeAfter and WedgeCooldown.
	After, Cooldown time.Duration

	steps    uint64
	movedAt  time.Time // when steps last changed (or observation began)
	seen     bool
	reloaded time.Time // the last Rebuilt; zero: never
	last     Verdict   // the last Observe's verdict
}

// suspected reports whether the last observation found a stall.
func (w *Wedge) suspected() bool { return w.last != Healthy }

// Observe reads one observation at now.
func (w *Wedge) Observe(now time.Time, p Progress) Verdict {
	w.last = w.observe(now, p)
	return w.last
}

// inCooldown reports whether now is within the cooldown of the last
// rebuild: After + Cooldown past it (a second failure then unloads).
func (w *Wedge) inCooldown(now time.Time) bool {
	after, cool := w.After, w.Cooldown
	if after <= 0 {
		after = WedgeAfter
	}
	if cool <= 0 {
		cool = WedgeCooldown
	}
	return !w.reloaded.IsZero() && now.Sub(w.reloaded) < after+cool
}

func (w *Wedge) observe(now time.Time, p Progress) Verdict {
	after := w.After
	if after <= 0 {
		after = WedgeAfter
	}
	if !w.seen || p.Steps != w.steps {
		w.seen, w.steps, w.movedAt = true, p.Steps, now
	}
	stalled := now.Sub(w.movedAt)
	if p.OldestWait.IsZero() || stalled < after/2 {
		return Healthy
	}
	if stalled < after || now.Sub(p.OldestWait) < after {
		return Suspected
	}
	if w.inCooldown(now) {
		return WedgedAgain
	}
	return Wedged
}

// Rebuilt records a rebuild at now: the new engine's step counter starts
// at zero, and its stall is timed from now.
func (w *Wedge) Rebuilt(now time.Time) {
	w.reloaded = now
	w.seen, w.steps, w.movedAt = true, 0, now
}

package slots

// State is a slot's lifecycle state, as the capacity snapshot and the
// network heartbeat report it.
type State string

// Slot states.
const (
	// StateLoading: weights are being read; the slot takes no requests yet.
	StateLoading State = "loading"
	// StateRunning: the engine serves.
	StateRunning State = "running"
	// StateReloading: a wedge was confirmed; the engine is being rebuilt
	// over the weights the slot holds. Requests wait for it.
	StateReloading State = "reloading"
	// StateCrashed: the engine stopped and could not be rebuilt.
	StateCrashed State = "crashed"
	// StateIdleShutdown: unloaded after its idle timeout.
	StateIdleShutdown State = "idle_shutdown"
)

// Snapshot is one slot's capacity at an instant: what /metrics exports and
// what the network heartbeat reports, from the same numbers.
type Snapshot struct {
	Model string
	State State
	// Running and Waiting count the engine's rows.
	Running, Waiting int
	// TokensUsed is the KV tokens the ledger charges now; TokensMax what
	// the slot's grant holds (both in full-attention tokens).
	TokensUsed, TokensMax int64
	// KVBytesPerToken is the layout's full-attention rate.
	KVBytesPerToken int64
	// KVGrant is the slot's KV byte grant.
	KVGrant int64
	// MaxConcurrent is the cap on running rows.
	MaxConcurrent int
	// DecodeTPS and PrefillTPS are exponentially weighted moving averages
	// of the observed decode and prefill token rates.
	DecodeTPS, PrefillTPS float64
	// Steps counts the engine's completed steps.
	Steps uint64
	// StepBuild and StepWait are the seconds the engine's steps spent
	// building and queueing their forward passes on the host, and waiting
	// for the device's results; AheadSteps counts the steps that ran from
	// a decode step built ahead of the read of the one before.
	StepBuild, StepWait float64
	AheadSteps          uint64
	// SinceStep and SinceFirstToken are seconds since the last step and
	// the last first token (negative: never).
	SinceStep, SinceFirstToken float64
	// WedgeSuspected is set while the wedge detector suspects the engine.
	WedgeSuspected bool
}

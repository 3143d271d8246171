package slots

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Memory policy of the reference system.
const (
	// Floor is the least KV grant a slot may hold: a load that would push
	// any slot below it is refused with ErrResliceFloor.
	Floor int64 = 1 << 30
	// ActivationReserve is held back from the budget for activations.
	ActivationReserve int64 = 3 << 30
	// HeadroomReserve is what the memory cap leaves the system at least.
	HeadroomReserve int64 = 2 << 30
	// ContextCap bounds the context a slot's demand is weighed by.
	ContextCap = 131072
	// DefaultMaxSlots is how many models stay loaded before the least
	// recently used idle one is unloaded.
	DefaultMaxSlots = 3
	// DefaultIdleUnload unloads a slot no request used for this long.
	DefaultIdleUnload = 60 * time.Minute
)

// Refusals: each a 503 with its reason code (Reason).
var (
	// ErrNoHeadroom: the weights do not fit the memory cap, or no KV
	// budget is left for the slot.
	ErrNoHeadroom = errors.New("no_kv_headroom")
	// ErrResliceFloor: sharing the budget would leave a slot under Floor.
	ErrResliceFloor = errors.New("reslice_floor")
	// ErrEngineInit: the model's engine could not be started.
	ErrEngineInit = errors.New("engine_init_failed")
	// ErrUnsupported: the model's architecture has no adapter, or its file
	// is not a model this provider can load.
	ErrUnsupported = errors.New("unsupported_model")
	// ErrRankLost: the model runs over tensor-parallel ranks and one of
	// them is gone.
	ErrRankLost = errors.New("rank_lost")
)

// MemoryCap is what the provider may use out of memory bytes (device
// memory on a GPU, physical memory elsewhere): 90 %, and at least
// HeadroomReserve less than all of it.
func MemoryCap(memory int64) int64 {
	return max(min(memory*9/10, memory-HeadroomReserve), 0)
}

// Budget is the KV budget all slots share: the memory cap less the
// weights held and the activation reserve.
func Budget(memoryCap, weights int64) int64 {
	return max(memoryCap-weights-ActivationReserve, 0)
}

// LoadFits is the load gate: a model of weights bytes (x 1.2 for load-time
// transients) fits beside held bytes of resident weights.
func LoadFits(memoryCap, held, weights int64) bool {
	return held+weights+weights/5+ActivationReserve <= memoryCap
}

// Demand is what re-slicing weighs a slot by.
type Demand struct {
	// KVRate is the slot's fp16 KV bytes per token (every layer).
	KVRate int64
	// Context is the slot's context length; 0 or more than ContextCap
	// counts as ContextCap.
	Context int
	// Max, when positive, is the most KV the slot can ever use (its full
	// context for every row it may run): it is never granted more, and
	// the floor asks no more of it than this.
	Max int64
}

// Weight is KVRate x min(Context, ContextCap).
func (d Demand) Weight() uint64 {
	ctx := d.Context
	if ctx <= 0 || ctx > ContextCap {
		ctx = ContextCap
	}
	return uint64(max(d.KVRate, 1)) * uint64(ctx)
}

// Grants shares budget among slots in proportion to their demands' weights,
// rounding down, so the grants never sum above budget. A lone slot gets all
// of it, whatever its Max. Among several, a slot whose share exceeds its Max gets its Max, and the rest is
// shared among the others the same way. A grant under the floor (or under
// its Max, when that is smaller) refuses the whole split with
// ErrResliceFloor.
func Grants(budget int64, demands []Demand, floor int64) ([]int64, error) {
	if len(demands) == 0 {
		return nil, nil
	}
	budget = max(budget, 0)
	if len(demands) == 1 {
		// Alone, the slot's prefix cache may use what its rows cannot.
		return []int64{budget}, nil
	}
	out := make([]int64, len(demands))
	capped := make([]bool, len(demands))
	for {
		left, open := budget, 0
		var total uint64
		for i, d := range demands {
			if capped[i] {
				left -= out[i]
			} else {
				total += d.Weight()
				open++
			}
		}
		more := false
		for i, d := range demands {
			if capped[i] {
				continue
			}
			if open == 1 {
				out[i] = left
			} else {
				// left * w / total in 128 bits: both factors reach 1e11.
				hi, lo := bits.Mul64(uint64(left), d.Weight())
				q, _ := bits.Div64(hi, lo, total)
				out[i] = int64(q)
			}
			if d.Max > 0 && out[i] > d.Max {
				out[i], capped[i], more = d.Max, true, true
			}
		}
		if !more || open == 1 {
			break
		}
	}
	for i, d := range demands {
		need := floor
		if d.Max > 0 {
			need = min(need, d.Max)
		}
		if out[i] < need {
			return nil, fmt.Errorf("%w: a slot would get %d bytes of KV, under the %d-byte floor", ErrResliceFloor, out[i], need)
		}
	}
	return out, nil
}

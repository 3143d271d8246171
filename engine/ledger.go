package engine

// WatermarkPercent is the share of the capacity that admissions leave free,
// so that rows already running can grow without preempting each other at
// once.
const WatermarkPercent = 5

// A Ledger accounts the KV-cache bytes charged to each request against one
// model's capacity. It keeps three limits:
//
//   - Limit (capacity - watermark) bounds admissions: a request's first
//     charge must leave the watermark free.
//   - Ceiling bounds growth: raising an existing charge may use the
//     watermark, up to Ceiling. Ceiling equals the capacity, except after a
//     shrink that left more bytes charged than the new capacity; it then
//     stays at the previous ceiling until Used drains to the new capacity,
//     so a shrink never forces out the rows that were running when it came.
//   - Capacity is the grant itself.
//
// Used always equals the sum of the charges and never exceeds Ceiling. The
// zero Ledger has no capacity and admits nothing. A Ledger is not safe for
// concurrent use.
type Ledger struct {
	capacity int64
	ceiling  int64
	used     int64
	charges  map[RequestID]int64
}

// NewLedger returns an empty ledger of the given capacity in bytes; a
// negative capacity counts as 0.
func NewLedger(capacity int64) *Ledger {
	capacity = max(capacity, 0)
	return &Ledger{capacity: capacity, ceiling: capacity, charges: map[RequestID]int64{}}
}

// Capacity is the grant in bytes.
func (l *Ledger) Capacity() int64 { return l.capacity }

// Watermark is WatermarkPercent of the capacity, rounded down.
func (l *Ledger) Watermark() int64 {
	return l.capacity/100*WatermarkPercent + l.capacity%100*WatermarkPercent/100
}

// Limit is the most bytes that may be charged after an admission:
// capacity - watermark.
func (l *Ledger) Limit() int64 { return l.capacity - l.Watermark() }

// Ceiling is the most bytes that may be charged after growing an existing
// charge. It is at least Capacity, and above it only while a shrink drains.
func (l *Ledger) Ceiling() int64 { return l.ceiling }

// Draining reports whether a shrink left more bytes charged than the
// capacity.
func (l *Ledger) Draining() bool { return l.used > l.capacity }

// Used is the sum of all charges.
func (l *Ledger) Used() int64 { return l.used }

// Free is the admission headroom, max(0, Limit - Used).
func (l *Ledger) Free() int64 { return max(0, l.Limit()-l.used) }

// Charge is the bytes charged to id, 0 when it holds no charge.
func (l *Ledger) Charge(id RequestID) int64 { return l.charges[id] }

// Holds reports whether id holds a charge, even one of 0 bytes.
func (l *Ledger) Holds(id RequestID) bool {
	_, ok := l.charges[id]
	return ok
}

// Len is the number of requests holding a charge.
func (l *Ledger) Len() int { return len(l.charges) }

// CanEverFit reports whether a request whose cache will reach bytes could run
// alone under the current capacity: bytes <= Limit.
func (l *Ledger) CanEverFit(bytes int64) bool { return bytes <= l.Limit() }

// TryCharge raises id's charge to bytes and reports whether it did. Charges
// only rise: a value at or below the current charge changes nothing and
// succeeds. When id holds no charge this is an admission and the new total
// must stay within Limit; otherwise it is growth and must stay within
// Ceiling. On failure nothing changes. A negative bytes counts as 0.
func (l *Ledger) TryCharge(id RequestID, bytes int64) bool {
	bytes = max(bytes, 0)
	old, held := l.charges[id]
	if held && bytes <= old {
		return true
	}
	bound := l.ceiling
	if !held {
		bound = l.Limit()
	}
	if l.used-old > bound-bytes {
		return false
	}
	if l.charges == nil {
		l.charges = map[RequestID]int64{}
	}
	l.charges[id] = bytes
	l.used += bytes - old
	return true
}

// Release drops id's charge and returns it (0 when id held none). Once every
// charge is released Used is 0.
func (l *Ledger) Release(id RequestID) int64 {
	bytes, held := l.charges[id]
	if !held {
		return 0
	}
	delete(l.charges, id)
	l.used -= bytes
	l.settle()
	return bytes
}

// Resize sets the capacity; a negative capacity counts as 0. It never changes
// a charge: after a shrink below Used, admissions stop (Used > Limit) and
// growth stays bounded by the previous ceiling until Used drains to the new
// capacity.
func (l *Ledger) Resize(capacity int64) {
	capacity = max(capacity, 0)
	l.capacity = capacity
	if l.used > capacity {
		l.ceiling = max(l.ceiling, capacity)
		return
	}
	l.ceiling = capacity
}

// settle lowers the ceiling to the capacity once a shrink has drained.
func (l *Ledger) settle() {
	if l.used <= l.capacity {
		l.ceiling = l.capacity
	}
}

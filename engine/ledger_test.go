package engine

import (
	"math/rand/v2"
	"testing"
)

func TestWatermark(t *testing.T) {
	tests := []struct {
		capacity, watermark, limit int64
	}{
		{0, 0, 0},
		{19, 0, 19},
		{20, 1, 19},
		{1000, 50, 950},
		{1999, 99, 1900},
		{1 << 30, 53_687_091, 1<<30 - 53_687_091},
		{-7, 0, 0},
	}
	for _, tt := range tests {
		l := NewLedger(tt.capacity)
		if l.Watermark() != tt.watermark || l.Limit() != tt.limit {
			t.Errorf("capacity %d: watermark %d limit %d, want %d and %d",
				tt.capacity, l.Watermark(), l.Limit(), tt.watermark, tt.limit)
		}
		if !l.CanEverFit(tt.limit) || l.CanEverFit(tt.limit+1) {
			t.Errorf("capacity %d: CanEverFit must accept exactly up to %d", tt.capacity, tt.limit)
		}
	}
}

// ledgerOp is one call in a ledger script: charge (bytes >= 0), release
// (bytes < 0, want is the returned charge), or resize (id "").
type ledgerOp struct {
	id    RequestID
	bytes int64
	ok    bool  // charge: the expected result
	want  int64 // release: the expected return
	used  int64 // Used after the call
	ceil  int64 // Ceiling after the call
}

func charge(id RequestID, bytes int64, ok bool, used, ceil int64) ledgerOp {
	return ledgerOp{id: id, bytes: bytes, ok: ok, used: used, ceil: ceil}
}

func release(id RequestID, want, used, ceil int64) ledgerOp {
	return ledgerOp{id: id, bytes: -1, want: want, used: used, ceil: ceil}
}

func resize(capacity, used, ceil int64) ledgerOp {
	return ledgerOp{bytes: capacity, used: used, ceil: ceil}
}

func TestLedgerScripts(t *testing.T) {
	// Capacity 1000: watermark 50, admission limit 950, growth ceiling 1000.
	tests := []struct {
		name string
		ops  []ledgerOp
	}{
		{"admission stops at the watermark", []ledgerOp{
			charge("a", 900, true, 900, 1000),
			charge("b", 51, false, 900, 1000),
			charge("b", 50, true, 950, 1000),
			charge("c", 1, false, 950, 1000),
			charge("c", 0, true, 950, 1000), // an empty charge still fits at the limit
		}},
		{"growth may use the watermark", []ledgerOp{
			charge("a", 900, true, 900, 1000),
			charge("a", 1000, true, 1000, 1000),
			charge("a", 1001, false, 1000, 1000),
			release("a", 1000, 0, 1000),
		}},
		{"charges never go down", []ledgerOp{
			charge("a", 300, true, 300, 1000),
			charge("a", 100, true, 300, 1000),
			charge("a", 300, true, 300, 1000),
			charge("a", 400, true, 400, 1000),
		}},
		{"release", []ledgerOp{
			charge("a", 300, true, 300, 1000),
			charge("b", 200, true, 500, 1000),
			release("a", 300, 200, 1000),
			release("a", 0, 200, 1000),
			release("zz", 0, 200, 1000),
			release("b", 200, 0, 1000),
			charge("a", 950, true, 950, 1000), // a released id is admitted afresh
		}},
		{"shrink never evicts and keeps the old ceiling until drained", []ledgerOp{
			charge("a", 400, true, 400, 1000),
			charge("b", 400, true, 800, 1000),
			resize(500, 800, 1000), // limit 475, ceiling stays 1000
			charge("c", 1, false, 800, 1000),
			charge("a", 600, true, 1000, 1000), // a running row still grows
			charge("b", 401, false, 1000, 1000),
			release("a", 600, 400, 500), // drained: ceiling drops to the capacity
			charge("c", 75, true, 475, 500),
			charge("c", 76, true, 476, 500),
			charge("b", 424, true, 500, 500),
			charge("b", 425, false, 500, 500),
		}},
		{"shrink below used then shrink again", []ledgerOp{
			charge("a", 900, true, 900, 1000),
			resize(600, 900, 1000),
			resize(300, 900, 1000),
			release("a", 900, 0, 300),
			charge("a", 286, false, 0, 300), // limit 285
			charge("a", 285, true, 285, 300),
		}},
		{"shrink with room keeps no slack", []ledgerOp{
			charge("a", 100, true, 100, 1000),
			resize(500, 100, 500),
			charge("a", 501, false, 100, 500),
		}},
		{"grow", []ledgerOp{
			charge("a", 900, true, 900, 1000),
			charge("b", 100, false, 900, 1000),
			resize(2000, 900, 2000),
			charge("b", 100, true, 1000, 2000),
		}},
		{"grow while draining", []ledgerOp{
			charge("a", 900, true, 900, 1000),
			resize(500, 900, 1000),
			resize(800, 900, 1000),
			resize(900, 900, 900),
		}},
		{"resize to nothing", []ledgerOp{
			resize(0, 0, 0),
			charge("a", 0, true, 0, 0),
			charge("a", 1, false, 0, 0),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLedger(1000)
			for i, op := range tt.ops {
				switch {
				case op.id == "":
					l.Resize(op.bytes)
				case op.bytes < 0:
					if got := l.Release(op.id); got != op.want {
						t.Fatalf("op %d: Release(%s) = %d, want %d", i, op.id, got, op.want)
					}
				default:
					if got := l.TryCharge(op.id, op.bytes); got != op.ok {
						t.Fatalf("op %d: TryCharge(%s, %d) = %v, want %v", i, op.id, op.bytes, got, op.ok)
					}
				}
				if l.Used() != op.used || l.Ceiling() != op.ceil {
					t.Fatalf("op %d: used %d ceiling %d, want %d and %d", i, l.Used(), l.Ceiling(), op.used, op.ceil)
				}
				checkLedger(t, l)
			}
		})
	}
}

func TestZeroLedger(t *testing.T) {
	var l Ledger
	if l.TryCharge("a", 1) || !l.TryCharge("a", 0) || l.Used() != 0 || l.Release("a") != 0 {
		t.Fatal("the zero Ledger has no capacity and must admit only empty charges")
	}
}

// TestLedgerRandom drives a ledger with random calls and checks its
// invariants after each one.
func TestLedgerRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	l := NewLedger(10_000)
	ids := []RequestID{"a", "b", "c", "d", "e"}
	for range 20_000 {
		id := ids[rng.IntN(len(ids))]
		switch rng.IntN(10) {
		case 0:
			l.Resize(rng.Int64N(20_000))
		case 1, 2:
			l.Release(id)
		default:
			before := l.Charge(id)
			ok := l.TryCharge(id, rng.Int64N(5_000))
			if !ok && l.Charge(id) != before {
				t.Fatal("a failed charge changed the ledger")
			}
		}
		checkLedger(t, l)
	}
	for _, id := range ids {
		l.Release(id)
	}
	if l.Used() != 0 || l.Len() != 0 || l.Ceiling() != l.Capacity() {
		t.Fatalf("after releasing everything: used %d, %d charges, ceiling %d", l.Used(), l.Len(), l.Ceiling())
	}
}

// checkLedger asserts the ledger's invariants.
func checkLedger(t *testing.T, l *Ledger) {
	t.Helper()
	var sum int64
	for _, b := range l.charges {
		if b < 0 {
			t.Fatalf("negative charge %d", b)
		}
		sum += b
	}
	if sum != l.Used() || l.Used() < 0 {
		t.Fatalf("used %d, sum of charges %d", l.Used(), sum)
	}
	if l.Used() > l.Ceiling() || l.Ceiling() < l.Capacity() {
		t.Fatalf("used %d, ceiling %d, capacity %d", l.Used(), l.Ceiling(), l.Capacity())
	}
	if !l.Draining() && l.Ceiling() != l.Capacity() {
		t.Fatalf("not draining but ceiling %d above capacity %d", l.Ceiling(), l.Capacity())
	}
	if l.Free() != max(0, l.Limit()-l.Used()) {
		t.Fatalf("free %d", l.Free())
	}
}

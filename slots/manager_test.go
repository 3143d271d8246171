package slots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
)

const gib = int64(1) << 30

// memory is a scripted device: it tracks the weights allocated and the
// grants instances hold, and checks after every event that grants and
// weights fit the cap: weights + grants + ActivationReserve <= cap.
type memory struct {
	t       *testing.T
	cap     int64
	mu      sync.Mutex
	weights int64
	grants  map[*fakeInst]int64
	events  int
	// failLoad makes the next Load of that name fail after allocating.
	failLoad map[string]bool
}

func (mem *memory) check(what string) {
	mem.events++
	var sum int64
	for _, g := range mem.grants {
		sum += g
	}
	if mem.weights+sum+ActivationReserve > mem.cap {
		mem.t.Errorf("after %s: weights %d + grants %d + reserve exceed the cap %d", what, mem.weights, sum, mem.cap)
	}
}

type fakeLoader struct {
	mem     *memory
	catalog map[string]Info
}

func (l *fakeLoader) Probe(name string) (Info, error) {
	info, ok := l.catalog[name]
	if !ok {
		return Info{}, fmt.Errorf("%q: %w", name, ErrUnknown)
	}
	return info, nil
}

func (l *fakeLoader) Load(_ context.Context, name string, grant int64) (Instance, error) {
	mem := l.mem
	mem.mu.Lock()
	defer mem.mu.Unlock()
	w := l.catalog[name].WeightBytes
	mem.weights += w
	mem.check("allocating " + name)
	if mem.failLoad[name] {
		delete(mem.failLoad, name)
		mem.weights -= w
		mem.check("releasing failed " + name)
		return nil, errors.New("corrupt weights")
	}
	inst := &fakeInst{mem: mem, weights: w, name: name}
	mem.grants[inst] = grant
	mem.check("granting " + name)
	return inst, nil
}

type fakeInst struct {
	mem      *memory
	name     string
	weights  int64
	steps    uint64
	oldest   time.Time
	rebuilds int
	closed   bool
	failed   error
}

func (f *fakeInst) Resize(g int64) {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	f.mem.grants[f] = g
	f.mem.check("resizing " + f.name)
}

func (f *fakeInst) Progress() Progress {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	return Progress{Steps: f.steps, OldestWait: f.oldest}
}

func (f *fakeInst) Rebuild() error {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	f.rebuilds++
	f.steps = 0
	f.failed = nil
	return nil
}

func (f *fakeInst) Snapshot() Snapshot { return Snapshot{} }

func (f *fakeInst) Failed() error {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	return f.failed
}

func (f *fakeInst) Close() {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	f.closed = true
	delete(f.mem.grants, f)
	f.mem.weights -= f.weights
	f.mem.check("closing " + f.name)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// setup is a 64 GiB machine (cap 57.6 GiB) with three models.
func setup(t *testing.T, o Options) (*Manager, *memory, *fakeLoader, *clock.Mock) {
	mem := &memory{t: t, cap: MemoryCap(64 * gib), grants: map[*fakeInst]int64{}, failLoad: map[string]bool{}}
	ld := &fakeLoader{mem: mem, catalog: map[string]Info{
		"small":  {WeightBytes: 1 * gib, Demand: Demand{KVRate: 65536, Context: 32768}},
		"medium": {WeightBytes: 4 * gib, Demand: Demand{KVRate: 131072, Context: 32768}},
		"large":  {WeightBytes: 16 * gib, Demand: Demand{KVRate: 262144, Context: 65536}},
		"huge":   {WeightBytes: 60 * gib, Demand: Demand{KVRate: 1 << 20, Context: 8192}},
	}}
	clk := clock.NewMock()
	o.Memory, o.Clock, o.Logger = 64*gib, clk, quiet()
	return New(ld, o), mem, ld, clk
}

// wantGrants checks the residents' grants against the formula.
func wantGrants(t *testing.T, m *Manager, ld *fakeLoader, names ...string) {
	t.Helper()
	var held int64
	demands := make([]Demand, len(names))
	for i, n := range names {
		held += ld.catalog[n].WeightBytes
		demands[i] = ld.catalog[n].Demand
	}
	want, err := Grants(Budget(MemoryCap(64*gib), held), demands, Floor)
	if err != nil {
		t.Fatal(err)
	}
	got := m.Grants()
	if len(got) != len(names) {
		t.Fatalf("residents %v, want %v", got, names)
	}
	for i, n := range names {
		if got[n] != want[i] {
			t.Errorf("grant of %s = %d, want %d", n, got[n], want[i])
		}
	}
}

func TestGrantsFormula(t *testing.T) {
	// One model gets the whole budget.
	g, err := Grants(40*gib, []Demand{{KVRate: 1000, Context: 4096}}, Floor)
	if err != nil || g[0] != 40*gib {
		t.Fatalf("lone grant %v %v", g, err)
	}
	// Two: in proportion to rate x min(context, 131072); the second's
	// context is capped.
	g, err = Grants(30*gib, []Demand{{KVRate: 2, Context: 131072}, {KVRate: 1, Context: 1 << 20}}, Floor)
	if err != nil {
		t.Fatal(err)
	}
	if g[0] != 20*gib || g[1] != 10*gib {
		t.Fatalf("grants %v, want 20 and 10 GiB", g)
	}
	// A slot's share above its Max goes to the others; the floor asks no
	// more of a slot than its Max.
	g, err = Grants(30*gib, []Demand{{KVRate: 1, Context: 1024, Max: gib / 4}, {KVRate: 1, Context: 1024}, {KVRate: 2, Context: 1024}}, Floor)
	if err != nil {
		t.Fatal(err)
	}
	if g[0] != gib/4 || g[1] != (30*gib-gib/4)/3 || g[2] != (30*gib-gib/4)*2/3 {
		t.Fatalf("capped grants %v", g)
	}
	// Under the floor: refused.
	if _, err := Grants(3*gib, []Demand{{KVRate: 100, Context: 1024}, {KVRate: 1, Context: 1024}}, Floor); !errors.Is(err, ErrResliceFloor) {
		t.Fatalf("err %v, want reslice_floor", err)
	}
	// Never above the budget, at sizes where budget x weight overflows 64 bits.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		n := 1 + rng.IntN(5)
		ds := make([]Demand, n)
		for i := range ds {
			ds[i] = Demand{KVRate: 1 + rng.Int64N(4<<20), Context: rng.IntN(1 << 19)}
		}
		budget := rng.Int64N(1 << 40)
		g, err := Grants(budget, ds, 0)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, x := range g {
			sum += x
		}
		if sum > budget || sum < budget-int64(n) {
			t.Fatalf("grants sum %d for budget %d", sum, budget)
		}
	}
}

func TestMemoryCap(t *testing.T) {
	for _, c := range []struct{ mem, want int64 }{
		{64 * gib, 64 * gib * 9 / 10},
		{16 * gib, 14 * gib},
		{1 * gib, 0},
	} {
		if got := MemoryCap(c.mem); got != c.want {
			t.Errorf("MemoryCap(%d) = %d, want %d", c.mem, got, c.want)
		}
	}
	if !LoadFits(20*gib, 0, 14*gib) || LoadFits(20*gib, 0, 15*gib) {
		t.Errorf("load gate: 14 GiB x 1.2 + 3 GiB fits 20 GiB, 15 GiB does not")
	}
}

func TestLoadReslicesAndUnloadRegrows(t *testing.T) {
	m, mem, ld, _ := setup(t, Options{})
	ctx := context.Background()
	rel := map[string]func(){}
	for _, n := range []string{"small", "medium", "large"} {
		r, err := m.Acquire(ctx, n)
		if err != nil {
			t.Fatalf("acquire %s: %v", n, err)
		}
		rel[n] = r
	}
	wantGrants(t, m, ld, "small", "medium", "large")
	rel["medium"]()
	if err := m.Unload("medium"); err != nil {
		t.Fatal(err)
	}
	wantGrants(t, m, ld, "small", "large")
	// Held slots are not unloaded.
	if err := m.Unload("large"); err == nil {
		t.Fatal("unloaded a slot in use")
	}
	if mem.events == 0 {
		t.Fatal("no memory events observed")
	}
}

func TestSlotLimitUnloadsLeastRecentlyUsedIdle(t *testing.T) {
	m, _, ld, clk := setup(t, Options{MaxSlots: 2})
	ctx := context.Background()
	r1, _ := m.Acquire(ctx, "small")
	clk.Add(time.Second)
	r2, _ := m.Acquire(ctx, "medium")
	clk.Add(time.Second)
	// Both busy: the third is refused with no_kv_headroom.
	if _, err := m.Acquire(ctx, "large"); !errors.Is(err, ErrNoHeadroom) {
		t.Fatalf("err %v, want no_kv_headroom", err)
	}
	r2()
	clk.Add(time.Second)
	r1()
	// medium was released first: it goes.
	r3, err := m.Acquire(ctx, "large")
	if err != nil {
		t.Fatal(err)
	}
	defer r3()
	wantGrants(t, m, ld, "small", "large")
}

func TestLoadGateAndFloor(t *testing.T) {
	m, _, _, _ := setup(t, Options{})
	ctx := context.Background()
	if _, err := m.Acquire(ctx, "huge"); !errors.Is(err, ErrNoHeadroom) {
		t.Fatalf("huge: %v, want no_kv_headroom", err)
	}
	if _, err := m.Acquire(ctx, "nope"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown: %v", err)
	}
	// A 4 GiB budget cannot hold two slots over the 1 GiB floor in these
	// proportions.
	m2, _, _, _ := setup(t, Options{Budget: 4 * gib})
	r, err := m2.Acquire(ctx, "large")
	if err != nil {
		t.Fatal(err)
	}
	defer r()
	if _, err := m2.Acquire(ctx, "small"); !errors.Is(err, ErrResliceFloor) || Reason(err) != "reslice_floor" {
		t.Fatalf("err %v, want reslice_floor", err)
	}
	if g := m2.Grants()["large"]; g != 4*gib {
		t.Fatalf("large's grant %d after a refused load, want it whole", g)
	}
}

func TestFailedLoadRestoresGrantsAfterRelease(t *testing.T) {
	m, mem, ld, _ := setup(t, Options{})
	ctx := context.Background()
	r, _ := m.Acquire(ctx, "small")
	defer r()
	mem.failLoad["large"] = true
	_, err := m.Acquire(ctx, "large")
	if !errors.Is(err, ErrEngineInit) {
		t.Fatalf("err %v, want engine_init_failed", err)
	}
	wantGrants(t, m, ld, "small")
	if mem.weights != ld.catalog["small"].WeightBytes {
		t.Fatalf("weights held %d after the failed load", mem.weights)
	}
}

func TestIdleUnload(t *testing.T) {
	m, _, ld, clk := setup(t, Options{IdleUnload: time.Hour})
	ctx := context.Background()
	r1, _ := m.Acquire(ctx, "small")
	r2, _ := m.Acquire(ctx, "medium")
	r1()
	clk.Add(time.Hour)
	m.Tick()
	// medium is held: it stays and regrows to the whole budget.
	wantGrants(t, m, ld, "medium")
	r2()
	clk.Add(59 * time.Minute)
	m.Tick()
	wantGrants(t, m, ld, "medium")
	clk.Add(time.Minute)
	m.Tick()
	if len(m.Grants()) != 0 {
		t.Fatalf("still loaded: %v", m.Grants())
	}
}

func TestWedgeRebuildsThenUnloads(t *testing.T) {
	m, mem, ld, clk := setup(t, Options{})
	ctx := context.Background()
	r, _ := m.Acquire(ctx, "small")
	defer r()
	r2, _ := m.Acquire(ctx, "medium")
	defer r2()
	var inst *fakeInst
	for i := range mem.grants {
		if i.name == "small" {
			inst = i
		}
	}
	grant := m.Grants()["small"]
	// Steps move: healthy however long a request waits.
	mem.mu.Lock()
	inst.oldest = clk.Now()
	mem.mu.Unlock()
	for range 30 {
		clk.Add(10 * time.Second)
		mem.mu.Lock()
		inst.steps++
		mem.mu.Unlock()
		m.Tick()
	}
	if inst.rebuilds != 0 {
		t.Fatal("rebuilt a moving engine")
	}
	// Steps freeze while a request waits: suspected, then wedged at 120 s.
	mem.mu.Lock()
	inst.oldest = clk.Now()
	mem.mu.Unlock()
	m.Tick()
	clk.Add(119 * time.Second)
	m.Tick()
	if inst.rebuilds != 0 {
		t.Fatal("rebuilt before the threshold")
	}
	clk.Add(time.Second)
	m.Tick()
	if inst.rebuilds != 1 {
		t.Fatalf("rebuilds %d, want 1", inst.rebuilds)
	}
	if g := m.Grants()["small"]; g != grant {
		t.Fatalf("grant %d after rebuild, want the same %d", g, grant)
	}
	if s := m.Snapshots(); s[0].State != StateRunning {
		t.Fatalf("state %s after rebuild", s[0].State)
	}
	// Frozen again: wedged within the cooldown: unloaded, and medium
	// regrows.
	clk.Add(120 * time.Second)
	m.Tick()
	if _, ok := m.Grants()["small"]; ok {
		t.Fatal("a slot wedged twice within the cooldown stayed loaded")
	}
	wantGrants(t, m, ld, "medium")
}

// TestConcurrentLoadsAndUnloads races acquires, releases, unloads and
// ticks: the memory check runs at every event (and -race watches).
func TestConcurrentLoadsAndUnloads(t *testing.T) {
	m, mem, _, clk := setup(t, Options{MaxSlots: 2, IdleUnload: time.Minute})
	names := []string{"small", "medium", "large"}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for range 200 {
				n := names[rng.IntN(len(names))]
				switch rng.IntN(4) {
				case 0:
					_ = m.Unload(n)
				case 1:
					m.Tick()
				default:
					if r, err := m.Acquire(context.Background(), n); err == nil {
						r()
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			clk.Add(10 * time.Second)
		}
	})
	wg.Wait()
	m.Close()
	if mem.weights != 0 || len(mem.grants) != 0 {
		t.Fatalf("after Close: weights %d, grants %v", mem.weights, mem.grants)
	}
}

// TestDeadEngineRebuiltThenCrashed: an engine that dies is rebuilt with
// its grant; dying again within the cooldown, its slot is unloaded and the
// crash reported with the slots left.
func TestDeadEngineRebuiltThenCrashed(t *testing.T) {
	var crashed []string
	m, mem, ld, clk := setup(t, Options{Crashed: func(name string, left int) { crashed = append(crashed, fmt.Sprint(name, " ", left)) }})
	ctx := context.Background()
	r, _ := m.Acquire(ctx, "small")
	defer r()
	var inst *fakeInst
	for i := range mem.grants {
		inst = i
	}
	grant := m.Grants()["small"]
	mem.mu.Lock()
	inst.failed = errors.New("step panicked")
	mem.mu.Unlock()
	m.Tick()
	if inst.rebuilds != 1 || m.Grants()["small"] != grant || len(crashed) != 0 {
		t.Fatalf("rebuilds %d, grants %v, crashed %v", inst.rebuilds, m.Grants(), crashed)
	}
	clk.Add(time.Minute)
	mem.mu.Lock()
	inst.failed = errors.New("step panicked again")
	mem.mu.Unlock()
	m.Tick()
	if len(m.Grants()) != 0 || len(crashed) != 1 || crashed[0] != "small 0" {
		t.Fatalf("grants %v, crashed %v", m.Grants(), crashed)
	}
	_ = ld
}

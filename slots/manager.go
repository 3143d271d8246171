package slots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
)

// Info is what the manager needs of a model before loading it.
type Info struct {
	// WeightBytes is the memory its weights take once loaded.
	WeightBytes int64
	Demand      Demand
}

// Instance is one loaded model: its weights and the engine over them.
type Instance interface {
	// Resize changes the KV grant; it never interrupts a running row.
	Resize(grant int64)
	// Progress is what the wedge detector reads.
	Progress() Progress
	// Rebuild replaces the engine by a new one over the same weights and
	// grant.
	Rebuild() error
	// Snapshot is the instance's capacity (Model, State and KVGrant are
	// filled in by the manager).
	Snapshot() Snapshot
	// Failed is why the engine stopped serving on its own (a step that
	// panicked or failed fatally); nil while it serves.
	Failed() error
	// Close stops the engine and releases the instance's memory before it
	// returns.
	Close()
}

// Loader opens models by name.
type Loader interface {
	// Probe returns what the load gate needs without loading weights;
	// an unknown name is an error wrapping ErrUnknown.
	Probe(name string) (Info, error)
	// Load loads the model's weights and starts its engine with the given
	// KV grant. When it fails, everything it allocated is released before
	// it returns.
	Load(ctx context.Context, name string, grant int64) (Instance, error)
}

// ErrUnknown: the loader has no model of that name.
var ErrUnknown = errors.New("unknown model")

// Options configure a Manager. Zero fields take the documented defaults.
type Options struct {
	// Memory is the device's memory (GPU memory, or physical memory on the
	// CPU and unified-memory machines); the cap is MemoryCap of it.
	Memory int64
	// Budget, when positive, fixes the KV budget all slots share instead
	// of deriving it from Memory and the weights held.
	Budget int64
	// MaxSlots is how many models stay loaded (default DefaultMaxSlots).
	MaxSlots int
	// IdleUnload unloads a slot unused this long (default
	// DefaultIdleUnload; negative: never).
	IdleUnload time.Duration
	// Floor is the least grant of a slot (default Floor).
	Floor int64
	// Wedge holds the wedge detector's thresholds (zero: defaults).
	Wedge Wedge
	// Clock is injected for tests; nil is the wall clock.
	Clock  clock.Clock
	Logger *slog.Logger
	// Crashed, when set, is called (under the gate) after a slot whose
	// engine died and could not be rebuilt was unloaded, with the number
	// of slots left.
	Crashed func(name string, left int)
}

// slot is one loaded model.
type slot struct {
	name   string
	info   Info
	inst   Instance
	grant  int64
	state  State
	used   time.Time // last Acquire or release
	users  int       // requests holding the slot
	wedge  Wedge
	seqNum uint64 // load order, for stable listings
}

// Manager keeps the loaded models: it loads on demand, unloads the least
// recently used idle slot at the slot limit and idle slots after their
// timeout, re-slices one KV budget among the residents, and rebuilds
// wedged engines.
//
// Every load, unload and re-slice runs under one gate, in this order:
// shrink the residents, then grant the newcomer; on a failed load release
// the newcomer's memory, then regrow the residents; on an unload release
// its memory, then regrow. So at every instant the grants sum to at most
// the budget of the weights then held.
type Manager struct {
	ld  Loader
	opt Options
	log *slog.Logger

	gate sync.Mutex // serializes loads, unloads and re-slices

	mu    sync.Mutex // guards slots and their fields; never held across a load
	slots map[string]*slot
	seq   uint64
}

// New returns a manager over ld.
func New(ld Loader, o Options) *Manager {
	if o.MaxSlots <= 0 {
		o.MaxSlots = DefaultMaxSlots
	}
	if o.IdleUnload == 0 {
		o.IdleUnload = DefaultIdleUnload
	}
	if o.Floor <= 0 {
		o.Floor = Floor
	}
	if o.Clock == nil {
		o.Clock = clock.New()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Manager{ld: ld, opt: o, log: o.Logger, slots: map[string]*slot{}}
}

// Acquire makes sure the named model is loaded and holds it until release
// is called: a held slot is never unloaded. It loads the model when it is
// not resident, unloading idle slots as the slot limit and the memory cap
// require.
func (m *Manager) Acquire(ctx context.Context, name string) (release func(), err error) {
	if s := m.hold(name); s != nil {
		return m.releaser(s), nil
	}
	m.gate.Lock()
	defer m.gate.Unlock()
	if s := m.hold(name); s != nil {
		return m.releaser(s), nil
	}
	s, err := m.load(ctx, name)
	if err != nil {
		return nil, err
	}
	return m.releaser(s), nil
}

// hold takes a use of a running slot, or returns nil.
func (m *Manager) hold(name string) *slot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.slots[name]
	if !ok || s.state == StateCrashed {
		return nil
	}
	s.users++
	s.used = m.opt.Clock.Now()
	return s
}

func (m *Manager) releaser(s *slot) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			s.users--
			s.used = m.opt.Clock.Now()
			m.mu.Unlock()
		})
	}
}

// budget is the KV budget with weights bytes of weights held.
func (m *Manager) budget(weights int64) int64 {
	if m.opt.Budget > 0 {
		return m.opt.Budget
	}
	return Budget(MemoryCap(m.opt.Memory), weights)
}

// plan is a load's outcome: which residents to unload, and the grants of
// the residents that stay (in order) and of the newcomer (last).
type plan struct {
	evict  []*slot
	stay   []*slot
	grants []int64
}

// planLoad finds the fewest least-recently-used idle slots to unload for
// info to load: within the slot limit, the load gate and the floor.
func (m *Manager) planLoad(info Info) (plan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	res := m.residents()
	idle := slices.DeleteFunc(slices.Clone(res), func(s *slot) bool { return s.users > 0 })
	slices.SortFunc(idle, func(a, b *slot) int { return a.used.Compare(b.used) })
	var last error
	for n := 0; n <= len(idle); n++ {
		evict := idle[:n]
		stay := slices.DeleteFunc(slices.Clone(res), func(s *slot) bool { return slices.Contains(evict, s) })
		if len(stay)+1 > m.opt.MaxSlots {
			last = fmt.Errorf("%w: %d models loaded (the limit) and none idle", ErrNoHeadroom, len(stay))
			continue
		}
		var held int64
		demands := make([]Demand, 0, len(stay)+1)
		for _, s := range stay {
			held += s.info.WeightBytes
			demands = append(demands, s.info.Demand)
		}
		if m.opt.Budget <= 0 && !LoadFits(MemoryCap(m.opt.Memory), held, info.WeightBytes) {
			last = fmt.Errorf("%w: %d bytes of weights do not fit beside %d held under a %d-byte cap", ErrNoHeadroom, info.WeightBytes, held, MemoryCap(m.opt.Memory))
			continue
		}
		demands = append(demands, info.Demand)
		grants, err := Grants(m.budget(held+info.WeightBytes), demands, m.opt.Floor)
		if err != nil {
			last = err
			continue
		}
		return plan{evict: slices.Clone(evict), stay: stay, grants: grants}, nil
	}
	return plan{}, last
}

// residents lists the slots in load order. mu is held.
func (m *Manager) residents() []*slot {
	out := make([]*slot, 0, len(m.slots))
	for _, s := range m.slots {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *slot) int { return int(a.seqNum) - int(b.seqNum) })
	return out
}

// load brings a model in under the gate and returns it held once.
func (m *Manager) load(ctx context.Context, name string) (*slot, error) {
	info, err := m.ld.Probe(name)
	if err != nil {
		return nil, err
	}
	p, err := m.planLoad(info)
	if err != nil {
		m.log.Error("model load refused", "model", name, "reason", Reason(err), "err", err)
		return nil, err
	}
	for _, s := range p.evict {
		m.unloadLocked(s, "lru")
	}
	// Shrink the residents first: the newcomer's grant is carved from
	// what they give back.
	for i, s := range p.stay {
		m.setGrant(s, p.grants[i])
	}
	grant := p.grants[len(p.grants)-1]
	m.log.Info("loading model", "model", name, "weight_bytes", info.WeightBytes, "kv_grant", grant)
	inst, err := m.ld.Load(ctx, name, grant)
	if err != nil {
		// Load released the newcomer's memory; the residents regrow.
		m.regrow()
		if Reason(err) == "" {
			err = fmt.Errorf("%w: %w", ErrEngineInit, err)
		}
		m.log.Error("model load failed", "model", name, "reason", Reason(err), "err", err)
		return nil, err
	}
	now := m.opt.Clock.Now()
	m.mu.Lock()
	m.seq++
	s := &slot{name: name, info: info, inst: inst, grant: grant, state: StateRunning, used: now, users: 1, wedge: m.opt.Wedge, seqNum: m.seq}
	m.slots[name] = s
	m.mu.Unlock()
	m.log.Info("model loaded", "model", name, "kv_grant", grant, "slots", len(p.stay)+1)
	return s, nil
}

func (m *Manager) setGrant(s *slot, grant int64) {
	if s.grant == grant {
		return
	}
	m.mu.Lock()
	s.grant = grant
	m.mu.Unlock()
	s.inst.Resize(grant)
}

// regrow re-slices the whole budget among the residents (after memory was
// released). Under the gate.
func (m *Manager) regrow() {
	m.mu.Lock()
	res := m.residents()
	var held int64
	demands := make([]Demand, len(res))
	for i, s := range res {
		held += s.info.WeightBytes
		demands[i] = s.info.Demand
	}
	m.mu.Unlock()
	grants, err := Grants(m.budget(held), demands, 0)
	if err != nil {
		return
	}
	for i, s := range res {
		m.setGrant(s, grants[i])
	}
}

// unloadLocked removes a slot and releases its memory. Under the gate.
func (m *Manager) unloadLocked(s *slot, why string) {
	m.mu.Lock()
	delete(m.slots, s.name)
	m.mu.Unlock()
	s.inst.Close()
	m.log.Info("model unloaded", "model", s.name, "why", why)
}

// Unload unloads the named model when no request holds it, and regrows the
// others' grants.
func (m *Manager) Unload(name string) error {
	m.gate.Lock()
	defer m.gate.Unlock()
	m.mu.Lock()
	s, ok := m.slots[name]
	busy := ok && s.users > 0
	m.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("slots: unload %s: %w", name, ErrUnknown)
	case busy:
		return fmt.Errorf("slots: unload %s: requests are using it", name)
	}
	m.unloadLocked(s, "requested")
	m.regrow()
	return nil
}

// Tick runs the periodic duties at the clock's now: idle unloads and the
// wedge detector (a wedged slot is rebuilt, a slot wedged again within the
// cooldown unloaded). Serve calls it every few seconds.
func (m *Manager) Tick() {
	m.gate.Lock()
	defer m.gate.Unlock()
	now := m.opt.Clock.Now()
	m.mu.Lock()
	res := m.residents()
	m.mu.Unlock()
	changed := false
	for _, s := range res {
		m.mu.Lock()
		idle := s.users == 0 && m.opt.IdleUnload > 0 && now.Sub(s.used) >= m.opt.IdleUnload
		m.mu.Unlock()
		if idle {
			m.unloadLocked(s, "idle")
			changed = true
			continue
		}
		if err := s.inst.Failed(); err != nil {
			// A dead engine is rebuilt like a wedged one; dead again
			// within the cooldown, the slot goes.
			m.log.Error("engine died", "model", s.name, "err", err)
			if s.wedge.inCooldown(now) {
				m.crash(s, "died again within the cooldown")
				changed = true
				continue
			}
			if !m.rebuild(s, now, "died") {
				changed = true
			}
			continue
		}
		switch s.wedge.Observe(now, s.inst.Progress()) {
		case Wedged:
			if !m.rebuild(s, now, "wedged") {
				changed = true
			}
		case WedgedAgain:
			m.crash(s, "wedged again within the cooldown")
			changed = true
		}
	}
	if changed {
		m.regrow()
	}
}

// crash unloads a slot whose engine cannot be kept serving. Under the
// gate.
func (m *Manager) crash(s *slot, why string) {
	m.log.Error("unloading a slot that cannot serve", "model", s.name, "why", why, "reason", ErrEngineInit.Error())
	m.mu.Lock()
	s.state = StateCrashed
	m.mu.Unlock()
	m.unloadLocked(s, "crashed")
	if m.opt.Crashed != nil {
		m.mu.Lock()
		left := len(m.slots)
		m.mu.Unlock()
		m.opt.Crashed(s.name, left)
	}
}

// rebuild swaps a wedged or dead slot's engine for a new one over its
// weights; a slot whose rebuild fails is unloaded (false).
func (m *Manager) rebuild(s *slot, now time.Time, why string) bool {
	m.log.Error("rebuilding the engine", "model", s.name, "why", why)
	m.mu.Lock()
	s.state = StateReloading
	m.mu.Unlock()
	err := s.inst.Rebuild()
	s.wedge.Rebuilt(now)
	if err != nil {
		m.crash(s, fmt.Sprintf("rebuild failed: %v", err))
		return false
	}
	m.mu.Lock()
	s.state = StateRunning
	m.mu.Unlock()
	m.log.Info("engine rebuilt", "model", s.name, "kv_grant", s.grant)
	return true
}

// Grants returns each resident's KV grant.
func (m *Manager) Grants() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int64, len(m.slots))
	for n, s := range m.slots {
		out[n] = s.grant
	}
	return out
}

// Snapshots returns every resident's capacity, in load order.
func (m *Manager) Snapshots() []Snapshot {
	m.mu.Lock()
	res := m.residents()
	m.mu.Unlock()
	out := make([]Snapshot, 0, len(res))
	for _, s := range res {
		snap := s.inst.Snapshot()
		m.mu.Lock()
		snap.Model, snap.State, snap.KVGrant = s.name, s.state, s.grant
		m.mu.Unlock()
		snap.WedgeSuspected = snap.WedgeSuspected || s.wedge.suspected()
		out = append(out, snap)
	}
	return out
}

// Close unloads every slot.
func (m *Manager) Close() {
	m.gate.Lock()
	defer m.gate.Unlock()
	m.mu.Lock()
	res := m.residents()
	m.mu.Unlock()
	// In parallel: each engine lets its rows finish within the same drain
	// deadline.
	var wg sync.WaitGroup
	for _, s := range res {
		wg.Go(func() { m.unloadLocked(s, "shutdown") })
	}
	wg.Wait()
}

// Reason is the closed refusal reason of err ("" when it has none).
func Reason(err error) string {
	for _, r := range []error{ErrNoHeadroom, ErrResliceFloor, ErrEngineInit, ErrUnsupported, ErrRankLost} {
		if errors.Is(err, r) {
			return r.Error()
		}
	}
	return ""
}

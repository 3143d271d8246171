package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/goprovider/provider/tp"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/goprovider/provider/cache"
	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/link"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/server"
	"github.com/goprovider/provider/slots"
)

// catalogEntry is a model serve can load, by name.
type catalogEntry struct {
	name string
	path string // checkpoint file or directory; the config.json of a dummy
	// dummy runs seeded random weights of the config's true size.
	dummy   bool
	preload bool // named on the command line: loaded and self-tested at start
}

// buildCatalog lists the models serve can load: each --model entry (PATH,
// or PATH=NAME to serve it under another name, such as a network catalog
// id) is preloaded; each GGUF file and checkpoint directory (one holding
// config.json) under modelsDir loads on demand. Two models of one name
// are an error.
func buildCatalog(mf *modelFlags, modelFlagSet bool, modelsDir string) ([]catalogEntry, error) {
	var out []catalogEntry
	switch {
	case mf.isDummy():
		out = append(out, catalogEntry{name: dummyName(*mf.dummy), path: *mf.dummy, dummy: true, preload: true})
	case modelFlagSet || modelsDir == "":
		for _, spec := range strings.Split(*mf.model, ",") {
			path, name, named := strings.Cut(spec, "=")
			if named && name == "" || path == "" {
				return nil, usageError{fmt.Sprintf("serve: --model %q: want PATH or PATH=NAME", spec)}
			}
			if !named {
				name = strings.TrimSuffix(filepath.Base(filepath.Clean(path)), ".gguf")
			}
			out = append(out, catalogEntry{name: name, path: path, preload: true})
		}
	}
	if modelsDir != "" {
		ents, err := os.ReadDir(modelsDir)
		if err != nil {
			return nil, fmt.Errorf("serve: --models-dir: %w", err)
		}
		for _, e := range ents {
			p := filepath.Join(modelsDir, e.Name())
			switch {
			case !e.IsDir() && strings.HasSuffix(e.Name(), ".gguf"):
				out = append(out, catalogEntry{name: strings.TrimSuffix(e.Name(), ".gguf"), path: p})
			case e.IsDir():
				if _, err := os.Stat(filepath.Join(p, "config.json")); err == nil {
					out = append(out, catalogEntry{name: e.Name(), path: p})
				}
			}
		}
	}
	seen := map[string]bool{}
	for _, e := range out {
		if seen[e.name] {
			return nil, fmt.Errorf("serve: two models are named %q; name one with --model PATH=NAME", e.name)
		}
		seen[e.name] = true
	}
	return out, nil
}

// kvRateFP16 is a model's fp16 KV bytes per token over the layers that own
// a cache: the re-slicing weight's rate.
func kvRateFP16(c model.Config) int64 {
	var n int64
	for _, k := range c.Kinds {
		if k.SharedFrom < 0 {
			n += 2 * int64(k.KVHeads) * int64(k.HeadDim) * 2
		}
	}
	return n
}

// cpuStepTokens is the default step budget on the CPU: one prefill chunk.
// There a forward of 2,048 tokens costs more a token than one of 512
// (measured on 2 cores), and a budget of one chunk finishes prompts one at
// a time, oldest first, so that requests waiting for a prompt's prefix
// blocks get them as early as possible instead of all at once.
const cpuStepTokens = engine.DefaultPrefillChunk

// stepBudget is the engine's step token budget: --step-tokens when given,
// else cpuStepTokens on the CPU and the engine's default on a GPU.
func stepBudget(flag int, cpu bool) int {
	switch {
	case flag > 0:
		return flag
	case cpu:
		return cpuStepTokens
	}
	return engine.DefaultTokenBudget
}

// stepAhead is whether the engine builds greedy decode steps ahead
// (engine.Options.Ahead) given PROVIDER_STEP_AHEAD's value v: 1 on, 0 off,
// unset on a GPU and off on the CPU, where they save nothing (engine/doc.go
// says why and what they measured).
func stepAhead(v string, cpu bool) (bool, error) {
	switch v {
	case "":
		return !cpu, nil
	case "0", "1":
		return v == "1", nil
	}
	return false, fmt.Errorf("PROVIDER_STEP_AHEAD=%q: want 0 or 1", v)
}

// serveLoader loads catalog models for the slot manager: weights on their
// own MLX thread, the prefix cache and its SSD tier, the engine, and the
// registration with the HTTP server.
type serveLoader struct {
	mf          *modelFlags
	device      string
	srv         *server.Server
	log         *slog.Logger
	conc        int
	stepTokens  int // --step-tokens (0: stepBudget's default)
	prefixBytes int64
	ctxSize     int // --ctx-size: caps every model's context (0: none)
	archs       []string
	// tp runs every model over tensor-parallel ranks (a group of one:
	// this process alone).
	tp *tp.Group
	// clock and beforeStep reach every engine (tests: a mock clock, and a
	// hook that freezes steps); nil is the wall clock and no hook.
	clock      clock.Clock
	beforeStep func()

	mu      sync.Mutex
	entries map[string]catalogEntry
	probed  map[string]slots.Info
	archOf  map[string]string // architecture of each probed model
	ctxOf   map[string]int    // context length of each probed model
}

// weightExtra is what decides a catalog entry's weights beside its files
// (cache.Fingerprint's extra): the seed of dummy weights.
func (sl *serveLoader) weightExtra(e catalogEntry) string {
	if e.dummy {
		return fmt.Sprint("dummy seed ", *sl.mf.seed)
	}
	return ""
}

// linkModels describes the catalog for the network's register message:
// each model's size, architecture and weight fingerprint (cache.Fingerprint:
// names, sizes and the SHA-256 of each file's first and last MiB).
func (sl *serveLoader) linkModels() []link.ModelInfo {
	var out []link.ModelInfo
	for _, name := range sl.names() {
		info, err := sl.Probe(name)
		if err != nil {
			continue
		}
		sl.mu.Lock()
		e, arch := sl.entries[name], sl.archOf[name]
		sl.mu.Unlock()
		fp, err := cache.Fingerprint(sl.weightExtra(e), e.path)
		if err != nil {
			continue
		}
		out = append(out, link.ModelInfo{ID: name, SizeBytes: info.WeightBytes, ModelType: arch, WeightHash: hex.EncodeToString(fp[:])})
	}
	return out
}

func (sl *serveLoader) names() []string {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	out := make([]string, 0, len(sl.entries))
	for n := range sl.entries {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// open opens a catalog entry's checkpoint (not its weights).
func (sl *serveLoader) open(e catalogEntry) (*model.Model, weightSource, error) {
	if e.dummy {
		m, _, src, err := sl.mf.openDummy("serve", func(msg string) { sl.log.Info(msg) })
		return m, src, err
	}
	m, err := openModel(e.path, sl.tp.Size())
	if err != nil {
		return nil, weightSource{}, fmt.Errorf("serve: %s: %w", e.name, err)
	}
	bar := newProgress(os.Stderr, "loading "+e.name, sl.log)
	upload := func(s mlx.Stream) (*model.Weights, error) {
		defer bar.done()
		return m.UploadProgress(s, bar.report)
	}
	return m, checkpointSource(e.path, upload), nil
}

// capContext applies --ctx-size to a model's config: a smaller context is
// taken, a larger one clamped to the model's own (logged).
func (sl *serveLoader) capContext(name string, c *model.Config) {
	n := sl.ctxSize
	switch {
	case n <= 0:
	case c.ContextLength > 0 && n > c.ContextLength:
		sl.log.Warn("--ctx-size above the model's context, clamped", "model", name, "requested", n, "context", c.ContextLength)
	default:
		c.ContextLength = n
	}
}

// context is a probed model's context length (0: unknown).
func (sl *serveLoader) context(name string) int {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.ctxOf[name]
}

// Probe implements slots.Loader.
func (sl *serveLoader) Probe(name string) (slots.Info, error) {
	sl.mu.Lock()
	e, ok := sl.entries[name]
	info, probed := sl.probed[name]
	sl.mu.Unlock()
	if !ok {
		return slots.Info{}, fmt.Errorf("serve: %w", slots.ErrUnknown)
	}
	if probed {
		return info, nil
	}
	m, src, err := sl.open(e)
	if err != nil {
		return slots.Info{}, fmt.Errorf("%w: %w", slots.ErrUnsupported, err)
	}
	defer m.Close()
	sl.capContext(name, &m.Config)
	if sl.archs != nil && !slices.Contains(sl.archs, m.Config.Arch) {
		return slots.Info{}, fmt.Errorf("%w: architecture %q has no adapter", slots.ErrUnsupported, m.Config.Arch)
	}
	// This process holds rank 0's share, the largest: its weights and its
	// KV heads are what the budget must hold here.
	n := sl.tp.Size()
	if n > 1 {
		if _, err := m.Shard(0, n); err != nil {
			return slots.Info{}, fmt.Errorf("%w: %w", slots.ErrUnsupported, err)
		}
	}
	weights, err := src.weightBytes(m, n)
	if err != nil {
		return slots.Info{}, fmt.Errorf("%w: %w", slots.ErrUnsupported, err)
	}
	// The most its rows can hold: every row at the full context, at
	// float32 (the widest activation type) when the context is known.
	var most int64
	if ctx := m.Config.ContextLength; ctx > 0 {
		c := m.Config
		c.ActDType = mlx.Float32
		most = engine.LayoutOf(c).SequenceBytes(ctx) * int64(sl.conc)
	}
	info = slots.Info{WeightBytes: weights, Demand: slots.Demand{KVRate: kvRateFP16(m.Config), Context: m.Config.ContextLength, Max: most}}
	sl.mu.Lock()
	sl.probed[name] = info
	if sl.archOf == nil {
		sl.archOf = map[string]string{}
	}
	sl.archOf[name] = m.Config.Arch
	if sl.ctxOf == nil {
		sl.ctxOf = map[string]int{}
	}
	sl.ctxOf[name] = m.Config.ContextLength
	sl.mu.Unlock()
	return info, nil
}

// Load implements slots.Loader.
func (sl *serveLoader) Load(_ context.Context, name string, grant int64) (slots.Instance, error) {
	sl.mu.Lock()
	e := sl.entries[name]
	sl.mu.Unlock()
	l, err := loadModel(func() (*model.Model, string, weightSource, error) {
		m, up, err := sl.open(e)
		if err == nil {
			sl.capContext(name, &m.Config)
		}
		return m, name, up, err
	}, sl.device, sl.tp)
	if err != nil {
		return nil, err
	}
	l.name = name
	l.net = withFaults(l.net)
	ahead, err := stepAhead(os.Getenv("PROVIDER_STEP_AHEAD"), l.s.IsCPU())
	if err != nil {
		l.close()
		return nil, err
	}
	opt := engine.Options{Sched: engine.Config{MaxConcurrent: sl.conc, TokenBudget: stepBudget(sl.stepTokens, l.s.IsCPU())}, KVCapacity: grant, Clock: sl.clock, BeforeStep: sl.beforeStep, Ahead: ahead, Log: sl.log.With("model", name)}
	if opt.Prefix, err = sl.prefix(l, e, grant); err != nil {
		l.close()
		return nil, err
	}
	if l.eng, err = engine.New(l.net, l.th, l.s, opt); err != nil {
		l.close()
		return nil, fmt.Errorf("%w: %w", slots.ErrEngineInit, err)
	}
	clk := sl.clock
	if clk == nil {
		clk = clock.New()
	}
	inst := &slotInstance{l: l, opt: opt, grant: grant, srv: sl.srv, log: sl.log, clk: clk}
	inst.gen.eng, inst.gen.group = l.eng, l.group
	if err := selfTest(context.Background(), name, &inst.gen, l.m.Tokenizer.BOS()); err != nil {
		l.close()
		return nil, err
	}
	if w := os.Getenv("PROVIDER_WARMUP"); w == "1" || (w != "0" && !l.s.IsCPU()) {
		if err := warmUp(context.Background(), name, &inst.gen, l.m.Config.Vocab, sl.conc, l.m.Config.ContextLength, sl.log); err != nil {
			l.close()
			return nil, fmt.Errorf("%w: warm-up of %s: %w", slots.ErrEngineInit, name, err)
		}
	}
	err = sl.srv.Register(server.Model{
		Name:          name,
		Architecture:  l.m.Config.Arch,
		Tokenizer:     l.m.Tokenizer,
		ChatTemplate:  l.m.ChatTemplate,
		EOS:           l.m.Config.EOS,
		ContextLength: l.m.Config.ContextLength,
		Generator:     &inst.gen,
		Vision:        l.vision,
	})
	if err != nil {
		l.close()
		if errors.Is(err, server.ErrUnsupportedArchitecture) {
			return nil, fmt.Errorf("%w: %w", slots.ErrUnsupported, err)
		}
		return nil, err
	}
	sl.log.Info("model ready", "model", name, "kv_bytes", grant, "weight_bytes", l.w.Bytes(), "max_concurrent", sl.conc)
	return inst, nil
}

// prefix configures a model's prefix cache out of its grant.
func (sl *serveLoader) prefix(l *loadedModel, e catalogEntry, grant int64) (engine.PrefixOptions, error) {
	var prefix engine.PrefixOptions
	if os.Getenv("PROVIDER_PREFIX_CACHE") == "0" {
		sl.log.Info("prefix cache off (PROVIDER_PREFIX_CACHE=0)", "model", l.name)
		return prefix, nil
	}
	layout := engine.LayoutOf(l.net.Config())
	block := layout.SequenceBytes(cache.BlockTokens)
	prefix.Budget = prefixBudget(sl.prefixBytes, physicalMemory(), grant, block)
	if prefix.Budget > 0 {
		var err error
		if prefix.Namespace, err = prefixNamespace(sl.weightExtra(e), []string{e.path}, l.net.Config()); err != nil {
			return prefix, fmt.Errorf("serve: %s: %w", l.name, err)
		}
		if sl.tp.Size() > 1 {
			// A block read back from disk would fill only this rank's
			// share of the KV heads.
			sl.log.Info("prefix cache SSD tier off under --tp", "model", l.name)
		} else if os.Getenv("PROVIDER_PREFIX_CACHE_SSD") != "0" {
			dir := prefixDir(l.name)
			d, err := cache.OpenDisk(cache.DiskOptions{Dir: dir, Queue: int(max(4, min(64, diskQueueBytes/max(block, 1))))})
			if err != nil {
				sl.log.Warn("prefix cache SSD tier off: cannot open it", "model", l.name, "dir", dir, "err", err)
			} else {
				l.disk, prefix.Disk = d, d
				st := d.Stats()
				sl.log.Info("prefix cache SSD tier", "model", l.name, "dir", dir, "files", st.Files, "bytes", st.Bytes, "budget", st.Budget)
			}
		}
	}
	sl.log.Info("prefix cache", "model", l.name, "ram_bytes", prefix.Budget, "on", prefix.Budget > 0, "ssd", prefix.Disk != nil)
	return prefix, nil
}

// slotGen is the Generator a slot registers: it forwards to the slot's
// current engine, which a wedge rebuild replaces.
type slotGen struct {
	mu  sync.Mutex
	eng *engine.Engine
	// group is the tensor-parallel group the model runs over (nil: none).
	group *tp.Group
}

func (g *slotGen) cur() *engine.Engine {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.eng
}

func (g *slotGen) swap(e *engine.Engine) *engine.Engine {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.eng
	g.eng = e
	return old
}

func (g *slotGen) Submit(ctx context.Context, gen engine.Generation) (<-chan engine.Event, error) {
	if err := g.lost(); err != nil {
		return nil, err
	}
	events, err := g.cur().Submit(ctx, gen)
	if err != nil || g.group.Size() == 1 {
		return events, err
	}
	return g.watchRanks(events), nil
}

// rankLostWait is how long a stream waits for its engine after the group
// lost a rank: a step caught in a collective when its peer died may never
// return, and the stream must still end.
const rankLostWait = 2 * time.Second

// watchRanks forwards a stream's events and, when the group loses a rank
// and the engine sends nothing for rankLostWait, ends the stream itself
// with an error (the engine's later events are drained and dropped).
func (g *slotGen) watchRanks(in <-chan engine.Event) <-chan engine.Event {
	out := make(chan engine.Event, 1)
	go func() {
		defer close(out)
		lost := g.group.LostC()
		var timeout <-chan time.Time
		for {
			select {
			case ev, ok := <-in:
				if !ok {
					return
				}
				out <- ev
				continue
			case <-lost:
				lost, timeout = nil, time.After(rankLostWait)
				continue
			case <-timeout:
			}
			out <- engine.Event{Kind: engine.EventError, Err: g.lost()}
			go func() {
				for range in {
				}
			}()
			return
		}
	}()
	return out
}

// lost is the refusal of a model whose tensor-parallel group lost a rank.
func (g *slotGen) lost() error {
	if err := g.group.Lost(); err != nil {
		return fmt.Errorf("%w: %w", slots.ErrRankLost, err)
	}
	return nil
}

func (g *slotGen) Stats() engine.Stats { return g.cur().Stats() }

// Err is the engine's fatal error, or the group's loss.
func (g *slotGen) Err() error {
	if err := g.lost(); err != nil {
		return err
	}
	return g.cur().Err()
}
func (g *slotGen) CacheStats() (st cache.Stats, ok bool) { return g.cur().CacheStats() }

// slotInstance is a loaded model as the slot manager drives it.
type slotInstance struct {
	l   *loadedModel
	gen slotGen
	srv *server.Server
	log *slog.Logger
	clk clock.Clock

	mu    sync.Mutex
	opt   engine.Options
	grant int64
}

// Resize implements slots.Instance.
func (si *slotInstance) Resize(grant int64) {
	si.mu.Lock()
	si.grant = grant
	si.mu.Unlock()
	si.gen.cur().Resize(grant)
}

// Progress implements slots.Instance.
func (si *slotInstance) Progress() slots.Progress {
	steps, oldest := si.gen.cur().Progress()
	return slots.Progress{Steps: steps, OldestWait: oldest}
}

// rebuildWait bounds how long a rebuild waits for the model's MLX thread,
// which a truly hung step holds.
const rebuildWait = 30 * time.Second

// Rebuild implements slots.Instance: a new engine over the same weights,
// thread and grant takes new requests; the old one drains in the
// background (its rows end when its step returns).
func (si *slotInstance) Rebuild() error {
	if err := si.gen.lost(); err != nil {
		return err
	}
	si.mu.Lock()
	opt := si.opt
	opt.KVCapacity = si.grant
	si.mu.Unlock()
	type built struct {
		e   *engine.Engine
		err error
	}
	ch := make(chan built, 1)
	go func() {
		e, err := engine.New(si.l.net, si.l.th, si.l.s, opt)
		ch <- built{e, err}
	}()
	var b built
	select {
	case b = <-ch:
	case <-time.After(rebuildWait):
		return fmt.Errorf("%w: the model's thread did not answer within %s", slots.ErrEngineInit, rebuildWait)
	}
	if b.err != nil {
		return fmt.Errorf("%w: %w", slots.ErrEngineInit, b.err)
	}
	old := si.gen.swap(b.e)
	si.l.eng = b.e
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		defer cancel()
		old.Shutdown(ctx)
	}()
	return nil
}

// Failed implements slots.Instance: the engine's fatal error, not its
// own shutdown.
func (si *slotInstance) Failed() error {
	if err := si.gen.cur().Err(); err != nil && !errors.Is(err, engine.ErrShutdown) {
		return err
	}
	return nil
}

// Snapshot implements slots.Instance.
func (si *slotInstance) Snapshot() slots.Snapshot {
	e := si.gen.cur()
	st, r := e.Stats(), e.Rates()
	snap := slots.Snapshot{
		Running: st.Running, Waiting: st.Waiting,
		KVBytesPerToken: st.KVBytesPerToken, MaxConcurrent: st.MaxConcurrent,
		DecodeTPS: r.DecodeTPS, PrefillTPS: r.PrefillTPS, Steps: st.Steps,
		SinceStep: -1, SinceFirstToken: -1,
	}
	tm := e.StepTimes()
	snap.StepBuild, snap.StepWait, snap.AheadSteps = tm.Build.Seconds(), tm.Wait.Seconds(), tm.AheadSteps
	if st.KVBytesPerToken > 0 {
		snap.TokensUsed, snap.TokensMax = st.KVUsed/st.KVBytesPerToken, st.KVCapacity/st.KVBytesPerToken
	}
	now := si.clk.Now()
	if !r.LastStep.IsZero() {
		snap.SinceStep = now.Sub(r.LastStep).Seconds()
	}
	if !r.FirstToken.IsZero() {
		snap.SinceFirstToken = now.Sub(r.FirstToken).Seconds()
	}
	return snap
}

// Close implements slots.Instance: the model leaves the server, its engine
// drains (running streams finish within the drain timeout) and its memory
// is released.
func (si *slotInstance) Close() {
	si.srv.Unregister(si.l.name)
	si.l.eng = si.gen.cur()
	si.l.close()
}

// drainDeadline is when running streams are cut at shutdown; zero: each
// engine's own drain timeout from when it is closed.
var drainDeadline atomic.Pointer[time.Time]

// selfTest runs a one-token generation through a freshly loaded model.
func selfTest(ctx context.Context, srvName string, g *slotGen, bos int32) error {
	if bos < 0 {
		bos = 0
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ch, err := g.Submit(ctx, engine.Generation{ID: engine.RequestID("self-test-" + srvName), Prompt: []int32{bos}, MaxTokens: 1, TopLogprobs: -1, IgnoreEOS: true})
	if err != nil {
		return fmt.Errorf("%w: self-test of %s: %w", slots.ErrEngineInit, srvName, err)
	}
	var last engine.Event
	for ev := range ch {
		last = ev
	}
	if last.Kind != engine.EventFinished {
		return fmt.Errorf("%w: self-test of %s: %v", slots.ErrEngineInit, srvName, last.Err)
	}
	return nil
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"github.com/goprovider/provider/cache"
	"github.com/goprovider/provider/tp"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/graph"
	"github.com/goprovider/provider/link"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/server"
	"github.com/goprovider/provider/slots"
	"github.com/goprovider/provider/stages"
)

const (
	// minKVGrant is what a model's prefix cache leaves its rows at least.
	minKVGrant = slots.Floor
	// drainTimeout bounds how long a stopping engine lets its rows finish.
	drainTimeout = 10 * time.Second
)

// loadedModel is one served model and what keeps it alive.
type loadedModel struct {
	m    *model.Model
	name string
	th   *mlx.Thread
	s    mlx.Stream
	w    *model.Weights
	net  model.Network
	eng  *engine.Engine
	disk *cache.Disk // the prefix cache's SSD tier; nil when off
	// vision is the model's vision tower; nil for a text-only model.
	vision stages.Vision
	// group runs the model over tensor-parallel ranks, as its slot there;
	// nil on one process.
	group *tp.Group
	slot  int
}

func (l *loadedModel) close() {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	if at := drainDeadline.Load(); at != nil {
		ctx, cancel = context.WithDeadline(context.Background(), *at)
	}
	defer cancel()
	if l.eng != nil {
		l.eng.Shutdown(ctx)
	}
	if l.disk != nil {
		// Blocks still queued are written: a graceful stop keeps them.
		l.disk.Flush()
		_ = l.disk.Close()
	}
	if c, ok := l.vision.(interface{ Close() }); ok {
		c.Close()
	}
	l.th.Do(func() {
		if l.net != nil {
			l.net.Close()
		}
		if l.w != nil {
			l.w.Free()
		}
		l.s.Free()
	})
	l.th.Close()
	l.m.Close()
	if l.group != nil {
		l.group.Unload(l.slot)
	}
}

func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	mf := addModelFlags(fs, "comma-separated GGUF files or HF/MLX checkpoint directories, each PATH or PATH=NAME (served under NAME); loaded and self-tested at start")
	addr := fs.String("addr", "127.0.0.1:8000", "listen address")
	maxConc := fs.Int("max-concurrent", engine.DefaultMaxConcurrent,
		fmt.Sprintf("cap on running requests per model, 1 to %d (larger values are clamped); below it the KV budget decides how many run together", engine.MaxConcurrentLimit))
	var kvBytes, prefixBytes byteSize
	fs.Var(&kvBytes, "kv-bytes", "KV cache `size` shared by all loaded models (bytes, or with a unit: 2GiB, 500MB); 0 derives it from the device's memory on a GPU, physical memory on the CPU, less the weights held")
	device := fs.String("device", "auto", "auto, cpu or gpu")
	stepTokens := fs.Int("step-tokens", 0, fmt.Sprintf("tokens one engine step processes at most: one per decoding request plus prefill chunks of at most %d; 0 is %d on the CPU, where longer forwards cost more a token and the oldest prompt should finish first, and %d on a GPU", engine.DefaultPrefillChunk, cpuStepTokens, engine.DefaultTokenBudget))
	fs.Var(&prefixBytes, "prefix-cache-bytes", "RAM `size` of each model's prefix cache, carved out of its KV grant (the engine keeps at least 1 GiB); 0 is physical memory / 8")
	ctxSize := fs.Int("ctx-size", 0, "context length in `tokens` (prompt plus output) of every model; 0 is each model's own, a larger value is clamped to it")
	maxConns := fs.Int("max-connections", 1024, "open HTTP connections at most; more wait in the kernel's accept queue")
	logFormat := fs.String("log-format", "auto", "text, json, or auto: text on a terminal, JSON lines otherwise")
	modelsDir := fs.String("models-dir", "", "directory of models loaded on demand by name (GGUF files by base name, checkpoint directories by directory name)")
	maxSlots := fs.Int("max-slots", slots.DefaultMaxSlots, "models kept loaded at once; loading another unloads the least recently used idle one")
	idleUnload := fs.Duration("idle-unload", slots.DefaultIdleUnload, "unload a model no request used for this long (0: never)")
	coordinator := fs.String("coordinator", "", "ws:// or wss:// URL of a coordinator (HOST/ws/provider) to join its network")
	noAuth := fs.Bool("no-auth", false, "serve the HTTP API without a bearer token (loopback addresses only)")
	tokenFile := fs.String("token-file", "", "bearer token `file` of the HTTP API, created 0600 on first run (default provider/token in the user's configuration directory)")
	tf := addTPFlags(fs)
	addConfigFlag(fs)
	cmd := command{name: "serve", config: serveConfigKeys(),
		synopsis: "Serve models over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/models, /health, /metrics). The --model models load and pass a one-token self-test before the port opens; --models-dir models load on demand.",
		env:      map[string]string{"prefix-cache-bytes": "PROVIDER_PREFIX_CACHE=0 turns the cache off, PROVIDER_PREFIX_CACHE_SSD=0 its SSD tier", "device": "PROVIDER_CPU_THREADS, PROVIDER_CPU_INT8, PROVIDER_CPU_SPIN_US"}}
	if err := cmd.parse(fs, args, os.Stdout); err != nil {
		return err
	}
	log, err := newLogger(*logFormat, os.Stderr)
	if err != nil {
		return err
	}
	// The configuration file fills in the flags not given here.
	if err := applyConfig(fs, args, log); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := mf.check("serve"); err != nil {
		return err
	}
	if err := tf.check("serve", mf); err != nil {
		return err
	}
	if *maxSlots < 1 {
		return usageError{fmt.Sprintf("serve: --max-slots %d: must be at least 1", *maxSlots)}
	}
	if *noAuth {
		if err := server.CheckNoAuth(*addr); err != nil {
			return usageError{fmt.Sprintf("serve: --no-auth: %v", err)}
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *ctxSize < 0 {
		return usageError{fmt.Sprintf("serve: --ctx-size %d: must be at least 0", *ctxSize)}
	}
	if *stepTokens < 0 {
		return usageError{fmt.Sprintf("serve: --step-tokens %d: must be at least 0", *stepTokens)}
	}
	conc, err := concurrencyCap(*maxConc)
	if err != nil {
		return err
	}
	if conc != *maxConc {
		log.Warn("--max-concurrent above the limit, clamped", "requested", *maxConc, "max_concurrent", conc)
	}
	if *stepTokens > 0 && *stepTokens < conc {
		return usageError{fmt.Sprintf("serve: --step-tokens %d: below --max-concurrent %d, some decoding requests would get no token in a step", *stepTokens, conc)}
	}
	catalog, err := buildCatalog(mf, set["model"], *modelsDir)
	if err != nil {
		return err
	}
	mem, err := deviceMemory(*device)
	if err != nil {
		return err
	}
	if kvBytes > 0 {
		log.Info("kv budget", "source", "--kv-bytes", "kv_bytes", int64(kvBytes))
	} else {
		log.Info("kv budget", "source", mem.name, "memory_bytes", mem.bytes, "memory_cap", slots.MemoryCap(mem.bytes))
	}
	idle := *idleUnload
	if idle == 0 {
		idle = -1
	}

	// With --tp, the workers start and the group forms before any model
	// loads; every model is then split over it.
	joinThread := mlx.NewThread()
	defer joinThread.Close()
	group, err := tf.start("serve", *device, joinThread)
	if ue := (usageError{}); errors.As(err, &ue) {
		return err
	} else if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer group.Close()
	if group.Size() > 1 {
		log.Info("tensor parallelism", "ranks", group.Size(), "backend", *tf.backend)
	}
	ld := &serveLoader{mf: mf, tp: group, device: *device, log: log, conc: conc, stepTokens: *stepTokens, prefixBytes: int64(prefixBytes), ctxSize: *ctxSize, archs: family.Supported(),
		entries: map[string]catalogEntry{}, probed: map[string]slots.Info{}}
	for _, e := range catalog {
		ld.entries[e.name] = e
	}
	// A slot whose engine died and could not be rebuilt is unloaded; with
	// none left the process exits non-zero for its supervisor.
	dead := make(chan string, 1)
	mgr := slots.New(ld, slots.Options{Memory: mem.bytes, Budget: int64(kvBytes), MaxSlots: *maxSlots, IdleUnload: idle, Logger: log,
		Crashed: func(name string, left int) {
			if left == 0 {
				select {
				case dead <- name:
				default:
				}
			}
		}})
	// The request stages run on one worker per core; each request still
	// passes them in order.
	// PROVIDER_LARGE_BODY_RATE: bytes a second at which bodies of 1 MiB
	// and more are read, all together; -1 leaves them unbounded.
	var bodyRate int64
	if v := os.Getenv("PROVIDER_LARGE_BODY_RATE"); v != "" {
		if bodyRate, err = strconv.ParseInt(v, 10, 64); err != nil || bodyRate == 0 {
			return fmt.Errorf("serve: PROVIDER_LARGE_BODY_RATE=%q: want bytes a second, or -1 for no bound", v)
		}
	}
	srv := server.New(server.Options{Architectures: family.Supported(), Logger: log, Slots: serveSlots{mgr, ld},
		LargeBodyRate: bodyRate, Graph: graph.Options{Parallelism: runtime.NumCPU()}})
	ld.srv = srv
	srv.SetLoading(true)
	defer mgr.Close()

	// Preloads: the models named on the command line, self-tested, before
	// the port opens.
	for _, e := range catalog {
		if !e.preload {
			continue
		}
		release, err := mgr.Acquire(context.Background(), e.name)
		if err != nil {
			return fmt.Errorf("serve: %s: %w", e.name, err)
		}
		release()
	}
	var handler http.Handler = srv
	authNote := "none (--no-auth)"
	if *noAuth {
		log.Warn("HTTP API without authentication (--no-auth)", "addr", *addr)
	} else {
		path := *tokenFile
		if path == "" {
			if path, err = configFile("token"); err != nil {
				return err
			}
		}
		token, err := server.LoadOrCreateToken(path)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		handler = server.RequireToken(token, srv)
		authNote = "bearer token in " + path
		log.Info("HTTP API requires a bearer token", "token_file", path)
	}
	if *coordinator != "" {
		keyDir, err := configFile("keys")
		if err != nil {
			return err
		}
		if _, err := link.LoadKeys(keyDir); err != nil {
			return fmt.Errorf("serve: --coordinator: %w", err)
		}
		// Requests from the network reach the server behind the token:
		// the coordinator is authenticated by the link.
		stopLink := startLink(context.Background(), *coordinator, srv, keyDir, ld.linkModels, mgr.Snapshots, func(ctx context.Context, name string) error {
			release, err := mgr.Acquire(ctx, name)
			if err == nil {
				release()
			}
			return err
		}, log)
		defer stopLink()
		log.Info("joining the coordinator's network", "coordinator", *coordinator, "keys", keyDir)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	ln = limitListener(ln, *maxConns)
	httpSrv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,  // slow headers
		ReadTimeout:       60 * time.Second,  // a body trickled in
		IdleTimeout:       120 * time.Second, // keep-alive connections doing nothing
		MaxHeaderBytes:    64 << 10,
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String())
	srv.SetLoading(false)
	banner(os.Stderr, bannerInfo{addr: ln.Addr().String(), device: *device, mem: mem, budget: int64(kvBytes), auth: authNote, mgr: mgr, ld: ld, coordinator: *coordinator})
	stopStats := logCacheStats(log, srv, cacheStatsEvery)
	defer stopStats()
	stopTicks := tickSlots(mgr, slotTickEvery)
	defer stopTicks()

	// Loading initialized the backend's libraries; some replace the Go
	// runtime's handlers for termination signals.
	mlx.RestoreSignals()
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	var failed error
	select {
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	case name := <-dead:
		failed = fmt.Errorf("serve: engine_init_failed: the engine of %s died and could not be rebuilt; no model left serving", name)
		log.Error("no healthy model left; exiting", "model", name)
	case <-group.LostC():
		// Every model runs over the group: none can serve. Running
		// streams have ended with an error frame; /health said 503
		// rank_lost until now.
		failed = fmt.Errorf("serve: %w: %w", slots.ErrRankLost, group.Lost())
		log.Error("a tensor-parallel rank was lost; exiting", "err", group.Lost(), "after", rankLostGrace.String())
		// For a while the server stays up to say so: /health answers 503
		// rank_lost and requests 503 rank_lost, then it exits non-zero
		// for its supervisor to restart the group.
		select {
		case <-time.After(rankLostGrace):
		case <-sig:
		}
		// A step caught in a collective when the rank died may never
		// return, so the engines cannot drain (the deferred unloads
		// would wait on it): the streams have ended (see
		// slotGen.watchRanks); stop the other ranks and exit.
		group.Close()
		log.Error("stopped after losing a tensor-parallel rank")
		fmt.Fprintln(os.Stderr, "provider:", failed)
		os.Exit(1)
	case <-sig:
		log.Info("shutting down; a second signal exits at once", "drain", drainTimeout.String())
		go func() {
			<-sig
			log.Warn("second signal: exiting without draining")
			os.Exit(130)
		}()
	}
	// Drain: new requests get 503 while the port stays open, running
	// streams finish until the deadline and are then cut with a proper
	// final frame; then the listener closes.
	srv.SetDraining(true)
	deadline := time.Now().Add(drainTimeout)
	drainDeadline.Store(&deadline)
	stopTicks()
	mgr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = httpSrv.Shutdown(ctx)
	srv.Close()
	log.Info("stopped")
	return failed
}

// rankLostGrace is how long serve keeps answering 503 rank_lost after a
// tensor-parallel rank is lost, before it exits.
const rankLostGrace = 5 * time.Second

// serveSlots is the server's view of the slot manager.
type serveSlots struct {
	mgr *slots.Manager
	ld  *serveLoader
}

func (s serveSlots) Acquire(ctx context.Context, name string) (func(), error) {
	return s.mgr.Acquire(ctx, name)
}

// Available lists the catalog's models that probe as loadable: a file of
// an architecture without an adapter, or one that does not open, is not
// advertised.
func (s serveSlots) Available() []string {
	var out []string
	for _, n := range s.ld.names() {
		if _, err := s.ld.Probe(n); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func (s serveSlots) Snapshots() []slots.Snapshot { return s.mgr.Snapshots() }

// configFile is a path under the provider's directory in the user's
// configuration directory ($XDG_CONFIG_HOME or ~/.config).
func configFile(name string) (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("serve: %w", err)
	}
	return filepath.Join(dir, "provider", name), nil
}

// slotTickEvery is how often the slot manager runs its idle unloads and
// wedge checks.
const slotTickEvery = 5 * time.Second

// tickSlots runs mgr.Tick every period; the returned function stops it.
func tickSlots(mgr *slots.Manager, period time.Duration) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				mgr.Tick()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// deviceMemory is the memory the models share: the GPU's as MLX reports it
// on a GPU, physical memory on the CPU.
func deviceMemory(device string) (memorySource, error) {
	th := mlx.NewThread()
	defer th.Close()
	var dev mlx.DeviceMemory
	var err error
	th.Do(func() {
		var s mlx.Stream
		if s, err = stream(device); err != nil {
			return
		}
		defer s.Free()
		dev, err = s.DeviceMemory()
	})
	if err != nil {
		return memorySource{}, fmt.Errorf("serve: %w", err)
	}
	return memoryOf(dev, physicalMemory())
}

// loadModel opens a model, uploads its weights and binds its family's
// forward pass on a new MLX thread.
func loadModel(open func() (*model.Model, string, weightSource, error), device string, group *tp.Group) (*loadedModel, error) {
	m, name, src, err := open()
	if err != nil {
		return nil, err
	}
	l := &loadedModel{m: m, name: name, th: mlx.NewThread()}
	l.th.Do(func() {
		if l.s, err = stream(device); err != nil {
			return
		}
		if _, err = model.ServeNumerics(&m.Config, l.s); err != nil {
			return
		}
		if group.Size() > 1 {
			l.net, l.w, l.slot, err = loadShard(group, src, device, m, l.s)
			l.group = group
			return
		}
		if l.w, err = src.upload(l.s); err != nil {
			return
		}
		l.net, err = family.Build(m.Config, l.w)
	})
	if err == nil {
		l.vision, err = family.Vision(m, l.th, l.s)
	}
	if err != nil {
		l.close()
		return nil, fmt.Errorf("serve: %s: %w", name, err)
	}
	return l, nil
}

// prefixBudget is a model's prefix cache budget: requested bytes (0:
// physical/8), at most what leaves the engine minKVGrant of its grant, and
// 0 (off) when that is less than one block.
func prefixBudget(requested, physical, grant, block int64) int64 {
	b := requested
	if b <= 0 {
		b = physical / 8
	}
	b = min(b, grant-minKVGrant)
	if b < block {
		return 0
	}
	return b
}

// prefixNamespace keys a model's cached blocks to its weights and to the
// layout of what a block stores (activation dtype, layer geometry).
func prefixNamespace(extra string, paths []string, cfg model.Config) (cache.Namespace, error) {
	fp, err := cache.Fingerprint(extra, paths...)
	if err != nil {
		return cache.Namespace{}, err
	}
	h := sha256.New()
	h.Write(fp[:])
	fmt.Fprintf(h, "|%v|%+v", cfg.ActDType, cfg.Kinds)
	var ns cache.Namespace
	h.Sum(ns.WeightHash[:0])
	ns.LayoutEpoch = prefixLayoutEpoch
	return ns, nil
}

// diskQueueBytes bounds the blocks an SSD tier's write-behind queue holds.
const diskQueueBytes = 256 << 20

// prefixDir is a model's SSD tier directory: under the user's cache
// directory ($XDG_CACHE_HOME or ~/.cache), named by the first 12 hex of
// SHA-256 of the model's name (no model name on disk).
func prefixDir(name string) string {
	root, err := os.UserCacheDir()
	if err != nil {
		root = os.TempDir()
	}
	sum := sha256.Sum256([]byte(name))
	return filepath.Join(root, "provider", "prefix", hex.EncodeToString(sum[:])[:12])
}

// prefixLayoutEpoch changes whenever what a cached block holds changes
// meaning.
const prefixLayoutEpoch = 1

// cacheStatsEvery is how often serve logs each prefix cache's counters.
const cacheStatsEvery = time.Minute

// logCacheStats logs, every period while they change, each served model's
// prefix cache counters; the returned function stops it.
func logCacheStats(log *slog.Logger, srv *server.Server, period time.Duration) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		last := map[string]cache.Stats{}
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			for name, st := range srv.CacheStats() {
				if st == last[name] {
					continue
				}
				last[name] = st
				log.Info("prefix cache stats", "model", name, "hits", st.Hits, "misses", st.Misses, "tokens_saved", st.TokensSaved,
					"entries", st.Entries, "bytes", st.Bytes, "shared_bytes", st.SharedBytes, "budget", st.Budget, "evicted", st.Evicted)
			}
		}
	}()
	return func() { close(done) }
}

// concurrencyCap checks --max-concurrent: below 1 is a usage error, above
// engine.MaxConcurrentLimit is clamped to it (the caller warns).
func concurrencyCap(n int) (int, error) {
	if n < 1 {
		return 0, usageError{fmt.Sprintf("serve: --max-concurrent %d: must be at least 1", n)}
	}
	return min(n, engine.MaxConcurrentLimit), nil
}

// memorySource is the memory a KV budget is carved from.
type memorySource struct {
	name  string // for the log
	bytes int64
}

// deriveKVBudget is the KV budget for all models when --kv-bytes is not
// given: on a GPU, from the memory MLX reports for the device (CUDA's total
// device memory, Metal's recommended working set); on the CPU, from physical
// memory. A GPU whose memory MLX does not report is an error, since host
// memory says nothing about it.
func deriveKVBudget(dev mlx.DeviceMemory, physical, weights int64) (int64, memorySource, error) {
	src, err := memoryOf(dev, physical)
	if err != nil {
		return 0, src, err
	}
	return kvBudget(src.bytes, weights), src, nil
}

// memoryOf is the memory the models share: the GPU's on a GPU (CUDA's
// total device memory, Metal's recommended working set), physical memory
// on the CPU. A GPU whose memory MLX does not report is an error, since
// host memory says nothing about it.
func memoryOf(dev mlx.DeviceMemory, physical int64) (memorySource, error) {
	src := memorySource{name: "physical memory", bytes: physical}
	if dev.GPU {
		src = memorySource{name: "gpu memory", bytes: dev.Total}
		if dev.TotalKey != "" {
			src.name = "gpu " + dev.TotalKey
		}
	}
	if src.bytes <= 0 {
		return src, fmt.Errorf("serve: %s unknown; set --kv-bytes", src.name)
	}
	return src, nil
}

// kvBudget is the KV memory left for all models out of memory bytes: the
// hard cap min(0.9 x memory, memory - 2 GiB) less weights and the
// activation reserve.
func kvBudget(memory, weights int64) int64 {
	return slots.Budget(slots.MemoryCap(memory), weights)
}

func physicalMemory() int64 {
	var info syscall.Sysinfo_t
	if err := syscall.Sysinfo(&info); err != nil {
		return 0
	}
	return int64(info.Totalram) * int64(info.Unit)
}

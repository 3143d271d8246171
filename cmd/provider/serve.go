package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"github.com/goprovider/provider/cache"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/server"
	"github.com/goprovider/provider/stages"
)

// Memory policy of the reference system.
const (
	activationReserve = 3 << 30
	minKVGrant        = 1 << 30
	drainTimeout      = 10 * time.Second
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
}

func (l *loadedModel) close() {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
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
}

func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	mf := addModelFlags(fs, "comma-separated GGUF files or HF/MLX checkpoint directories")
	addr := fs.String("addr", "127.0.0.1:8000", "listen address")
	maxConc := fs.Int("max-concurrent", engine.DefaultMaxConcurrent,
		fmt.Sprintf("cap on running requests per model, 1 to %d (larger values are clamped); below it the KV budget decides how many run together", engine.MaxConcurrentLimit))
	kvBytes := fs.Int64("kv-bytes", 0, "KV cache budget in bytes for all models; 0 derives it from the device's memory on a GPU, physical memory on the CPU")
	device := fs.String("device", "auto", "auto, cpu or gpu")
	prefixBytes := fs.Int64("prefix-cache-bytes", 0, "RAM budget of each model's prefix cache, carved out of its KV grant (the engine keeps at least 1 GiB); 0 is physical memory / 8; PROVIDER_PREFIX_CACHE=0 turns the cache off")
	if err := fs.Parse(args); err != nil {
		return usageError{fmt.Sprintf("serve: %v", err)}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("serve: unexpected argument %q", fs.Arg(0))}
	}
	if err := mf.check("serve"); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	conc, err := concurrencyCap(*maxConc)
	if err != nil {
		return err
	}
	if conc != *maxConc {
		log.Warn("--max-concurrent above the limit, clamped", "requested", *maxConc, "max_concurrent", conc)
	}
	srv := server.New(server.Options{Architectures: family.Supported(), Logger: log})
	srv.SetLoading(true)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	httpSrv := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String())

	var loaded []*loadedModel
	defer func() {
		for _, l := range loaded {
			l.close()
		}
	}()
	var opens []func() (*model.Model, string, uploader, error)
	// weights names what decides each model's weights, for its prefix
	// cache namespace: files, and a seed for dummy weights.
	type weightSource struct {
		extra string
		paths []string
	}
	var sources []weightSource
	if mf.isDummy() {
		opens = append(opens, func() (*model.Model, string, uploader, error) {
			return mf.openDummy("serve", func(msg string) { log.Info(msg) })
		})
		sources = append(sources, weightSource{fmt.Sprint("dummy seed ", *mf.seed), []string{*mf.dummy}})
	} else {
		for _, p := range strings.Split(*mf.model, ",") {
			opens = append(opens, func() (*model.Model, string, uploader, error) {
				m, err := model.Open(p)
				if err != nil {
					return nil, "", nil, err
				}
				return m, m.Name(), m.Upload, nil
			})
			sources = append(sources, weightSource{"", []string{p}})
		}
	}
	budget := *kvBytes
	for _, open := range opens {
		l, err := loadModel(open, *device)
		if err != nil {
			httpSrv.Close()
			return err
		}
		loaded = append(loaded, l)
	}
	if budget == 0 {
		var weights int64
		for _, l := range loaded {
			weights += l.w.Bytes()
		}
		// All models run on the same device; ask MLX about the first's.
		var dev mlx.DeviceMemory
		first := loaded[0]
		first.th.Do(func() { dev, err = first.s.DeviceMemory() })
		if err != nil {
			httpSrv.Close()
			return fmt.Errorf("serve: %w", err)
		}
		var src memorySource
		if budget, src, err = deriveKVBudget(dev, physicalMemory(), weights); err != nil {
			httpSrv.Close()
			return err
		}
		log.Info("kv budget", "source", src.name, "memory_bytes", src.bytes, "weight_bytes", weights, "kv_bytes", budget)
		if dev.GPU && dev.Free >= 0 && budget > dev.Free {
			log.Warn("kv budget above the device's free memory; other processes may hold it", "kv_bytes", budget, "free_bytes", dev.Free)
		}
	} else {
		log.Info("kv budget", "source", "--kv-bytes", "kv_bytes", budget)
	}
	grant := budget / int64(len(loaded))
	if grant < minKVGrant {
		httpSrv.Close()
		return fmt.Errorf("serve: no_kv_headroom: %d bytes of KV per model, need at least %d", grant, int64(minKVGrant))
	}
	prefixOn := os.Getenv("PROVIDER_PREFIX_CACHE") != "0"
	ssdOn := os.Getenv("PROVIDER_PREFIX_CACHE_SSD") != "0"
	for i, l := range loaded {
		var err error
		var prefix engine.PrefixOptions
		if prefixOn {
			layout := engine.LayoutOf(l.net.Config())
			prefix.Budget = prefixBudget(*prefixBytes, physicalMemory(), grant, layout.SequenceBytes(cache.BlockTokens))
			if prefix.Budget > 0 {
				if prefix.Namespace, err = prefixNamespace(sources[i].extra, sources[i].paths, l.net.Config()); err != nil {
					httpSrv.Close()
					return fmt.Errorf("serve: %s: %w", l.name, err)
				}
			}
			if prefix.Budget > 0 && ssdOn {
				block := layout.SequenceBytes(cache.BlockTokens)
				dir := prefixDir(l.name)
				l.disk, err = cache.OpenDisk(cache.DiskOptions{Dir: dir, Queue: int(max(4, min(64, diskQueueBytes/max(block, 1))))})
				if err != nil {
					log.Warn("prefix cache SSD tier off: cannot open it", "model", l.name, "dir", dir, "err", err)
					l.disk = nil
				} else {
					prefix.Disk = l.disk
					st := l.disk.Stats()
					log.Info("prefix cache SSD tier", "model", l.name, "dir", dir, "files", st.Files, "bytes", st.Bytes, "budget", st.Budget)
				}
			}
			log.Info("prefix cache", "model", l.name, "ram_bytes", prefix.Budget, "on", prefix.Budget > 0, "ssd", prefix.Disk != nil)
		} else {
			log.Info("prefix cache off (PROVIDER_PREFIX_CACHE=0)", "model", l.name)
		}
		l.eng, err = engine.New(l.net, l.th, l.s, engine.Options{
			Sched:      engine.Config{MaxConcurrent: conc},
			KVCapacity: grant,
			Prefix:     prefix,
		})
		if err != nil {
			httpSrv.Close()
			return fmt.Errorf("serve: engine_init_failed: %w", err)
		}
		err = srv.Register(server.Model{
			Name:          l.name,
			Architecture:  l.m.Config.Arch,
			Tokenizer:     l.m.Tokenizer,
			ChatTemplate:  l.m.ChatTemplate,
			EOS:           l.m.Config.EOS,
			ContextLength: l.m.Config.ContextLength,
			Generator:     l.eng,
			Vision:        l.vision,
		})
		if err != nil {
			httpSrv.Close()
			return err
		}
		log.Info("model ready", "model", l.name, "kv_bytes", grant, "weight_bytes", l.w.Bytes(), "max_concurrent", conc)
	}
	srv.SetLoading(false)
	stopStats := logCacheStats(log, loaded, cacheStatsEvery)
	defer stopStats()

	// Loading initialized the backend's libraries; some replace the Go
	// runtime's handlers for termination signals.
	mlx.RestoreSignals()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	case <-sig:
		log.Info("shutting down", "drain", drainTimeout.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	srv.SetLoading(true)
	_ = httpSrv.Shutdown(ctx)
	srv.Close()
	return nil
}

// loadModel opens a model, uploads its weights and binds its family's
// forward pass on a new MLX thread.
func loadModel(open func() (*model.Model, string, uploader, error), device string) (*loadedModel, error) {
	m, name, upload, err := open()
	if err != nil {
		return nil, err
	}
	l := &loadedModel{m: m, name: name, th: mlx.NewThread()}
	l.th.Do(func() {
		if l.s, err = stream(device); err != nil {
			return
		}
		cpuNumerics(&m.Config, l.s)
		if l.w, err = upload(l.s); err != nil {
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

// cpuNumerics sets a model's numerics for a CPU stream: float32
// activations (MLX's CPU kernels, the experts' gathered matmuls among them,
// run in float32; a half-precision checkpoint is widened), and, with
// PROVIDER_CPU_INT8=1, 8-bit activations into the integer matmul kernel
// (model.Config.Int8Activations; off by default: its matmuls are faster
// but whole decode steps have not yet measured clearly faster, and it
// changes the outputs). Other streams are left as they are.
func cpuNumerics(c *model.Config, s mlx.Stream) {
	if !s.IsCPU() {
		return
	}
	c.ActDType = mlx.Float32
	c.Int8Activations = os.Getenv("PROVIDER_CPU_INT8") == "1"
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

// logCacheStats logs, every period while they change, each model's prefix
// cache counters; the returned function stops it.
func logCacheStats(log *slog.Logger, models []*loadedModel, period time.Duration) func() {
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
			for _, l := range models {
				st, on := l.eng.CacheStats()
				if !on || st == last[l.name] {
					continue
				}
				last[l.name] = st
				log.Info("prefix cache stats", "model", l.name, "hits", st.Hits, "misses", st.Misses, "tokens_saved", st.TokensSaved,
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
	src := memorySource{name: "physical memory", bytes: physical}
	if dev.GPU {
		src = memorySource{name: "gpu memory", bytes: dev.Total}
		if dev.TotalKey != "" {
			src.name = "gpu " + dev.TotalKey
		}
	}
	if src.bytes <= 0 {
		return 0, src, fmt.Errorf("serve: %s unknown; set --kv-bytes", src.name)
	}
	return kvBudget(src.bytes, weights), src, nil
}

// kvBudget is the KV memory left for all models out of memory bytes: the
// hard cap min(0.9 x memory, memory - 2 GiB) less weights and the
// activation reserve.
func kvBudget(memory, weights int64) int64 {
	hardCap := min(memory*9/10, memory-2<<30)
	return max(hardCap-weights-activationReserve, 0)
}

func physicalMemory() int64 {
	var info syscall.Sysinfo_t
	if err := syscall.Sysinfo(&info); err != nil {
		return 0
	}
	return int64(info.Totalram) * int64(info.Unit)
}

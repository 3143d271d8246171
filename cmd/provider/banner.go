package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/slots"
)

// newLogger is serve's logger: text for people on a terminal, JSON lines
// for a service manager or a log shipper.
func newLogger(format string, w *os.File) (*slog.Logger, error) {
	switch format {
	case "text":
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	case "auto":
		if !isTerminal(w) {
			return slog.New(slog.NewJSONHandler(w, nil)), nil
		}
	default:
		return nil, usageError{fmt.Sprintf("serve: --log-format %q: want text, json or auto", format)}
	}
	return slog.New(slog.NewTextHandler(w, nil)), nil
}

// bannerInfo is what serve's start banner shows.
type bannerInfo struct {
	addr, device string
	mem          memorySource
	budget       int64 // --kv-bytes; 0: derived
	auth         string
	coordinator  string
	mgr          *slots.Manager
	ld           *serveLoader
}

// banner prints, once the port is open, where and what the server serves:
// its URL, device and threads, each loaded model with its context,
// concurrency and KV grant, the models it loads on demand, and the KV
// budget.
func banner(w io.Writer, b bannerInfo) {
	fmt.Fprintf(w, "provider %s serving on http://%s\n", buildVersion(), b.addr)
	dev := b.device
	if dev == "auto" {
		dev = "auto (" + b.mem.name + ")"
	}
	fmt.Fprintf(w, "  device:   %s, %d CPU threads\n", dev, mlx.CPUThreads())
	if b.budget > 0 {
		fmt.Fprintf(w, "  KV:       %s budget (--kv-bytes), shared by the loaded models\n", humanGiB(b.budget))
	} else {
		fmt.Fprintf(w, "  KV:       derived from %s (%s; cap %s), less the weights held, shared by the loaded models\n",
			b.mem.name, humanGiB(b.mem.bytes), humanGiB(slots.MemoryCap(b.mem.bytes)))
	}
	grants := b.mgr.Grants()
	loaded := make([]string, 0, len(grants))
	for n := range grants {
		loaded = append(loaded, n)
	}
	sort.Strings(loaded)
	for _, n := range loaded {
		ctx := "unknown"
		if c := b.ld.context(n); c > 0 {
			ctx = fmt.Sprint(c)
		}
		fmt.Fprintf(w, "  model:    %s (context %s tokens, up to %d requests at once, KV grant %s)\n", n, ctx, b.ld.conc, humanGiB(grants[n]))
	}
	for _, n := range b.ld.names() {
		if _, ok := grants[n]; !ok {
			fmt.Fprintf(w, "  on demand: %s\n", n)
		}
	}
	fmt.Fprintf(w, "  dashboard: http://%s/\n", b.addr)
	fmt.Fprintf(w, "  auth:     %s\n", b.auth)
	if b.coordinator != "" {
		fmt.Fprintf(w, "  network:  %s\n", b.coordinator)
	}
}

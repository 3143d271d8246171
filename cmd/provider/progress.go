package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// progress shows a long load: a bar redrawn in place on a terminal, a log
// line every quarter otherwise.
type progress struct {
	w     *os.File
	label string
	log   *slog.Logger
	tty   bool
	shown int // last percentage drawn or logged
	drawn bool
}

func newProgress(w *os.File, label string, log *slog.Logger) *progress {
	return &progress{w: w, label: label, log: log, tty: isTerminal(w), shown: -1}
}

// report takes done of total bytes.
func (p *progress) report(done, total int64) {
	pct := int(done * 100 / max(total, 1))
	switch {
	case p.tty && pct != p.shown:
		const width = 30
		fill := pct * width / 100
		fmt.Fprintf(p.w, "\r%s [%s%s] %3d%% %s of %s", p.label, strings.Repeat("#", fill), strings.Repeat(" ", width-fill), pct,
			humanGiB(done), humanGiB(total))
		p.drawn = true
	case !p.tty && pct/25 > p.shown/25 && total >= 256<<20:
		p.log.Info(p.label, "percent", pct, "bytes", done, "total_bytes", total)
	default:
		return
	}
	p.shown = pct
}

// done ends the bar's line.
func (p *progress) done() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

package engine

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// TestSchedGolden runs every testdata/sched/*.script and compares its
// transcript with the .golden file beside it. Regenerate with
//
//	go test ./engine -run TestSchedGolden -update
//
// and review the diff by hand against the policy before accepting it.
func TestSchedGolden(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join("testdata", "sched", "*.script"))
	if err != nil {
		t.Fatal(err)
	}
	if len(scripts) == 0 {
		t.Fatal("no scripts")
	}
	for _, path := range scripts {
		name := strings.TrimSuffix(filepath.Base(path), ".script")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := runScript(string(src))
			if err != nil {
				t.Fatal(err)
			}
			again, err := runScript(string(src))
			if err != nil || again != got {
				t.Fatal("the same script produced a different transcript")
			}
			golden := strings.TrimSuffix(path, ".script") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("transcript differs from %s:\n%s", golden, diffLines(string(want), got))
			}
		})
	}
}

// A script is a list of commands, one a line; blank lines and lines starting
// with # are copied to the transcript as they are.
//
//	new [budget=N] [chunk=N] [cap=N] [waiting=N] [full=N] [sliding=N] [window=N] [capacity=BYTES]
//	    a fresh scheduler; the layout has `full` full-attention and `sliding`
//	    sliding layers of 1 KV head of 1 element of 1 byte, so a token costs
//	    2 bytes per layer (default full=1 sliding=0)
//	submit ID prompt=N max=N [prio=N] [arrival=N] [spans=A-B,C-D]
//	    arrival defaults to a counter bumped by every submit
//	plan                      print the plan and the state after it
//	complete [stop=ID,..] [fail=ID,..]
//	step [N]                  N times plan + complete, one plan line each
//	drain                     step until a plan is idle and nothing is live
//	cancel ID
//	resize BYTES              BYTES may end in KiB or MiB
//	cap N                     SetMaxConcurrent
//	stats                     print Snapshot
type script struct {
	s       *Scheduler
	arrival uint64
	out     strings.Builder
}

func runScript(src string) (string, error) {
	sc := &script{}
	for i, line := range strings.Split(strings.TrimRight(src, "\n"), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			sc.out.WriteString(line + "\n")
			continue
		}
		sc.out.WriteString("> " + trimmed + "\n")
		if err := sc.exec(strings.Fields(trimmed)); err != nil {
			return "", fmt.Errorf("line %d: %q: %w", i+1, trimmed, err)
		}
	}
	return sc.out.String(), nil
}

func (sc *script) printf(format string, args ...any) {
	fmt.Fprintf(&sc.out, "  "+format+"\n", args...)
}

func (sc *script) exec(f []string) error {
	if f[0] != "new" && sc.s == nil {
		return fmt.Errorf("no scheduler: start with new")
	}
	switch f[0] {
	case "new":
		args, err := parseArgs(f[1:], "budget", "chunk", "cap", "waiting", "full", "sliding", "window", "capacity")
		if err != nil {
			return err
		}
		cfg := Config{
			TokenBudget:   int(args.get("budget", 0)),
			PrefillChunk:  int(args.get("chunk", 0)),
			MaxConcurrent: int(args.get("cap", 0)),
			MaxWaiting:    int(args.get("waiting", 0)),
		}
		layout := unitLayout(int(args.get("full", 1)), int(args.get("sliding", 0)), int(args.get("window", 0)))
		if err := layout.Validate(); err != nil {
			return err
		}
		sc.s = NewScheduler(cfg, layout, args.get("capacity", 1<<20))
		sc.arrival = 0
		c := sc.s.cfg
		sc.printf("budget=%d chunk=%d cap=%d waiting=%d; %s", c.TokenBudget, c.PrefillChunk, c.MaxConcurrent, c.MaxWaiting, sc.kvLine())
	case "submit":
		if len(f) < 2 {
			return fmt.Errorf("submit needs an id")
		}
		args, err := parseArgs(f[2:], "prompt", "max", "prio", "arrival", "spans")
		if err != nil {
			return err
		}
		sc.arrival++
		req := Request{
			ID:           RequestID(f[1]),
			PromptTokens: int(args.get("prompt", 0)),
			MaxTokens:    int(args.get("max", 0)),
			Priority:     int(args.get("prio", 0)),
			Arrival:      uint64(args.get("arrival", int64(sc.arrival))),
			Spans:        args.spans,
		}
		if err := sc.s.Submit(req); err != nil {
			sc.printf("error: %v", err)
		} else {
			sc.printf("ok")
		}
	case "plan":
		sc.printf("%s", planLine(sc.s.Plan()))
		sc.printf("%s", sc.stateLine())
	case "complete":
		res, err := parseResult(f[1:])
		if err != nil {
			return err
		}
		sc.s.Complete(res)
	case "step":
		n := 1
		if len(f) > 1 {
			v, err := strconv.Atoi(f[1])
			if err != nil {
				return err
			}
			n = v
		}
		for range n {
			sc.printf("%s", planLine(sc.s.Plan()))
			sc.s.Complete(StepResult{})
		}
		sc.printf("%s", sc.stateLine())
	case "drain":
		for i := 0; ; i++ {
			if i == 10_000 {
				return fmt.Errorf("drain did not finish")
			}
			plan := sc.s.Plan()
			sc.printf("%s", planLine(plan))
			sc.s.Complete(StepResult{})
			if plan.Empty() && len(sc.s.rows) == 0 {
				break
			}
		}
		sc.printf("%s", sc.stateLine())
	case "cancel":
		if len(f) != 2 {
			return fmt.Errorf("cancel needs an id")
		}
		if sc.s.Cancel(RequestID(f[1])) {
			sc.printf("cancelled")
		} else {
			sc.printf("not live")
		}
	case "resize":
		if len(f) != 2 {
			return fmt.Errorf("resize needs a size")
		}
		n, err := parseBytes(f[1])
		if err != nil {
			return err
		}
		sc.s.Resize(n)
		sc.printf("%s", sc.kvLine())
	case "cap":
		if len(f) != 2 {
			return fmt.Errorf("cap needs a number")
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			return err
		}
		sc.s.SetMaxConcurrent(n)
		sc.printf("cap=%d", sc.s.cfg.MaxConcurrent)
	case "stats":
		st := sc.s.Snapshot()
		sc.printf("running=%d waiting=%d max_concurrent=%d kv=%d/%d bytes_per_token=%d preemptions=%d steps=%d",
			st.Running, st.Waiting, st.MaxConcurrent, st.KVUsed, st.KVCapacity, st.KVBytesPerToken, st.Preemptions, st.Steps)
	default:
		return fmt.Errorf("unknown command %q", f[0])
	}
	return nil
}

// unitLayout has full full-attention and sliding windowed layers costing 2
// bytes per retained token each.
func unitLayout(full, sliding, window int) KVLayout {
	var l KVLayout
	for range full {
		l.Layers = append(l.Layers, LayerKV{KVHeads: 1, HeadDim: 1, ElemBytes: 1, SharedFrom: -1})
	}
	for range sliding {
		l.Layers = append(l.Layers, LayerKV{KVHeads: 1, HeadDim: 1, ElemBytes: 1, Window: window, SharedFrom: -1})
	}
	return l
}

// planLine renders a plan on one line: a final chunk carries a *.
func planLine(p StepPlan) string {
	var parts []string
	if len(p.Prefill) > 0 {
		var b strings.Builder
		b.WriteString("prefill")
		for _, c := range p.Prefill {
			fmt.Fprintf(&b, " %s[%d,%d)", c.ID, c.Start, c.Start+c.Len)
			if c.Final {
				b.WriteString("*")
			}
		}
		parts = append(parts, b.String())
	}
	if len(p.Decode) > 0 {
		parts = append(parts, "decode "+joinIDs(p.Decode))
	}
	if len(p.Preempted) > 0 {
		parts = append(parts, "preempted "+joinIDs(p.Preempted))
	}
	if len(p.Finished) > 0 {
		var fs []string
		for _, f := range p.Finished {
			fs = append(fs, fmt.Sprintf("%s:%s", f.ID, f.Reason))
		}
		parts = append(parts, "finished "+strings.Join(fs, " "))
	}
	if len(parts) == 0 {
		return "idle"
	}
	return strings.Join(parts, "; ")
}

// stateLine renders the rows and the ledger after a plan: kv and gen are the
// progress before the planned step, bytes the charge for after it.
func (sc *script) stateLine() string {
	run := "-"
	if len(sc.s.running) > 0 {
		var rs []string
		for _, r := range sc.s.running {
			rs = append(rs, fmt.Sprintf("%s{kv=%d gen=%d bytes=%d}", r.req.ID, r.kv, r.gen, sc.s.ledger.Charge(r.req.ID)))
		}
		run = strings.Join(rs, " ")
	}
	wait := "-"
	if len(sc.s.waiting) > 0 {
		var ws []string
		for _, r := range sc.s.waiting {
			ws = append(ws, string(r.req.ID))
		}
		wait = strings.Join(ws, " ")
	}
	return fmt.Sprintf("running %s; waiting %s; %s", run, wait, sc.kvLine())
}

func (sc *script) kvLine() string {
	l := sc.s.ledger
	line := fmt.Sprintf("kv %d/%d limit %d", l.Used(), l.Capacity(), l.Limit())
	if l.Ceiling() != l.Capacity() {
		line += fmt.Sprintf(" ceiling %d", l.Ceiling())
	}
	return line
}

func joinIDs(ids []RequestID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	return strings.Join(s, " ")
}

type scriptArgs struct {
	vals  map[string]int64
	spans []Span
}

func (a scriptArgs) get(key string, def int64) int64 {
	if v, ok := a.vals[key]; ok {
		return v
	}
	return def
}

func parseArgs(fields []string, allowed ...string) (scriptArgs, error) {
	a := scriptArgs{vals: map[string]int64{}}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok || !slices.Contains(allowed, k) {
			return a, fmt.Errorf("bad argument %q", f)
		}
		if k == "spans" {
			for _, sp := range strings.Split(v, ",") {
				lo, hi, ok := strings.Cut(sp, "-")
				start, err1 := strconv.Atoi(lo)
				end, err2 := strconv.Atoi(hi)
				if !ok || err1 != nil || err2 != nil {
					return a, fmt.Errorf("bad span %q", sp)
				}
				a.spans = append(a.spans, Span{Start: start, End: end})
			}
			continue
		}
		n, err := parseBytes(v)
		if err != nil {
			return a, err
		}
		a.vals[k] = n
	}
	return a, nil
}

func parseResult(fields []string) (StepResult, error) {
	var res StepResult
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return res, fmt.Errorf("bad argument %q", f)
		}
		var ids []RequestID
		for _, id := range strings.Split(v, ",") {
			ids = append(ids, RequestID(id))
		}
		switch k {
		case "stop":
			res.Stopped = ids
		case "fail":
			res.Failed = ids
		default:
			return res, fmt.Errorf("bad argument %q", f)
		}
	}
	return res, nil
}

func parseBytes(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "KiB"):
		s, mult = strings.TrimSuffix(s, "KiB"), 1<<10
	case strings.HasSuffix(s, "MiB"):
		s, mult = strings.TrimSuffix(s, "MiB"), 1<<20
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}

// diffLines shows the first differing line of two transcripts.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d\n want: %s\n  got: %s", i+1, wl, gl)
		}
	}
	return "(equal)"
}

package main

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/media"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/safetensors"
)

// The benchmark's Gemma 4 VLM: seeded random weights (no trained VLM is
// here) in the shapes of a real one, sized for this CPU. The text model
// has SmolLM2-135M's body (hidden 576, 30 layers, MLP 1536, 9 query heads
// of 64 over 3 KV heads) in Gemma 4's structure (5 sliding layers of
// window 512 to one global, per-layer inputs of 64), its layer matrices
// 4-bit affine in groups of 64 as an MLX checkpoint stores them, so that
// a decode step is one of SmolLM2-135M's; the vocabulary is the tiny
// fixture's 287 tokens (its tokenizer and chat template). The tower is
// Gemma 4's with the published patch size (16) and video budget (70 soft
// tokens a frame: 630 patches), narrower and shallower than the published
// one (hidden 128, 2 layers of 2 heads of 64, MLP 512, about 0.5M
// parameters against some 150M), so that 32 frames take seconds on two
// cores rather than minutes: about 1 GFLOP a frame, most of it in the
// patches' matmuls and 630x630 attention, the shape of the real work.
const (
	benchTextLayers = 30
	benchVision     = `{"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
		"num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 64, "patch_size": 16}`
	benchText = `{"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
		"num_key_value_heads": 3, "head_dim": 64, "global_head_dim": 64, "sliding_window": 512,
		"hidden_size_per_layer_input": 64, "num_kv_shared_layers": 0, "max_position_embeddings": 8192}`
)

// writeBenchVLM writes the benchmark's checkpoint into dir from the tiny
// Gemma 4 VLM's configuration and tokenizer.
func writeBenchVLM(dir string) error {
	read := func(name string) (map[string]any, error) {
		raw, err := os.ReadFile(filepath.Join(vlmTiny, name))
		if err != nil {
			return nil, err
		}
		var m map[string]any
		return m, json.Unmarshal(raw, &m)
	}
	merge := func(dst map[string]any, src string) error {
		var m map[string]any
		if err := json.Unmarshal([]byte(src), &m); err != nil {
			return err
		}
		for k, v := range m {
			dst[k] = v
		}
		return nil
	}
	cfg, err := read("config.json")
	if err != nil {
		return err
	}
	text, vision := cfg["text_config"].(map[string]any), cfg["vision_config"].(map[string]any)
	if err := merge(text, benchText); err != nil {
		return err
	}
	if err := merge(vision, benchVision); err != nil {
		return err
	}
	kinds := make([]string, benchTextLayers)
	for i := range kinds {
		kinds[i] = "sliding_attention"
		if i%6 == 5 {
			kinds[i] = "full_attention"
		}
	}
	text["num_hidden_layers"], text["layer_types"] = benchTextLayers, kinds
	cfg["quantization"] = map[string]any{"group_size": 64, "bits": 4}
	proc, err := read("processor_config.json")
	if err != nil {
		return err
	}
	for _, k := range []string{"image_processor", "video_processor"} {
		proc[k].(map[string]any)["patch_size"] = vision["patch_size"]
	}
	for name, v := range map[string]any{"config.json": cfg, "processor_config.json": proc} {
		raw, err := json.MarshalIndent(v, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
			return err
		}
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		raw, err := os.ReadFile(filepath.Join(vlmTiny, name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
			return err
		}
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	tc, err := model.ReadHFConfig(raw)
	if err != nil {
		return err
	}
	w := &benchWeights{rng: rand.New(rand.NewPCG(20261204, 1))}
	for _, s := range model.Gemma4Tensors(tc) {
		name := "model.language_model." + strings.TrimPrefix(s.Name, "model.")
		switch {
		case strings.Contains(name, ".layers.") && (strings.Contains(name, ".self_attn.") || strings.Contains(name, ".mlp.")) && strings.HasSuffix(name, "_proj.weight"):
			w.quantized(name, s.Shape[0], s.Shape[1])
		case len(s.Shape) == 2:
			w.normal(name, 1/math.Sqrt(float64(s.Shape[len(s.Shape)-1])), s.Shape...)
		default:
			w.fill(name, 1, s.Shape...)
		}
	}
	vc := func(k string) int { return int(vision[k].(float64)) }
	H, P, I := vc("hidden_size"), vc("patch_size"), vc("intermediate_size")
	q, kv, hd := vc("num_attention_heads")*vc("head_dim"), vc("num_key_value_heads")*vc("head_dim"), vc("head_dim")
	tower := "model.vision_tower."
	w.normal(tower+"patch_embedder.input_proj.weight", 1/math.Sqrt(float64(3*P*P)), H, 3*P*P)
	w.normal(tower+"patch_embedder.position_embedding_table", 0.1, 2, vc("position_embedding_size"), H)
	w.normal(tower+"std_bias", 0.1, H)
	w.fill(tower+"std_scale", 1, H)
	w.normal("model.embed_vision.embedding_projection.weight", 1/math.Sqrt(float64(H)), tc.Hidden, H)
	for i := range vc("num_hidden_layers") {
		p := fmt.Sprintf("%sencoder.layers.%d.", tower, i)
		for _, l := range []struct {
			name    string
			in, out int
		}{
			{"self_attn.q_proj", H, q}, {"self_attn.k_proj", H, kv}, {"self_attn.v_proj", H, kv}, {"self_attn.o_proj", q, H},
			{"mlp.gate_proj", H, I}, {"mlp.up_proj", H, I}, {"mlp.down_proj", I, H},
		} {
			w.normal(p+l.name+".linear.weight", 1/math.Sqrt(float64(l.in)), l.out, l.in)
			w.fill(p+l.name+".input_min", -1e4)
			w.fill(p+l.name+".input_max", 1e4)
			w.fill(p+l.name+".output_min", -1e4)
			w.fill(p+l.name+".output_max", 1e4)
		}
		for _, n := range []string{"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"} {
			w.fill(p+n+".weight", 1, H)
		}
		w.fill(p+"self_attn.q_norm.weight", 1, hd)
		w.fill(p+"self_attn.k_norm.weight", 1, hd)
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return err
	}
	if err := safetensors.Write(f, w.tensors, map[string]string{"format": "pt"}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// benchWeights collects seeded random tensors.
type benchWeights struct {
	rng     *rand.Rand
	tensors []safetensors.Tensor
}

func (w *benchWeights) f32(name string, vals []float32, shape ...int) {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	w.tensors = append(w.tensors, safetensors.Tensor{Name: name, DType: "F32", Shape: shape, Data: b})
}

func (w *benchWeights) normal(name string, std float64, shape ...int) {
	vals := make([]float32, count(shape))
	for i := range vals {
		vals[i] = float32(w.rng.NormFloat64() * std)
	}
	w.f32(name, vals, shape...)
}

func (w *benchWeights) fill(name string, v float32, shape ...int) {
	vals := make([]float32, count(shape))
	for i := range vals {
		vals[i] = v
	}
	w.f32(name, vals, shape...)
}

// quantized writes an MLX 4-bit affine matrix [out, in] in groups of 64:
// uniformly random codes, each group scaled to a standard deviation of
// 1/sqrt(in) around 0.
func (w *benchWeights) quantized(name string, out, in int) {
	words := make([]byte, 4*out*in/8)
	for i := 0; i < len(words); i += 4 {
		binary.LittleEndian.PutUint32(words[i:], w.rng.Uint32())
	}
	base := strings.TrimSuffix(name, ".weight")
	w.tensors = append(w.tensors, safetensors.Tensor{Name: name, DType: "U32", Shape: []int{out, in / 8}, Data: words})
	// Codes 0..15 have a standard deviation of sqrt(255/12).
	scale := float32(1 / math.Sqrt(float64(in)) / math.Sqrt(255.0/12))
	groups := out * in / 64
	scales, biases := make([]float32, groups), make([]float32, groups)
	for i := range scales {
		scales[i], biases[i] = scale, -7.5*scale
	}
	w.f32(base+".scales", scales, out, in/64)
	w.f32(base+".biases", biases, out, in/64)
}

func count(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// benchClip is a 320x240 MP4 of 8 s at 4 frames a second: 32 frames, as
// many as a request's video is sampled to.
func benchClip(tb testing.TB) string {
	tb.Helper()
	bin := media.LocateFFmpeg("")
	if bin == "" {
		tb.Skip("no ffmpeg: run `make setup` (scripts/setup_ffmpeg.sh)")
	}
	out := filepath.Join(tb.TempDir(), "clip.mp4")
	cmd := exec.Command(bin, "-hide_banner", "-loglevel", "error", "-nostdin", "-y",
		"-f", "lavfi", "-i", "testsrc2=duration=8:size=320x240:rate=4", "-c:v", "mpeg4", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("ffmpeg: %v\n%s", err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	return "data:video/mp4;base64," + base64.StdEncoding.EncodeToString(b)
}

// towerCPU samples the time on the CPU (schedstat, nanoseconds) of a
// server's tower threads: those named family.TowerThread, the tower's MLX
// thread and its stream's worker.
type towerCPU struct{ pid int }

func (c towerCPU) sample() (time.Time, int64) {
	now := time.Now()
	dir := fmt.Sprintf("/proc/%d/task", c.pid)
	ents, _ := os.ReadDir(dir)
	var ns int64
	for _, e := range ents {
		comm, err := os.ReadFile(filepath.Join(dir, e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != family.TowerThread {
			continue
		}
		st, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if f := strings.Fields(string(st)); err == nil && len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			ns += v
		}
	}
	return now, ns
}

// window watches the tower threads until stop is closed and returns when
// they first and last gained CPU time, and how much.
func (c towerCPU) window(stop <-chan struct{}) (start, end time.Time, busy time.Duration) {
	_, base := c.sample()
	last := base
	for {
		select {
		case <-stop:
			return start, end, time.Duration(last - base)
		case <-time.After(2 * time.Millisecond):
		}
		at, ns := c.sample()
		if ns > last {
			if start.IsZero() {
				start = at
			}
			end, last = at, ns
		}
	}
}

// streamTokens posts a streaming chat request and returns each token's
// arrival time (a chunk's logprobs count its tokens); first is called
// once the first token arrived.
func streamTokens(url, body string, first func()) ([]time.Time, error) {
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	var at []time.Time
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		data, ok := strings.CutPrefix(lines.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		now := time.Now()
		var chunk struct {
			Choices []struct {
				Logprobs struct {
					Content []json.RawMessage `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return nil, err
		}
		for _, c := range chunk.Choices {
			for range c.Logprobs.Content {
				at = append(at, now)
				if len(at) == 1 && first != nil {
					first()
				}
			}
		}
	}
	return at, lines.Err()
}

// gaps is the inter-token gaps in milliseconds of the tokens at[i] with
// lo <= at[i-1] and at[i] <= hi (zero bounds: no bound), from token skip
// on.
func gaps(at []time.Time, skip int, lo, hi time.Time) []float64 {
	var g []float64
	for i := max(1, skip); i < len(at); i++ {
		if !lo.IsZero() && at[i-1].Before(lo) || !hi.IsZero() && at[i].After(hi) {
			continue
		}
		g = append(g, float64(at[i].Sub(at[i-1]))/1e6)
	}
	return g
}

func p50(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func mean(v []float64) float64 {
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

// BenchmarkTextBesideVideoTower measures, in one run, a text-only
// streaming request's time per output token alone and while a 32-frame
// video request's vision tower runs on the same server, rounds of (alone,
// beside) interleaved so that noise hits both, on two servers of the same
// model at once: the tower at background priority (the default) and at
// normal priority (PROVIDER_TOWER_BACKGROUND=0). Beside, only the gaps
// between text tokens that both arrived inside the tower's run count: the
// run is read from the tower threads' CPU time (/proc/PID/task/*/schedstat),
// so the video's prefill, which follows it, is left out. ROUNDS sets the
// rounds (default 3); VIDEO_TOWER_JSON a file for the figures.
//
//	go test ./cmd/provider -run '^$' -bench TextBesideVideoTower -benchtime 1x -timeout 30m
func BenchmarkTextBesideVideoTower(b *testing.B) {
	clip := benchClip(b)
	dir := b.TempDir()
	if err := writeBenchVLM(dir); err != nil {
		b.Fatal(err)
	}
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	type server struct {
		name, url string
		cpu       towerCPU
		alone     []float64
		beside    []float64
		inside    []int // text tokens inside each tower run
		tower     []time.Duration
		busy      []time.Duration
	}
	servers := []*server{{name: "normal"}, {name: "background"}}
	for _, s := range servers {
		env := []string{"PROVIDER_TOWER_BACKGROUND=0"}
		if s.name == "background" {
			env = nil
		}
		cmd, url, _, _ := startServe(b, env, "--model", dir+"=vlm", "--ctx-size", "8192", "--max-concurrent", "4")
		s.url, s.cpu = url, towerCPU{pid: cmd.Process.Pid}
	}
	const textTokens = 400
	text := func(n int) string {
		return fmt.Sprintf(`{"model":"vlm","max_tokens":%d,"temperature":0,"ignore_eos":true,"logprobs":true,"stream":true,`+
			`"messages":[{"role":"user","content":"Hello there, tell me a story."}]}`, n)
	}
	video := `{"model":"vlm","max_tokens":1,"temperature":0,"stream":true,"messages":[{"role":"user","content":[` +
		`{"type":"video_url","video_url":{"url":"` + clip + `"}},{"type":"text","text":"What happens?"}]}]}`
	for _, s := range servers {
		// Warm up both paths.
		if _, err := streamTokens(s.url, text(16), nil); err != nil {
			b.Fatal(err)
		}
		if _, err := streamTokens(s.url, video, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		for r := range rounds {
			for _, s := range servers {
				at, err := streamTokens(s.url, text(textTokens), nil)
				if err != nil {
					b.Fatal(err)
				}
				g := gaps(at, 8, time.Time{}, time.Time{})
				s.alone = append(s.alone, g...)
				b.Logf("round %d %s alone: %d gaps, p50 %.2f ms, mean %.2f ms", r, s.name, len(g), p50(g), mean(g))

				stop, done := make(chan struct{}), make(chan struct{})
				var start, end time.Time
				var busy time.Duration
				videoErr := make(chan error, 1)
				launch := func() {
					go func() { start, end, busy = s.cpu.window(stop); close(done) }()
					go func() { _, err := streamTokens(s.url, video, nil); videoErr <- err }()
				}
				// The video goes in once the text row decodes; the text
				// row runs on past the tower's run, into the video's
				// prefill, which the window leaves out, or ends inside it.
				at, err = streamTokens(s.url, text(textTokens), launch)
				if err != nil {
					b.Fatal(err)
				}
				if err := <-videoErr; err != nil {
					b.Fatal(err)
				}
				close(stop)
				<-done
				g = gaps(at, 0, start, end)
				// The text row may end inside the tower's run (a slow,
				// background tower): its gaps all overlapped the tower.
				if len(g) < 10 {
					b.Fatalf("round %d %s: %d text gaps inside the tower's run (%v to %v), text from %v to %v: no overlap to measure",
						r, s.name, len(g), start.Format(time.StampMilli), end.Format(time.StampMilli),
						at[0].Format(time.StampMilli), at[len(at)-1].Format(time.StampMilli))
				}
				s.beside = append(s.beside, g...)
				s.inside = append(s.inside, len(g)+1)
				s.tower, s.busy = append(s.tower, end.Sub(start)), append(s.busy, busy)
				b.Logf("round %d %s beside: tower ran %v (%v on the CPU), %d text tokens inside it, p50 %.2f ms, mean %.2f ms",
					r, s.name, end.Sub(start).Round(time.Millisecond), busy.Round(time.Millisecond), len(g)+1, p50(g), mean(g))
			}
		}
	}
	b.StopTimer()
	type figures struct {
		Tower                                 string
		AloneP50, AloneMean                   float64
		BesideP50, BesideMean                 float64
		RatioP50, RatioMean                   float64
		AloneGaps, BesideGaps                 int
		TextTokensInside                      []int
		TowerWallMS, TowerCPUMS               []int64
		Rounds, TextMaxTokens, Frames, Budget int
	}
	var out []figures
	for _, s := range servers {
		ms := func(d []time.Duration) []int64 {
			v := make([]int64, len(d))
			for i, x := range d {
				v[i] = x.Milliseconds()
			}
			return v
		}
		f := figures{Tower: s.name, AloneP50: p50(s.alone), AloneMean: mean(s.alone), BesideP50: p50(s.beside), BesideMean: mean(s.beside),
			AloneGaps: len(s.alone), BesideGaps: len(s.beside), TextTokensInside: s.inside, TowerWallMS: ms(s.tower), TowerCPUMS: ms(s.busy),
			Rounds: rounds, TextMaxTokens: textTokens, Frames: 32, Budget: 70}
		f.RatioP50, f.RatioMean = f.BesideP50/f.AloneP50, f.BesideMean/f.AloneMean
		out = append(out, f)
		b.Logf("%s tower: TPOT alone p50 %.2f ms mean %.2f ms; beside p50 %.2f ms mean %.2f ms; ratio p50 %.3fx mean %.3fx; tower runs %v ms wall, %v ms CPU; text tokens inside %v",
			s.name, f.AloneP50, f.AloneMean, f.BesideP50, f.BesideMean, f.RatioP50, f.RatioMean, f.TowerWallMS, f.TowerCPUMS, f.TextTokensInside)
		b.ReportMetric(f.RatioP50, s.name+"-ratio-p50")
		b.ReportMetric(f.RatioMean, s.name+"-ratio-mean")
	}
	if path := os.Getenv("VIDEO_TOWER_JSON"); path != "" {
		raw, _ := json.MarshalIndent(out, "", "  ")
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

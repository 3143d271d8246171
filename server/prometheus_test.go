package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/internal/syncbuf"
)

// A real Prometheus scrapes the real stories260K server every 100 ms; after
// a few requests, its query API reads back as many time-to-first-token
// observations as requests made, as many time-per-output-token ones as
// requests that generated at least two tokens, and a median first-token
// latency within the histogram's bounds.
func TestPrometheusScrapesRealServer(t *testing.T) {
	bin := prometheusTool(t, "prometheus")
	h, _ := realServer(t, engine.Options{})
	// Scrapes reach the same Server through a listener of their own, so
	// they never mix with the harness's served signals.
	target := httptest.NewServer(h.Server)
	t.Cleanup(target.Close)
	prom := startPrometheus(t, bin, target.Listener.Addr().String())

	var requests, decoded int
	tally := func(completionTokens float64) {
		requests++
		if completionTokens >= 2 {
			decoded++
		}
	}
	for _, prompt := range []string{"Once upon a time", "The little dog", "Lily and Ben went"} {
		status, body := h.post(t, "/v1/completions", fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":8}`, prompt))
		var resp struct {
			Usage struct {
				CompletionTokens float64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &resp); status != 200 || err != nil {
			t.Fatalf("completion: %d %v %s", status, err, body)
		}
		tally(resp.Usage.CompletionTokens)
	}
	r := streamCompletion(context.Background(), h.http.URL, "A cat sat on", 8)
	if r.err != nil {
		t.Fatal(r.err)
	}
	<-h.served
	n, _ := r.usage["completion_tokens"].(float64)
	tally(n)
	done := time.Now()

	// Wait for a scrape that started after the last request had been
	// counted; the counts read after it are final. The first scrape comes
	// about 5 s after Prometheus starts (its scrape manager applies new
	// targets on a 5 s tick), which is most of this test's time.
	const count = `provider_time_to_first_token_seconds_count{model="stories"}`
	prom.await(t, func() bool {
		ts := prom.query(t, "timestamp("+count+")")
		return ts > float64(done.UnixMilli())/1000
	})
	if got := prom.query(t, count); got != float64(requests) {
		t.Errorf("%s = %g, want %d", count, got, requests)
	}
	tpot := `provider_time_per_output_token_seconds_count{model="stories"}`
	if got := prom.query(t, tpot); got != float64(decoded) {
		t.Errorf("%s = %g, want %d", tpot, got, decoded)
	}
	median := prom.query(t, `histogram_quantile(0.5, provider_time_to_first_token_seconds_bucket{model="stories"})`)
	if !(median > 0 && median <= ttftBuckets[len(ttftBuckets)-1]) {
		t.Errorf("median time to first token %g s, want within (0, %g]", median, ttftBuckets[len(ttftBuckets)-1])
	}
}

// prometheus is a Prometheus process with its own port, configuration and
// data directory, killed when the test ends.
type prometheus struct {
	url string
	log *syncbuf.Buffer
}

func startPrometheus(t *testing.T, bin, target string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 100ms
  scrape_timeout: 100ms
scrape_configs:
  - job_name: provider
    static_configs:
      - targets: [%q]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := &prometheus{url: "http://" + addr, log: &syncbuf.Buffer{}}
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", p.log.String())
		}
	})
	p.await(t, func() bool {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

// await polls cond until it holds, failing the test after a deadline with
// the scrape target's state.
func (p *prometheus) await(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			resp, err := http.Get(p.url + "/api/v1/targets")
			var targets []byte
			if err == nil {
				targets, _ = readAll(resp)
			}
			t.Fatalf("prometheus: condition not met within a minute; targets: %s %v", targets, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// query evaluates an instant query that must return one sample and
// returns its value (NaN when it returns none).
func (p *prometheus) query(t *testing.T, q string) float64 {
	t.Helper()
	resp, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	body, err := readAll(resp)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Status string `json:"status"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" || r.Data.ResultType != "vector" || len(r.Data.Result) > 1 {
		t.Fatalf("query %s: %v %s", q, err, body)
	}
	if len(r.Data.Result) == 0 {
		return math.NaN()
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("query %s: %v %s", q, err, body)
	}
	return v
}

func readAll(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/slots"
)

// TestHeartbeatEqualsMetrics: serve's network link and its /metrics read
// the same slot snapshots. With a stream held in flight (the engine paused
// mid-stream), a coordinator's heartbeat reports the same running rows and
// KV tokens as a /metrics scrape taken then.
func TestHeartbeatEqualsMetrics(t *testing.T) {
	hold := make(chan struct{})
	var rig *slotRig
	running := func() int {
		if rig == nil || rig.srv == nil {
			return 0
		}
		for _, m := range rig.srv.Models() {
			if m.Name == "stories" {
				return m.Generator.Stats().Running
			}
		}
		return 0
	}
	// Once the stream's row runs, the engine holds before its next step.
	rig = newSlotRig(t, []catalogEntry{{name: "stories", path: enginetest.Stories()}}, slots.Options{}, nil, func() {
		if running() > 0 {
			<-hold
		}
	})
	beats := make(chan []byte, 16)
	coord := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			_, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if strings.Contains(string(msg), `"type":"heartbeat"`) {
				select {
				case beats <- msg:
				default:
				}
			}
		}
	}))
	defer coord.Close()
	release, err := rig.mgr.Acquire(context.Background(), "stories")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	hs := httptest.NewServer(rig.srv)
	defer hs.Close()
	defer close(hold) // before the server's Close waits for the stream
	// A stream that stops mid-way: its row stays running.
	go func() {
		resp, err := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"stories","prompt":"Once upon a time","max_tokens":50,"stream":true}`))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	for rig.gen(t, "stories").Stats().Running != 1 {
		time.Sleep(time.Millisecond) // waiting for the held stream's admission
	}
	stop := startLink(context.Background(), "ws"+strings.TrimPrefix(coord.URL, "http"), rig.srv, t.TempDir(), rig.ld.linkModels, rig.mgr.Snapshots, nil, nil)
	defer stop()
	var hb struct {
		BackendCapacity struct {
			Slots []struct {
				Model        string `json:"model"`
				State        string `json:"state"`
				NumRunning   int    `json:"num_running"`
				NumWaiting   int    `json:"num_waiting"`
				ActiveTokens int64  `json:"active_tokens"`
				MaxTokens    int64  `json:"max_tokens_potential"`
			} `json:"slots"`
		} `json:"backend_capacity"`
	}
	select {
	case b := <-beats:
		if err := json.Unmarshal(b, &hb); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no heartbeat")
	}
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	scrape, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(hb.BackendCapacity.Slots) != 1 {
		t.Fatalf("heartbeat slots %+v", hb.BackendCapacity.Slots)
	}
	s := hb.BackendCapacity.Slots[0]
	if s.NumRunning != 1 || s.ActiveTokens == 0 {
		t.Fatalf("heartbeat %+v: want the held stream", s)
	}
	if want := fmt.Sprintf(`provider_slot_state{model="stories",state=%q} 1`, s.State); !strings.Contains(string(scrape), want) {
		t.Errorf("/metrics lacks %q, which the heartbeat reported", want)
	}
	for series, want := range map[string]int64{
		`provider_requests_running{model="stories"}`: int64(s.NumRunning),
		`provider_requests_waiting{model="stories"}`: int64(s.NumWaiting),
		`provider_slot_tokens_used{model="stories"}`: s.ActiveTokens,
		`provider_slot_tokens_max{model="stories"}`:  s.MaxTokens,
	} {
		if got, ok := scraped(string(scrape), series); !ok || got != float64(want) {
			t.Errorf("/metrics %s = %v (found %v), the heartbeat reported %d", series, got, ok, want)
		}
	}
}

// scraped is the value of one series in a Prometheus text scrape.
func scraped(scrape, series string) (float64, bool) {
	for _, line := range strings.Split(scrape, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

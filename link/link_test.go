package link

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goprovider/provider/slots"
)

// Frames of a streamed chat answer in the provider server's format: the
// role chunk, two content chunks, one with reasoning, the finish chunk,
// the usage chunk (stream_options.include_usage) and [DONE].
var chatFrames = []string{
	`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null}`,
	`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"think"}}],"usage":null}`,
	`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"}}],"usage":null}`,
	`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":", world"}}],"usage":null}`,
	`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
	`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`,
	`data: [DONE]`,
}

// streamHandler answers like the server's streaming path, writing the
// events in 7-byte pieces, each flushed, so that writes cut across event
// boundaries.
func streamHandler(frames []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		all := []byte(strings.Join(frames, "\n\n") + "\n\n")
		for len(all) > 0 {
			n := min(7, len(all))
			if _, err := w.Write(all[:n]); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			all = all[n:]
		}
	})
}

// throughCoordinator is what the reference coordinator writes to its
// consumer from chunks: each followed by a blank line, then its own
// [DONE] after inference_complete.
func throughCoordinator(chunks [][]byte) []byte {
	var b bytes.Buffer
	for _, c := range chunks {
		b.Write(c)
		b.WriteString("\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

func TestRegisterAndHeartbeat(t *testing.T) {
	models := []ModelInfo{
		{ID: "smollm2", SizeBytes: 270 << 20, ModelType: "llama", Quantization: "bf16", WeightHash: strings.Repeat("ab", 32)},
		{ID: "gemma3", SizeBytes: 1 << 30, ModelType: "gemma3", Quantization: "q8_0"},
	}
	var mu sync.Mutex
	capacity := []slots.Snapshot{
		{Model: "smollm2", State: slots.StateRunning, Running: 3, Waiting: 2, TokensUsed: 1234, TokensMax: 65536},
		{Model: "gemma3", State: slots.StateLoading},
	}
	h := start(t, streamHandler(chatFrames), func(o *Options) {
		o.Models = func() []ModelInfo { return models }
		o.Capacity = func() []slots.Snapshot {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(capacity)
		}
	})
	p := h.coord.accept()

	var reg struct {
		registerMsg
		Attestation json.RawMessage `json:"attestation"`
	}
	p.expect(typeRegister).decode(t, &reg)
	keys, err := LoadKeys(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	if reg.PublicKey != keys.EncryptionPublicKey() {
		t.Errorf("public_key %q, want the key directory's %q", reg.PublicKey, keys.EncryptionPublicKey())
	}
	if raw, err := base64.StdEncoding.DecodeString(reg.PublicKey); err != nil || len(raw) != 32 {
		t.Errorf("public_key is not a base64 X25519 key: %v", err)
	}
	if !slices.Equal(reg.Models, models) {
		t.Errorf("models %+v, want %+v", reg.Models, models)
	}
	if reg.Backend != "provider" || reg.Version != "test" || !reg.EncryptedResponseChunks {
		t.Errorf("backend %q version %q encrypted_response_chunks %v", reg.Backend, reg.Version, reg.EncryptedResponseChunks)
	}
	if reg.Hardware.CPUCores.Total != runtime.NumCPU() || reg.Hardware.ChipName == "" || reg.Hardware.GPUCores != 0 {
		t.Errorf("hardware %+v", reg.Hardware)
	}
	pc := reg.PrivacyCapabilities
	if pc == nil || !pc.TextBackendInprocess || pc.SIPEnabled || pc.HypervisorActive || pc.AntiDebugEnabled || pc.PythonRuntimeLocked {
		t.Errorf("privacy capabilities %+v", pc)
	}

	wantSlots := func(snaps []slots.Snapshot) []slotCapacity {
		var out []slotCapacity
		for _, s := range snaps {
			out = append(out, slotCapacity{Model: s.Model, State: string(s.State), NumRunning: s.Running, NumWaiting: s.Waiting, ActiveTokens: s.TokensUsed, MaxTokensPotential: s.TokensMax})
		}
		return out
	}
	var hb heartbeatMsg
	p.expect(typeHeartbeat).decode(t, &hb)
	if got, want := hb.BackendCapacity.Slots, wantSlots(capacity); !slices.Equal(got, want) {
		t.Errorf("first heartbeat slots %+v, want %+v", got, want)
	}
	if hb.Status != "idle" || !slices.Equal(hb.WarmModels, []string{"smollm2"}) || hb.ActiveModel == nil || *hb.ActiveModel != "smollm2" {
		t.Errorf("first heartbeat status %q warm %v active %v", hb.Status, hb.WarmModels, hb.ActiveModel)
	}

	mu.Lock()
	capacity[0].Running, capacity[0].Waiting, capacity[0].TokensUsed = 1, 0, 99
	capacity[1].State = slots.StateRunning
	want := wantSlots(capacity)
	mu.Unlock()
	h.clk.Add(heartbeatInterval)
	hb = heartbeatMsg{}
	p.expect(typeHeartbeat).decode(t, &hb)
	if !slices.Equal(hb.BackendCapacity.Slots, want) {
		t.Errorf("heartbeat after 5 s: slots %+v, want %+v", hb.BackendCapacity.Slots, want)
	}
	if !slices.Equal(hb.WarmModels, []string{"smollm2", "gemma3"}) {
		t.Errorf("warm models %v", hb.WarmModels)
	}
}

func TestEncryptedStreamMatchesLocalHTTP(t *testing.T) {
	handler := streamHandler(chatFrames)
	h := start(t, handler, nil)
	p := h.coord.accept()
	reg := p.greeted()
	c := newClient(t, reg.PublicKey)

	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`
	p.send(c.request("req-1", body))
	p.expect(typeAccepted)
	var chunks [][]byte
	var done completeMsg
	for {
		m := p.nextSkipping()
		if m.Type == typeChunk {
			if m.RequestID != "req-1" {
				t.Fatalf("chunk for %q", m.RequestID)
			}
			chunks = append(chunks, c.open(m))
			continue
		}
		if m.Type != typeComplete {
			t.Fatalf("got %s: %s", m.Type, m.raw)
		}
		m.decode(t, &done)
		break
	}

	if len(chunks) != len(chatFrames)-1 {
		t.Errorf("%d chunks, want one per event but [DONE]: %d", len(chunks), len(chatFrames)-1)
	}
	for i, ch := range chunks {
		if string(ch) != chatFrames[i] {
			t.Errorf("chunk %d = %q, want the event %q", i, ch, chatFrames[i])
		}
	}
	status, local := localAnswer(t, handler, "/v1/chat/completions", body)
	if status != http.StatusOK {
		t.Fatalf("local status %d", status)
	}
	if got := throughCoordinator(chunks); !bytes.Equal(got, local) {
		t.Errorf("chunks as the coordinator relays them differ from the local answer:\n got %q\nwant %q", got, local)
	}
	if done.RequestID != "req-1" || done.Usage != (tokenUsage{PromptTokens: 7, CompletionTokens: 3}) {
		t.Errorf("complete %+v", done)
	}
	sum := sha256.Sum256([]byte("req-1:3:thinkHello, world"))
	if want := fmt.Sprintf("%x", sum); done.ResponseHash != want {
		t.Errorf("response_hash %s, want %s", done.ResponseHash, want)
	}

	// The coordinator cancels every request once it has answered its
	// consumer; for a finished request that is ignored. The heartbeat
	// counts the request.
	p.send(map[string]any{"type": typeCancel, "request_id": "req-1"})
	h.clk.Add(heartbeatInterval)
	var hb heartbeatMsg
	p.expect(typeHeartbeat).decode(t, &hb)
	if hb.Stats != (heartbeatStats{RequestsServed: 1, TokensGenerated: 3}) {
		t.Errorf("stats %+v", hb.Stats)
	}
}

func TestWholeAnswerIsOneChunk(t *testing.T) {
	answer := `{"id":"chatcmpl-2","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}`
	var gotPath, gotBody string
	var mu sync.Mutex
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := new(bytes.Buffer)
		_, _ = b.ReadFrom(r.Body)
		mu.Lock()
		gotPath, gotBody = r.URL.Path, b.String()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(answer[:10]))
		_, _ = w.Write([]byte(answer[10:]))
	})
	h := start(t, handler, nil)
	p := h.coord.accept()
	c := newClient(t, p.greeted().PublicKey)

	p.send(c.request("req-2", `{"model":"m","prompt":"hi","endpoint":"/v1/completions"}`))
	p.expect(typeAccepted)
	got := c.open(p.expectSkipping(typeChunk))
	if string(got) != answer {
		t.Errorf("chunk %q, want the body %q", got, answer)
	}
	var done completeMsg
	p.expectSkipping(typeComplete).decode(t, &done)
	if done.Usage != (tokenUsage{PromptTokens: 4, CompletionTokens: 2}) {
		t.Errorf("usage %+v", done.Usage)
	}
	if want := responseHash("req-2", 2, answer); done.ResponseHash != want {
		t.Errorf("response_hash %s, want %s over the body", done.ResponseHash, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if gotPath != "/v1/completions" {
		t.Errorf("handler got path %q", gotPath)
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(gotBody), &fields); err != nil {
		t.Fatal(err)
	}
	if _, ok := fields["endpoint"]; ok || fields["prompt"] != "hi" {
		t.Errorf("handler got body %s; want it without endpoint", gotBody)
	}
}

func TestHandlerErrorsBecomeInferenceErrors(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Model string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		switch req.Model {
		case "missing":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"message":"The requested model does not exist.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`))
		case "midstream":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(chatFrames[0] + "\n\n"))
			_, _ = w.Write([]byte(`data: {"error":{"message":"The server could not encode the request's media; retry elsewhere.","type":"service_unavailable_error","param":null,"code":"vlm_extraction_failed"}}` + "\n\n"))
		}
	})
	h := start(t, handler, nil)
	p := h.coord.accept()
	c := newClient(t, p.greeted().PublicKey)

	p.send(c.request("a", `{"model":"missing"}`))
	p.expect(typeAccepted)
	var e errorMsg
	p.expectSkipping(typeError).decode(t, &e)
	if e != (errorMsg{Type: typeError, RequestID: "a", Error: "model_not_found", StatusCode: 404}) {
		t.Errorf("error %+v", e)
	}

	p.send(c.request("b", `{"model":"midstream","stream":true}`))
	p.expect(typeAccepted)
	if got := c.open(p.expectSkipping(typeChunk)); string(got) != chatFrames[0] {
		t.Errorf("first chunk %q", got)
	}
	e = errorMsg{}
	p.expectSkipping(typeError).decode(t, &e)
	if e != (errorMsg{Type: typeError, RequestID: "b", Error: "vlm_extraction_failed", StatusCode: 503}) {
		t.Errorf("error %+v", e)
	}
}

func TestCancelEndsHandlerContext(t *testing.T) {
	started := make(chan struct{})
	ended := make(chan error, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(chatFrames[0] + "\n\n"))
		close(started)
		<-r.Context().Done()
		ended <- r.Context().Err()
	})
	h := start(t, handler, nil)
	p := h.coord.accept()
	c := newClient(t, p.greeted().PublicKey)

	p.send(map[string]any{"type": typeCancel, "request_id": "never-sent"})
	p.send(c.request("req-3", `{"model":"m","stream":true}`))
	p.expect(typeAccepted)
	c.open(p.expect(typeChunk))
	<-started
	p.send(map[string]any{"type": typeCancel, "request_id": "req-3"})
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("handler context ended with %v", err)
		}
	case <-time.After(guard):
		t.Fatal("cancel did not end the handler's context")
	}
	// A second cancel for the finished request is ignored too. The
	// connection then answers as before, and a cancelled request has no
	// terminal message: the next heartbeat that finds it gone is idle,
	// and nothing came before it.
	p.send(map[string]any{"type": typeCancel, "request_id": "req-3"})
	for i := 0; ; i++ {
		h.clk.Add(heartbeatInterval)
		var hb heartbeatMsg
		p.expect(typeHeartbeat).decode(t, &hb)
		if hb.Status == "idle" {
			if hb.Stats.RequestsServed != 0 {
				t.Errorf("cancelled request counted as served: %+v", hb.Stats)
			}
			break
		}
		if i > 100 {
			t.Fatal("request still in flight after its handler returned")
		}
	}
}

func TestCoordinatorRestart(t *testing.T) {
	started := make(chan string, 4)
	ended := make(chan error, 4)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Model string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Model == "slow" {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(chatFrames[0] + "\n\n"))
			started <- req.Model
			<-r.Context().Done()
			ended <- r.Context().Err()
			return
		}
		streamHandler(chatFrames).ServeHTTP(w, r)
	})
	h := start(t, handler, nil)
	p1 := h.coord.accept()
	c := newClient(t, p1.greeted().PublicKey)
	p1.send(c.request("running", `{"model":"slow","stream":true}`))
	p1.expect(typeAccepted)
	c.open(p1.expect(typeChunk))
	<-started
	// The connection has been up a heartbeat interval: losing it
	// redials at once.
	h.clk.Add(heartbeatInterval)
	p1.expect(typeHeartbeat)

	_ = p1.conn.CloseNow()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("running request's context ended with %v", err)
		}
	case <-time.After(guard):
		t.Fatal("losing the connection did not cancel the running request")
	}

	p2 := h.coord.accept()
	reg := p2.greeted()
	if reg.PublicKey != c.provider64() {
		t.Errorf("re-registered with another key")
	}
	var e errorMsg
	p2.expectSkipping(typeError).decode(t, &e)
	if e != (errorMsg{Type: typeError, RequestID: "running", Error: reasonConnection, StatusCode: http.StatusBadGateway}) {
		t.Errorf("lost request reported as %+v", e)
	}

	// And it keeps serving.
	p2.send(c.request("after", `{"model":"m","stream":true}`))
	p2.expectSkipping(typeAccepted)
	n := 0
	for {
		m := p2.nextSkipping()
		if m.Type == typeComplete {
			break
		}
		if m.Type != typeChunk {
			t.Fatalf("got %s", m.Type)
		}
		c.open(m)
		n++
	}
	if n != len(chatFrames)-1 {
		t.Errorf("%d chunks after the restart", n)
	}
}

func (c *client) provider64() string { return base64.StdEncoding.EncodeToString(c.provider[:]) }

func TestAttestationChallenge(t *testing.T) {
	models := []ModelInfo{{ID: "m", WeightHash: "cafe"}}
	h := start(t, streamHandler(chatFrames), func(o *Options) { o.Models = func() []ModelInfo { return models } })
	p := h.coord.accept()

	// The coordinator takes the signing key from the attestation blob,
	// verifying the blob's signature over its bytes as sent.
	var reg struct {
		PublicKey   string          `json:"public_key"`
		Attestation json.RawMessage `json:"attestation"`
	}
	p.expect(typeRegister).decode(t, &reg)
	var signed struct {
		Attestation json.RawMessage `json:"attestation"`
		Signature   string          `json:"signature"`
	}
	if err := json.Unmarshal(reg.Attestation, &signed); err != nil {
		t.Fatal(err)
	}
	var b blob
	if err := json.Unmarshal(signed.Attestation, &b); err != nil {
		t.Fatal(err)
	}
	if b.EncryptionPublicKey != reg.PublicKey || b.SecureEnclaveAvailable || b.SIPEnabled || b.SecureBootEnabled || b.HypervisorActive {
		t.Errorf("attestation blob %+v", b)
	}
	pub := p256Key(t, b.PublicKey)
	verify(t, pub, signed.Attestation, signed.Signature)

	nonce := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	ts := "2026-12-04T10:00:00Z"
	p.send(map[string]any{"type": typeChallenge, "nonce": nonce, "timestamp": ts})
	var a attestationMsg
	p.expectSkipping(typeAttestation).decode(t, &a)
	if a.Nonce != nonce || a.PublicKey != reg.PublicKey {
		t.Errorf("response nonce %q public_key %q", a.Nonce, a.PublicKey)
	}
	if a.SIPEnabled == nil || *a.SIPEnabled || a.HypervisorActive == nil || *a.HypervisorActive {
		t.Errorf("posture: sip %v hypervisor %v", a.SIPEnabled, a.HypervisorActive)
	}
	if a.ModelHashes["m"] != "cafe" {
		t.Errorf("model hashes %v", a.ModelHashes)
	}
	verify(t, pub, []byte(nonce+ts), a.Signature)
}

// p256Key parses a base64 uncompressed P-256 point, as the coordinator
// does.
func p256Key(t *testing.T, b64 string) *ecdsa.PublicKey {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 65 || raw[0] != 4 {
		t.Fatalf("signing key %q is not an uncompressed P-256 point", b64)
	}
	x, y := new(big.Int).SetBytes(raw[1:33]), new(big.Int).SetBytes(raw[33:])
	return &ecdsa.PublicKey{Curve: elliptic.P256(), X: x, Y: y}
}

// verify checks a base64 DER ECDSA signature over SHA-256(data).
func verify(t *testing.T, pub *ecdsa.PublicKey, data []byte, sig64 string) {
	t.Helper()
	der, err := base64.StdEncoding.DecodeString(sig64)
	if err != nil {
		t.Fatal(err)
	}
	var rs struct{ R, S *big.Int }
	if _, err := asn1.Unmarshal(der, &rs); err != nil {
		t.Fatalf("signature is not DER: %v", err)
	}
	sum := sha256.Sum256(data)
	if !ecdsa.Verify(pub, sum[:], rs.R, rs.S) {
		t.Errorf("signature over %q does not verify", data)
	}
}

func TestBadInput(t *testing.T) {
	h := start(t, streamHandler(chatFrames), nil)
	p := h.coord.accept()
	c := newClient(t, p.greeted().PublicKey)
	challenge := func() {
		t.Helper()
		p.send(map[string]any{"type": typeChallenge, "nonce": "bm9uY2U=", "timestamp": "t"})
		p.expectSkipping(typeAttestation)
	}

	// A frame over 32 MiB is discarded whole; the same connection then
	// answers the next message.
	big := bytes.Repeat([]byte("x"), maxFrame+1)
	p.send(big)
	challenge()
	if !h.logs.contains("over the 32 MiB limit") {
		t.Error("oversized frame not logged")
	}

	p.send([]byte(`{"type": "inference_request", "request_id": `))
	challenge()
	if !h.logs.contains("malformed message") {
		t.Error("malformed message not logged")
	}

	p.send(map[string]any{"type": "reticulate_splines", "request_id": "x"})
	challenge()
	if !h.logs.contains("unknown type") {
		t.Error("unknown message type not logged")
	}

	// A body that does not open: inference_error with a fixed reason,
	// and nothing else.
	bad := c.request("tampered", `{"model":"m","stream":true}`)
	s := bad["encrypted_body"].(*sealed)
	ct, _ := base64.StdEncoding.DecodeString(s.Ciphertext)
	ct[len(ct)-1] ^= 1
	s.Ciphertext = base64.StdEncoding.EncodeToString(ct)
	p.send(bad)
	var e errorMsg
	p.expectSkipping(typeError).decode(t, &e)
	if e != (errorMsg{Type: typeError, RequestID: "tampered", Error: reasonUndecryptable, StatusCode: 400}) {
		t.Errorf("error %+v", e)
	}
	p.send(map[string]any{"type": typeInferenceRequest, "request_id": "plain", "body": map[string]any{"model": "m"}})
	e = errorMsg{}
	p.expectSkipping(typeError).decode(t, &e)
	if e != (errorMsg{Type: typeError, RequestID: "plain", Error: reasonUnencrypted, StatusCode: 400}) {
		t.Errorf("error %+v", e)
	}

	// Still registered on the first connection, and serving.
	p.send(c.request("ok", `{"model":"m","stream":true}`))
	p.expectSkipping(typeAccepted)
	for m := p.nextSkipping(); m.Type != typeComplete; m = p.nextSkipping() {
		if m.Type != typeChunk {
			t.Fatalf("got %s: %s", m.Type, m.raw)
		}
	}
	select {
	case p2 := <-h.coord.peers:
		t.Errorf("provider reconnected: %v", p2)
	default:
	}
}

func TestLoadModel(t *testing.T) {
	var mu sync.Mutex
	var loaded []string
	h := start(t, streamHandler(chatFrames), func(o *Options) {
		o.LoadModel = func(ctx context.Context, id string) error {
			mu.Lock()
			defer mu.Unlock()
			loaded = append(loaded, id)
			if id == "absent" {
				return errors.New("model not in local cache")
			}
			return nil
		}
	})
	p := h.coord.accept()
	p.greeted()
	for _, tc := range []struct{ id, final, reason string }{
		{"gemma3", loadSucceeded, ""},
		{"absent", loadFailed, "model not in local cache"},
	} {
		p.send(map[string]any{"type": typeLoadModel, "model_id": tc.id})
		var st loadStatusMsg
		p.expectSkipping(typeLoadModelStatus).decode(t, &st)
		if st != (loadStatusMsg{Type: typeLoadModelStatus, ModelID: tc.id, Status: loadStarted}) {
			t.Errorf("first status %+v", st)
		}
		st = loadStatusMsg{}
		p.expectSkipping(typeLoadModelStatus).decode(t, &st)
		if st != (loadStatusMsg{Type: typeLoadModelStatus, ModelID: tc.id, Status: tc.final, Error: tc.reason}) {
			t.Errorf("final status %+v", st)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(loaded, []string{"gemma3", "absent"}) {
		t.Errorf("loaded %v", loaded)
	}
}

func TestLoadModelUnsupported(t *testing.T) {
	h := start(t, streamHandler(chatFrames), nil)
	p := h.coord.accept()
	p.greeted()
	p.send(map[string]any{"type": typeLoadModel, "model_id": "m"})
	var st loadStatusMsg
	p.expectSkipping(typeLoadModelStatus).decode(t, &st)
	if st.Status != loadFailed || st.ModelID != "m" || st.Error == "" {
		t.Errorf("status %+v", st)
	}
}

func TestRetryDelay(t *testing.T) {
	want := []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for failures, w := range want {
		if got := retryDelay(failures); got != w {
			t.Errorf("retryDelay(%d) = %v, want %v", failures, got, w)
		}
	}
	if got := retryDelay(1000); got != maxBackoff {
		t.Errorf("retryDelay(1000) = %v", got)
	}
}

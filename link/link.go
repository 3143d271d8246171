package link

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/coder/websocket"

	"github.com/goprovider/provider/slots"
)

// Timing and size rules of the link.
const (
	heartbeatInterval = 5 * time.Second
	pingInterval      = 10 * time.Second
	pongTimeout       = 30 * time.Second
	dialTimeout       = 30 * time.Second
	minBackoff        = time.Second
	maxBackoff        = 30 * time.Second
	// maxFrame bounds one message from the coordinator, and one answer
	// or event the link buffers from the handler.
	maxFrame = 32 << 20
)

// Options configure Run. Zero fields take the documented defaults.
type Options struct {
	// URL is the coordinator's provider endpoint, ws:// or wss://
	// (for example ws://host/ws/provider). Required.
	URL string
	// Handler answers the requests the network sends, in process: the
	// provider's OpenAI-compatible server without its auth layer.
	// Required.
	Handler http.Handler
	// KeyDir holds the provider's keys (see LoadKeys). Required.
	KeyDir string
	// Models lists the models to register; nil registers none.
	Models func() []ModelInfo
	// Capacity reports the slots for each heartbeat; nil reports none.
	Capacity func() []slots.Snapshot
	// LoadModel loads a model on the coordinator's load_model request;
	// nil answers every such request "failed".
	LoadModel func(ctx context.Context, id string) error
	// Version is the provider version register reports; "" omits it.
	Version string
	// Logger receives the link's records: ids, counts, statuses and
	// reasons, never request or response content. Nil is slog.Default().
	Logger *slog.Logger
	// Clock times heartbeats, pings, the pong deadline and reconnection;
	// nil is the real clock.
	Clock clock.Clock
}

// Run connects to the coordinator and serves its requests until ctx
// ends, reconnecting whenever the connection is lost. It returns nil
// once ctx has ended and every request and model load it started has
// returned, or an error at once when the options or the keys are unfit.
func Run(ctx context.Context, o Options) error {
	switch {
	case o.URL == "":
		return errors.New("link: no coordinator URL")
	case o.Handler == nil:
		return errors.New("link: no handler")
	}
	keys, err := LoadKeys(o.KeyDir)
	if err != nil {
		return err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.New()
	}
	l := &link{
		o:        o,
		keys:     keys,
		log:      o.Logger,
		clk:      o.Clock,
		host:     probeHost(),
		binHash:  sync.OnceValue(executableHash),
		inflight: map[string]*exchange{},
		loading:  map[string]bool{},
	}
	return l.run(ctx)
}

// link is the state that outlives a connection: the requests in flight,
// the terminal messages waiting for a connection, and the counters.
type link struct {
	o       Options
	keys    *Keys
	log     *slog.Logger
	clk     clock.Clock
	host    host
	meter   loadMeter // used by one heartbeat loop at a time
	binHash func() string
	runCtx  context.Context

	served, tokens atomic.Int64
	wg             sync.WaitGroup // request, reply and load goroutines

	mu       sync.Mutex
	sess     *session // the registered connection; nil between connections
	inflight map[string]*exchange
	outbox   []any // terminal messages that found no connection
	loading  map[string]bool
}

// session is one connection to the coordinator.
type session struct {
	conn *websocket.Conn
	ctx  context.Context
	end  context.CancelCauseFunc
}

// send writes one message. Writes always use the session's context: the
// websocket closes the connection when a write's context ends.
func (s *session) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("link: encode: %w", err)
	}
	return s.conn.Write(s.ctx, websocket.MessageText, b)
}

// retryDelay is the wait before a connection attempt after failures
// consecutive failed ones: none after a connection that was up, then 1 s
// doubling to 30 s.
func retryDelay(failures int) time.Duration {
	if failures <= 0 {
		return 0
	}
	d := minBackoff
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

func (l *link) run(ctx context.Context) error {
	l.runCtx = ctx
	defer l.wg.Wait()
	failures := 0
	for {
		up, err := l.session(ctx)
		if ctx.Err() != nil {
			l.mu.Lock()
			dropped := len(l.outbox)
			l.mu.Unlock()
			l.log.Info("coordinator link stopped", "undelivered", dropped)
			return nil
		}
		if up {
			failures = 0
		} else {
			failures++
		}
		d := retryDelay(failures)
		l.log.Warn("coordinator connection ended", "error", err, "retry_in", d.String())
		if d > 0 {
			t := l.clk.Timer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				continue
			case <-t.C:
			}
		}
	}
}

// session runs one connection: register, heartbeats, pings and the
// coordinator's messages, until the connection fails or ctx ends. It
// reports whether the connection was up, registered for at least one
// heartbeat interval; only such a connection resets the backoff.
func (l *link) session(ctx context.Context) (up bool, err error) {
	dctx, cancel := l.clk.WithTimeout(ctx, dialTimeout)
	conn, _, err := websocket.Dial(dctx, l.o.URL, nil)
	cancel()
	if err != nil {
		return false, fmt.Errorf("dial: %w", err)
	}
	// Frames are limited by read, which discards an oversized one and
	// keeps the connection.
	conn.SetReadLimit(-1)
	sctx, end := context.WithCancelCause(ctx)
	s := &session{conn: conn, ctx: sctx, end: end}
	defer func() {
		end(nil)
		l.detach(s)
		_ = conn.CloseNow()
	}()
	// The tickers are armed before register goes out: whoever has read
	// register may count on the first heartbeat one interval later.
	hb := l.clk.Ticker(heartbeatInterval)
	defer hb.Stop()
	ping := l.clk.Ticker(pingInterval)
	defer ping.Stop()
	start := l.clk.Now()

	if err := l.greet(s); err != nil {
		return false, err
	}
	var loops sync.WaitGroup
	loops.Add(2)
	go func() { defer loops.Done(); l.heartbeats(s, hb) }()
	go func() { defer loops.Done(); l.pings(s, ping) }()
	err = l.read(s)
	// Detached before its context ends: a request that sees the end
	// reports itself to the next connection, never to this one.
	l.detach(s)
	end(err)
	loops.Wait()
	if cause := context.Cause(sctx); cause != nil && !errors.Is(cause, err) {
		err = cause
	}
	return l.clk.Since(start) >= heartbeatInterval, err
}

// greet registers on a fresh connection, sends the first heartbeat, and
// makes the connection the one terminal messages go to, flushing those
// that waited for it.
func (l *link) greet(s *session) error {
	reg, err := l.register()
	if err != nil {
		return err
	}
	if err := s.send(reg); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if err := s.send(l.heartbeat()); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	l.log.Info("registered with coordinator", "models", len(reg.Models))
	l.mu.Lock()
	pending := l.outbox
	l.outbox = nil
	l.sess = s
	l.mu.Unlock()
	for i, m := range pending {
		if err := s.send(m); err != nil {
			l.mu.Lock()
			l.outbox = append(pending[i:], l.outbox...)
			if l.sess == s {
				l.sess = nil
			}
			l.mu.Unlock()
			return fmt.Errorf("flush: %w", err)
		}
	}
	return nil
}

func (l *link) detach(s *session) {
	l.mu.Lock()
	if l.sess == s {
		l.sess = nil
	}
	l.mu.Unlock()
}

// deliver sends a terminal message on the current connection, or keeps
// it for the next one.
func (l *link) deliver(m any) {
	for {
		l.mu.Lock()
		s := l.sess
		if s == nil || s.ctx.Err() != nil {
			l.outbox = append(l.outbox, m)
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		if s.send(m) == nil {
			return
		}
		l.detach(s)
	}
}

// spawn runs f on a goroutine Run waits for.
func (l *link) spawn(f func()) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
}

func (l *link) heartbeats(s *session, t *clock.Ticker) {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			if err := s.send(l.heartbeat()); err != nil {
				s.end(fmt.Errorf("heartbeat: %w", err))
				return
			}
		}
	}
}

func (l *link) pings(s *session, t *clock.Ticker) {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			pctx, cancel := l.clk.WithTimeout(s.ctx, pongTimeout)
			err := s.conn.Ping(pctx)
			cancel()
			if err != nil {
				s.end(fmt.Errorf("no pong within %v: %w", pongTimeout, err))
				return
			}
		}
	}
}

// read takes the coordinator's messages until the connection fails.
func (l *link) read(s *session) error {
	for {
		typ, r, err := s.conn.Reader(s.ctx)
		if err != nil {
			return err
		}
		data, n, err := readLimited(r, maxFrame)
		if errors.Is(err, errFrameTooLarge) {
			l.log.Warn("coordinator message over the 32 MiB limit discarded; connection kept", "bytes", n)
			continue
		}
		if err != nil {
			return err
		}
		if typ != websocket.MessageText {
			l.log.Warn("binary message from coordinator ignored", "bytes", n)
			continue
		}
		l.dispatch(s, data)
	}
}

var errFrameTooLarge = errors.New("link: message too large")

// readLimited reads one message of at most limit bytes. A larger one is
// read to its end and discarded, without being held, so that the next
// message can be read; its size is returned with errFrameTooLarge.
func readLimited(r io.Reader, limit int64) ([]byte, int64, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, int64(len(data)), err
	}
	if int64(len(data)) <= limit {
		return data, int64(len(data)), nil
	}
	rest, err := io.Copy(io.Discard, r)
	n := int64(len(data)) + rest
	if err != nil {
		return nil, n, err
	}
	return nil, n, errFrameTooLarge
}

// dispatch handles one coordinator message. Nothing a message says can
// end the connection: a malformed or unknown message is logged and
// dropped.
func (l *link) dispatch(s *session, data []byte) {
	var env struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		l.log.Warn("malformed message from coordinator ignored", "bytes", len(data))
		return
	}
	switch env.Type {
	case typeInferenceRequest:
		l.request(s, data)
	case typeCancel:
		l.cancelRequest(data)
	case typeChallenge:
		l.challenge(s, data)
	case typeRuntimeStatus:
		l.runtimeStatus(data)
	case typeLoadModel:
		l.loadModel(s, data)
	default:
		l.log.Warn("coordinator message of unknown type ignored", "type", clip(env.Type, 64))
	}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// cancelRequest cancels a request in flight: its handler's context
// ends, which frees its engine row. A cancel for a request that is not
// in flight is ignored; the coordinator sends one after every request.
func (l *link) cancelRequest(data []byte) {
	var m idMsg
	if json.Unmarshal(data, &m) != nil {
		l.log.Warn("malformed cancel ignored")
		return
	}
	l.mu.Lock()
	ex := l.inflight[m.RequestID]
	l.mu.Unlock()
	if ex == nil {
		l.log.Debug("cancel for a request not in flight ignored", "request_id", m.RequestID)
		return
	}
	ex.cancelled.Store(true)
	ex.cancel()
}

func (l *link) challenge(s *session, data []byte) {
	var c challengeMsg
	if json.Unmarshal(data, &c) != nil || c.Nonce == "" {
		l.log.Warn("malformed attestation challenge ignored")
		return
	}
	l.spawn(func() {
		m, err := answer(l.keys, l.host, c, l.binHash(), l.models())
		if err != nil {
			l.log.Error("attestation challenge not answered", "error", err)
			return
		}
		if err := s.send(m); err != nil {
			l.log.Warn("attestation response not sent", "error", err)
		}
	})
}

func (l *link) runtimeStatus(data []byte) {
	var m runtimeStatusMsg
	if json.Unmarshal(data, &m) != nil {
		l.log.Warn("malformed runtime status ignored")
		return
	}
	if m.Verified {
		l.log.Info("coordinator verified the runtime")
		return
	}
	components := make([]string, 0, len(m.Mismatches))
	for _, mm := range m.Mismatches {
		components = append(components, clip(mm.Component, 64))
	}
	l.log.Warn("coordinator did not verify the runtime", "mismatches", len(m.Mismatches), "components", components)
}

// loadModel answers load_model: "started" at once, then "succeeded" or
// "failed" when LoadModel returns, on whatever connection is current
// then. A load already running for the model is not started twice.
func (l *link) loadModel(s *session, data []byte) {
	var m loadModelMsg
	if json.Unmarshal(data, &m) != nil || m.ModelID == "" {
		l.log.Warn("malformed load_model ignored")
		return
	}
	status := func(st, reason string) loadStatusMsg {
		return loadStatusMsg{Type: typeLoadModelStatus, ModelID: m.ModelID, Status: st, Error: reason}
	}
	if l.o.LoadModel == nil {
		l.spawn(func() { _ = s.send(status(loadFailed, "load_model is not supported by this provider")) })
		return
	}
	l.mu.Lock()
	running := l.loading[m.ModelID]
	l.loading[m.ModelID] = true
	l.mu.Unlock()
	if running {
		l.spawn(func() { _ = s.send(status(loadStarted, "")) })
		return
	}
	l.spawn(func() {
		_ = s.send(status(loadStarted, ""))
		l.log.Info("loading model for the coordinator", "model", m.ModelID)
		err := l.o.LoadModel(l.runCtx, m.ModelID)
		l.mu.Lock()
		delete(l.loading, m.ModelID)
		l.mu.Unlock()
		if err != nil {
			l.log.Warn("model load for the coordinator failed", "model", m.ModelID, "error", err)
			l.deliver(status(loadFailed, err.Error()))
			return
		}
		l.deliver(status(loadSucceeded, ""))
	})
}

func (l *link) models() []ModelInfo {
	if l.o.Models == nil {
		return []ModelInfo{}
	}
	ms := l.o.Models()
	if ms == nil {
		return []ModelInfo{}
	}
	return ms
}

func (l *link) register() (registerMsg, error) {
	att, err := attestation(l.keys, l.host, l.clk.Now())
	if err != nil {
		return registerMsg{}, err
	}
	hw := l.host.hw
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		_, avail := memInfo(string(b))
		hw.MemoryAvailableGB = float64(avail) / gib
	}
	return registerMsg{
		Type:                    typeRegister,
		Hardware:                hw,
		Models:                  l.models(),
		Backend:                 Backend,
		Version:                 l.o.Version,
		PublicKey:               l.keys.EncryptionPublicKey(),
		EncryptedResponseChunks: true,
		Attestation:             att,
		// Requests run in this process, through the handler, with no
		// local proxy hop; none of the platform protections the other
		// fields name is in place here.
		PrivacyCapabilities: &privacyCapabilities{TextBackendInprocess: true, TextProxyDisabled: true},
	}, nil
}

func (l *link) heartbeat() heartbeatMsg {
	var snaps []slots.Snapshot
	if l.o.Capacity != nil {
		snaps = l.o.Capacity()
	}
	caps := make([]slotCapacity, 0, len(snaps))
	var warm []string
	var active *string
	for _, sn := range snaps {
		caps = append(caps, slotCapacity{
			Model:              sn.Model,
			State:              string(sn.State),
			NumRunning:         sn.Running,
			NumWaiting:         sn.Waiting,
			ActiveTokens:       sn.TokensUsed,
			MaxTokensPotential: sn.TokensMax,
		})
		if sn.State == slots.StateRunning {
			warm = append(warm, sn.Model)
			if active == nil {
				m := sn.Model
				active = &m
			}
		}
	}
	l.mu.Lock()
	busy := len(l.inflight) > 0
	l.mu.Unlock()
	status := "idle"
	if busy {
		status = "serving"
	}
	return heartbeatMsg{
		Type:            typeHeartbeat,
		Status:          status,
		ActiveModel:     active,
		Stats:           heartbeatStats{RequestsServed: l.served.Load(), TokensGenerated: l.tokens.Load()},
		WarmModels:      warm,
		SystemMetrics:   l.meter.sample(),
		BackendCapacity: &backendCapacity{Slots: caps, TotalMemoryGB: float64(l.host.memTotal) / gib},
	}
}

package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout bounds a request when the workload sets no timeout.
const DefaultTimeout = 5 * time.Minute

// ErrConfig marks an invalid configuration.
var ErrConfig = errors.New("invalid bench config")

// Target is one server under test.
type Target struct {
	Name string `json:"name"`
	// URL is the server's base, e.g. http://127.0.0.1:8000; a trailing
	// /v1 is accepted and dropped.
	URL string `json:"url"`
}

// ParseTarget reads name=url, or a bare url named after its host.
func ParseTarget(s string) (Target, error) {
	name, raw, ok := strings.Cut(s, "=")
	if !ok || strings.Contains(name, "://") {
		name, raw = "", s
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Target{}, fmt.Errorf("%w: target %q: %w", ErrConfig, s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Target{}, fmt.Errorf("%w: target %q: want name=http://host:port", ErrConfig, s)
	}
	if name == "" {
		name = u.Host
	}
	return Target{Name: name, URL: raw}, nil
}

// base is the target's URL without a trailing slash or /v1.
func (t Target) base() string {
	b := strings.TrimRight(t.URL, "/")
	b = strings.TrimSuffix(b, "/v1")
	return b
}

// Endpoint is the OpenAI route the requests use.
type Endpoint string

const (
	EndpointChat        Endpoint = "chat"        // /v1/chat/completions
	EndpointCompletions Endpoint = "completions" // /v1/completions
)

func (e Endpoint) path() string {
	if e == EndpointCompletions {
		return "/v1/completions"
	}
	return "/v1/chat/completions"
}

// Level is one step of a sweep. Rate zero is closed loop: Concurrency
// workers each send their next request when the previous one ends. Rate
// above zero is open loop: requests arrive as a Poisson process of Rate
// per second, each sent on arrival, with at most Concurrency in flight
// (zero: no cap; an arrival waits for a free slot).
type Level struct {
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
}

// OpenLoop reports whether requests arrive on a schedule.
func (l Level) OpenLoop() bool { return l.Rate > 0 }

// Label names the level in tables and plots.
func (l Level) Label() string {
	if !l.OpenLoop() {
		return fmt.Sprintf("c=%d", l.Concurrency)
	}
	s := "rate=" + strconv.FormatFloat(l.Rate, 'g', 4, 64) + "/s"
	if l.Concurrency > 0 {
		s += fmt.Sprintf(" max=%d", l.Concurrency)
	}
	return s
}

// x is the level's position on a plot's x axis.
func (l Level) x() float64 {
	if l.OpenLoop() {
		return l.Rate
	}
	return float64(l.Concurrency)
}

// PromptShape selects how prompts are built.
type PromptShape string

const (
	// PromptsRandom draws each prompt's length uniformly from
	// Tokens*(1-Range) to Tokens*(1+Range).
	PromptsRandom PromptShape = "random"
	// PromptsFixed makes every prompt Tokens long.
	PromptsFixed PromptShape = "fixed"
	// PromptsSharedPrefix starts each prompt with one of Prefixes common
	// prefixes of PrefixTokens, then a distinct suffix up to Tokens.
	PromptsSharedPrefix PromptShape = "shared-prefix"
)

// PromptSet describes the prompts of a level. Lengths count filler words
// chosen to be one token each in common tokenizers, so they approximate
// tokens; the server's usage reports the exact count.
type PromptSet struct {
	Shape  PromptShape `json:"shape"`
	Tokens int         `json:"tokens"`
	// Range is the random shape's spread; zero means 0.5.
	Range float64 `json:"range,omitempty"`
	// Prefixes is the shared-prefix shape's number of prefixes; zero
	// means 4.
	Prefixes int `json:"prefixes,omitempty"`
	// PrefixTokens is the shared prefix's length; zero means three
	// quarters of Tokens.
	PrefixTokens int `json:"prefix_tokens,omitempty"`
}

// SLO bounds a good request; a zero field is no bound.
type SLO struct {
	TTFT time.Duration
	TPOT time.Duration
	E2E  time.Duration
}

// Set reports whether any bound is set.
func (s SLO) Set() bool { return s.TTFT > 0 || s.TPOT > 0 || s.E2E > 0 }

// MarshalJSON writes the bounds in milliseconds, zero for none.
func (s SLO) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		TTFT float64 `json:"ttft_ms"`
		TPOT float64 `json:"tpot_ms"`
		E2E  float64 `json:"e2e_ms"`
	}{ms(s.TTFT), ms(s.TPOT), ms(s.E2E)})
}

// Workload is the request mix, the same for every target.
type Workload struct {
	// Model is sent as the request's model; empty leaves it out.
	Model    string   `json:"model,omitempty"`
	Endpoint Endpoint `json:"endpoint"`
	Levels   []Level  `json:"levels"`
	// Requests is the number of measured requests per level.
	Requests int `json:"requests"`
	// Warmup requests go to each target, one at a time, before its first
	// level; they are not measured.
	Warmup    int       `json:"warmup"`
	Prompts   PromptSet `json:"prompts"`
	MaxTokens int       `json:"max_tokens"`
	// IgnoreEOS sends ignore_eos: true, which only some servers accept
	// (vLLM, llama-server); off, the field is not sent.
	IgnoreEOS bool `json:"ignore_eos"`
	// ResponseFormat, when set, is sent as each request's response_format
	// (an OpenAI object such as {"type":"json_schema",...}), so constrained
	// decoding is measured against the same prompts unconstrained.
	ResponseFormat json.RawMessage `json:"response_format,omitempty"`
	// Timeout bounds each request from send to end of stream; zero means
	// DefaultTimeout.
	Timeout time.Duration `json:"-"`
	SLO     SLO           `json:"slo"`
	Seed    uint64        `json:"seed"`
}

// MarshalJSON adds the timeout in seconds.
func (w Workload) MarshalJSON() ([]byte, error) {
	type plain Workload
	return json.Marshal(struct {
		plain
		Timeout float64 `json:"timeout_s"`
	}{plain(w), w.timeout().Seconds()})
}

func (w Workload) timeout() time.Duration {
	if w.Timeout <= 0 {
		return DefaultTimeout
	}
	return w.Timeout
}

// Config is one invocation: the workload run against every target.
type Config struct {
	Targets  []Target `json:"targets"`
	Workload Workload `json:"workload"`
}

// Validate reports the first problem that would make a run meaningless.
func (c Config) Validate() error {
	if len(c.Targets) == 0 {
		return fmt.Errorf("%w: no target", ErrConfig)
	}
	seen := map[string]bool{}
	for _, t := range c.Targets {
		if _, err := ParseTarget(t.Name + "=" + t.URL); err != nil {
			return err
		}
		if seen[t.Name] {
			return fmt.Errorf("%w: target name %q used twice", ErrConfig, t.Name)
		}
		seen[t.Name] = true
	}
	w := c.Workload
	switch w.Endpoint {
	case EndpointChat, EndpointCompletions:
	default:
		return fmt.Errorf("%w: endpoint %q, want chat or completions", ErrConfig, w.Endpoint)
	}
	if len(w.Levels) == 0 {
		return fmt.Errorf("%w: no level", ErrConfig)
	}
	open := w.Levels[0].OpenLoop()
	for _, l := range w.Levels {
		if l.OpenLoop() != open {
			return fmt.Errorf("%w: levels mix closed and open loop", ErrConfig)
		}
		if l.Rate < 0 || l.Concurrency < 0 || (!l.OpenLoop() && l.Concurrency == 0) {
			return fmt.Errorf("%w: level %s", ErrConfig, l.Label())
		}
	}
	if w.Requests <= 0 {
		return fmt.Errorf("%w: requests %d, want > 0", ErrConfig, w.Requests)
	}
	if w.Warmup < 0 {
		return fmt.Errorf("%w: warmup %d", ErrConfig, w.Warmup)
	}
	if w.MaxTokens <= 0 {
		return fmt.Errorf("%w: max tokens %d, want > 0", ErrConfig, w.MaxTokens)
	}
	if len(w.ResponseFormat) > 0 {
		var rf struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(w.ResponseFormat, &rf); err != nil || rf.Type == "" {
			return fmt.Errorf("%w: response format is not an object with a type", ErrConfig)
		}
	}
	return w.Prompts.validate()
}

func (p PromptSet) validate() error {
	switch p.Shape {
	case PromptsRandom, PromptsFixed, PromptsSharedPrefix:
	default:
		return fmt.Errorf("%w: prompts %q, want random, fixed or shared-prefix", ErrConfig, p.Shape)
	}
	if p.Tokens <= 0 {
		return fmt.Errorf("%w: prompt tokens %d, want > 0", ErrConfig, p.Tokens)
	}
	if p.Range < 0 || p.Range > 1 {
		return fmt.Errorf("%w: prompt range %g, want 0..1", ErrConfig, p.Range)
	}
	if p.Prefixes < 0 || p.PrefixTokens < 0 {
		return fmt.Errorf("%w: negative shared prefix", ErrConfig)
	}
	if p.Shape == PromptsSharedPrefix {
		if n := p.prefixTokens(); n < 1 || n >= p.Tokens {
			return fmt.Errorf("%w: shared prefix of %d tokens in prompts of %d", ErrConfig, n, p.Tokens)
		}
	}
	return nil
}

func (p PromptSet) spread() float64 {
	if p.Range == 0 {
		return 0.5
	}
	return p.Range
}

func (p PromptSet) prefixes() int {
	if p.Prefixes == 0 {
		return 4
	}
	return p.Prefixes
}

func (p PromptSet) prefixTokens() int {
	if p.PrefixTokens == 0 {
		return p.Tokens * 3 / 4
	}
	return p.PrefixTokens
}

// ms converts a duration to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

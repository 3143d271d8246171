package server

import (
	"context"
	"log/slog"
)

// Telemetry fields a log record may carry. Anything else is dropped at the
// source, whoever adds it: request content, token ids and hashes never
// reach a log.
var telemetryFields = map[string]bool{
	"request_id":        true,
	"model":             true,
	"architecture":      true,
	"endpoint":          true,
	"stream":            true,
	"status":            true,
	"class":             true,
	"code":              true,
	"param":             true,
	"finish_reason":     true,
	"prompt_tokens":     true,
	"completion_tokens": true,
	"cached_tokens":     true,
	"reasoning_tokens":  true,
	"ttft_ms":           true,
	"e2e_ms":            true,
	"disconnected":      true,
	"ignored_fields":    true,
}

// allowlist is a slog.Handler that passes only telemetry fields.
type allowlist struct {
	next    slog.Handler
	allowed map[string]bool
	muted   bool // inside a group that is not allowed
}

// newAllowlist wraps next with the telemetry field allowlist.
func newAllowlist(next slog.Handler) slog.Handler {
	return &allowlist{next: next, allowed: telemetryFields}
}

func (a *allowlist) Enabled(ctx context.Context, l slog.Level) bool { return a.next.Enabled(ctx, l) }

func (a *allowlist) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	if !a.muted {
		r.Attrs(func(at slog.Attr) bool {
			if keep, ok := a.filter(at); ok {
				out.AddAttrs(keep)
			}
			return true
		})
	}
	return a.next.Handle(ctx, out)
}

// filter keeps an allowed attribute; a group keeps its allowed members.
func (a *allowlist) filter(at slog.Attr) (slog.Attr, bool) {
	if !a.allowed[at.Key] {
		return slog.Attr{}, false
	}
	if at.Value.Kind() != slog.KindGroup {
		return at, true
	}
	var kept []any
	for _, m := range at.Value.Group() {
		if k, ok := a.filter(m); ok {
			kept = append(kept, k)
		}
	}
	return slog.Group(at.Key, kept...), true
}

func (a *allowlist) WithAttrs(attrs []slog.Attr) slog.Handler {
	if a.muted {
		return a
	}
	var kept []slog.Attr
	for _, at := range attrs {
		if k, ok := a.filter(at); ok {
			kept = append(kept, k)
		}
	}
	return &allowlist{next: a.next.WithAttrs(kept), allowed: a.allowed}
}

func (a *allowlist) WithGroup(name string) slog.Handler {
	if a.muted || !a.allowed[name] {
		return &allowlist{next: a.next, allowed: a.allowed, muted: true}
	}
	return &allowlist{next: a.next.WithGroup(name), allowed: a.allowed}
}

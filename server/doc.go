// Package server is the provider's OpenAI-compatible HTTP edge: plain
// net/http handlers over the request graph.
//
//	POST /v1/chat/completions   chat, streamed (SSE) or not
//	POST /v1/completions        text completion, streamed or not
//	GET  /v1/models             registered models (architectures with an adapter only)
//	GET  /v1/models/{model}     one of them
//	GET  /health                200 when serving; 503 while loading or when an engine died
//	GET  /metrics               Prometheus text format
//	GET  /v1/status             live figures per model, recent refusals (the dashboard's)
//	GET  /                      the dashboard page (assets under /dashboard/)
//
// The server owns the one place errors become HTTP: classify maps the
// error classes of stages, graph and engine to a status, an OpenAI error
// type and code, and a fixed message. Messages never echo request content,
// the requested model id, or a decoder's error text.
//
// # Invariants
//
//   - A generation request leaves in exactly one way, counted once in
//     provider_requests_total and logged once: a response, an error body,
//     or a client cancel (499, never counted as a provider fault).
//   - A streamed response commits its headers only with its first event,
//     so an error before any output gets its real status; after that,
//     errors travel as an SSE error event and the stream ends without
//     [DONE].
//   - A client that goes away cancels its generation: the request context
//     is the generation's context.
//   - Logs pass a telemetry allowlist: ids, model names, counts, timings,
//     statuses and error classes; never prompt or response text, token ids
//     or hashes.
//
// # Imports
//
// server imports graph, stages, engine (error classes and stats),
// tokenizer and jinja (the types of a registration), and family, only for
// what an architecture fixes of a registration (For: its output parsers,
// default chat template and tool syntax; never Build or Vision); it never
// imports model or mlx itself: the engine reaches it only as a
// graph.Generator.
package server

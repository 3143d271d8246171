package server

import (
	"fmt"
	"io"
	"slices"
)

// knownExtensions are request fields other OpenAI-compatible servers
// (vLLM, llama.cpp, SGLang, OpenAI's newer models) accept and we ignore:
// provider_ignored_fields_total counts them by name, and every other
// ignored name as "other", so the label set stays bounded whatever
// clients send.
var knownExtensions = map[string]bool{
	// vLLM
	"min_tokens": true, "stop_token_ids": true, "include_stop_str_in_output": true,
	"skip_special_tokens": true, "spaces_between_special_tokens": true, "truncate_prompt_tokens": true,
	"chat_template": true, "chat_template_kwargs": true, "add_generation_prompt": true,
	"continue_final_message": true, "add_special_tokens": true, "documents": true,
	"guided_json": true, "guided_regex": true, "guided_choice": true, "guided_grammar": true,
	"use_beam_search": true, "length_penalty": true, "prompt_logprobs": true, "priority": true,
	"request_id": true, "return_tokens_as_token_ids": true, "echo": true,
	// llama.cpp
	"typical_p": true, "tfs_z": true, "mirostat": true, "mirostat_tau": true, "mirostat_eta": true,
	"dynatemp_range": true, "dynatemp_exponent": true, "xtc_probability": true, "xtc_threshold": true,
	"dry_multiplier": true, "dry_base": true, "dry_allowed_length": true, "top_n_sigma": true,
	"repeat_last_n": true, "penalize_nl": true, "n_predict": true, "n_probs": true, "cache_prompt": true,
	"samplers": true, "id_slot": true, "timings_per_token": true, "return_progress": true,
	"grammar": true, "json_schema": true,
	// others
	"top_a": true, "enable_thinking": true, "thinking": true, "prediction": true, "audio": true,
	"web_search_options": true, "verbosity": true, "safety_identifier": true, "stream_usage": true,
	"suffix": true, "best_of": true, "messages": true, "prompt": true, "max_completion_tokens": true,
	"top_logprobs": true, "reasoning_effort": true, "tools": true, "tool_choice": true,
	"response_format": true, "functions": true, "function_call": true, "parallel_tool_calls": true,
	"store": true, "metadata": true, "service_tier": true, "modalities": true,
}

// Bounds on the names one request's log line carries.
const (
	maxLoggedIgnored  = 16
	maxIgnoredNameLen = 64
)

// ignoredLabel is the metrics label of an ignored field's name.
func ignoredLabel(name string) string {
	if knownExtensions[name] {
		return name
	}
	return "other"
}

// loggableIgnored returns the names of a request's ignored fields for its
// log line: names only (never values), at most maxLoggedIgnored, each a
// plain identifier of at most maxIgnoredNameLen bytes; any other name is
// logged as "other".
func loggableIgnored(names []string) []string {
	out := make([]string, 0, min(len(names), maxLoggedIgnored))
	for _, n := range names[:min(len(names), maxLoggedIgnored)] {
		if !plainName(n) {
			n = "other"
		}
		out = append(out, n)
	}
	return out
}

func plainName(s string) bool {
	if s == "" || len(s) > maxIgnoredNameLen {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// ignore counts a request's ignored fields.
func (m *metrics) ignore(names []string) {
	if len(names) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ignored == nil {
		m.ignored = map[string]uint64{}
	}
	for _, n := range names {
		m.ignored[ignoredLabel(n)]++
	}
}

// writeIgnored renders provider_ignored_fields_total; mu must be held.
func (m *metrics) writeIgnored(w io.Writer) {
	header(w, "provider_ignored_fields_total", "counter", "Request fields ignored because the server does not know them, by name (names outside a fixed list of known extensions count as other).")
	labels := make([]string, 0, len(m.ignored))
	for l := range m.ignored {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	for _, l := range labels {
		fmt.Fprintf(w, "provider_ignored_fields_total{field=%s} %d\n", quote(l), m.ignored[l])
	}
}

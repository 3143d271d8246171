// Package grammar owns constrained decoding: it compiles a response
// format (a JSON schema, any JSON object, a regex or a Lark grammar) into
// a grammar over one model's vocabulary and gives each generation a
// Constraint (engine.Constraint) that masks the tokens the grammar does
// not allow at each step.
//
// The grammar engine is llguidance (github.com/guidance-ai/llguidance),
// a Rust library with a C API, linked statically through cgo from
// .deps/llguidance (scripts/setup_llguidance.sh builds it with cargo;
// grammar/rust pins the crate and its dependencies).
//
// # The vocabulary
//
// llguidance sees a vocabulary as each token's bytes. A Compiler builds
// them once per model from package tokenizer: the bytes a token adds to
// decoded text (tokenizer.Piece: byte-level BPE tokens their decoded
// bytes, SentencePiece pieces with U+2581 as a space, byte-fallback
// tokens their byte), control and end-of-sequence tokens as 0xFF and
// their name (so no text ever spells them), and tokens that decode to
// nothing as empty (never allowed). End of sequence is allowed exactly
// when the output so far is a whole sentence of the grammar.
//
// # JSON
//
// JSON schemas compile as llguidance compiles them (draft 2020-12 less
// what docs/json_schema.md of llguidance lists: no remote $ref, oneOf
// only where it equals anyOf, the formats date-time, time, date,
// duration, email, hostname, ipv4, ipv6, uuid and uri); what it cannot
// compile is ErrCompile. Object properties come in the order the schema
// lists them. Whitespace between tokens is bounded (Whitespace) unless
// the schema sets llguidance's own options ("x-guidance"); none is
// allowed before or after the value.
//
// # Invariants
//
//   - A Compiler and a Grammar are safe for concurrent use; a Constraint
//     is used by one goroutine at a time (the engine's contract).
//   - Every token a Constraint's mask allows can be accepted, and a
//     sequence of accepted tokens followed by end of sequence decodes to
//     a sentence of the grammar.
//   - C memory is freed by Close (constraints) or when the Go value is
//     collected (compiled grammars, vocabularies, constraints never
//     closed).
//
// # Imports
//
// grammar imports engine only for the Constraint and Grammar interfaces
// it implements and tokenizer for the vocabulary; it knows nothing of
// the request pipeline or HTTP. engine never imports grammar.
package grammar

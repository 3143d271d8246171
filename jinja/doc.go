// Package jinja renders the chat templates that model repositories ship
// (tokenizer_config.json's chat_template, GGUF's tokenizer.chat_template)
// with output byte-identical to Python jinja2 as Hugging Face transformers
// runs it in apply_chat_template.
//
// The package owns the whole pipeline: a lexer that reproduces jinja2's
// whitespace handling (trim_blocks and lstrip_blocks on, the "-" and "+"
// markers, newline normalisation and the dropped trailing newline), a parser
// for the statement and expression grammar chat templates use, and a
// tree-walking evaluator with Python value semantics: truthiness, repr-style
// printing of lists and dicts, float formatting, integer division, string
// methods, and jinja2's Undefined and sandbox rules.
//
// Invariants:
//
//   - A parsed *Template is immutable; Render may run concurrently.
//   - Rendering never mutates the caller's values: the environment is the
//     immutable sandbox, so list.append, dict.update and friends fail with
//     ErrSecurity just as they do in transformers.
//   - Mappings keep insertion order. Values decoded with DecodeJSON, and
//     *Dict values, print and serialise (tojson) in their original key order;
//     a plain Go map has none, so its keys are taken in sorted order.
//   - Work is bounded: Limits caps evaluation steps, call and nesting depth
//     and output size, so no template, however hostile, renders forever or
//     exhausts memory. Exceeding a limit yields ErrLimit.
//   - Every failure is an *Error carrying the template line and column and
//     one of the kind sentinels (ErrSyntax, ErrUndefined, ErrRaised, ...),
//     matching the Python exception class jinja2 would raise.
package jinja

// Package toolcall owns OpenAI tool calling apart from HTTP, templates and
// the engine: the tools a request offers and its tool_choice, the syntaxes
// models write calls in, a streaming scanner that finds calls in generated
// text, the text that tells a model about tools when its chat template
// does not, and what a required or named tool_choice asks a constrained
// sampler to enforce.
//
// # Syntaxes
//
// A model writes a call the way it was trained to; Detect picks the
// syntax from the model's family (whose syntax package family holds) and
// its chat template:
//
//	Harmony   gpt-oss: a message to functions.NAME in harmony's commentary
//	          channel; the structure is tokens, so package harmony reads it
//	Gemma4    <|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|>
//	Hermes    <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//	          (Qwen, Hermes, and every template that knows no tools)
//	Llama3    the whole answer is {"name": ..., "parameters": {...}},
//	          after an optional <|python_tag|>
//	ToolCode  a fenced ```tool_code block holding a JSON call object or
//	          Python-style calls name(key="text", n=1) (Gemma 3, whose
//	          template has no tool tokens)
//
// # Scanning
//
// Scanner reads one generation's text as it streams and releases content
// and complete calls. A call is released whole once it is complete and
// parses; until then its text is held. What does not parse as a call
// (bad JSON, a missing name, an unclosed block at the end) is released as
// the text the model wrote, so no output is ever lost to the scanner.
// Whitespace that only separates calls from each other or from the text
// is dropped.
//
// # Invariants
//
//   - What a Scanner releases depends only on the text, never on how it is
//     split into Feed calls.
//   - Released content, concatenated, is the generated text minus the
//     text of the released calls and the whitespace that touched them.
//   - Arguments of a released call are a JSON object in compact form.
//
// # Imports
//
// toolcall imports only the standard library: stages, harmony and the
// server use it, never the reverse.
package toolcall

// Package harmony owns gpt-oss's chat format, harmony, on the serving path:
// the prompt a chat request renders to, and the parser that splits the
// generated tokens into what the client sees.
//
// # Format
//
// A harmony conversation is a sequence of messages, each
//
//	<|start|>{role}[ to={recipient}]<|channel|>{channel}[ <|constrain|>{type}]<|message|>{text}<|end|>
//
// The prompt ends with "<|start|>assistant", so generation starts inside
// a header. The model typically reasons in the analysis channel, then
// answers in the final channel and ends with <|return|>; a tool call is a
// message with a recipient, ended by <|call|>. <|return|> and <|call|>
// end generation (StopTokens); <|end|> ends one message only.
//
// # Rendering
//
// Prompts are rendered by the model's own chat template when it has one;
// ChatTemplate (the official gpt-oss template) stands in when it has
// none. Both read reasoning_effort (low, medium, high; the template
// defaults to medium) into the system message's "Reasoning:" line.
//
// # Output
//
// Parser is the stages.OutputParser of a gpt-oss chat generation. It reads
// token ids, not text: structure tokens render as no text, so only their
// ids say where a header or a body begins. What goes where:
//
//	analysis channel               reasoning (reasoning_content); its body
//	                               tokens are the reasoning tokens of usage
//	final channel                  content
//	commentary channel             content: without a recipient it is a
//	                               preamble meant for the user
//	a message to functions.NAME    with tools offered (NewToolParser): a
//	                               tool call (stages.Output.Calls), its
//	                               body the arguments; a body that is not
//	                               a JSON object is content
//	any other message with a       nothing: a call of a tool that was not
//	recipient                      offered (an analysis one still counts
//	                               as reasoning tokens)
//	headers, structure tokens      nothing
//
// Messages that go to the same field are concatenated as generated, with
// nothing in between: the parser adds no text of its own. A call is
// reported whole when its body ends (<|call|>, or any token that ends a
// body).
//
// # Invariants
//
//   - Structure tokens never appear in the output, whole or in part: they
//     are ids, and the text of an id is never released. (The same
//     characters generated as ordinary text tokens are text.)
//   - The output depends only on the token sequence, never on how it is
//     split into Add calls.
//   - Text is never lost to structure the parser does not understand:
//     text outside any message, a header that cannot be one (a character
//     no header has, a length no header reaches, a first word at
//     generation start other than "to="), an unknown channel, or a body
//     cut by a stray structure token, all become content. Only header
//     text that still reads as a header is dropped when the stream cuts
//     it off.
//
// # Imports
//
// harmony imports stages for the OutputParser seam it plugs into,
// tokenizer, and toolcall for the calls it reports; it never imports
// server, graph or engine.
package harmony

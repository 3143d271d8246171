// Package stages owns the request-level units of the serving pipeline and
// the per-token path that follows the engine.
//
// # Request stages
//
// A Stage is a typed unit: it is handed the request's context and its
// Request (the data as it is enriched) and returns an error or nothing.
// Run wraps a Stage around an Envelope, which carries the context, the
// reply channel and the error through the pipeline: a failed stage marks
// the envelope and passes it on, later stages skip it, and the terminal
// (in package graph) replies. The stages, in order:
//
//	Parse        OpenAI chat/completions JSON -> validated Params, resolved Model
//	MediaDecode  decoded images and video frames (package media)
//	Template     chat template (add_generation_prompt) or raw prompt -> Tokens;
//	             image and video markers expanded to the model's placeholder runs
//	VisionTower  the model's tower on each image and frame -> MediaItems (soft tokens)
//	SpanCarve    one span per item over its placeholder run -> Spans
//	Admit        request id, token bounds, sampling, spans and soft tokens
//	             -> engine.Generation (one per choice: n per prompt)
//
// # Images
//
// A model with a vision tower (Model.Vision) gets chat content parts as
// lists ({"type": "image"} where an image was), so its template writes its
// image marker in place; Template replaces each marker, before tokenizing,
// with the tower's prompt for that decoded image, as the model's processor
// writes it (Gemma 3: "\n\n<start_of_image>", 256 <image_soft_token>,
// "<end_of_image>\n\n"). An image's size may set its number of soft
// tokens: media is decoded first for that reason, and so that bad media is
// refused before any tokenizing. The tower runs on an MLX thread and stream
// of its own, beside the engine's steps (package family); its soft
// tokens travel as engine.Generation.Embeds, written over the placeholders'
// embeddings by the family's forward pass, and each placeholder run is a
// span: attended bidirectionally, never split by a prefill chunk, keyed in
// the prefix cache by the image's hash. Markers and images that do not
// pair up one for one are refused: 400 when the request's text holds
// markers, 503 (CarveError) when the template dropped an image; a tower
// failure is 503 vlm_extraction_failed (ErrVision).
//
// A tower whose Video reports true is a VideoVision: a video part's marker
// becomes the prompt of its sampled frames (Gemma 4: per frame its mm:ss
// timestamp and its run of video placeholders), each frame is one item
// and one span, and the items follow the parts' order across images and
// videos. Without one, video parts are refused (400 unsupported_media).
//
// # Token path
//
// After the engine accepted a generation, Detokenizer turns its events into
// Deltas on a typed per-request channel: text from the tokenizer's stream
// decoder, stop strings held back until they can no longer match and never
// emitted, logprob entries released with the text they produced. Framer and
// Collector turn Deltas into OpenAI response bytes (SSE chunks or one JSON
// body). The per-token path never goes through a chan any.
//
// A response of several choices (n > 1, or a completion's list of
// prompts) is one generation per choice, each with its own token path;
// Detokenizer merges their Deltas, each marked with its choice's index,
// into the request's one channel, and the first error ends them all.
//
// A model whose output has structure gives chat generations an
// OutputParser (Model.NewOutputParser; package harmony for gpt-oss): it
// owns decoding and splits the text into content and reasoning, marks the
// reasoning tokens for usage, and may end the generation on a token of its
// format. Stop strings and logprobs apply to content only; reasoning is
// delivered as Delta.Reasoning as soon as the parser releases it.
//
// # Tools
//
// A chat request may offer tools (Params.Tools, parseTools) and send calls
// and their results back as history. Each model has a ToolDialect, found
// when it is registered (DetectTools): the syntax its calls are written
// in (package toolcall) and what its chat template renders of tools,
// calls and results, learned by rendering probe conversations. RenderChat
// passes tools and calls to the template as Hugging Face templates take
// them, and writes in the model's syntax what the template does not
// render (a system preamble listing the tools, calls as assistant text,
// results as user turns), so tools are never dropped silently. The
// output of a generation that offers tools goes through the model's tool
// parser (harmony's) or a toolOutput scanning the text; its calls travel
// as Output.Calls and Delta.ToolCalls, are framed as OpenAI tool-call
// deltas with ids minted from the response id, and an answer that made
// calls finishes with "tool_calls". tool_choice "none" offers nothing; a
// required or named choice is enforced by constrained decoding: the
// generation carries the grammar of the model's call syntax around the
// tools' argument schemas (ToolChoiceGrammar).
//
// # Replay
//
// Every stage can be recorded: Run and Detokenizer hand a Recorder the
// msgpack encoding of what went in and what came out, and Replay re-runs a
// record through its stage. Stages read no wall clock of their own: time
// comes from the envelope (Request.Received) or an injected clock, and
// minted ids are drawn before the pipeline, so a replay yields the same
// bytes every time.
//
// # Invariants
//
//   - A stage never runs on an envelope that already carries an error or
//     whose context is done.
//   - Errors meant for the client are *Invalid (the request is wrong,
//     ErrInvalid) or ErrUnknownModel; their text is fixed and never echoes
//     request content. Everything else is the provider's fault.
//   - A Detokenizer stream delivers content Deltas and then exactly one
//     final Delta (Final: the last choice's Finish, or Err), then closes;
//     text of a stop string and text after it are never delivered.
//
// # Imports
//
// stages knows nothing of HTTP, the server or the graph wiring and must
// never import them (nor go-streams): it imports engine only for the types
// of its boundary (Generation, Event).
package stages

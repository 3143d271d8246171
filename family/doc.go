// Package family is the one place that knows an architecture. Each
// architecture served is one Family value (Llama, Gemma3, Gemma4, GPTOSS)
// in the registry, and For is the one lookup: it answers to every
// config.json model_type a Family lists and refuses anything else with an
// error wrapping model.ErrUnsupportedArch. Supported lists the registry,
// and only what it lists is advertised and registered for serving.
//
// A Family holds:
//
//	Arch            its name, model.Config.Arch of its checkpoints
//	ModelTypes      the config.json model_type values read as it
//	Build           its forward pass over uploaded weights (MLX thread)
//	LoadVision      its vision tower loader; nil when it has none
//	ToolSyntax      how its models call tools when their template shows
//	                no syntax (toolcall.Detect)
//	Output          its output parsers from its vocabulary; nil for plain
//	                text (gpt-oss: harmony's)
//	ChatTemplate    the template of a checkpoint that ships none; "" when
//	                its format is not fixed
//	DummyTokenizer  the tokenizer.json of its dummy models
//
// Adding an architecture means writing its forward pass in model/<arch>,
// adding one Family value here and listing it in the registry. Package
// model cannot import this one (this package imports it), so what model
// itself does per architecture stays there: its config.json reader
// (ReadHFConfig, by model_type), and one table of its checkpoint hooks
// (tensor check, read and adapt, extra EOS tokens, dummy manifest,
// tensor-parallel split) that model.Architectures lists; the tests here
// keep that list equal to Supported.
//
// # Invariants
//
//   - Supported() lists exactly the registry's Arch values, the same as
//     model.Architectures(), and For(a)
//     answers for each of them and for each of their ModelTypes; no
//     model_type belongs to two families.
//   - For never returns a partial Family: an unknown architecture gets the
//     zero Family (no hooks) with its error, so a caller that ignores the
//     error (server, where nil Architectures admit any) gets plain text
//     output and no default template.
//
// # Vision towers beside the decode loop
//
// A tower runs on its own MLX thread and stream (vision.go), named
// provider-tower, at background priority (nice 19, inherited by its
// stream's worker; PROVIDER_TOWER_BACKGROUND=0 keeps normal priority), and
// evaluates its graph one primitive at a time (mlx.EvalStepwise) so that
// it never fills MLX's shared queue of tasks, which would make the decode
// loop wait on it. It then takes only the cores decode leaves: a text
// row's TPOT beside a 32-frame video's tower equals its TPOT alone
// (bench/results/video-tower-*, BenchmarkTextBesideVideoTower).
//
// # Imports
//
// family imports model and the model/<arch> packages, mlx and media (the
// vision towers), stages (the pipeline's Vision and OutputParser types),
// harmony and toolcall (output formats). It never imports server, graph,
// engine or cmd: they ask it.
package family

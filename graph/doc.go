// Package graph composes the request pipeline: a bounded intake, the
// request stages of package stages as go-streams Flows, and a terminal that
// submits each admitted request to its model's Generator and replies.
//
//	Submit -> intake (bounded) -> parse -> media -> template -> vision
//	       -> spans -> admit -> terminal (Generator.Submit) -> reply
//	reply  -> Detokenizer (typed per-request channel) -> Stream.Deltas
//
// go-streams moves elements as chan any with no error or cancellation
// path, so every element is a *stages.Envelope carrying its context, its
// reply channel and its error; the per-token path never goes through it.
//
// # Backpressure
//
// The intake holds at most Options.Intake envelopes and every stage holds
// one at a time. A request that finds the intake full waits up to
// Options.IntakeWait and then fails with ErrBusy; memory is bounded by the
// intake plus the stages, never by the offered load. Per model, the
// engine's own waiting queue bounds admitted work (engine.ErrQueueFull).
//
// # Invariants
//
//   - Every envelope that enters the intake is replied to exactly once,
//     by the terminal; Submit always takes that reply, so an engine stream
//     opened for a caller that gave up is still read to its end.
//   - An envelope that failed or whose context ended is never submitted to
//     a Generator.
//   - With Parallelism 1 (the default) requests leave every stage in the
//     order they entered the intake, and the Harness replays a recorded
//     Trace to the same bytes every time.
//
// # Imports
//
// graph imports stages, engine (boundary types only) and go-streams; it
// knows nothing of HTTP and must never import the server.
package graph

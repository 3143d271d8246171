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
//     Trace to the same bytes every time. With more (serve runs one worker
//     per core) each request still passes the stages in order and its
//     records replay to the same bytes; only the order between requests
//     may change, so a long tokenization holds up no other request.
//
// # Bounds
//
// What waiting clients can hold is bounded by construction (serve's
// defaults):
//
//   - Connections: at most 1,024 open (--max-connections); more wait in
//     the kernel's accept queue. Headers must arrive within 10 s and be
//     at most 64 KiB, a request (headers and body) within 60 s; an idle
//     keep-alive connection closes after 120 s; a stream whose client
//     reads nothing for 30 s loses its stream and its engine row.
//   - Bodies: a generation request takes its place in the server's intake
//     (Intake places, default 64) before its body is read, or gets 429
//     after IntakeWait (2 s); it gives the place back once the pipeline has
//     admitted or refused it. A body is at most 32 MiB (413 above), read
//     into a buffer of its declared size, and bodies held at once share a
//     256 MiB budget (server.Options.BodyBudget): a body takes its declared
//     size (32 MiB when undeclared) before its intake place, or gets 429
//     after the intake wait, so large bodies waiting for the budget hold
//     no place. Bodies of 1 MiB and more are large: they may not take the
//     budget's last 16 MiB, kept for small bodies, and at most one fewer
//     than the cores run through the stages at once (at least one), so a
//     small request always finds its share, a stage worker and a core.
//     Large bodies are read, all together, at 64 MiB/s after a burst of
//     8 MiB (server.Options.LargeBodyRate, PROVIDER_LARGE_BODY_RATE):
//     their senders wait in the kernel's flow control instead of taking
//     the CPU that reading, copying and parsing them at loopback speed
//     would. 100 clients sending 32 MiB at once held the server under
//     300 MiB of RSS; on two cores a normal request's first token
//     meanwhile had a median of 2.3 ms (2.0-2.1 ms unloaded) and a 90th
//     percentile of 3.6 ms; with the rate unbounded 2.7 ms and 6.6-8.5 ms,
//     and 490-520 MiB of RSS (cmd/provider TestServeHostileBodies; 7 of
//     the 100 bodies were served, the others got 429 after the wait).
//   - Requests in the pipeline: the graph's own intake (Intake) and one
//     envelope per stage worker; admitted generations are bounded by each
//     engine's running rows and its waiting queue (429 beyond it).
//
// # Imports
//
// graph imports stages, engine (boundary types only) and go-streams; it
// knows nothing of HTTP and must never import the server.
package graph

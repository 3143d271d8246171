// Package bench drives OpenAI-compatible servers over HTTP with a
// reproducible request mix and measures them the way serving benchmarks
// define the numbers: TTFT, TPOT, ITL, E2E, request and output-token
// throughput, and goodput under SLOs.
//
// It owns the workload (closed-loop concurrency sweeps and open-loop
// Poisson arrivals over random, fixed-length and shared-prefix prompt
// sets), the streaming client that times each request, the metric math,
// and the outputs: a progress bar, a terminal table, results.json,
// report.md with ratios between targets, and PNG plots. [Main] is the
// command line over all of it.
//
// # Definitions
//
// A request is timed from just before it is sent. One whose connection
// breaks before any byte of the response (a server that closes a
// kept-alive connection as the client reuses it, as llama.cpp's server
// does after each streamed answer) is sent again on a fresh connection,
// at most twice, and timed from the attempt that was answered; the
// retries are counted, not failed. Content is a streamed
// chunk carrying non-empty text (chat delta content or reasoning, or
// completion text); role-only, finish-only and usage chunks are not
// content.
//
//   - TTFT: send to the first content chunk.
//   - E2E: send to the end of the stream ([DONE]).
//   - ITL: every gap between consecutive content chunks, pooled over the
//     successful requests of a level.
//   - TPOT: (E2E - TTFT) / (output tokens - 1), only for requests with
//     more than one output token.
//   - Output tokens: completion_tokens of the stream's usage when the
//     server sent usage, else the number of content chunks; each record
//     says which.
//   - Throughput: successful requests, and their output tokens, divided
//     by the level's duration (its first send to its last completion).
//   - Goodput: successful requests meeting every SLO that is set,
//     divided by the same duration; a request with at most one output
//     token meets the TPOT SLO.
//   - Percentiles interpolate linearly between the closest ranks
//     (numpy's default): rank = p/100 * (n-1) over the sorted values.
//
// # Invariants
//
//   - Every request that is sent yields exactly one [Record], success or
//     failure; failures carry a [FailureKind] and a reason and never enter
//     the latency or throughput metrics, only the failure counts.
//   - A request never outlives its timeout: a stalled or dead target
//     becomes a failure, never a hang or a panic.
//   - The request mix is a pure function of the workload and its seed:
//     every target sees the same prompts in the same order and, open
//     loop, the same arrival times. Prompts are drawn from a seed
//     derived from the base seed, the prompt set and the level, so that
//     no level, and not the warm-up, shares a prompt or its opening with
//     another, within a run or across runs of one seed whose levels or
//     prompt set differ: a server's prompt cache never answers for its
//     prefill. Shared-prefix prompts share prefixes within their level
//     only.
//   - Metric math is pure: it reads recorded durations, never the clock.
//
// # Imports
//
// bench speaks HTTP only; it imports nothing else of the provider, so it
// measures ours and peers alike.
package bench

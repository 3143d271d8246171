// Package engine owns one model's continuous-batching engine: which requests
// run, how far each advances per step, and how many KV-cache bytes they may
// hold.
//
// # The policy core
//
// The core is pure: KVLayout (cache byte math), Ledger (the KV-byte
// admission ledger) and Scheduler (the step planner) read no clock, start no
// goroutine, do no I/O and never touch MLX. Like a consensus state machine
// that is handed messages and returns what to do, the Scheduler is driven by
// the engine loop around it:
//
//	s.Submit(req) / s.Cancel(id) / s.Resize(bytes) / s.SetMaxConcurrent(n)   at any time between steps
//	plan := s.Plan()            decide the next step; charges the ledger for it
//	(drop the caches of plan.Preempted and plan.Finished rows, end the
//	 Finished streams, run plan.Prefill and plan.Decode as one batched step)
//	s.Complete(result)          feed back end-of-sequence tokens and failures
//
// A plan with work must be completed before the next Plan. The same sequence
// of calls always yields the same plans.
//
// # Policy
//
// Submit rejects only what can never fit: a request whose prompt plus
// MaxTokens tokens would need more than capacity - watermark bytes. Others
// are admitted optimistically and charged step by step: before a row takes a
// step the ledger is charged the bytes its cache holds after that step. Each
// step spends at most one token budget: running rows first (decode rows cost
// one token, prefill rows a chunk), then waiting rows in FIFO order while the
// budget, the concurrency cap and the ledger allow. The budget is 2,048
// tokens by default; `provider serve` makes it one prefill chunk (512) on
// the CPU (--step-tokens), where a forward of 2,048 tokens costs more a
// token than one of 512 and one chunk a step finishes prompts oldest
// first. A prefill chunk never ends inside a multimodal span. When growth
// would overflow the ledger the least important running row is preempted:
// it returns to the front of the waiting queue and later recomputes its
// prompt and the tokens it already generated. The watermark (5% of
// capacity) binds admissions only, so rows already running can grow into
// it. Shrinking the capacity never evicts: it stops admissions until the
// ledger drains.
//
// # The loop around the core
//
// Engine runs the Scheduler's plans on the model's MLX thread. Every row's
// keys and values live in one kvpool.Pool (see that package: blocks of 256
// tokens, per-row block tables, sliding groups bounded at their ring). A
// plan's prefill chunks and decode rows run as one forward pass over the
// flattened step; logits are computed only for the rows that sample. Greedy
// rows that ask no logprobs take the argmax on the device, so only their
// token ids cross to the host; the others copy their row of logits and
// sample on the host with their own seeded sampler. The layout the ledger
// charges (LayoutOf) counts whole pool blocks, so between steps the ledger
// holds exactly the bytes the pool's sequences hold.
//
// Steps can be built ahead (ahead.go, Options.Ahead): before the host reads a
// step's picks, the loop queues the next decode step for the rows whose next
// token is the device's argmax of this one (greedy, no grammar, not at their
// token limit, not starting a block), with this step's picks, still on the
// device, as its input. The host's reading, delivering, planning and graph
// building then overlap the device's work. A step built ahead that the next
// plan does not cover is dropped, and changes nothing. StepTimes reports the
// host's build time and its wait for the device. The picks are queued in the
// form the host reads them (mlx.Frame.Flat): a read that added a primitive
// would evaluate it behind the step built ahead, and wait for that step too,
// which is what once made steps built ahead no faster. The server builds
// ahead on a GPU (on an H100 a one-row 7B step took 2.8 to 3.0 ms ahead
// against 3.4 to 3.6 ms after the read, the device idle 0.17 ms a step) and
// not on the CPU, whose stream runs each primitive as a task the host waits
// for.
//
// Within a step, the families queue their layers for the device as they are
// built (mlx.Frame.DispatchLayer: on CUDA every 2 layers,
// PROVIDER_GPU_DISPATCH_LAYERS), so the device runs the first layers while
// the host builds and encodes the rest; the graph and its floats are the
// same. On an H100 a one-row 7B step was paced by the host, and queued it
// took 0.80x the time of the step evaluated at its end. For the same reason
// a Llama layer's products fuse with what follows them where the
// matrix-vector kernel takes them (model.Weight.LinearAdd, LinearSwiGLU,
// LinearHeadsRoPE), and attention reads keys as one strided view of the
// pool: 465 primitives a one-row step instead of 721.
//
// # The prefix cache
//
// With PrefixOptions.Budget set, a cache.Index registers every row's full
// blocks as steps fill them and keeps them after the row ends, up to the
// budget of blocks no row holds, carved out of KVCapacity (rows are
// admitted against the rest; a row is charged its whole length, adopted
// blocks included, so the ledger never undercounts). Admission asks the
// Scheduler's Prefixes for the longest cached prefix of the row's sequence
// that leaves its last token to compute; the row adopts those blocks and
// its first prefill chunk starts after them. A row whose prompt shares
// more blocks with a running row's still-prefilling prompt than the cache
// holds waits at the head of the queue until that row has stored them, so
// rows with one prefix that arrive together cost one prefill. Blocks
// missing from RAM are
// read from the SSD tier (PrefixOptions.Disk) at Submit, by the submitting
// goroutine, and put into the pool when the row is admitted. The usage of
// a finished row reports the adopted tokens as CachedTokens.
//
// # Invariants
//
// At every point between calls:
//
//   - Ledger.Used equals the sum of the charges and is never negative; once
//     every charge is released it is 0.
//   - Used <= Ledger.Ceiling; Ceiling equals the capacity except while a
//     shrink drains, so Used <= capacity whenever no shrink is draining.
//   - The rows holding a charge are exactly the running rows.
//   - A row is in at most one of waiting, running and finished-unreported.
//   - Running rows never exceed the concurrency cap, except after the cap is
//     lowered, until enough rows finish; Plan admits nobody meanwhile.
//   - A plan's tokens (prefill lengths plus decode rows) stay within the
//     token budget, except that the first prefill chunk may overrun it to
//     take a whole span longer than the budget left.
//   - Every request Submit accepted leaves in exactly one way: Cancel, or one
//     Finish in some plan; while steps keep completing, every one of them
//     eventually leaves.
//
// # Imports
//
// The package knows nothing of HTTP, the request-level stage graph, the
// server or the bench harness, and must never import them. The policy core
// imports only the standard library.
package engine

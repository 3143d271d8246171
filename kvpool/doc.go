// Package kvpool owns the keys and values of every sequence a model serves:
// one pool per model, shared by all its rows, for every family.
//
// # Blocks, groups and tables
//
// Storage is allocated in blocks of BlockTokens (256) token positions, the
// prefix cache's block size. Layers with the same sliding window (0: full
// attention) form a group with one block allocator; each storage-owning
// layer of the group has its own key and value arrays of [blocks x
// BlockTokens, KVHeads, HeadDim], and block b of the group is rows
// b*BlockTokens.. of every one of them. A layer that reads another layer's
// keys and values (KV sharing) holds nothing and attends over its source's
// arrays. A sequence (Seq) keeps, per group, a block table: the physical
// block of each logical block (position / BlockTokens). Blocks are
// refcounted (a sequence's hold is one reference; the prefix cache will add
// the sharing of full blocks between sequences); the last release returns a
// block to its group's free list. The arrays
// grow by doubling when a group runs out of free blocks; they never shrink.
//
// A full-attention group keeps every block of a sequence. A sliding group of
// window w keeps, between steps, the newest RingBlocks(w) =
// ceil((w-1)/BlockTokens)+1 blocks: the next query at position n sees
// positions n-w+1 .. n, and the w-1 of them already stored span at most that
// many blocks wherever the boundaries fall. During a step a sequence may hold
// more (a prefill chunk's own blocks); Commit lets them go.
//
// # Steps
//
// A step (Batch) flattens every row's new tokens, prefill chunks and decode
// tokens alike, into N positions, so a family's forward pass runs once over
// [1, N, hidden] whatever the mix. Begin reserves the blocks the step writes;
// the family calls Attend once per layer, which stores the layer's N new keys
// and values and returns each token's attention over its own row: causal,
// within the layer's window, GQA, attention sinks. Logits are computed only
// at LogitRows (each sampling row's last token). Commit, after the pass has
// evaluated, advances the sequences and trims sliding groups.
//
// Attend has two implementations with one meaning. On a CPU stream with
// float32 storage it is one fused primitive per layer (mlx PagedAttention)
// that writes the new keys and values into the pool's arrays in place and
// reads every row's keys through its block table. Elsewhere (CUDA, Metal,
// half precision) it is MLX ops: a scatter into the pool arrays, whose old
// handles are dropped before evaluation so MLX updates them in place, a
// gather of each row's keys into a padded [rows, keys] layout and one
// masked scaled_dot_product_attention for all rows. Tests run both on the
// same steps against attention computed in float64 on the host.
//
// The CPU primitive, on a processor with AVX-512 and head sizes that are
// multiples of 16, works in query tiles: up to 16 (token, head) pairs of
// one row's consecutive tokens and one key-value head share every key and
// value read (a prefill chunk's keys are read once per tile, not once per
// token). A score is a dot product over 16-element chunks of the head
// reduced 16 keys at a time (keys grouped by position, so a decode tile of
// 3 lanes costs no more per score than a full one), and each query's
// floats come from its own operations in one fixed order, so they are the
// same whether the query is alone, in a decode batch or inside a prefill
// chunk, and however a small batch at a long context is split across the
// threads (TestAttendSameAloneAndBatched).
//
// On CUDA, single-token (decode) rows skip the gather: one kernel per
// layer (mlx PagedDecode, compiled by MLX at run time) reads each row's
// keys through its block table, a block of threads per query and head,
// each warp four consecutive keys a turn. Gathering every row's keys each
// step cost most of a step at long contexts (about 2,000 tokens: 73 ms
// against mlx-lm's 37 ms for 8 rows of a 7B model on an H200; 25.7 ms
// through the kernel); at 128 tokens on an H100 the kernel takes a step
// of 8 rows from 22.2 to 14.8 ms (one row: 7.7 ms). A lone row whose keys
// lie in consecutive slots attends over a view of the pool through MLX's
// attention instead: one block of threads per head is too few for one
// row at a long context. PROVIDER_GPU_PAGED_LONE=N sends a lone row that
// sees at most N keys through the kernel all the same (off by default):
// the view costs ten primitives a layer, the kernel one, but on an H100
// at 120 keys the kernel took 0.67 ms a step against 0.29 ms for MLX's
// attention, and the step was no faster
// (bench/results/layer-kernels-nvidia-h100-2026-12-06).
// PROVIDER_GPU_PAGED=0 keeps the MLX-ops path.
//
// In a step of single-token rows on CUDA, the kernel that makes a layer's
// keys and values (the fused q/k/v product and rotation, mlx
// Frame.HeadsRoPE and AffineLinearHeadsRoPE) also writes them into the
// pool at each token's slot (Batch.KernelStore, then Batch.Stored), so
// the step makes no scatter: two primitives a layer fewer, and two
// kernels. MLX keeps arrays immutable and sees the pool only as that
// kernel's input; the write is sound because nothing else in the step
// writes the layer's pool, and the step reads it only in the layer's
// attention, through the paged kernel or MLX's attention over a view,
// both of which take the queries the same kernel makes and so run after
// it on the device. Prefill chunks, whose attention gathers keys through
// an op that takes no queries, scatter as before; so does every step under
// PROVIDER_GPU_KV_STORE=0.
//
// PROVIDER_GPU_PAGED=split sends every decode row, a lone one too,
// through a split kernel (mlx PagedDecode with split set): a block of
// threads per query, head and block of the row's table, at most 256 keys,
// then a second kernel that merges a query's blocks in order, with the
// sink. A row splits at its own block boundaries, so a lone row at 2,000
// tokens still gives each head 8 blocks of threads, and a query's floats
// do not depend on the rest of the step. It is opt-in: correct on an H100,
// a step no faster than the SDPA path for a lone row, a third faster for
// rows that hit the prefix cache, and its one long server run not yet
// clean (bench/results/split-kernel-nvidia-h100-2026-12-05).
// TestAttendPagedCUDA runs the same steps through both kernels and the
// MLX-ops path against float64 attention.
//
// # The ledger agreement
//
// Between steps a sequence of n tokens holds exactly what the engine's
// ledger charges for n tokens (engine.KVLayout.SequenceBytes with Block =
// BlockTokens): per group, whole blocks, a sliding group at most its ring.
// The engine's tests pin this for every family's layout.
//
// # Threads and imports
//
// Every method runs on the model's MLX thread; nothing here locks. The
// package imports only mlx and the standard library; the engine and the
// model families import it.
package kvpool

// Package tp runs one model over several processes by tensor parallelism,
// on MLX's distributed layer (ring over TCP on any machine, nccl on NVIDIA
// GPUs, jaccl between Macs, mpi).
//
// # Ranks
//
// Rank 0, the leader, is the provider process: it owns HTTP, the stage
// graph, the scheduler, the ledger and the KV pool's allocator. Start
// launches ranks 1..N-1 as worker processes of the same binary on this
// machine (a worker started by hand elsewhere with the same environment
// joins the same way), gives every rank the backend's rendezvous, and joins
// the MLX group with them. Each rank holds its share of every model
// (model.Sharding: attention heads with their KV heads, the feed-forward
// width, a vocabulary-split output head), loaded from the checkpoint
// itself, so no rank reads the tensors of another. A dummy model
// (DummySpec) is built the same way: every rank generates each seeded
// tensor whole, as the one process would, and keeps only its part.
//
// # Steps
//
// A model served over the ranks is a Leader: a model.Network whose Forward
// first sends the step's kvpool.Plan (block tables and new tokens) to the
// workers over the control connections, then runs its own share, and
// evaluates it there, so the collectives of every step (an all-sum after
// each attention and feed-forward block, an all-gather of the logits) meet
// in the same order on every rank. One lock orders the steps of all the
// models over one group. Workers keep no allocator: they write and read
// their KV arrays where the plan's tables say.
//
// # Failure
//
// A worker that exits or whose control connection breaks makes the group
// dead: the step in flight fails (the backend reports the lost peer), every
// later Forward fails with ErrRankLost, and Lost reports it (the server's
// /health turns to 503 with reason rank_lost). A worker that cannot run a
// step exits, so the leader never waits on a collective that will not
// come. A worker whose leader goes away exits.
package tp

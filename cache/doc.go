// Package cache is the prefix cache: the keys and values of full 256-token
// prompt blocks, kept after the rows that computed them and adopted by
// later rows whose prompts start the same way, in RAM (Index, over the KV
// pool's refcounted blocks) and on disk (Disk, encrypted files).
//
// # Keys
//
// Block j of a prompt is keyed by ChainKey: an xxhash of typed,
// length-prefixed fields (never a plain concatenation): the namespace (a
// fingerprint of the model's weights and a layout epoch), the parent
// block's key or, for block 0, a root marker and the tenant's scope, the
// media the block holds, and its tokens. The scope is SHA-256 of the
// request's prompt_cache_key, else its user, else all zero (SaltScope);
// since it keys block 0 and every key chains its parent, two scopes never
// share a block. xxhash is not collision-proof: every hit also compares
// the stored block's tokens, parent and scope with the request's, and a
// mismatch is a miss (counted as a collision).
//
// # The RAM tier
//
// The Index registers a tracked sequence's block j the moment a step fills
// it, before the pool's sliding groups let go of it, and takes its own
// reference on the block of every group: full-attention, and sliding too.
// So a later row adopts a prefix exactly, with nothing recomputed: it takes
// every full-attention block of the prefix and, per sliding group, the
// newest kvpool.RingBlocks blocks, which is what a sequence of that length
// would hold had it computed them. (The alternative, keeping only full
// layers and recomputing windowCount x maxWindow tokens on adoption, saves
// memory but little time on models such as Gemma 4.) Admission adopts the
// longest such prefix of at most (prompt-1)/256 blocks, so the last prompt
// token is always computed, and reports it as cached_tokens.
//
// Blocks a running row holds cost the cache nothing (the row is charged
// for them). Blocks only the index holds are bounded by its budget, carved
// out of the model's KV grant: after every step Evict lets go of the least
// recently used, a sliding group's block alone first (the entry still
// chains the blocks after it), a whole entry only once nothing below it is
// left, a stale chain bottom-up before a fresher one loses anything.
//
// # Invariants
//
//   - An entry's tokens are exactly the tokens its blocks were computed
//     from, under its parent's prefix and its scope; a sequence adopts an
//     entry only after comparing them.
//   - Every indexed block has one reference of the index's; Close releases
//     them all.
//   - After Evict, the bytes of blocks only the index holds are at most the
//     budget, unless every such block is a chain's ancestor of a block a
//     running row holds.
//
// # Threads and imports
//
// Index runs on its pool's MLX thread, except Has. The package imports
// kvpool and the standard library (and xxhash); never the engine.
package cache

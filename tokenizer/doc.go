// Package tokenizer owns turning text into token ids and back for the
// models the provider serves. It reproduces two references exactly:
// llama.cpp for vocabularies read from GGUF metadata (New, FromGGUF) and
// the HF tokenizers library for tokenizer.json files (FromJSON).
//
// Two tokenizer models are implemented:
//
//   - SentencePiece-style ("llama" in GGUF): spaces become U+2581, a space
//     is prepended to text that starts the input or follows a special
//     token, adjacent symbols are merged by the best score of the token
//     they form, and characters without a token fall back to <0xXX> byte
//     tokens.
//   - BPE ("gpt2" in GGUF, model type BPE in tokenizer.json): text is split
//     into words by a pre-tokenizer, each word is mapped to byte-level
//     characters (or, for SentencePiece-style BPE such as Llama 2's
//     tokenizer.json, normalized and byte-fallback encoded), and pairs are
//     merged by rank.
//
// The GPT-2, Llama 3, Qwen 2 and o200k pre-tokenizer patterns use
// lookahead and Unicode classes that Go's regexp lacks; they are
// implemented as hand-written scanners that follow the regex semantics,
// including backtracking order.
//
// Special tokens written in text are split out before tokenization:
// control tokens only when EncodeOptions.ParseSpecial is set, user-defined
// (non-special added) tokens always. GGUF vocabularies use llama.cpp's
// longest-token-first partition, tokenizer.json vocabularies HF's
// leftmost-longest match.
//
// Invariants:
//
//   - A Tokenizer is immutable after construction (its word cache is
//     internally synchronized) and safe for concurrent use.
//   - Encode never fails: invalid UTF-8 is tokenized as llama.cpp does (byte
//     tokens for SentencePiece, U+FFFD for BPE) and ids are always in
//     [0, VocabSize()).
//   - Decode and StreamDecoder agree: the concatenation of what a
//     StreamDecoder returns equals Decode of the same ids, and every string
//     either returns is valid UTF-8.
//   - For text without special-token text or U+2581, Decode(Encode(s)) == s
//     whenever s is valid UTF-8 and the vocabulary can represent it (byte
//     fallback or byte-level).
package tokenizer

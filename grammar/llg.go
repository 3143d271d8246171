package grammar

/*
#cgo CFLAGS: -I${SRCDIR}/../.deps/llguidance/include
#cgo LDFLAGS: -L${SRCDIR}/../.deps/llguidance/lib -lllguidance -lgcc_s -lutil -lrt -lpthread -lm -ldl
#include <stdlib.h>
#include <string.h>
#include "llguidance.h"

static LlgTokenizer *grammar_new_tokenizer(uint32_t vocab, const uint32_t *lens, const uint8_t *bytes,
		const uint32_t *eos, uint32_t n_eos, char *err, size_t err_len) {
	LlgTokenizerInitV2 init;
	memset(&init, 0, sizeof(init));
	init.struct_size = sizeof(init);
	init.vocab_size = vocab;
	init.tok_eos = eos[0];
	init.token_lens = lens;
	init.token_bytes = bytes;
	init.use_approximate_greedy_tokenize_fn = true;
	if (n_eos > 1) {
		init.tok_eos_extra = eos + 1;
		init.tok_eos_extra_count = n_eos - 1;
	}
	return llg_new_tokenizer_v2(&init, err, err_len);
}

static LlgMatcher *grammar_new_matcher(const LlgTokenizer *tok, const char *kind, const char *data) {
	LlgConstraintInit init;
	memset(&init, 0, sizeof(init));
	llg_constraint_init_set_defaults(&init, tok);
	init.log_buffer_level = 0;
	init.log_stderr_level = 0;
	return llg_new_matcher(&init, kind, data);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// llgVocab is llguidance's view of a vocabulary (an LlgTokenizer: the
// token trie and its slices). It is immutable and shared by every matcher
// made from it; the C side keeps it alive while they exist.
type llgVocab struct {
	c    *C.LlgTokenizer
	size int // tokens, and bits of a mask
}

// newLLGVocab builds the tokenizer from each token's bytes (special
// tokens prefixed with specialMarker, empty for tokens never sampled) and
// the end-of-sequence tokens, eos[0] first.
func newLLGVocab(tokens [][]byte, eos []int32) (*llgVocab, error) {
	if len(tokens) == 0 || len(eos) == 0 {
		return nil, errors.New("grammar: a vocabulary needs tokens and an end-of-sequence token")
	}
	lens := make([]uint32, len(tokens))
	var total int
	for i, t := range tokens {
		lens[i] = uint32(len(t))
		total += len(t)
	}
	flat := make([]byte, 0, total+1)
	for _, t := range tokens {
		flat = append(flat, t...)
	}
	flat = append(flat, 0) // never empty, so &flat[0] exists
	ids := make([]uint32, len(eos))
	for i, id := range eos {
		ids[i] = uint32(id)
	}
	// Go memory without pointers may be passed: llguidance copies what it
	// keeps before returning.
	var msg [1024]C.char
	c := C.grammar_new_tokenizer(C.uint32_t(len(tokens)), (*C.uint32_t)(unsafe.Pointer(&lens[0])), (*C.uint8_t)(unsafe.Pointer(&flat[0])),
		(*C.uint32_t)(unsafe.Pointer(&ids[0])), C.uint32_t(len(ids)), &msg[0], C.size_t(len(msg)))
	if c == nil {
		return nil, fmt.Errorf("grammar: llguidance refused the vocabulary: %s", C.GoString(&msg[0]))
	}
	v := &llgVocab{c: c, size: len(tokens)}
	runtime.AddCleanup(v, func(c *C.LlgTokenizer) { C.llg_free_tokenizer(c) }, c)
	return v, nil
}

// llgMatcher is one llguidance matcher. It is not safe for concurrent use.
type llgMatcher struct {
	c *C.LlgMatcher
	// vocab keeps the tokenizer reachable while the matcher lives.
	vocab *llgVocab
	words int
}

// newLLGMatcher compiles data of the given llguidance constraint type
// ("json_schema", "json_object", "regex", "lark"). A grammar llguidance
// cannot compile is an error wrapping ErrCompile.
func newLLGMatcher(v *llgVocab, kind, data string) (*llgMatcher, error) {
	ck, cd := C.CString(kind), C.CString(data)
	defer C.free(unsafe.Pointer(ck))
	defer C.free(unsafe.Pointer(cd))
	c := C.grammar_new_matcher(v.c, ck, cd)
	m := wrapMatcher(v, c)
	if err := m.err(); err != nil {
		m.free()
		return nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	return m, nil
}

func wrapMatcher(v *llgVocab, c *C.LlgMatcher) *llgMatcher {
	return &llgMatcher{c: c, vocab: v, words: int(C.llg_matcher_get_mask_byte_size(c)) / 4}
}

// clone copies the matcher's state; the clone shares its compiled
// grammar and lexer caches (llguidance locks them), so cloning a fresh
// matcher is how a cached grammar starts a new generation.
func (m *llgMatcher) clone() *llgMatcher {
	return wrapMatcher(m.vocab, C.llg_clone_matcher(m.c))
}

// err is the matcher's error, nil when it has none.
func (m *llgMatcher) err() error {
	if !bool(C.llg_matcher_is_error(m.c)) {
		return nil
	}
	return errors.New(C.GoString(C.llg_matcher_get_error(m.c)))
}

// maskInto writes the allowed tokens of the next step into dst
// (len(dst) == m.words): bit i%32 of dst[i/32] is token i. A stopped
// matcher allows only the end-of-sequence tokens.
func (m *llgMatcher) maskInto(dst []uint32) error {
	if C.llg_matcher_compute_mask_into(m.c, (*C.uint32_t)(unsafe.Pointer(&dst[0])), C.size_t(4*len(dst))) != 0 {
		return m.err()
	}
	return nil
}

// consume advances past tok.
func (m *llgMatcher) consume(tok int32) error {
	if C.llg_matcher_consume_token(m.c, C.uint32_t(tok)) != 0 {
		return m.err()
	}
	return nil
}

// stopped reports whether only end of sequence may follow.
func (m *llgMatcher) stopped() bool { return bool(C.llg_matcher_is_stopped(m.c)) }

func (m *llgMatcher) free() {
	if m.c != nil {
		C.llg_free_matcher(m.c)
		m.c = nil
	}
}

// freeWith frees m's C matcher once owner is unreachable, unless the
// returned cleanup is stopped first.
func freeWith[T any](owner *T, m *llgMatcher) runtime.Cleanup {
	return runtime.AddCleanup(owner, func(c *C.LlgMatcher) { C.llg_free_matcher(c) }, m.c)
}

// Version is the llguidance build linked in ("llguidance@1.9.1 ...").
func Version() string { return C.GoString(C.llg_get_version()) }

package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpeModel merges symbol pairs by rank. Symbols are identified by their
// text: ids below the vocabulary size are tokens, higher ids are texts that
// appear in merges without being tokens themselves. Identifying symbols by
// text is what makes comparing ids equivalent to comparing the strings
// llama.cpp compares.
type bpeModel struct {
	pre          *preTokenizer
	byteLevel    bool
	ignoreMerges bool

	nTokens int32
	ranks   map[uint64]bpeMerge // key: left<<32 | right symbol
	extra   []string            // texts of symbols >= nTokens
	byteSym [256]int32          // byte-level: symbol of the character standing for each byte

	// HF semantics for symbols that are not tokens.
	hf           bool
	byteFallback bool
	fuseUnk      bool
	unk          int32

	cache wordCache
}

type bpeMerge struct {
	rank   int32
	result int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func newBPE(t *Tokenizer, v Vocab, o buildOptions) (*bpeModel, error) {
	m := &bpeModel{
		nTokens:      int32(len(t.tokens)),
		hf:           o.hf,
		byteFallback: o.byteFallback,
		fuseUnk:      o.fuseUnk,
		unk:          v.UNK,
	}
	m.cache.init()
	extraIDs := map[string]int32{}
	// symbol interns a text; b is looked up without allocating and only
	// copied when it becomes a new extra symbol.
	symbol := func(b []byte) int32 {
		if id, ok := t.byText[string(b)]; ok {
			return id
		}
		if id, ok := extraIDs[string(b)]; ok {
			return id
		}
		id := m.nTokens + int32(len(m.extra))
		s := string(b)
		m.extra = append(m.extra, s)
		extraIDs[s] = id
		return id
	}

	if o.hf {
		m.pre, m.byteLevel, m.ignoreMerges = o.pre, o.byteLevel, o.ignoreMerges
		if m.pre == nil {
			m.pre = &preTokenizer{}
		}
	} else {
		pre, ignore, err := ggufPreTokenizer(v.Pre)
		if err != nil {
			return nil, err
		}
		m.pre, m.byteLevel, m.ignoreMerges = pre, true, ignore
	}

	pairs := o.merges
	if !o.hf {
		pairs = make([][2]string, len(v.Merges))
		for i, s := range v.Merges {
			// Like llama.cpp: split at the first space after the first
			// byte; a merge without one becomes the pair ("", "").
			if k := strings.IndexByte(s[min(1, len(s)):], ' '); k >= 0 && len(s) > 0 {
				k += min(1, len(s))
				pairs[i] = [2]string{s[:k], s[k+1:]}
			}
		}
	}
	m.ranks = make(map[uint64]bpeMerge, len(pairs))
	var buf []byte
	for i, p := range pairs {
		if p[0] == "" && p[1] == "" {
			continue
		}
		if i > 1<<31-1 {
			return nil, fmt.Errorf("tokenizer: too many merges (%d)", len(pairs))
		}
		buf = append(append(buf[:0], p[0]...), p[1]...)
		a, b := symbol(buf[:len(p[0])]), symbol(buf[len(p[0]):])
		key := pairKey(a, b)
		if _, dup := m.ranks[key]; dup && !o.hf {
			continue // llama.cpp keeps the first rank of a repeated pair
		}
		m.ranks[key] = bpeMerge{rank: int32(i), result: symbol(buf)}
	}
	if m.byteLevel {
		for b := 0; b < 256; b++ {
			m.byteSym[b] = symbol([]byte(byteLevelChar[b]))
		}
	}
	return m, nil
}

func (m *bpeModel) text(t *Tokenizer, sym int32) string {
	if sym < m.nTokens {
		return t.tokens[sym]
	}
	return m.extra[sym-m.nTokens]
}

// encode pre-tokenizes s (a text fragment without special tokens) and runs
// BPE on every word.
func (m *bpeModel) encode(t *Tokenizer, s string, out []int32) []int32 {
	sc := bpePool.Get().(*bpeScratch)
	defer bpePool.Put(sc)
	words := m.pre.split(s, &sc.spans)
	for _, w := range words {
		word := s[w.start:w.end]
		if ids, ok := m.cache.get(word); ok {
			out = append(out, ids...)
			continue
		}
		start := len(out)
		out = m.encodeWord(t, word, out, sc)
		m.cache.put(word, out[start:])
	}
	return out
}

type bpeSymbol struct {
	sym        int32
	prev, next int32
}

type bpeCandidate struct {
	rank        int32
	left, right int32
	lsym, rsym  int32 // the pair's symbols when queued; a change makes it stale
	result      int32
}

func bpeBefore(a, b *bpeCandidate) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.left < b.left)
}

type bpeScratch struct {
	syms  []bpeSymbol
	heap  []bpeCandidate
	spans [2][]span
	buf   []byte
}

var bpePool = sync.Pool{New: func() any { return new(bpeScratch) }}

func (m *bpeModel) encodeWord(t *Tokenizer, word string, out []int32, sc *bpeScratch) []int32 {
	if m.ignoreMerges {
		// A word that is a token as a whole is emitted without merging.
		if m.byteLevel {
			buf := sc.buf[:0]
			for i := 0; i < len(word); i++ {
				buf = append(buf, byteLevelChar[word[i]]...)
			}
			sc.buf = buf
			if id, ok := t.byText[string(buf)]; ok {
				return append(out, id)
			}
		} else if id, ok := t.byText[word]; ok {
			return append(out, id)
		}
	}

	syms := sc.syms[:0]
	addSym := func(sym int32) {
		syms = append(syms, bpeSymbol{sym: sym, prev: int32(len(syms)) - 1, next: int32(len(syms)) + 1})
	}
	if m.byteLevel {
		for i := 0; i < len(word); i++ {
			addSym(m.byteSym[word[i]])
		}
	} else {
		for i := 0; i < len(word); {
			_, n := utf8.DecodeRuneInString(word[i:])
			ch := word[i : i+n]
			i += n
			if id, ok := t.byText[ch]; ok {
				addSym(id)
				continue
			}
			if m.byteFallback {
				if ids, ok := m.byteTokens(t, ch); ok {
					for _, id := range ids {
						addSym(id)
					}
					continue
				}
			}
			if m.unk >= 0 {
				if m.fuseUnk && len(syms) > 0 && syms[len(syms)-1].sym == m.unk {
					continue
				}
				addSym(m.unk)
			}
		}
	}
	if len(syms) == 0 {
		sc.syms = syms
		return out
	}
	syms[len(syms)-1].next = -1

	h := sc.heap[:0]
	push := func(left, right int32) {
		if left < 0 || right < 0 {
			return
		}
		ls, rs := syms[left].sym, syms[right].sym
		mg, ok := m.ranks[pairKey(ls, rs)]
		if !ok {
			return
		}
		h = append(h, bpeCandidate{rank: mg.rank, left: left, right: right, lsym: ls, rsym: rs, result: mg.result})
		siftUp(h, len(h)-1, bpeBefore)
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		push(i-1, i)
	}
	for len(h) > 0 {
		c := h[0]
		h = popHeap(h, bpeBefore)
		l := &syms[c.left]
		if l.sym != c.lsym || l.next != c.right || syms[c.right].sym != c.rsym {
			continue
		}
		r := &syms[c.right]
		l.sym = c.result
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.left
		}
		r.sym = -1
		push(l.prev, c.left)
		push(c.left, l.next)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		out = m.emit(t, syms[i].sym, out)
	}
	sc.syms, sc.heap = syms, h
	return out
}

// emit appends the token(s) for a final symbol.
func (m *bpeModel) emit(t *Tokenizer, sym int32, out []int32) []int32 {
	if sym < m.nTokens {
		return append(out, sym)
	}
	text := m.text(t, sym)
	if m.hf {
		// HF requires merge results to be tokens; an unknown symbol can
		// only be an unknown character.
		if m.unk >= 0 {
			return append(out, m.unk)
		}
		return out
	}
	// llama.cpp looks each byte of the symbol's text up as a token and
	// drops the bytes that are not.
	for k := 0; k < len(text); k++ {
		if id, ok := t.byText[text[k:k+1]]; ok {
			out = append(out, id)
		}
	}
	return out
}

// byteTokens maps a character to its <0xXX> tokens, if all exist.
func (m *bpeModel) byteTokens(t *Tokenizer, ch string) ([]int32, bool) {
	const hex = "0123456789ABCDEF"
	ids := make([]int32, 0, len(ch))
	for k := 0; k < len(ch); k++ {
		b := ch[k]
		id, ok := t.byText[string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})]
		if !ok {
			return nil, false
		}
		ids = append(ids, id)
	}
	return ids, true
}

// wordCache remembers the ids of recently seen words; natural text repeats
// words heavily, so most of a long prompt never reaches the merge loop.
// When the cache is full it starts over, which is simpler than LRU
// bookkeeping and costs one re-merge per word still in use.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

const (
	wordCacheMaxEntries = 1 << 16
	wordCacheMaxWordLen = 256
)

func (c *wordCache) init() { c.m = make(map[string][]int32) }

func (c *wordCache) reset() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}

func (c *wordCache) get(w string) ([]int32, bool) {
	if len(w) > wordCacheMaxWordLen {
		return nil, false
	}
	c.mu.RLock()
	ids, ok := c.m[w]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	if len(w) > wordCacheMaxWordLen {
		return
	}
	v := slices.Clone(ids)
	c.mu.Lock()
	if len(c.m) >= wordCacheMaxEntries {
		clear(c.m)
	}
	c.m[strings.Clone(w)] = v
	c.mu.Unlock()
}

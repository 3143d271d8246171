package tokenizer

import "sync"

// SentencePiece-style tokenization as llama.cpp does it for "llama" GGUF
// vocabularies: start from UTF-8 characters and repeatedly merge the
// adjacent pair whose concatenation is the token with the highest score
// (leftmost on ties). Symbols that end up not being tokens fall back to
// <0xXX> byte tokens.

type spmSymbol struct {
	start, n   int32 // byte range in the text; n == 0 once merged away
	prev, next int32
}

type spmBigram struct {
	left, right int32
	score       float32
	size        int32 // byte length of the pair when it was queued
}

type spmScratch struct {
	syms []spmSymbol
	heap []spmBigram
}

var spmPool = sync.Pool{New: func() any { return new(spmScratch) }}

// spmBefore orders the work queue: higher score first, then leftmost.
func spmBefore(a, b *spmBigram) bool {
	return a.score > b.score || (a.score == b.score && a.left < b.left)
}

// utf8Len is the sequence length announced by a lead byte. Like llama.cpp
// it does not validate: stray continuation bytes count as one-byte
// characters, so invalid input survives through byte fallback.
func utf8Len(b byte) int32 {
	switch b >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

func (t *Tokenizer) encodeSPM(text string, out []int32) []int32 {
	if text == "" {
		return out
	}
	sc := spmPool.Get().(*spmScratch)
	defer spmPool.Put(sc)
	syms := sc.syms[:0]
	for off := int32(0); off < int32(len(text)); {
		n := min(utf8Len(text[off]), int32(len(text))-off)
		syms = append(syms, spmSymbol{start: off, n: n, prev: int32(len(syms)) - 1, next: int32(len(syms)) + 1})
		off += n
	}
	syms[len(syms)-1].next = -1

	h := sc.heap[:0]
	push := func(left, right int32) {
		if left < 0 || right < 0 {
			return
		}
		l, r := &syms[left], &syms[right]
		id, ok := t.byText[text[l.start:l.start+l.n+r.n]]
		if !ok {
			return
		}
		h = append(h, spmBigram{left: left, right: right, score: t.scores[id], size: l.n + r.n})
		siftUp(h, len(h)-1, spmBefore)
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		push(i-1, i)
	}
	for len(h) > 0 {
		b := h[0]
		h = popHeap(h, spmBefore)
		l, r := &syms[b.left], &syms[b.right]
		// A queued pair is stale once either side has merged with
		// something else; sizes only grow, so comparing the size suffices.
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		push(l.prev, b.left)
		push(b.left, l.next)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		s := syms[i]
		piece := text[s.start : s.start+s.n]
		if id, ok := t.byText[piece]; ok {
			out = append(out, id)
			continue
		}
		for k := 0; k < len(piece); k++ {
			out = t.appendByte(out, piece[k])
		}
	}
	sc.syms, sc.heap = syms, h
	return out
}

// appendByte emits the byte-fallback token for b: <0xXX>, else a token
// whose text is the byte itself, else the unknown token (llama.cpp has no
// answer for that last case and fails).
func (t *Tokenizer) appendByte(out []int32, b byte) []int32 {
	const hex = "0123456789ABCDEF"
	buf := [6]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'}
	if id, ok := t.byText[string(buf[:])]; ok {
		return append(out, id)
	}
	if id, ok := t.byText[string([]byte{b})]; ok {
		return append(out, id)
	}
	if t.unk >= 0 {
		return append(out, t.unk)
	}
	return out
}

// siftUp and popHeap implement a binary heap ordered by before, written
// out to avoid container/heap's interface calls on this hot path.
func siftUp[T any](h []T, i int, before func(a, b *T) bool) {
	for i > 0 {
		p := (i - 1) / 2
		if !before(&h[i], &h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func popHeap[T any](h []T, before func(a, b *T) bool) []T {
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && before(&h[r], &h[l]) {
			m = r
		}
		if !before(&h[m], &h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return h
}

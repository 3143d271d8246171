package tokenizer

import (
	"slices"
	"unicode"
	"unicode/utf8"
)

// addedToken is an HF added token with the flags that change how it is
// matched in text.
type addedToken struct {
	id                         int32
	content                    string
	special                    bool
	lstrip, rstrip, singleWord bool
}

// fragment is a piece of the input after special tokens were split out:
// either the text [start, end) (id < 0) or the token id.
type fragment struct {
	start, end int
	id         int32
}

// specialMatcher finds special tokens written in text. Two matching
// disciplines exist because the references differ:
//
//   - llama.cpp (GGUF) takes the candidate tokens longest first and splits
//     every remaining text fragment on each in turn, so a longer token wins
//     over a shorter one anywhere in the text;
//   - HF scans left to right and takes the longest token starting at the
//     leftmost position where any token matches.
//
// Both find candidates with a byte trie over the token texts.
type specialMatcher struct {
	hf    bool
	nodes []trieNode
	root  [256]int32 // children of the root, which may be many; 0 = none
	cands []candidate
}

type trieNode struct {
	edges []trieEdge // few per node: a linear scan beats a map
	cand  int32      // index into cands of the token ending here, or -1
}

type trieEdge struct {
	b    byte
	next int32
}

func (m *specialMatcher) step(node int32, b byte) (int32, bool) {
	if node == 0 {
		nx := m.root[b]
		return nx, nx != 0
	}
	for _, e := range m.nodes[node].edges {
		if e.b == b {
			return e.next, true
		}
	}
	return 0, false
}

type candidate struct {
	id       int32
	n        int  // text length
	priority int  // llama.cpp processing order (lower first)
	always   bool // matched even without ParseSpecial
	lstrip   bool // absorb whitespace before the match
	rstrip   bool // absorb whitespace after the match
	single   bool // only match as a whole word
}

func (m *specialMatcher) init(t *Tokenizer, o buildOptions) {
	m.hf = o.hf
	m.nodes = []trieNode{{cand: -1}}
	if o.hf {
		for _, a := range o.added {
			if a.content == "" {
				continue
			}
			m.add(candidate{id: a.id, n: len(a.content), always: !a.special,
				lstrip: a.lstrip, rstrip: a.rstrip, single: a.singleWord}, a.content)
		}
		return
	}
	// llama.cpp: control, user-defined and unknown tokens, longest first.
	var ids []int32
	for i, a := range t.attrs {
		if a&(attrControl|attrUserDefined|attrUnknown) != 0 {
			ids = append(ids, int32(i))
		}
	}
	slices.SortStableFunc(ids, func(a, b int32) int { return len(t.tokens[b]) - len(t.tokens[a]) })
	for prio, id := range ids {
		m.add(candidate{id: id, n: len(t.tokens[id]), priority: prio,
			always: t.attrs[id]&attrUserDefined != 0}, t.tokens[id])
	}
}

func (m *specialMatcher) add(c candidate, text string) {
	node := int32(0)
	for i := 0; i < len(text); i++ {
		nx, ok := m.step(node, text[i])
		if !ok {
			nx = int32(len(m.nodes))
			m.nodes = append(m.nodes, trieNode{cand: -1})
			if node == 0 {
				m.root[text[i]] = nx
			} else {
				m.nodes[node].edges = append(m.nodes[node].edges, trieEdge{text[i], nx})
			}
		}
		node = nx
	}
	if old := m.nodes[node].cand; old >= 0 {
		// Same text twice: llama.cpp's longest-first order keeps the
		// earlier one in its list; HF keeps the last added.
		if !m.hf {
			return
		}
		m.cands[old] = c
		return
	}
	m.nodes[node].cand = int32(len(m.cands))
	m.cands = append(m.cands, c)
}

// partition splits text into text fragments and special tokens.
func (m *specialMatcher) partition(text string, parseSpecial bool) []fragment {
	if len(m.cands) == 0 {
		return []fragment{{0, len(text), -1}}
	}
	var hits []fragment
	if m.hf {
		hits = m.matchLeftmostLongest(text, parseSpecial)
	} else {
		hits = m.matchLongestFirst(text, parseSpecial)
	}
	if len(hits) == 0 {
		if len(text) == 0 {
			return nil
		}
		return []fragment{{0, len(text), -1}}
	}
	out := make([]fragment, 0, 2*len(hits)+1)
	pos := 0
	for _, h := range hits {
		if h.start > pos {
			out = append(out, fragment{pos, h.start, -1})
		}
		out = append(out, h)
		pos = h.end
	}
	if pos < len(text) {
		out = append(out, fragment{pos, len(text), -1})
	}
	return out
}

func (m *specialMatcher) active(c *candidate, parseSpecial bool) bool {
	return parseSpecial || c.always
}

// matchLongestFirst reproduces llama.cpp's tokenizer_st_partition: tokens
// are taken in priority order, and each occurrence that lies entirely in
// text not yet claimed by a higher-priority token (or an earlier occurrence
// of the same token) is split out.
func (m *specialMatcher) matchLongestFirst(text string, parseSpecial bool) []fragment {
	type occ struct {
		pos  int
		cand int32
	}
	var occs []occ
	for i := 0; i < len(text); i++ {
		if m.root[text[i]] == 0 {
			continue
		}
		node := int32(0)
		for j := i; j < len(text); j++ {
			nx, ok := m.step(node, text[j])
			if !ok {
				break
			}
			node = nx
			if c := m.nodes[node].cand; c >= 0 && m.active(&m.cands[c], parseSpecial) {
				occs = append(occs, occ{i, c})
			}
		}
	}
	if len(occs) == 0 {
		return nil
	}
	// Occurrences are found in text order. When none overlap, which is
	// the normal case, priorities cannot matter and all of them are taken.
	overlap := false
	for k := 1; k < len(occs); k++ {
		if occs[k].pos < occs[k-1].pos+m.cands[occs[k-1].cand].n {
			overlap = true
			break
		}
	}
	if !overlap {
		hits := make([]fragment, len(occs))
		for k, o := range occs {
			hits[k] = fragment{o.pos, o.pos + m.cands[o.cand].n, m.cands[o.cand].id}
		}
		return hits
	}
	slices.SortFunc(occs, func(a, b occ) int {
		if pa, pb := m.cands[a.cand].priority, m.cands[b.cand].priority; pa != pb {
			return pa - pb
		}
		return a.pos - b.pos
	})
	claimed := make([]bool, len(text))
	var hits []fragment
	for _, o := range occs {
		c := &m.cands[o.cand]
		if slices.Contains(claimed[o.pos:o.pos+c.n], true) {
			continue
		}
		for k := o.pos; k < o.pos+c.n; k++ {
			claimed[k] = true
		}
		hits = append(hits, fragment{o.pos, o.pos + c.n, c.id})
	}
	slices.SortFunc(hits, func(a, b fragment) int { return a.start - b.start })
	return hits
}

// matchLeftmostLongest reproduces HF's added-token extraction: the longest
// token starting at the leftmost matching position, with the lstrip, rstrip
// and single_word flags applied to the match.
func (m *specialMatcher) matchLeftmostLongest(text string, parseSpecial bool) []fragment {
	var hits []fragment
	prevEnd := 0
	for i := 0; i < len(text); {
		if m.root[text[i]] == 0 {
			i++
			continue
		}
		best := int32(-1)
		node := int32(0)
		for j := i; j < len(text); j++ {
			nx, ok := m.step(node, text[j])
			if !ok {
				break
			}
			node = nx
			if c := m.nodes[node].cand; c >= 0 && m.active(&m.cands[c], parseSpecial) {
				best = c
			}
		}
		if best < 0 {
			i++
			continue
		}
		c := &m.cands[best]
		start, end := i, i+c.n
		if c.single && (isWordBefore(text, start) || isWordAfter(text, end)) {
			i++
			continue
		}
		if c.lstrip {
			for start > prevEnd {
				r, n := utf8.DecodeLastRuneInString(text[prevEnd:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= n
			}
		}
		if c.rstrip {
			for end < len(text) {
				r, n := utf8.DecodeRuneInString(text[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += n
			}
		}
		hits = append(hits, fragment{start, end, c.id})
		prevEnd = end
		i = end
	}
	return hits
}

func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

func isWordBefore(s string, i int) bool {
	if i == 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return isWordRune(r)
}

func isWordAfter(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isWordRune(r)
}

package tokenizer

import (
	"fmt"
	"regexp"
	"unicode/utf8"
)

// span is a half-open byte range [start, end) of the text being split.
type span struct{ start, end int }

// splitter splits s[start:end] into consecutive pieces that exactly cover
// the range and appends them to out. The range is treated as the whole
// input: lookarounds see its bounds as the start and end of text, which is
// how both llama.cpp and HF apply a pattern to each piece of a previous
// split.
type splitter func(s string, start, end int, out []span) []span

// preTokenizer is a sequence of splitters applied one after the other, each
// to every piece the previous one produced.
type preTokenizer struct {
	stages []splitter
}

// split returns the pieces of s. bufs holds two scratch buffers that are
// reused between calls to avoid allocation; on return they hold the
// (possibly grown) buffers again, still distinct, and the result aliases
// one of them until the next call.
func (p *preTokenizer) split(s string, bufs *[2][]span) []span {
	cur := append(bufs[0][:0], span{0, len(s)})
	next := bufs[1][:0]
	if len(s) == 0 {
		cur = cur[:0]
	}
	for _, st := range p.stages {
		next = next[:0]
		for _, sp := range cur {
			next = st(s, sp.start, sp.end, next)
		}
		cur, next = next, cur
	}
	bufs[0], bufs[1] = cur, next
	return cur
}

func addSpan(out []span, start, end int) []span {
	if end > start {
		out = append(out, span{start, end})
	}
	return out
}

// runeAt decodes the rune at p, returning -1 and size 0 at or past end so
// that callers can treat "out of range" as matching no class.
func runeAt(s string, p, end int) (rune, int) {
	if p >= end {
		return -1, 0
	}
	if c := s[p]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	r, n := utf8.DecodeRuneInString(s[p:end])
	if r == utf8.RuneError && n == 1 {
		// normalizeUTF8 leaves encoded surrogates in place; like
		// llama.cpp, treat one as a single (unclassified) code point.
		if cp, m := lenientDecode(s[p:end]); m == 3 && cp >= 0xD800 && cp <= 0xDFFF {
			return cp, m
		}
	}
	return r, n
}

func classAt(s string, p, end int) (uint8, int) {
	if p >= end {
		return 0, 0
	}
	if c := s[p]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := runeAt(s, p, end)
	return classOf(r), n
}

// scanWhile advances from p over runes whose class intersects mask (or,
// with invert, does not intersect it) and returns where it stopped.
func scanWhile(s string, p, end int, mask uint8, invert bool) int {
	for p < end {
		var c uint8
		m := 1
		if b := s[p]; b < utf8.RuneSelf {
			c = asciiClass[b]
		} else {
			c, m = classAt(s, p, end)
		}
		if (c&mask != 0) == invert {
			break
		}
		p += m
	}
	return p
}

// isOther reports membership in [^\s\p{L}\p{N}] for a rune that exists.
func isOther(c uint8) bool { return c&(clsSpace|clsLetter|clsNumber) == 0 }

// contractionLen returns the length of an English contraction suffix
// ('s 't 're 've 'm 'll 'd) starting at p, or 0. With fold set the letters
// match case-insensitively; foldLongS additionally lets U+017F (long s) match
// 's', as Unicode case folding in the HF regex engine does.
func contractionLen(s string, p, end int, fold, foldLongS bool) int {
	if p+1 >= end || s[p] != '\'' {
		return 0
	}
	lower := func(c byte) byte {
		if fold && c >= 'A' && c <= 'Z' {
			return c + ('a' - 'A')
		}
		return c
	}
	c1 := lower(s[p+1])
	switch c1 {
	case 's', 't', 'm', 'd':
		return 2
	}
	if foldLongS && fold && p+2 < end && s[p+1] == 0xC5 && s[p+2] == 0xBF {
		return 3
	}
	if p+2 < end {
		c2 := lower(s[p+2])
		if (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') {
			return 3
		}
	}
	return 0
}

// whitespaceRun scans the whitespace starting at p. It returns the end of
// the run, the start of its last rune, the number of runes, and the end of
// the last \r or \n in it (0 when there is none).
func whitespaceRun(s string, p, end int) (runEnd, lastStart, count, lastNL int) {
	q := p
	for {
		r, n := runeAt(s, q, end)
		if n == 0 || classOf(r)&clsSpace == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = q + n
		}
		lastStart = q
		q += n
		count++
	}
	return q, lastStart, count, lastNL
}

// trailingWhitespace applies `\s+(?!\S)|\s+` at p, where the caller has
// established that p starts a whitespace run. The lookahead keeps the last
// whitespace rune of a run that is followed by a non-space, so that it can
// attach to the following word.
func trailingWhitespace(s string, p, end int) int {
	runEnd, lastStart, count, _ := whitespaceRun(s, p, end)
	if count > 1 && runEnd < end {
		return lastStart
	}
	return runEnd
}

// splitGPT2 implements the GPT-2 pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func splitGPT2(s string, start, end int, out []span) []span {
	p := start
	for p < end {
		if n := contractionLen(s, p, end, false, false); n > 0 {
			out = append(out, span{p, p + n})
			p += n
			continue
		}
		r, n := runeAt(s, p, end)
		c := classOf(r)
		// The optional leading space belongs to the word after it, so the
		// class that decides the branch is that of the next rune.
		q, c2, exists := p, c, true
		if r == ' ' {
			var m int
			c2, m = classAt(s, p+1, end)
			q, exists = p+1, m > 0
		}
		var e int
		switch {
		case !exists:
		case c2&clsLetter != 0:
			e = scanWhile(s, q, end, clsLetter, false)
		case c2&clsNumber != 0:
			e = scanWhile(s, q, end, clsNumber, false)
		case isOther(c2):
			e = scanWhile(s, q, end, clsSpace|clsLetter|clsNumber, true)
		}
		if e > q {
			out = append(out, span{p, e})
			p = e
			continue
		}
		if c&clsSpace != 0 {
			e := trailingWhitespace(s, p, end)
			out = append(out, span{p, e})
			p = e
			continue
		}
		out = append(out, span{p, p + n})
		p += n
	}
	return out
}

// splitLlama3 implements the Llama 3 pattern
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// and, with maxDigits 1, the Qwen2 variant that uses \p{N} instead of
// \p{N}{1,3}.
func splitLlama3(maxDigits int, foldLongS bool) splitter {
	return func(s string, start, end int, out []span) []span {
		p := start
		for p < end {
			if n := contractionLen(s, p, end, true, foldLongS); n > 0 {
				out = append(out, span{p, p + n})
				p += n
				continue
			}
			r, n := runeAt(s, p, end)
			c := classOf(r)
			// [^\r\n\p{L}\p{N}]?\p{L}+
			if r != '\r' && r != '\n' && c&clsNumber == 0 {
				c2, _ := classAt(s, p+n, end)
				if c&clsLetter != 0 || c2&clsLetter != 0 {
					e := scanWhile(s, p+n, end, clsLetter, false)
					out = append(out, span{p, e})
					p = e
					continue
				}
			}
			// \p{N}{1,maxDigits}
			if c&clsNumber != 0 {
				e, k := p, 0
				for k < maxDigits {
					ce, m := classAt(s, e, end)
					if m == 0 || ce&clsNumber == 0 {
						break
					}
					e += m
					k++
				}
				out = append(out, span{p, e})
				p = e
				continue
			}
			// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
			if e := punctRun(s, p, end, "\r\n"); e > p {
				out = append(out, span{p, e})
				p = e
				continue
			}
			if c&clsSpace != 0 {
				// \s*[\r\n]+ takes everything up to the last line break of
				// the run; otherwise \s+(?!\S)|\s+.
				_, _, _, lastNL := whitespaceRun(s, p, end)
				e := lastNL
				if e == 0 {
					e = trailingWhitespace(s, p, end)
				}
				out = append(out, span{p, e})
				p = e
				continue
			}
			out = append(out, span{p, p + n})
			p += n
		}
		return out
	}
}

// punctRun matches ` ?[^\s\p{L}\p{N}]+[tail]*` at p and returns the end of
// the match, or p when it does not match.
func punctRun(s string, p, end int, tail string) int {
	q := p
	if q < end && s[q] == ' ' {
		if c, m := classAt(s, q+1, end); m > 0 && isOther(c) {
			q++
		}
	}
	e := scanWhile(s, q, end, clsSpace|clsLetter|clsNumber, true)
	if e == q {
		return p
	}
	for e < end && containsByte(tail, s[e]) {
		e++
	}
	return e
}

func containsByte(set string, b byte) bool {
	for i := 0; i < len(set); i++ {
		if set[i] == b {
			return true
		}
	}
	return false
}

// splitO200k implements the o200k (GPT-4o, gpt-oss) pattern
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// following the backtracking order of a regex engine: the first
// alternative that can match at a position wins, and within it the greedy
// quantifiers give back one rune at a time.
func splitO200k(foldLongS bool) splitter {
	return func(s string, start, end int, out []span) []span {
		var ups []int // scratch: offsets of the runes of an upper-ish run
		p := start
		for p < end {
			if e, ok := o200kWord(s, p, end, foldLongS, &ups); ok {
				out = append(out, span{p, e})
				p = e
				continue
			}
			r, n := runeAt(s, p, end)
			c := classOf(r)
			if c&clsNumber != 0 {
				e, k := p, 0
				for k < 3 {
					ce, m := classAt(s, e, end)
					if m == 0 || ce&clsNumber == 0 {
						break
					}
					e += m
					k++
				}
				out = append(out, span{p, e})
				p = e
				continue
			}
			if e := punctRun(s, p, end, "\r\n/"); e > p {
				out = append(out, span{p, e})
				p = e
				continue
			}
			if c&clsSpace != 0 {
				_, _, _, lastNL := whitespaceRun(s, p, end)
				e := lastNL
				if e == 0 {
					e = trailingWhitespace(s, p, end)
				}
				out = append(out, span{p, e})
				p = e
				continue
			}
			out = append(out, span{p, p + n})
			p += n
		}
		return out
	}
}

// o200kWord tries the two word alternatives of the o200k pattern at p.
func o200kWord(s string, p, end int, foldLongS bool, ups *[]int) (int, bool) {
	r, n := runeAt(s, p, end)
	prefixOK := n > 0 && r != '\r' && r != '\n' && classOf(r)&(clsLetter|clsNumber) == 0
	// Alternative 1: P? U* Lw+ C?
	for _, withPrefix := range [2]bool{true, false} {
		q := p
		if withPrefix {
			if !prefixOK {
				continue
			}
			q += n
		}
		run := upperRun(s, q, end, ups)
		for k := len(run) - 1; k >= 0; k-- {
			c, m := classAt(s, run[k], end)
			if m > 0 && c&clsLowerish != 0 {
				e := run[k]
				for {
					c, m := classAt(s, e, end)
					if m == 0 || c&clsLowerish == 0 {
						break
					}
					e += m
				}
				return e + contractionLen(s, e, end, true, foldLongS), true
			}
		}
	}
	// Alternative 2: P? U+ Lw* C?
	for _, withPrefix := range [2]bool{true, false} {
		q := p
		if withPrefix {
			if !prefixOK {
				continue
			}
			q += n
		}
		run := upperRun(s, q, end, ups)
		if len(run) < 2 {
			continue
		}
		e := run[len(run)-1]
		for {
			c, m := classAt(s, e, end)
			if m == 0 || c&clsLowerish == 0 {
				break
			}
			e += m
		}
		return e + contractionLen(s, e, end, true, foldLongS), true
	}
	return 0, false
}

// upperRun returns the offsets at which U* may stop when matched greedily
// from q: q itself and the end of each upper-ish rune after it.
func upperRun(s string, q, end int, buf *[]int) []int {
	run := append((*buf)[:0], q)
	e := q
	for {
		c, m := classAt(s, e, end)
		if m == 0 || c&clsUpperish == 0 {
			break
		}
		e += m
		run = append(run, e)
	}
	*buf = run
	return run
}

// isolate matches pred{min,max} (max 0 meaning unbounded) leftmost-first and
// greedily, emitting each match and each gap between matches as a piece:
// the "Isolated" split behaviour of HF and what llama.cpp does with a
// regex that is not one of its hand-written ones.
func isolate(pred func(rune) bool, min, max int) splitter {
	var ascii [utf8.RuneSelf]bool // pred for ASCII, to skip the call on the common path
	for r := range ascii {
		ascii[r] = pred(rune(r))
	}
	match := func(s string, p, end int) (bool, int) {
		if c := s[p]; c < utf8.RuneSelf {
			return ascii[c], 1
		}
		r, m := runeAt(s, p, end)
		return pred(r), m
	}
	return func(s string, start, end int, out []span) []span {
		gap := start
		for p := start; p < end; {
			// Skip quickly to the next rune that can start a match.
			if c := s[p]; c < utf8.RuneSelf {
				if !ascii[c] {
					p++
					continue
				}
			} else if r, m := runeAt(s, p, end); !pred(r) {
				p += m
				continue
			}
			e, k := p, 0
			for e < end && (max == 0 || k < max) {
				ok, m := match(s, e, end)
				if !ok {
					break
				}
				e += m
				k++
			}
			if k >= min {
				out = addSpan(out, gap, p)
				out = append(out, span{p, e})
				p, gap = e, e
				continue
			}
			_, m := runeAt(s, p, end)
			p += m
		}
		return addSpan(out, gap, end)
	}
}

func isNumberRune(r rune) bool { return classOf(r)&clsNumber != 0 }

func isASCIIDigit(r rune) bool { return r >= '0' && r <= '9' }

// isPunctOrSymbolSet matches [\p{P}\$\+<=>\^~\|], optionally with the
// backtick that the Falcon variant adds.
func punctSet(backtick bool) func(rune) bool {
	return func(r rune) bool {
		switch r {
		case '$', '+', '<', '=', '>', '^', '~', '|':
			return true
		case '`':
			return backtick
		}
		return classOf(r)&clsPunct != 0
	}
}

// regexSplitter isolates the matches of a pattern that Go's regexp engine
// can run unchanged (no lookaround, no \s).
func regexSplitter(re *regexp.Regexp) splitter {
	return func(s string, start, end int, out []span) []span {
		gap := start
		for _, m := range re.FindAllStringIndex(s[start:end], -1) {
			a, b := start+m[0], start+m[1]
			if b == a {
				continue
			}
			out = addSpan(out, gap, a)
			out = append(out, span{a, b})
			gap = b
		}
		return addSpan(out, gap, end)
	}
}

// Patterns as they appear in HF tokenizer.json files and in llama.cpp, for
// which a hand-written scanner exists.
const (
	patGPT2       = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patLlama3     = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patLlama3Alt  = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen2      = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patO200k      = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patDigit      = `\p{N}`
	patDigitsRun  = `\p{N}+`
	patDigitGroup = `\p{N}{1,3}`
)

// splitterForPattern returns the splitter that isolates the matches of an
// HF Split pattern. Patterns with lookaround get hand-written scanners;
// other patterns run on Go's regexp engine when their meaning does not
// depend on engine differences.
func splitterForPattern(pat string) (splitter, error) {
	switch pat {
	case patGPT2:
		return splitGPT2, nil
	case patLlama3, patLlama3Alt:
		return splitLlama3(3, pat == patLlama3), nil
	case patQwen2:
		return splitLlama3(1, true), nil
	case patO200k:
		return splitO200k(true), nil
	case patDigit:
		return isolate(isNumberRune, 1, 1), nil
	case patDigitsRun:
		return isolate(isNumberRune, 1, 0), nil
	case patDigitGroup:
		return isolate(isNumberRune, 1, 3), nil
	}
	if !regexSafe(pat) {
		return nil, fmt.Errorf("tokenizer: unsupported split pattern %q", pat)
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: split pattern %q: %w", pat, err)
	}
	return regexSplitter(re), nil
}

// regexSafe reports whether pat avoids the constructs whose meaning differs
// between Go's RE2 engine and the Oniguruma engine HF uses: lookaround and
// the ASCII-only \s, \S, \w, \W, \d, \D and \b classes of RE2.
func regexSafe(pat string) bool {
	for i := 0; i+1 < len(pat); i++ {
		if pat[i] == '\\' {
			switch pat[i+1] {
			case 's', 'S', 'w', 'W', 'd', 'D', 'b', 'B':
				return false
			}
			i++
			continue
		}
		if pat[i] == '(' && pat[i+1] == '?' && i+2 < len(pat) {
			switch pat[i+2] {
			case '=', '!', '<', '>':
				return false
			}
		}
	}
	return true
}

// ggufPreTokenizer returns the pre-tokenizer llama.cpp uses for a GGUF
// tokenizer.ggml.pre name, and whether that name enables "ignore merges"
// (a word that is itself a token is emitted without running BPE).
func ggufPreTokenizer(name string) (*preTokenizer, bool, error) {
	switch name {
	case "", "default":
		return &preTokenizer{stages: []splitter{
			isolate(punctSet(false), 1, 0),
			splitGPT2,
			isolate(isNumberRune, 1, 0),
			isolate(isASCIIDigit, 3, 3),
		}}, false, nil
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano":
		return &preTokenizer{stages: []splitter{splitLlama3(3, false)}}, true, nil
	case "glm4", "glm5":
		return &preTokenizer{stages: []splitter{splitLlama3(3, false)}}, true, nil
	case "dbrx", "smaug-bpe", "chatglm-bpe":
		return &preTokenizer{stages: []splitter{splitLlama3(3, false)}}, false, nil
	case "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "megrez", "hunyuan", "solar-open", "grok-2":
		return &preTokenizer{stages: []splitter{splitLlama3(1, false)}}, false, nil
	case "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
		"modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion",
		"granite-docling", "exaone4":
		return &preTokenizer{stages: []splitter{splitGPT2}}, false, nil
	case "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2":
		return &preTokenizer{stages: []splitter{isolate(isNumberRune, 1, 1), splitGPT2}}, false, nil
	case "falcon":
		return &preTokenizer{stages: []splitter{
			isolate(punctSet(true), 1, 0),
			splitGPT2,
			isolate(isASCIIDigit, 3, 3),
		}}, false, nil
	case "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2":
		return &preTokenizer{stages: []splitter{splitO200k(false)}}, false, nil
	}
	return nil, false, fmt.Errorf("tokenizer: unsupported pre-tokenizer %q", name)
}

package tokenizer

import (
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// Character classes used by the pre-tokenizers. They mirror the regex
// classes the reference tokenizers are defined with: \p{L}, \p{N}, \s and,
// for the o200k pattern, the letter sub-categories and \p{M}.
const (
	clsLetter uint8 = 1 << iota
	clsNumber
	clsSpace
	clsUpperish // \p{Lu} \p{Lt} \p{Lm} \p{Lo} \p{M}
	clsLowerish // \p{Ll} \p{Lm} \p{Lo} \p{M}
	clsPunct    // \p{P}
	clsMark     // \p{M}
)

// asciiClass is a lookup table for the overwhelmingly common ASCII case, so
// the scanners only consult the unicode range tables for other runes.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = slowClass(r)
	}
	return t
}()

func slowClass(r rune) uint8 {
	var c uint8
	if unicode.IsLetter(r) {
		c |= clsLetter
		switch {
		case unicode.Is(unicode.Lu, r) || unicode.Is(unicode.Lt, r):
			c |= clsUpperish
		case unicode.Is(unicode.Ll, r):
			c |= clsLowerish
		default: // Lm, Lo
			c |= clsUpperish | clsLowerish
		}
	}
	if unicode.IsNumber(r) {
		c |= clsNumber
	}
	// unicode.IsSpace is exactly the Unicode White_Space property, which is
	// what \s means in the regex engines the references use.
	if unicode.IsSpace(r) {
		c |= clsSpace
	}
	if unicode.IsPunct(r) {
		c |= clsPunct
	}
	if unicode.IsMark(r) {
		c |= clsMark | clsUpperish | clsLowerish
	}
	return c
}

// classBlocks caches slowClass for the planes text actually uses, one
// 256-rune block at a time, filled on first use: the unicode range tables
// cost a binary search per call, which dominated pre-tokenization of
// non-ASCII text.
var classBlocks [classBlockCount]atomic.Pointer[[256]uint8]

const classBlockCount = 0x30000 >> 8 // planes 0-2

func classOf(r rune) uint8 {
	if r >= 0 && r < utf8.RuneSelf {
		return asciiClass[r]
	}
	if r < 0 || r >= classBlockCount<<8 {
		return slowClass(r)
	}
	blk := classBlocks[r>>8].Load()
	if blk == nil {
		blk = new([256]uint8)
		base := r &^ 0xFF
		for i := range blk {
			blk[i] = slowClass(base + rune(i))
		}
		classBlocks[r>>8].Store(blk) // racing fillers store equal tables
	}
	return blk[r&0xFF]
}

// normalizeUTF8 rewrites s the way llama.cpp's UTF-8 decoding does before
// BPE pre-tokenization: its decoder only checks the continuation bits, so
// an overlong form decodes to its code point (and is re-encoded in the
// shortest form) and an encoded surrogate survives as is, while every
// other byte that does not start a sequence becomes U+FFFD. Sequences
// beyond U+10FFFF, on which llama.cpp fails, also become U+FFFD.
func normalizeUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || n > 1 {
			b = append(b, s[i:i+n]...)
			i += n
			continue
		}
		cp, n := lenientDecode(s[i:])
		switch {
		case n == 0 || cp > unicode.MaxRune:
			b = utf8.AppendRune(b, utf8.RuneError)
			i += max(n, 1)
		case cp >= 0xD800 && cp <= 0xDFFF:
			b = append(b, s[i:i+n]...) // not representable as a rune; kept as bytes
			i += n
		default:
			b = utf8.AppendRune(b, cp)
			i += n
		}
	}
	return string(b)
}

// lenientDecode decodes one sequence checking only the lead byte's length
// bits and that the continuation bytes are 10xxxxxx; n is 0 when even that
// fails.
func lenientDecode(s string) (rune, int) {
	c := s[0]
	var n int
	var cp rune
	switch {
	case c < 0x80:
		return rune(c), 1
	case c&0xE0 == 0xC0:
		n, cp = 2, rune(c&0x1F)
	case c&0xF0 == 0xE0:
		n, cp = 3, rune(c&0x0F)
	case c&0xF8 == 0xF0:
		n, cp = 4, rune(c&0x07)
	default:
		return 0, 0
	}
	if len(s) < n {
		return 0, 0
	}
	for k := 1; k < n; k++ {
		if s[k]&0xC0 != 0x80 {
			return 0, 0
		}
		cp = cp<<6 | rune(s[k]&0x3F)
	}
	return cp, n
}

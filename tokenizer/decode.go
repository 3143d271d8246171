package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// renderPiece computes what a token contributes to decoded text, following
// llama.cpp's token_to_piece with special=false, or the tokenizer.json
// decoder with special tokens skipped.
func (t *Tokenizer) renderPiece(id int32) []byte {
	a, text := t.attrs[id], t.tokens[id]
	switch {
	case a&(attrControl|attrUnknown) != 0:
		return nil
	case t.decoder != nil:
		if a&(attrNormal|attrUserDefined|attrByte) == 0 {
			return nil
		}
		return t.decoder.piece(text)
	case a&attrUserDefined != 0:
		return []byte(text)
	case a&attrNormal != 0:
		if t.kind == modelBPE {
			return byteLevelDecode(text)
		}
		return []byte(strings.ReplaceAll(text, "\u2581", " "))
	case a&attrByte != 0:
		if b, ok := isByteToken(text); ok {
			return []byte{b}
		}
	}
	// Unused and undefined tokens render as nothing, like in llama.cpp.
	return nil
}

// Piece returns the raw bytes token id contributes to decoded text: nothing
// for control, unknown and unused tokens (and ids out of range), the text
// of user-defined tokens, one byte for byte tokens, and the detokenized
// text of normal tokens. A piece may be a fragment of a UTF-8 sequence.
// The slice is shared; do not modify it.
func (t *Tokenizer) Piece(id int32) []byte {
	if id < 0 || int(id) >= len(t.pieces) {
		return nil
	}
	return t.pieces[id]
}

// Decode turns ids back into text: the concatenation of their pieces, with
// byte sequences that are not valid UTF-8 replaced by U+FFFD (one per
// maximal invalid subpart, as Python's and Rust's lossy decoders do).
// Nothing is skipped, but control tokens render as nothing (llama.cpp's
// token_to_piece with special=false).
//
// For vocabularies that prepend a space to the input (SentencePiece), the
// first space of the output is dropped, so that Decode(Encode(s)) == s.
// This is SentencePiece's and HF's convention; llama.cpp's own detokenize
// keeps that space when the ids start with BOS. llama.cpp's detokenize also
// "cleans up" spaces before punctuation for some BPE vocabularies; Decode
// does not, so that it stays lossless and agrees with token-by-token
// streaming.
func (t *Tokenizer) Decode(ids []int32) string {
	buf := make([]byte, 0, 4*len(ids))
	strip := t.stripSpace
	for _, id := range ids {
		p := t.Piece(id)
		if len(p) == 0 {
			continue
		}
		if strip {
			strip = false
			if p[0] == ' ' {
				p = p[1:]
			}
		}
		buf = append(buf, p...)
	}
	out, _ := appendValidUTF8(make([]byte, 0, len(buf)), buf, true)
	return string(out)
}

// StreamDecoder decodes ids one at a time, as they are generated. The
// concatenation of everything Add and Flush return equals Decode of all
// ids, and every returned string is valid UTF-8: bytes of a character
// split across tokens are held back until the character is complete.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte // an incomplete UTF-8 sequence awaiting more bytes
	started bool   // a non-empty piece has been seen
	out     []byte
}

// NewStreamDecoder returns a decoder for a fresh sequence. The leading
// space rule of Decode applies to the first non-empty piece it sees.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return &StreamDecoder{t: t}
}

// Add decodes one more id and returns the text it completes.
func (d *StreamDecoder) Add(id int32) string {
	p := d.t.Piece(id)
	if len(p) == 0 {
		return ""
	}
	if !d.started {
		d.started = true
		if d.t.stripSpace && p[0] == ' ' {
			p = p[1:]
		}
	}
	d.pending = append(d.pending, p...)
	var n int
	d.out, n = appendValidUTF8(d.out[:0], d.pending, false)
	d.pending = d.pending[:copy(d.pending, d.pending[n:])]
	return string(d.out)
}

// Flush returns the bytes still held back, each invalid sequence replaced
// by U+FFFD, and resets the decoder to the middle of a sequence (the
// leading space rule does not apply again).
func (d *StreamDecoder) Flush() string {
	out, _ := appendValidUTF8(nil, d.pending, true)
	d.pending = d.pending[:0]
	return string(out)
}

// appendValidUTF8 appends b to dst with every maximal subpart of an
// ill-formed sequence replaced by U+FFFD (Unicode's recommended practice).
// Unless final is set, an incomplete sequence at the end of b that could
// still become valid is left unconsumed; n is the number of bytes consumed.
func appendValidUTF8(dst, b []byte, final bool) (out []byte, n int) {
	i := 0
	for i < len(b) {
		c := b[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		size, lo, hi := seqShape(c)
		if size == 0 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
			i++
			continue
		}
		k := 1 // bytes of the sequence that are valid so far
		for k < size && i+k < len(b) {
			cb := b[i+k]
			if k == 1 {
				if cb < lo || cb > hi {
					break
				}
			} else if cb < 0x80 || cb > 0xBF {
				break
			}
			k++
		}
		switch {
		case k == size:
			dst = append(dst, b[i:i+size]...)
			i += size
		case i+k == len(b) && !final:
			return dst, i
		default:
			dst = utf8.AppendRune(dst, utf8.RuneError)
			i += k
		}
	}
	return dst, i
}

// seqShape returns the length of the UTF-8 sequence a lead byte starts
// and the allowed range of its second byte (which excludes overlong forms,
// surrogates and code points past U+10FFFF); size 0 means c cannot start a
// sequence.
func seqShape(c byte) (size int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 2, 0x80, 0xBF
	case c == 0xE0:
		return 3, 0xA0, 0xBF
	case c == 0xED:
		return 3, 0x80, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		return 3, 0x80, 0xBF
	case c == 0xF0:
		return 4, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 4, 0x80, 0xBF
	case c == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}

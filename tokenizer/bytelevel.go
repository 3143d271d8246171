package tokenizer

import "unicode/utf8"

// Byte-level BPE (GPT-2) does not see raw bytes: every byte is replaced by
// a printable character first, so that vocabularies and merges can be
// stored as text. Printable Latin-1 bytes stand for themselves; the others
// (controls, space, DEL, NBSP, soft hyphen...) are given the code points
// from U+0100 upwards, in byte order.
var (
	byteLevelChar [256]string       // byte -> its character, UTF-8 encoded
	byteLevelByte = map[rune]byte{} // character -> byte
)

func init() {
	next := rune(256)
	for b := 0; b < 256; b++ {
		r := rune(b)
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if !printable {
			r = next
			next++
		}
		byteLevelChar[b] = string(r)
		byteLevelByte[r] = byte(b)
	}
}

// byteLevelDecode maps the characters of a byte-level token back to bytes.
// A token containing a character outside the mapping (an added token
// stored verbatim, say) is returned as its own UTF-8 text, as HF's
// ByteLevel decoder does.
func byteLevelDecode(s string) []byte {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := byteLevelByte[r]
		if !ok || (r == utf8.RuneError && !utf8.ValidString(s)) {
			return []byte(s)
		}
		out = append(out, b)
	}
	return out
}

package jinja

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokenKind int

const (
	tokEOF tokenKind = iota
	tokData
	tokVarBegin
	tokVarEnd
	tokBlockBegin
	tokBlockEnd
	tokName
	tokString
	tokInt
	tokFloat
	tokOp
)

type token struct {
	kind tokenKind
	val  string // name, operator, decoded string or raw data
	ival int64
	fval float64
	p    pos
}

// describe names a token the way jinja2's error messages do.
func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of template"
	case tokVarEnd:
		return "end of print statement"
	case tokBlockEnd:
		return "end of statement block"
	case tokVarBegin:
		return "begin of print statement"
	case tokBlockBegin:
		return "begin of statement block"
	case tokData:
		return "template data / text"
	case tokInt, tokFloat:
		return "number"
	case tokString:
		return "string"
	}
	return t.val
}

// isPySpace is Python's str.isspace for one character, which is also what
// \s matches in jinja2's lexer regular expressions.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

func rstripPySpace(s string) string {
	return strings.TrimRightFunc(s, isPySpace)
}

// skipPySpace returns the index of the first non-whitespace byte at or after i.
func skipPySpace(s string, i int) int {
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !isPySpace(r) {
			break
		}
		i += size
	}
	return i
}

// normalizeSource applies jinja2's preprocessing: every newline sequence
// becomes "\n" and one trailing newline is dropped (keep_trailing_newline
// is off).
func normalizeSource(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

type lexer struct {
	src  string
	pos  int
	toks []token
	// lineStarting is true when the previous match ended a line (or nothing
	// was matched yet); lstrip_blocks then also strips a tag's indentation
	// when the text before it holds no newline of its own.
	lineStarting bool
	// lineStarts holds the byte offset of every line start, for positions.
	lineStarts []int
}

func (lx *lexer) position(off int) pos {
	lo, hi := 0, len(lx.lineStarts)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if lx.lineStarts[mid] <= off {
			lo = mid
		} else {
			hi = mid
		}
	}
	start := lx.lineStarts[lo]
	if off > len(lx.src) {
		off = len(lx.src)
	}
	return pos{line: lo + 1, col: utf8.RuneCountInString(lx.src[start:off]) + 1}
}

func (lx *lexer) errAt(off int, format string, args ...any) error {
	e := newErr(ErrSyntax, format, args...)
	p := lx.position(off)
	e.Line, e.Col = p.line, p.col
	return e
}

func (lx *lexer) emit(kind tokenKind, val string, off int) {
	lx.toks = append(lx.toks, token{kind: kind, val: val, p: lx.position(off)})
}

// tokenize splits a normalised template into tokens.
func tokenize(src string) ([]token, error) {
	lx := &lexer{src: src, lineStarting: true, lineStarts: []int{0}}
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			lx.lineStarts = append(lx.lineStarts, i+1)
		}
	}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.emit(tokEOF, "", len(src))
	return lx.toks, nil
}

// stripText applies the whitespace control of the tag that follows text:
// "-" strips all trailing whitespace; otherwise lstrip_blocks removes the
// tag's indentation when only whitespace precedes it on its line.
func (lx *lexer) stripText(text string, sign byte, lstrip bool) string {
	if sign == '-' {
		return rstripPySpace(text)
	}
	if sign != '+' && lstrip {
		lpos := strings.LastIndexByte(text, '\n') + 1
		if lpos > 0 || lx.lineStarting {
			rest := text[lpos:]
			if rest != "" && strings.TrimLeftFunc(rest, isPySpace) == "" {
				return text[:lpos]
			}
		}
	}
	return text
}

func (lx *lexer) run() error {
	src := lx.src
	for lx.pos < len(src) {
		start := lx.pos
		i := findTagStart(src, start)
		if i < 0 {
			lx.emit(tokData, src[start:], start)
			lx.pos = len(src)
			return nil
		}
		kind := src[i+1]
		if kind == '%' {
			if end, sign, ok := matchRawBegin(src, i); ok {
				text := lx.stripText(src[start:i], sign, true)
				if text != "" {
					lx.emit(tokData, text, start)
				}
				lx.lineStarting = src[end-1] == '\n'
				if err := lx.lexRaw(i, end); err != nil {
					return err
				}
				continue
			}
		}
		j := i + 2
		var sign byte
		if j < len(src) && (src[j] == '-' || src[j] == '+') {
			sign = src[j]
			j++
		}
		text := lx.stripText(src[start:i], sign, kind != '{')
		if text != "" {
			lx.emit(tokData, text, start)
		}
		var err error
		switch kind {
		case '#':
			err = lx.lexComment(i, j)
		case '%':
			lx.emit(tokBlockBegin, "", i)
			lx.pos = j
			err = lx.lexTag(true)
		default:
			lx.emit(tokVarBegin, "", i)
			lx.pos = j
			err = lx.lexTag(false)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// findTagStart returns the index of the next "{{", "{%" or "{#".
func findTagStart(src string, from int) int {
	for i := from; i+1 < len(src); i++ {
		if src[i] == '{' {
			if c := src[i+1]; c == '{' || c == '%' || c == '#' {
				return i
			}
		}
	}
	return -1
}

// matchRawBegin matches {%[-+]? raw (-%}\s*|%}) at i. Unlike other block
// tags, the plain form does not eat the following newline.
func matchRawBegin(src string, i int) (end int, sign byte, ok bool) {
	j := i + 2
	if j < len(src) && (src[j] == '-' || src[j] == '+') {
		sign = src[j]
		j++
	}
	j = skipPySpace(src, j)
	if !strings.HasPrefix(src[j:], "raw") {
		return 0, 0, false
	}
	j = skipPySpace(src, j+3)
	switch {
	case strings.HasPrefix(src[j:], "-%}"):
		return skipPySpace(src, j+3), sign, true
	case strings.HasPrefix(src[j:], "%}"):
		return j + 2, sign, true
	}
	return 0, 0, false
}

// lexRaw emits the body of a raw block verbatim up to its endraw tag.
func (lx *lexer) lexRaw(tagStart, bodyStart int) error {
	src := lx.src
	for k := bodyStart; ; {
		m := strings.Index(src[k:], "{%")
		if m < 0 {
			return lx.errAt(tagStart, "Missing end of raw directive")
		}
		m += k
		j := m + 2
		var sign byte
		if j < len(src) && (src[j] == '-' || src[j] == '+') {
			sign = src[j]
			j++
		}
		j = skipPySpace(src, j)
		if strings.HasPrefix(src[j:], "endraw") {
			j = skipPySpace(src, j+6)
			end := -1
			switch {
			case strings.HasPrefix(src[j:], "+%}"):
				end = j + 3
			case strings.HasPrefix(src[j:], "-%}"):
				end = skipPySpace(src, j+3)
			case strings.HasPrefix(src[j:], "%}"):
				end = j + 2
				if end < len(src) && src[end] == '\n' {
					end++
				}
			}
			if end >= 0 {
				text := lx.stripText(src[bodyStart:m], sign, true)
				if text != "" {
					lx.emit(tokData, text, bodyStart)
				}
				lx.pos = end
				lx.lineStarting = src[end-1] == '\n'
				return nil
			}
		}
		k = m + 2
	}
}

// lexComment skips a comment; its end tag follows the block-end rules.
func (lx *lexer) lexComment(tagStart, bodyStart int) error {
	src := lx.src
	m := strings.Index(src[bodyStart:], "#}")
	if m < 0 {
		return lx.errAt(tagStart, "Missing end of comment tag")
	}
	m += bodyStart
	end := m + 2
	switch {
	case m > bodyStart && src[m-1] == '-':
		end = skipPySpace(src, end)
	case m > bodyStart && src[m-1] == '+':
	default:
		if end < len(src) && src[end] == '\n' {
			end++
		}
	}
	lx.pos = end
	lx.lineStarting = src[end-1] == '\n'
	return nil
}

// operators, longest first so "//" wins over "/".
var operators = []string{"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// lexTag tokenizes the inside of {% %} (block) or {{ }} up to its end tag.
func (lx *lexer) lexTag(block bool) error {
	src := lx.src
	var stack []byte
	for {
		if lx.pos >= len(src) {
			// Let the parser report what it was expecting.
			return nil
		}
		p := lx.pos
		if len(stack) == 0 {
			if block {
				switch {
				case strings.HasPrefix(src[p:], "+%}"):
					lx.emit(tokBlockEnd, "", p)
					lx.pos = p + 3
					lx.lineStarting = false
					return nil
				case strings.HasPrefix(src[p:], "-%}"):
					lx.emit(tokBlockEnd, "", p)
					lx.pos = skipPySpace(src, p+3)
					lx.lineStarting = src[lx.pos-1] == '\n'
					return nil
				case strings.HasPrefix(src[p:], "%}"):
					lx.emit(tokBlockEnd, "", p)
					lx.pos = p + 2
					if lx.pos < len(src) && src[lx.pos] == '\n' {
						lx.pos++
					}
					lx.lineStarting = src[lx.pos-1] == '\n'
					return nil
				}
			} else {
				switch {
				case strings.HasPrefix(src[p:], "-}}"):
					lx.emit(tokVarEnd, "", p)
					lx.pos = skipPySpace(src, p+3)
					lx.lineStarting = src[lx.pos-1] == '\n'
					return nil
				case strings.HasPrefix(src[p:], "}}"):
					lx.emit(tokVarEnd, "", p)
					lx.pos = p + 2
					lx.lineStarting = false
					return nil
				}
			}
		}
		if q := skipPySpace(src, p); q > p {
			lx.pos = q
			continue
		}
		if n := matchFloat(src, p); n > 0 {
			text := strings.ReplaceAll(src[p:p+n], "_", "")
			f, err := strconv.ParseFloat(text, 64)
			if err != nil {
				// Only overflow gets here; Python yields inf as well.
				f = parseFloatLenient(text)
			}
			lx.toks = append(lx.toks, token{kind: tokFloat, val: src[p : p+n], fval: f, p: lx.position(p)})
			lx.pos = p + n
			continue
		}
		if n := matchInteger(src, p); n > 0 {
			text := strings.ReplaceAll(src[p:p+n], "_", "")
			v, err := strconv.ParseInt(text, 0, 64)
			if err != nil {
				if len(text) > 1 && text[0] == '0' && (text[1] == 'o' || text[1] == 'O') {
					v, err = strconv.ParseInt(text[2:], 8, 64)
				}
				if err != nil {
					return lx.errAt(p, "integer literal %s is out of the supported 64-bit range", src[p:p+n])
				}
			}
			lx.toks = append(lx.toks, token{kind: tokInt, val: src[p : p+n], ival: v, p: lx.position(p)})
			lx.pos = p + n
			continue
		}
		if n := matchName(src, p); n > 0 {
			lx.emit(tokName, src[p:p+n], p)
			lx.pos = p + n
			continue
		}
		if src[p] == '\'' || src[p] == '"' {
			end := matchString(src, p)
			if end > 0 {
				s, err := unescapeString(src[p+1 : end-1])
				if err != nil {
					e := err.(*Error)
					pp := lx.position(p)
					e.Line, e.Col = pp.line, pp.col
					return e
				}
				lx.emit(tokString, s, p)
				lx.pos = end
				continue
			}
		}
		op := ""
		for _, o := range operators {
			if strings.HasPrefix(src[p:], o) {
				op = o
				break
			}
		}
		if op == "" {
			r, _ := utf8.DecodeRuneInString(src[p:])
			return lx.errAt(p, "unexpected char %s at %d", strRepr(string(r)), utf8.RuneCountInString(src[:p]))
		}
		switch op {
		case "(":
			stack = append(stack, ')')
		case "[":
			stack = append(stack, ']')
		case "{":
			stack = append(stack, '}')
		case ")", "]", "}":
			if len(stack) == 0 {
				return lx.errAt(p, "unexpected '%s'", op)
			}
			want := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if want != op[0] {
				return lx.errAt(p, "unexpected '%s', expected '%c'", op, want)
			}
		}
		lx.emit(tokOp, op, p)
		lx.pos = p + len(op)
	}
}

func parseFloatLenient(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// matchDigits matches (\d+_)*\d+ at i and returns its length.
func matchDigits(s string, i int) int {
	j := i
	for {
		k := j
		for k < len(s) && isDigit(s[k]) {
			k++
		}
		if k == j {
			if j > i && s[j-1] == '_' {
				return j - 1 - i
			}
			return j - i
		}
		j = k
		if j < len(s) && s[j] == '_' && j+1 < len(s) && isDigit(s[j+1]) {
			j++
			continue
		}
		return j - i
	}
}

// matchFloat matches jinja2's float literal: digits with a fraction and/or
// an exponent, not directly after a dot.
func matchFloat(s string, i int) int {
	if !isDigit(s[i]) || (i > 0 && s[i-1] == '.') {
		return 0
	}
	n := matchDigits(s, i)
	j := i + n
	frac := false
	if j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
		j += 1 + matchDigits(s, j+1)
		frac = true
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		k := j + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < len(s) && isDigit(s[k]) {
			return k + matchDigits(s, k) - i
		}
	}
	if frac {
		return j - i
	}
	return 0
}

// matchInteger matches 0b/0o/0x literals, decimal literals and runs of zeros.
func matchInteger(s string, i int) int {
	if !isDigit(s[i]) {
		return 0
	}
	if s[i] == '0' && i+1 < len(s) {
		var ok func(byte) bool
		switch s[i+1] | 0x20 {
		case 'b':
			ok = func(c byte) bool { return c == '0' || c == '1' }
		case 'o':
			ok = func(c byte) bool { return c >= '0' && c <= '7' }
		case 'x':
			ok = func(c byte) bool { return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') }
		}
		if ok != nil {
			j := i + 2
			for {
				k := j
				if k < len(s) && s[k] == '_' {
					k++
				}
				if k < len(s) && ok(s[k]) {
					j = k + 1
					continue
				}
				break
			}
			if j > i+2 {
				return j - i
			}
		}
	}
	if s[i] == '0' {
		j := i + 1
		for {
			k := j
			if k < len(s) && s[k] == '_' {
				k++
			}
			if k < len(s) && s[k] == '0' {
				j = k + 1
				continue
			}
			return j - i
		}
	}
	return matchDigits(s, i)
}

func matchName(s string, i int) int {
	j := i
	for j < len(s) {
		r, size := utf8.DecodeRuneInString(s[j:])
		if r == '_' || unicode.IsLetter(r) || (j > i && (unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Mc, r))) {
			j += size
			continue
		}
		break
	}
	return j - i
}

// matchString returns the end offset (past the closing quote) of the string
// literal starting at i, or 0 when it is unterminated.
func matchString(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			return j + 1
		}
	}
	return 0
}

// unescapeString decodes Python string-literal escapes the way jinja2 does
// (via the unicode-escape codec); unknown escapes keep their backslash.
func unescapeString(s string) (string, error) {
	if strings.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte(7)
		case 'b':
			b.WriteByte(8)
		case 'f':
			b.WriteByte(12)
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte(11)
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+n > len(s) {
				return "", newErr(ErrSyntax, "truncated \\%cXX escape", e)
			}
			v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
			if err != nil || strings.ContainsAny(s[i+1:i+1+n], "+-_") {
				return "", newErr(ErrSyntax, "truncated \\%cXX escape", e)
			}
			if v > unicode.MaxRune {
				return "", newErr(ErrSyntax, "illegal Unicode character")
			}
			b.WriteRune(rune(v))
			i += n
		case 'N':
			// Named escapes need the Unicode name table, which the
			// standard library does not carry.
			return "", newErr(ErrUnsupported, "\\N{...} named escapes are not supported")
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := 0
			k := i
			for k < len(s) && k < i+3 && s[k] >= '0' && s[k] <= '7' {
				v = v*8 + int(s[k]-'0')
				k++
			}
			b.WriteRune(rune(v))
			i = k - 1
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}

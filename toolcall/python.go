package toolcall

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// parsePythonCalls reads Python-style calls, as Gemma writes them in a
// tool_code block: name(key=value, ...), one per line or separated by
// ";" or ",", optionally as a list [a(...), b(...)] and each optionally
// wrapped in print(...). Values are Python literals: strings, numbers,
// True, False, None, lists and dicts. Positional arguments have no name
// to give them, so a call with one is not a call.
func parsePythonCalls(t string) ([]Call, bool) {
	p := &pyParser{s: t}
	list := p.eat("[")
	var calls []Call
	for {
		c, ok := p.call()
		if !ok {
			return nil, false
		}
		calls = append(calls, c)
		p.skip()
		newline := p.newline
		if list && p.eat("]") {
			p.skip()
			return calls, p.i == len(p.s)
		}
		if p.i == len(p.s) {
			return calls, !list
		}
		if !p.eat(",") && !p.eat(";") && !newline {
			return nil, false
		}
	}
}

type pyParser struct {
	s string
	i int
	// newline: the last skip crossed a line break.
	newline bool
}

func (p *pyParser) skip() {
	p.newline = false
	for p.i < len(p.s) && strings.IndexByte(space, p.s[p.i]) >= 0 {
		if p.s[p.i] == '\n' {
			p.newline = true
		}
		p.i++
	}
}

func (p *pyParser) eat(tok string) bool {
	p.skip()
	if strings.HasPrefix(p.s[p.i:], tok) {
		p.i += len(tok)
		return true
	}
	return false
}

func (p *pyParser) ident() string {
	p.skip()
	j := p.i
	for j < len(p.s) {
		c := p.s[j]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || j > p.i && '0' <= c && c <= '9') {
			break
		}
		j++
	}
	id := p.s[p.i:j]
	p.i = j
	return id
}

// call reads name(kwargs) or print(call).
func (p *pyParser) call() (Call, bool) {
	name := p.ident()
	for name != "" && strings.HasPrefix(p.s[p.i:], ".") {
		p.i++
		part := p.ident()
		if part == "" {
			return Call{}, false
		}
		name += "." + part
	}
	if !validName(name) || !p.eat("(") {
		return Call{}, false
	}
	if name == "print" {
		c, ok := p.call()
		return c, ok && p.eat(")")
	}
	var b strings.Builder
	b.WriteByte('{')
	for n := 0; ; n++ {
		if p.eat(")") {
			b.WriteByte('}')
			return Call{Name: name, Arguments: b.String()}, true
		}
		if n > 0 {
			if !p.eat(",") {
				return Call{}, false
			}
			if p.eat(")") {
				b.WriteByte('}')
				return Call{Name: name, Arguments: b.String()}, true
			}
			b.WriteByte(',')
		}
		key := p.ident()
		if key == "" || !p.eat("=") {
			return Call{}, false
		}
		writeJSONString(&b, key)
		b.WriteByte(':')
		if !p.value(&b) {
			return Call{}, false
		}
	}
}

func (p *pyParser) value(b *strings.Builder) bool {
	p.skip()
	if p.i == len(p.s) {
		return false
	}
	switch c := p.s[p.i]; c {
	case '"', '\'':
		s, ok := p.str()
		writeJSONString(b, s)
		return ok
	case '[', '(':
		end := map[byte]string{'[': "]", '(': ")"}[c]
		p.i++
		b.WriteByte('[')
		for n := 0; ; n++ {
			if p.eat(end) {
				b.WriteByte(']')
				return true
			}
			if n > 0 {
				if !p.eat(",") {
					return false
				}
				if p.eat(end) {
					b.WriteByte(']')
					return true
				}
				b.WriteByte(',')
			}
			if !p.value(b) {
				return false
			}
		}
	case '{':
		p.i++
		b.WriteByte('{')
		for n := 0; ; n++ {
			if p.eat("}") {
				b.WriteByte('}')
				return true
			}
			if n > 0 {
				if !p.eat(",") {
					return false
				}
				if p.eat("}") {
					b.WriteByte('}')
					return true
				}
				b.WriteByte(',')
			}
			p.skip()
			if p.i == len(p.s) || p.s[p.i] != '"' && p.s[p.i] != '\'' {
				return false
			}
			key, ok := p.str()
			if !ok || !p.eat(":") {
				return false
			}
			writeJSONString(b, key)
			b.WriteByte(':')
			if !p.value(b) {
				return false
			}
		}
	}
	j := p.i
	for j < len(p.s) && strings.IndexByte(space+"()[]{},:;=", p.s[j]) < 0 {
		j++
	}
	word := p.s[p.i:j]
	p.i = j
	return writeScalar(b, word)
}

// str reads a Python string literal (single or double quotes, one line,
// the common escapes).
func (p *pyParser) str() (string, bool) {
	q := p.s[p.i]
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String(), true
		case c == '\n':
			return "", false
		case c == '\\' && p.i+1 < len(p.s):
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '\\', '\'', '"':
				b.WriteByte(e)
			case 'u':
				if p.i+4 > len(p.s) {
					return "", false
				}
				r, err := strconv.ParseUint(p.s[p.i:p.i+4], 16, 32)
				if err != nil {
					return "", false
				}
				b.WriteRune(rune(r))
				p.i += 4
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			_, n := utf8.DecodeRuneInString(p.s[p.i:])
			b.WriteString(p.s[p.i : p.i+n])
			p.i += n
		}
	}
	return "", false
}

package toolcall

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
)

// parseCallObjects reads the JSON values of a block: each a call object
// or a list of them. Anything else, or nothing, is not calls.
func parseCallObjects(body string) ([]Call, bool) {
	dec := json.NewDecoder(strings.NewReader(body))
	var calls []Call
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false
		}
		switch firstByte(raw) {
		case '{':
			c, ok := parseCallObject(string(raw))
			if !ok {
				return nil, false
			}
			calls = append(calls, c)
		case '[':
			var list []json.RawMessage
			if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
				return nil, false
			}
			for _, item := range list {
				c, ok := parseCallObject(string(item))
				if !ok {
					return nil, false
				}
				calls = append(calls, c)
			}
		default:
			return nil, false
		}
	}
	return calls, len(calls) > 0
}

// parseCallObject reads one call object: {"name": ..., "arguments": {...}}
// ("parameters" is Llama's word for the arguments; a string holding a JSON
// object is accepted for them, and absent arguments are none). A
// "type": "function" member is allowed; any other member makes it not a
// call, so that an answer that happens to be JSON is not taken for one.
func parseCallObject(text string) (Call, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(text), &m) != nil || m == nil {
		return Call{}, false
	}
	var c Call
	var args json.RawMessage
	for k, v := range m {
		switch k {
		case "name":
			if json.Unmarshal(v, &c.Name) != nil || c.Name == "" {
				return Call{}, false
			}
		case "arguments", "parameters":
			if args != nil {
				return Call{}, false
			}
			args = v
		case "type":
			var typ string
			if json.Unmarshal(v, &typ) != nil || typ != "function" {
				return Call{}, false
			}
		default:
			return Call{}, false
		}
	}
	if c.Name == "" {
		return Call{}, false
	}
	a, ok := argumentsText(args)
	if !ok {
		return Call{}, false
	}
	c.Arguments = a
	return c, true
}

// argumentsText turns an arguments value into compact JSON object text:
// absent or null is {}, a string must hold an object.
func argumentsText(raw json.RawMessage) (string, bool) {
	switch firstByte(raw) {
	case 0, 'n':
		if raw != nil && string(bytes.TrimSpace(raw)) != "null" {
			return "", false
		}
		return "{}", true
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		raw = json.RawMessage(s)
		if firstByte(raw) != '{' {
			return "", false
		}
	case '{':
	default:
		return "", false
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "", false
	}
	return b.String(), true
}

func firstByte(raw []byte) byte {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

// parseToolCode reads the body of a ```tool_code block: JSON call objects,
// or Python-style calls.
func parseToolCode(body string) ([]Call, bool) {
	if !strings.HasPrefix(body, "\n") && !strings.HasPrefix(body, "\r\n") {
		return nil, false // the fence's language word goes on on the same line
	}
	t := strings.TrimSpace(body)
	if t == "" {
		return nil, false
	}
	if t[0] == '{' || t[0] == '[' && strings.HasPrefix(strings.TrimLeft(t[1:], space), "{") {
		return parseCallObjects(t)
	}
	return parsePythonCalls(t)
}

// parseGemma4Call reads the body of a Gemma 4 call block:
// call:NAME{key:value,...}, values in Gemma 4's notation.
func parseGemma4Call(body string) (Call, bool) {
	t := strings.TrimSpace(body)
	rest, ok := strings.CutPrefix(t, "call:")
	if !ok {
		return Call{}, false
	}
	i := strings.IndexByte(rest, '{')
	if i <= 0 || !validName(rest[:i]) {
		return Call{}, false
	}
	p := &gemmaParser{s: rest[i:]}
	var b strings.Builder
	if !p.object(&b) || strings.TrimSpace(p.s[p.i:]) != "" {
		return Call{}, false
	}
	return Call{Name: rest[:i], Arguments: b.String()}, true
}

// ValidName reports whether s can name a function, as OpenAI allows
// them: 1 to 64 letters, digits, "_" or "-".
func ValidName(s string) bool {
	return !strings.Contains(s, ".") && validName(s)
}

// validName is ValidName that also takes "." (the namespaced names a
// model may write in a call).
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// gemmaParser reads Gemma 4's value notation into JSON: strings between
// <|"|> markers, bare or quoted keys, JSON's numbers, true, false, null.
type gemmaParser struct {
	s string
	i int
}

func (p *gemmaParser) skip() {
	for p.i < len(p.s) && strings.IndexByte(space, p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *gemmaParser) eat(tok string) bool {
	p.skip()
	if strings.HasPrefix(p.s[p.i:], tok) {
		p.i += len(tok)
		return true
	}
	return false
}

func (p *gemmaParser) object(b *strings.Builder) bool {
	if !p.eat("{") {
		return false
	}
	b.WriteByte('{')
	for n := 0; ; n++ {
		if p.eat("}") {
			b.WriteByte('}')
			return true
		}
		if n > 0 && !p.eat(",") {
			return false
		}
		key, ok := p.key()
		if !ok || !p.eat(":") {
			return false
		}
		if n > 0 {
			b.WriteByte(',')
		}
		writeJSONString(b, key)
		b.WriteByte(':')
		if !p.value(b) {
			return false
		}
	}
}

func (p *gemmaParser) key() (string, bool) {
	p.skip()
	if p.eat(gemma4Quote) {
		return p.quoted()
	}
	j := p.i
	for j < len(p.s) && p.s[j] != ':' && strings.IndexByte(space+"{}[],", p.s[j]) < 0 {
		j++
	}
	key := p.s[p.i:j]
	p.i = j
	return key, key != ""
}

// quoted reads a string's text up to its closing marker.
func (p *gemmaParser) quoted() (string, bool) {
	j := strings.Index(p.s[p.i:], gemma4Quote)
	if j < 0 {
		return "", false
	}
	s := p.s[p.i : p.i+j]
	p.i += j + len(gemma4Quote)
	return s, true
}

func (p *gemmaParser) value(b *strings.Builder) bool {
	p.skip()
	rest := p.s[p.i:]
	switch {
	case strings.HasPrefix(rest, gemma4Quote):
		p.i += len(gemma4Quote)
		s, ok := p.quoted()
		writeJSONString(b, s)
		return ok
	case strings.HasPrefix(rest, "{"):
		return p.object(b)
	case strings.HasPrefix(rest, "["):
		p.i++
		b.WriteByte('[')
		for n := 0; ; n++ {
			if p.eat("]") {
				b.WriteByte(']')
				return true
			}
			if n > 0 {
				if !p.eat(",") {
					return false
				}
				b.WriteByte(',')
			}
			if !p.value(b) {
				return false
			}
		}
	}
	j := p.i
	for j < len(p.s) && strings.IndexByte(space+"{}[],:", p.s[j]) < 0 {
		j++
	}
	word := p.s[p.i:j]
	p.i = j
	return writeScalar(b, word)
}

// writeScalar writes a bare word as JSON: a number, true, false or null
// (Python's spellings too).
func writeScalar(b *strings.Builder, word string) bool {
	switch word {
	case "true", "True":
		b.WriteString("true")
		return true
	case "false", "False":
		b.WriteString("false")
		return true
	case "null", "None":
		b.WriteString("null")
		return true
	}
	if word == "" || !json.Valid([]byte(word)) || word[0] != '-' && (word[0] < '0' || word[0] > '9') {
		return false
	}
	b.WriteString(word)
	return true
}

// writeJSONString writes s as a JSON string, with <, > and & as they
// are (encoding/json would escape them for HTML).
func writeJSONString(b *strings.Builder, s string) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	b.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

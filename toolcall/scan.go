package toolcall

import "strings"

// space is the whitespace dropped where it touches a call.
const space = " \t\r\n"

// Scanner finds the tool calls of one generation in its text as it
// streams (see the package comment). The zero value is not usable; make
// one with NewScanner per generation.
type Scanner struct {
	syn Syntax
	// buf is text not yet released: the start of a possible marker,
	// whitespace that may turn out to touch a call, or a call's text.
	buf    string
	inCall bool
	// gap is the whitespace before the open block: dropped when the block
	// is a call, kept when it turns out to be text.
	gap string
	// touched: the last thing released was a call, so whitespace that
	// follows it is dropped.
	touched bool
	// Llama3: whether the answer's first character has been seen, and
	// whether it made the answer text (no calls can follow).
	decided, text bool
}

// NewScanner returns the scanner of one generation in syntax s, which
// must be one that Scans.
func NewScanner(s Syntax) *Scanner { return &Scanner{syn: s} }

// InCall reports whether the scanner holds the text of a call it has not
// yet released: the tokens that wrote it are not content.
func (s *Scanner) InCall() bool { return s.inCall }

// Feed consumes the next text and returns the content and the calls it
// completes. Content precedes the calls it is released with.
func (s *Scanner) Feed(text string) (string, []Call) {
	s.buf += text
	var out strings.Builder
	var calls []Call
	if s.syn == Llama3 {
		s.scanAnswer(&out, &calls)
	} else {
		s.scanBlocks(&out, &calls)
	}
	return out.String(), calls
}

// Flush releases what is held at the end of the generation: a block left
// open whose text parses as a call is one (models often end on it without
// its closing marker); any other held text is content.
func (s *Scanner) Flush() (string, []Call) {
	var out strings.Builder
	var calls []Call
	rest := s.buf
	s.buf = ""
	switch {
	case s.syn == Llama3 && s.inCall:
		s.inCall = false
		if rest = strings.TrimLeft(rest, space+";,"); rest != "" {
			s.release(&out, rest)
		}
	case s.inCall:
		s.inCall = false
		open, _ := s.syn.block()
		s.block(&out, &calls, rest, s.gap+open+rest)
	default:
		s.release(&out, rest)
	}
	return out.String(), calls
}

// block returns a block syntax's opening and closing markers.
func (s Syntax) block() (open, close string) {
	switch s {
	case Hermes:
		return hermesOpen, hermesClose
	case ToolCode:
		return toolCodeOpen, fence
	case Gemma4:
		return gemma4Open, gemma4Close
	}
	return "", ""
}

// scanBlocks scans a syntax whose calls are blocks between markers: text
// outside them is content.
func (s *Scanner) scanBlocks(out *strings.Builder, calls *[]Call) {
	open, close := s.syn.block()
	for {
		if !s.inCall {
			if i := strings.Index(s.buf, open); i >= 0 {
				text := strings.TrimRight(s.buf[:i], space)
				s.release(out, text)
				s.gap = s.buf[len(text):i]
				s.buf = s.buf[i+len(open):]
				s.inCall = true
				continue
			}
			head := s.buf[:len(s.buf)-partialSuffix(s.buf, open)]
			text := strings.TrimRight(head, space)
			s.release(out, text)
			s.buf = s.buf[len(text):]
			return
		}
		j := strings.Index(s.buf, close)
		if j < 0 {
			return
		}
		body := s.buf[:j]
		s.buf = s.buf[j+len(close):]
		s.inCall = false
		s.block(out, calls, body, s.gap+open+body+close)
	}
}

// block releases one block: its calls when its body parses, else its raw
// text as content.
func (s *Scanner) block(out *strings.Builder, calls *[]Call, body, raw string) {
	var cs []Call
	var ok bool
	switch s.syn {
	case Hermes:
		cs, ok = parseCallObjects(body)
	case ToolCode:
		cs, ok = parseToolCode(body)
	case Gemma4:
		var c Call
		c, ok = parseGemma4Call(body)
		cs = []Call{c}
	}
	if !ok {
		s.release(out, raw)
		return
	}
	*calls = append(*calls, cs...)
	s.touched = true
}

// scanAnswer scans Llama 3's syntax: an answer that starts with "{" (after
// whitespace and an optional <|python_tag|>) is calls, separated by
// whitespace or ";"; any other answer is text. Calls are released as each
// object closes; the first object that is not a call makes it and the
// rest text.
func (s *Scanner) scanAnswer(out *strings.Builder, calls *[]Call) {
	if !s.decided {
		t := strings.TrimLeft(s.buf, space)
		if strings.HasPrefix(t, pythonTag) {
			t = strings.TrimLeft(t[len(pythonTag):], space)
		} else if strings.HasPrefix(pythonTag, t) {
			return // empty, or the start of the tag
		}
		if t == "" {
			return
		}
		s.decided = true
		if t[0] == '{' {
			s.inCall, s.buf = true, t
		} else {
			s.text = true
		}
	}
	if s.text {
		s.release(out, s.buf)
		s.buf = ""
		return
	}
	for {
		b := strings.TrimLeft(s.buf, space+";,")
		if b == "" {
			s.buf = ""
			return
		}
		if b[0] == '{' {
			end := objectEnd(b)
			if end < 0 {
				s.buf = b
				return
			}
			if c, ok := parseCallObject(b[:end]); ok {
				*calls = append(*calls, c)
				s.touched = true
				s.buf = b[end:]
				continue
			}
		}
		s.inCall, s.text = false, true
		s.release(out, b)
		s.buf = ""
		return
	}
}

// release writes text as content, less the whitespace that touches the
// call before it.
func (s *Scanner) release(out *strings.Builder, text string) {
	if s.touched {
		text = strings.TrimLeft(text, space)
	}
	if text != "" {
		out.WriteString(text)
		s.touched = false
	}
}

// partialSuffix is the length of the longest end of s that is a proper
// start of marker.
func partialSuffix(s, marker string) int {
	for k := min(len(marker)-1, len(s)); k > 0; k-- {
		if strings.HasSuffix(s, marker[:k]) {
			return k
		}
	}
	return 0
}

// objectEnd returns the length of the JSON object s starts with (s[0] is
// '{'), or -1 when it is not closed yet. It only tracks nesting and
// strings; whether the object is valid JSON is decided by its parser.
func objectEnd(s string) int {
	depth, inString, escaped := 0, false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

package jinja

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// defaultReprLimit caps reprs built outside a render (error messages).
const defaultReprLimit = 1 << 16

// pyStr is Python's str(v), which is what {{ v }} prints.
func pyStr(v any) string { return strLimit(v, defaultReprLimit) }

// pyRepr is Python's repr(v), used for the items of printed containers.
func pyRepr(v any) string {
	var b strings.Builder
	writeRepr(&b, v, 0, defaultReprLimit)
	return b.String()
}

// strLimit is str(v), giving up once the text passes limit bytes: shared
// sublists can make a repr exponentially larger than the data, and the
// caller rejects anything over its limit anyway.
func strLimit(v any, limit int) string {
	switch x := v.(type) {
	case string:
		return x
	case *undefined:
		return ""
	}
	var b strings.Builder
	writeRepr(&b, v, 0, limit)
	return b.String()
}

func writeRepr(b *strings.Builder, v any, depth int, limit int) {
	if b.Len() > limit {
		return
	}
	if depth > 64 {
		// Containers cannot be cyclic here, but very deep data still
		// must not blow the stack.
		b.WriteString("...")
		return
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(floatRepr(x))
	case string:
		b.WriteString(strRepr(x))
	case []any:
		b.WriteByte('[')
		writeItems(b, x, depth, limit)
		b.WriteByte(']')
	case Tuple:
		b.WriteByte('(')
		writeItems(b, x, depth, limit)
		if len(x) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *Dict:
		writeDictRepr(b, x, depth, limit)
	case *undefined:
		b.WriteString("Undefined")
	case *namespace:
		b.WriteString("<Namespace ")
		writeDictRepr(b, x.attrs, depth, limit)
		b.WriteString(">")
	case *view:
		b.WriteString(x.kind + "([")
		writeItems(b, x.items, depth, limit)
		b.WriteString("])")
	case *generator:
		b.WriteString("<" + x.kind + " object>")
	case *rangeValue:
		if x.step == 1 {
			fmt.Fprintf(b, "range(%d, %d)", x.start, x.stop)
		} else {
			fmt.Fprintf(b, "range(%d, %d, %d)", x.start, x.stop, x.step)
		}
	case *funcValue:
		b.WriteString("<built-in method " + x.name + ">")
	case *macroValue:
		b.WriteString("<Macro " + strRepr(x.name) + ">")
	case *loopValue:
		fmt.Fprintf(b, "<LoopContext %d/%d>", x.index0+1, len(x.items))
	default:
		fmt.Fprintf(b, "%v", x)
	}
}

func writeItems(b *strings.Builder, items []any, depth, limit int) {
	for i, e := range items {
		if b.Len() > limit {
			return
		}
		if i > 0 {
			b.WriteString(", ")
		}
		writeRepr(b, e, depth+1, limit)
	}
}

func writeDictRepr(b *strings.Builder, d *Dict, depth, limit int) {
	b.WriteByte('{')
	for i, k := range d.keys {
		if b.Len() > limit {
			return
		}
		if i > 0 {
			b.WriteString(", ")
		}
		writeRepr(b, k, depth+1, limit)
		b.WriteString(": ")
		writeRepr(b, d.vals[i], depth+1, limit)
	}
	b.WriteByte('}')
}

// strRepr quotes s the way Python's repr does: single quotes unless the
// string holds a single quote and no double quote.
func strRepr(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	var b strings.Builder
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x7f:
			b.WriteRune(r)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte(quote)
	return b.String()
}

// floatRepr is Python's repr(float): the shortest round-tripping digits,
// positional between 1e-4 and 1e16, always with a fractional part or exponent.
func floatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±XX
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	epos := strings.IndexByte(s, 'e')
	exp, _ := strconv.Atoi(s[epos+1:])
	digits := strings.Replace(s[:epos], ".", "", 1)
	decpt := exp + 1
	var out string
	if decpt <= -4 || decpt > 16 {
		out = digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		e := decpt - 1
		sign := "+"
		if e < 0 {
			sign = "-"
			e = -e
		}
		out += fmt.Sprintf("e%s%02d", sign, e)
	} else if decpt <= 0 {
		out = "0." + strings.Repeat("0", -decpt) + digits
	} else if decpt >= len(digits) {
		out = digits + strings.Repeat("0", decpt-len(digits)) + ".0"
	} else {
		out = digits[:decpt] + "." + digits[decpt:]
	}
	if neg {
		out = "-" + out
	}
	return out
}

// jsonOptions are json.dumps' keyword arguments as transformers' tojson
// passes them through.
type jsonOptions struct {
	ensureASCII bool
	indent      *string // nil: single line
	itemSep     string
	keySep      string
	sortKeys    bool
	limit       int // give up past this many bytes
}

// jsonDumps is Python's json.dumps for evaluator values.
func jsonDumps(v any, o jsonOptions) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSON(b *strings.Builder, v any, o jsonOptions, level int) error {
	if b.Len() > o.limit {
		return newErr(ErrLimit, "JSON text exceeds the %d-byte limit", o.limit)
	}
	if level > 512 {
		return valueErr("maximum recursion depth exceeded while encoding a JSON object")
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(jsonFloat(x))
	case string:
		writeJSONString(b, x, o.ensureASCII)
	case []any:
		return writeJSONArray(b, x, o, level)
	case Tuple:
		return writeJSONArray(b, x, o, level)
	case *Dict:
		return writeJSONObject(b, x, o, level)
	default:
		return typeErr("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return floatRepr(f)
}

func jsonNewline(b *strings.Builder, o jsonOptions, level int) {
	b.WriteByte('\n')
	for i := 0; i < level && b.Len() <= o.limit; i++ {
		b.WriteString(*o.indent)
	}
}

func writeJSONArray(b *strings.Builder, items []any, o jsonOptions, level int) error {
	if len(items) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i, e := range items {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		if o.indent != nil {
			jsonNewline(b, o, level+1)
		}
		if err := writeJSON(b, e, o, level+1); err != nil {
			return err
		}
	}
	if o.indent != nil {
		jsonNewline(b, o, level)
	}
	b.WriteByte(']')
	return nil
}

func writeJSONObject(b *strings.Builder, d *Dict, o jsonOptions, level int) error {
	if d.Len() == 0 {
		b.WriteString("{}")
		return nil
	}
	type entry struct {
		key string
		raw any
		val any
	}
	entries := make([]entry, 0, d.Len())
	for i, k := range d.keys {
		var ks string
		switch kk := k.(type) {
		case string:
			ks = kk
		case nil:
			ks = "null"
		case bool:
			ks = "false"
			if kk {
				ks = "true"
			}
		case int64:
			ks = strconv.FormatInt(kk, 10)
		case float64:
			ks = jsonFloat(kk)
		default:
			return typeErr("keys must be str, int, float, bool or None, not %s", typeName(k))
		}
		entries = append(entries, entry{ks, k, d.vals[i]})
	}
	if o.sortKeys {
		var err error
		sort.SliceStable(entries, func(i, j int) bool {
			c, e := compareValues(entries[i].raw, entries[j].raw)
			if e != nil && err == nil {
				err = e
			}
			return c < 0
		})
		if err != nil {
			return err
		}
	}
	b.WriteByte('{')
	for i, e := range entries {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		if o.indent != nil {
			jsonNewline(b, o, level+1)
		}
		writeJSONString(b, e.key, o.ensureASCII)
		b.WriteString(o.keySep)
		if err := writeJSON(b, e.val, o, level+1); err != nil {
			return err
		}
	}
	if o.indent != nil {
		jsonNewline(b, o, level)
	}
	b.WriteByte('}')
	return nil
}

func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case ensureASCII && r > 0x7e:
				if r > 0xffff {
					r -= 0x10000
					fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// DecodeJSON decodes JSON into evaluator values, keeping object key order
// (objects become *Dict) and the int/float distinction Python's json module
// makes: 1 is an int, 1.0 a float.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSONValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("jinja: decode JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("jinja: decode JSON: trailing data after the value")
	}
	return v, nil
}

func decodeJSONValue(dec *json.Decoder, depth int) (any, error) {
	if depth > 10000 {
		return nil, fmt.Errorf("nesting too deep")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			out := []any{}
			for dec.More() {
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, err
		case '{':
			d := NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.Set(k, v)
			}
			_, err := dec.Token()
			return d, err
		}
		return nil, fmt.Errorf("unexpected delimiter %v", t)
	case json.Number:
		return numberFromJSON(string(t))
	default:
		return t, nil // nil, bool, string
	}
}

func numberFromJSON(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, valueErr("invalid number %q", s)
	}
	return f, nil
}

// strftime formats t like C's strftime under glibc, which is what Python's
// datetime.strftime calls on Linux.
func strftime(format string, t time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		pad := true
		if format[i] == '-' && i+1 < len(format) {
			pad = false
			i++
		}
		num := func(n, width int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", width, n)
			} else {
				b.WriteString(strconv.Itoa(n))
			}
		}
		hour12 := t.Hour() % 12
		if hour12 == 0 {
			hour12 = 12
		}
		switch format[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num(hour12, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'f':
			fmt.Fprintf(&b, "%06d", t.Nanosecond()/1000)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'B':
			b.WriteString(t.Month().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			b.WriteString(strconv.Itoa(wd))
		case 'F':
			fmt.Fprintf(&b, "%d-%02d-%02d", t.Year(), t.Month(), t.Day())
		case 'T':
			fmt.Fprintf(&b, "%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second())
		case 'D':
			fmt.Fprintf(&b, "%02d/%02d/%02d", t.Month(), t.Day(), t.Year()%100)
		case 'R':
			fmt.Fprintf(&b, "%02d:%02d", t.Hour(), t.Minute())
		case 'c':
			fmt.Fprintf(&b, "%s %s %2d %02d:%02d:%02d %d", t.Weekday().String()[:3], t.Month().String()[:3], t.Day(), t.Hour(), t.Minute(), t.Second(), t.Year())
		case 'x':
			fmt.Fprintf(&b, "%02d/%02d/%02d", t.Month(), t.Day(), t.Year()%100)
		case 'X':
			fmt.Fprintf(&b, "%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second())
		case 'Z', 'z':
			// Python's datetime.now() is naive: no zone to print.
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if !pad {
				b.WriteByte('-')
			}
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// percentFormat is Python's "fmt % args" for the common conversions.
func percentFormat(format string, arg any, limit int) (string, error) {
	var args []any
	var mapping *Dict
	switch a := arg.(type) {
	case Tuple:
		args = a
	case *Dict:
		mapping = a
		args = []any{a}
	default:
		args = []any{a}
	}
	next := 0
	take := func() (any, error) {
		if next >= len(args) {
			return nil, typeErr("not enough arguments for format string")
		}
		v := args[next]
		next++
		return v, nil
	}
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if b.Len() > limit {
			return "", newErr(ErrLimit, "formatted string exceeds the %d-byte limit", limit)
		}
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return "", valueErr("incomplete format")
		}
		var key string
		hasKey := false
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 {
				return "", valueErr("incomplete format key")
			}
			key, hasKey = format[i+1:i+end], true
			i += end + 1
		}
		start := i
		for i < len(format) && strings.IndexByte("-+ #0", format[i]) >= 0 {
			i++
		}
		for i < len(format) && format[i] >= '0' && format[i] <= '9' {
			i++
		}
		if i < len(format) && format[i] == '.' {
			i++
			for i < len(format) && format[i] >= '0' && format[i] <= '9' {
				i++
			}
		}
		if i >= len(format) {
			return "", valueErr("incomplete format")
		}
		spec := format[start:i]
		conv := format[i]
		if w := specWidth(spec); w > maxFormatWidth {
			return "", valueErr("format width %d is too large", w)
		}
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		var v any
		if hasKey {
			if mapping == nil {
				return "", typeErr("format requires a mapping")
			}
			var ok bool
			if v, ok = mapping.getAny(key); !ok {
				return "", valueErr("KeyError: %s", strRepr(key))
			}
		} else {
			var err error
			if v, err = take(); err != nil {
				return "", err
			}
		}
		switch conv {
		case 's':
			fmt.Fprintf(&b, "%"+spec+"s", strLimit(v, limit))
		case 'r', 'a':
			fmt.Fprintf(&b, "%"+spec+"s", pyRepr(v))
		case 'd', 'i', 'u':
			n, err := toInt(v)
			if err != nil {
				return "", typeErr("%%%c format: a real number is required, not %s", conv, typeName(v))
			}
			fmt.Fprintf(&b, "%"+spec+"d", n)
		case 'f', 'F', 'e', 'E', 'g', 'G':
			f, ok := toFloat(v)
			if !ok {
				return "", typeErr("must be real number, not %s", typeName(v))
			}
			if !strings.Contains(spec, ".") {
				spec += ".6"
			}
			fmt.Fprintf(&b, "%"+spec+string(conv), f)
		case 'x', 'X', 'o':
			n, err := toInt(v)
			if err != nil {
				return "", typeErr("%%%c format: an integer is required, not %s", conv, typeName(v))
			}
			fmt.Fprintf(&b, "%"+spec+string(conv), n)
		case 'c':
			if s, ok := v.(string); ok {
				b.WriteString(s)
			} else if n, err := toInt(v); err == nil {
				b.WriteRune(rune(n))
			}
		default:
			return "", valueErr("unsupported format character '%c'", conv)
		}
	}
	if mapping == nil && next < len(args) {
		return "", typeErr("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// maxFormatWidth bounds padding widths and precisions in format strings;
// larger ones would only serve to exhaust memory.
const maxFormatWidth = 1 << 20

// specWidth returns the largest number in a printf spec (width or
// precision), saturating instead of overflowing.
func specWidth(spec string) int {
	best, cur := 0, 0
	for i := 0; i < len(spec); i++ {
		if isDigit(spec[i]) {
			if cur < 1<<30 {
				cur = cur*10 + int(spec[i]-'0')
			}
			best = max(best, cur)
		} else {
			cur = 0
		}
	}
	return best
}

// strFormat is str.format for {}, {0} and {name} fields with an optional
// simple spec (fill, alignment, width, precision, type).
func strFormat(format string, args []any, kw []kwarg, limit int) (string, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(format); i++ {
		if b.Len() > limit {
			return "", newErr(ErrLimit, "formatted string exceeds the %d-byte limit", limit)
		}
		c := format[i]
		if c == '}' {
			if i+1 < len(format) && format[i+1] == '}' {
				b.WriteByte('}')
				i++
				continue
			}
			return "", valueErr("Single '}' encountered in format string")
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(format) && format[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		end := strings.IndexByte(format[i:], '}')
		if end < 0 {
			return "", valueErr("Single '{' encountered in format string")
		}
		field := format[i+1 : i+end]
		i += end
		name, spec, _ := strings.Cut(field, ":")
		name, _, _ = strings.Cut(name, "!")
		var v any
		switch {
		case name == "":
			if auto >= len(args) {
				return "", valueErr("Replacement index %d out of range for positional args tuple", auto)
			}
			v = args[auto]
			auto++
		case name[0] >= '0' && name[0] <= '9':
			n, err := strconv.Atoi(name)
			if err != nil || n >= len(args) {
				return "", valueErr("Replacement index %s out of range for positional args tuple", name)
			}
			v = args[n]
		default:
			found := false
			for _, k := range kw {
				if k.name == name {
					v, found = k.val, true
				}
			}
			if !found {
				return "", valueErr("KeyError: %s", strRepr(name))
			}
		}
		s, err := formatSpec(v, spec, limit)
		if err != nil {
			return "", err
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

func formatSpec(v any, spec string, limit int) (string, error) {
	if spec == "" {
		return strLimit(v, limit), nil
	}
	fill, align := " ", byte(0)
	if len(spec) >= 2 && strings.IndexByte("<>^=", spec[1]) >= 0 {
		r, size := utf8.DecodeRuneInString(spec)
		if size == 1 {
			fill, align, spec = string(r), spec[1], spec[2:]
		}
	} else if len(spec) >= 1 && strings.IndexByte("<>^=", spec[0]) >= 0 {
		align, spec = spec[0], spec[1:]
	}
	zero := false
	if strings.HasPrefix(spec, "0") {
		zero = true
		spec = spec[1:]
	}
	j := 0
	for j < len(spec) && spec[j] >= '0' && spec[j] <= '9' {
		j++
	}
	width, _ := strconv.Atoi(spec[:j])
	if width > maxFormatWidth || j > 9 {
		return "", valueErr("format width %s is too large", spec[:j])
	}
	spec = spec[j:]
	prec := -1
	if strings.HasPrefix(spec, ".") {
		k := 1
		for k < len(spec) && spec[k] >= '0' && spec[k] <= '9' {
			k++
		}
		prec, _ = strconv.Atoi(spec[1:k])
		if prec > maxFormatWidth || k > 10 {
			return "", valueErr("format precision %s is too large", spec[1:k])
		}
		spec = spec[k:]
	}
	var s string
	numeric := false
	switch spec {
	case "":
		if f, ok := v.(float64); ok && prec >= 0 {
			s = strconv.FormatFloat(f, 'g', prec, 64)
		} else {
			s = strLimit(v, limit)
			if prec >= 0 {
				if r := []rune(s); len(r) > prec {
					s = string(r[:prec])
				}
			}
		}
		_, isNum := v.(int64)
		_, isF := v.(float64)
		numeric = isNum || isF
	case "d":
		n, err := toInt(v)
		if err != nil {
			return "", valueErr("Unknown format code 'd' for object of type '%s'", typeName(v))
		}
		s, numeric = strconv.FormatInt(n, 10), true
	case "f", "F", "e", "E", "%":
		f, ok := toFloat(v)
		if !ok {
			return "", valueErr("Unknown format code '%s' for object of type '%s'", spec, typeName(v))
		}
		if prec < 0 {
			prec = 6
		}
		if spec == "%" {
			s = strconv.FormatFloat(f*100, 'f', prec, 64) + "%"
		} else {
			s = strconv.FormatFloat(f, spec[0]|0x20, prec, 64)
		}
		numeric = true
	case "s":
		s = strLimit(v, limit)
	default:
		return "", valueErr("unsupported format spec %q", spec)
	}
	if zero && align == 0 {
		fill, align = "0", '='
	}
	if align == 0 {
		align = '<'
		if numeric {
			align = '>'
		}
	}
	n := utf8.RuneCountInString(s)
	if n >= width {
		return s, nil
	}
	padding := width - n
	switch align {
	case '>':
		return strings.Repeat(fill, padding) + s, nil
	case '^':
		left := padding / 2
		return strings.Repeat(fill, left) + s + strings.Repeat(fill, padding-left), nil
	case '=':
		if strings.HasPrefix(s, "-") {
			return "-" + strings.Repeat(fill, padding) + s[1:], nil
		}
		return strings.Repeat(fill, padding) + s, nil
	}
	return s + strings.Repeat(fill, padding), nil
}
